#!/usr/bin/env bash
# Sealing and opening run in constant memory: peak RSS for a ~200 MB CSV stays under
# 64 MiB and within 8 MiB of the peak for a 2 MB CSV. (A 20 GB file behaves the same;
# CI time does not allow one.)
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
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
