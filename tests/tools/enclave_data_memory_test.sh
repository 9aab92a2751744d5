#!/usr/bin/env bash
# Sealing and opening run in constant memory: peak RSS for a ~200 MB CSV stays under
# 64 MiB and within 8 MiB of the peak for a 2 MB CSV; the same for a ~200 MB model through
# seal-to and open-model. (A 20 GB file behaves the same; CI time does not allow one.)
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'correct horse battery staple\n' >pass
"$bin" keystore init --keystore ks.json --passphrase-fd 3 --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass >/dev/null

peak_kib() { /usr/bin/time -f '%M' -o rss.txt "$@" >/dev/null 2>err.txt || { cat err.txt; exit 1; }; cat rss.txt; }
measure() {  # measure ROWS -> "seal_kib open_kib bytes"
  "$bin" synth --rows "$1" --features 50 --out "d$1.csv" >/dev/null
  local s o
  s=$(peak_kib "$bin" seal --csv "d$1.csv" --label y --suite aes-256-gcm --dataset-id "d$1" \
        --keystore ks.json --passphrase-fd 3 --out "d$1.sealed" 3<pass)
  o=$(peak_kib "$bin" open "d$1.sealed" --keystore ks.json --passphrase-fd 3 --out "o$1.csv" 3<pass)
  cmp -s "d$1.csv" "o$1.csv" || { echo "round trip differs for $1 rows"; exit 1; }
  echo "$s $o $(stat -c %s "d$1.csv")"
}
read -r small_seal small_open small_bytes < <(measure 4000)
read -r big_seal big_open big_bytes < <(measure 400000)
echo "seal peak RSS: ${small_seal} KiB for ${small_bytes} B CSV, ${big_seal} KiB for ${big_bytes} B CSV"
echo "open peak RSS: ${small_open} KiB, ${big_open} KiB"
fail=0
for v in "$big_seal" "$big_open"; do [ "$v" -lt $((64 * 1024)) ] || { echo "FAIL: peak $v KiB >= 64 MiB"; fail=1; }; done
[ $((big_seal - small_seal)) -lt 8192 ] || { echo "FAIL: seal memory grows with input"; fail=1; }
[ $((big_open - small_open)) -lt 8192 ] || { echo "FAIL: open memory grows with input"; fail=1; }

"$bin" keystore export-key create --keystore ks.json --passphrase-fd 3 3<pass >/dev/null
"$bin" keystore export-key show --keystore ks.json --passphrase-fd 3 --out t.pub 3<pass >/dev/null
measure_model() {  # measure_model MIB -> "seal_kib open_kib"
  head -c "$(($1 << 20))" /dev/urandom >"m$1.bin"
  local s o
  s=$(peak_kib "$bin" seal-to --pub t.pub --in "m$1.bin" --out "m$1.sealed" --format-id mem/v1)
  o=$(peak_kib "$bin" open-model --keystore ks.json --passphrase-fd 3 --in "m$1.sealed" --out "o$1.bin" 3<pass)
  cmp -s "m$1.bin" "o$1.bin" || { echo "model round trip differs for $1 MiB"; exit 1; }
  rm -f "m$1.bin" "o$1.bin" "m$1.sealed"
  echo "$s $o"
}
read -r msmall_seal msmall_open < <(measure_model 2)
read -r mbig_seal mbig_open < <(measure_model 200)
echo "seal-to peak RSS: ${msmall_seal} KiB for 2 MiB, ${mbig_seal} KiB for 200 MiB"
echo "open-model peak RSS: ${msmall_open} KiB, ${mbig_open} KiB"
for v in "$mbig_seal" "$mbig_open"; do [ "$v" -lt $((64 * 1024)) ] || { echo "FAIL: model peak $v KiB >= 64 MiB"; fail=1; }; done
[ $((mbig_seal - msmall_seal)) -lt 8192 ] || { echo "FAIL: seal-to memory grows with input"; fail=1; }
[ $((mbig_open - msmall_open)) -lt 8192 ] || { echo "FAIL: open-model memory grows with input"; fail=1; }
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
