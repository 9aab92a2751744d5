#!/usr/bin/env bash
# enclave-data as a user meets it: every verb, its exit codes (docs/exit-codes.md),
# one-line errors, --json output, and no partial output file after a failure.
set -u
bin=$1
samples=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0

check() {  # check NAME EXPECTED_RC COMMAND...
  local name=$1 expected=$2
  shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [ "$rc" -eq "$expected" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc, expected $expected"; sed 's/^/  | /' err.txt | head -5
  fi
}
expect_stderr() {  # the last command's error was one line containing TEXT
  local text=$1
  if [ "$(wc -l <err.txt)" -eq 1 ] && grep -qF -- "$text" err.txt; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL stderr should be one line with '$text':"; sed 's/^/  | /' err.txt | head -5
  fi
}
expect_absent() {
  if [ -e "$1" ] || ls -a | grep -q '\.tmp-'; then
    failed=$((failed + 1)); echo "FAIL partial output left: $(ls -a)"
  else
    passed=$((passed + 1))
  fi
}

printf 'correct horse battery staple\n' >pass
printf 'wrong horse battery staple\n' >wrong
ks=(--keystore ks.json --passphrase-fd 3)

check "help" 0 "$bin" --help
for verb in "keystore init" "keystore list" seal inspect verify open synth; do
  check "help $verb" 0 "$bin" $verb --help
done
check "no verb" 2 "$bin"
check "unknown verb" 2 "$bin" frobnicate
check "unknown option" 2 "$bin" inspect x --frobnicate
check "missing required" 2 "$bin" seal --csv x

check "init" 0 "$bin" keystore init "${ks[@]}" --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass
check "init again" 7 "$bin" keystore init "${ks[@]}" --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass
check "init weak kdf" 3 "$bin" keystore init --keystore weak.json --passphrase-fd 3 --kdf-opslimit 1 3<pass

seal=(seal --label diagnosis --positive malignant --suite aes-256-gcm --dataset-id bcw "${ks[@]}")
check "seal" 0 "$bin" "${seal[@]}" --csv "$samples/breast_cancer_wisconsin.csv" --out bcw.sealed 3<pass
check "seal exists" 7 "$bin" "${seal[@]}" --csv "$samples/breast_cancer_wisconsin.csv" --out bcw.sealed 3<pass
check "seal bad suite" 3 "$bin" seal --label diagnosis --suite rot13 --dataset-id x "${ks[@]}" \
  --csv "$samples/breast_cancer_wisconsin.csv" --out x.sealed 3<pass
check "seal wrong passphrase" 5 "$bin" "${seal[@]}" --csv "$samples/breast_cancer_wisconsin.csv" --out w.sealed 3<wrong
expect_absent w.sealed
check "seal missing csv" 6 "$bin" "${seal[@]}" --csv nothere.csv --out m.sealed 3<pass

printf 'a,diagnosis\n1,benign\n2\n' >ragged.csv
check "seal ragged" 3 "$bin" "${seal[@]}" --csv ragged.csv --out r.sealed 3<pass
expect_stderr "ragged.csv:3: 1 fields, header has 2"
expect_absent r.sealed
printf 'a,diagnosis\n1,benign\nx,malignant\n' >nonnum.csv
check "seal non-numeric" 3 "$bin" "${seal[@]}" --csv nonnum.csv --out n.sealed 3<pass
expect_stderr "nonnum.csv:3: column 'a': non-numeric or out-of-range value 'x'"
printf 'a,diagnosis\n1,benign\n2,unsure\n' >unknown.csv
check "seal unknown label" 3 "$bin" "${seal[@]}" --csv unknown.csv --out u.sealed 3<pass
expect_stderr "positive label value 'malignant' never occurs"
printf 'a,b\n1,2\n' >nolabel.csv
check "seal missing label column" 3 "$bin" "${seal[@]}" --csv nolabel.csv --out l.sealed 3<pass
expect_stderr "label column 'diagnosis' not in header"
: >empty.csv
check "seal empty" 3 "$bin" "${seal[@]}" --csv empty.csv --out e.sealed 3<pass
expect_stderr "empty CSV"

check "inspect" 0 "$bin" inspect bcw.sealed
check "inspect json" 0 "$bin" inspect bcw.sealed --json
if /usr/bin/python3 -c 'import json,sys; d=json.load(open("out.txt")); assert d["rows"]==569 and d["schema"]["features"]==30 and d["suite"]=="aes-256-gcm"'; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL inspect --json content"; fi
check "verify" 0 "$bin" verify bcw.sealed "${ks[@]}" 3<pass
check "verify wrong passphrase" 5 "$bin" verify bcw.sealed "${ks[@]}" 3<wrong
check "open" 0 "$bin" open bcw.sealed "${ks[@]}" --out bcw.csv 3<pass
if cmp -s bcw.csv "$samples/breast_cancer_wisconsin.csv"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL round trip differs"; fi

# Tampering: a flipped bit in the last byte (a tag), truncation, an unknown version.
cp bcw.sealed t.sealed
size=$(stat -c %s t.sealed)
printf '\x00' | dd of=t.sealed bs=1 seek=$((size - 1)) conv=notrunc status=none
check "verify tampered" 4 "$bin" verify t.sealed "${ks[@]}" 3<pass
expect_stderr "failed authentication"
check "open tampered" 4 "$bin" open t.sealed "${ks[@]}" --out t.csv 3<pass
expect_absent t.csv
head -c $((size - 100)) bcw.sealed >short.sealed
check "verify truncated" 4 "$bin" verify short.sealed "${ks[@]}" 3<pass
expect_stderr "truncated"
cp bcw.sealed v.sealed
printf '\x07' | dd of=v.sealed bs=1 seek=8 conv=notrunc status=none
check "inspect unknown version" 9 "$bin" inspect v.sealed
expect_stderr "format version 7 is not supported"
check "inspect not sealed" 3 "$bin" inspect "$samples/breast_cancer_wisconsin.csv"

# Another tenant's keystore holds no key for this file.
check "init other" 0 "$bin" keystore init --keystore other.json --passphrase-fd 3 --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass
check "verify wrong keystore" 6 "$bin" verify bcw.sealed --keystore other.json --passphrase-fd 3 3<pass
expect_stderr "not with this keystore"

check "list" 0 "$bin" keystore list "${ks[@]}" --json 3<pass
if grep -q '"dataset_id": "bcw"' out.txt && ! grep -q wrapped out.txt; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL keystore list"; fi

check "synth" 0 "$bin" synth --rows 100 --features 3 --out s.csv
check "seal chacha" 0 "$bin" seal --csv s.csv --label y --suite chacha20-poly1305 --dataset-id synth \
  --chunk-records 7 "${ks[@]}" --out s.sealed 3<pass
check "open chacha" 0 "$bin" open s.sealed "${ks[@]}" --out s2.csv 3<pass
if cmp -s s.csv s2.csv; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL synth round trip"; fi

# A key-holding binary disables core dumps before it reads a passphrase: hold it at the
# passphrase read (a FIFO nobody has written yet) and look at its limits.
# The soft limit is raised first, so only the binary's own setrlimit can make both 0.
if [ "$(ulimit -H -c)" = "0" ]; then
  echo "note: core-dump check not run: this environment's hard core limit is already 0"
else
  mkfifo pass.fifo
  ( ulimit -S -c "$(ulimit -H -c)"; exec "$bin" verify bcw.sealed "${ks[@]}" 3<>pass.fifo >/dev/null 2>&1 ) &
  pid=$!
  sleep 0.5
  if grep -Eq '^Max core file size +0 +0 ' "/proc/$pid/limits"; then
    passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL core dumps not disabled:"; grep core "/proc/$pid/limits"; fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
fi

echo "enclave-data CLI: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
