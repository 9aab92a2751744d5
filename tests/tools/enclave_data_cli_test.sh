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
printf 'a,diagnosis\n1,benign\n1e999,malignant\n' >nonnum.csv
check "seal out-of-range number" 3 "$bin" "${seal[@]}" --csv nonnum.csv --out n.sealed 3<pass
expect_stderr "nonnum.csv:3: column 'a': not a valid float32 number"
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

# Schema v2 (sealed-dataset.md): missing values, categorical columns, regression labels.
printf 'age,colour,smoker,y\n37.5,red,yes,a\nNA,blue,,b\n?,red,no,a\n41,green,yes,b\n' >v2.csv
v2=(seal --suite aes-256-gcm --dataset-id v2 "${ks[@]}")
check "seal v2" 0 "$bin" "${v2[@]}" --csv v2.csv --label y --missing '?' --out v2.sealed --json 3<pass
if /usr/bin/python3 - <<'PY'
import json
s = json.load(open("out.txt"))["schema"]
cols = {c["name"]: c for c in s["columns"]}
assert s["version"] == 2 and s["task"] == "classification", s
assert cols["age"] == {"name": "age", "kind": "numeric", "missing_allowed": True}, cols
assert cols["colour"]["kind"] == "categorical" and cols["colour"]["categories"] == 3, cols
assert cols["smoker"]["kind"] == "yes/no" and cols["smoker"]["missing_allowed"], cols
PY
then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL seal v2 --json schema"; fi
check "inspect v2" 0 "$bin" inspect v2.sealed
if grep -q "^schema       v2, classification" out.txt && grep -q "colour .*categorical, 3 categories" out.txt &&
   grep -q "age .*numeric, missing values allowed" out.txt; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL inspect v2 text"; cat out.txt; fi
check "verify v2" 0 "$bin" verify v2.sealed "${ks[@]}" 3<pass
check "open v2" 0 "$bin" open v2.sealed "${ks[@]}" --out v2-open.csv 3<pass
if [ "$(cat v2-open.csv)" = "$(printf 'age,colour,smoker,y\n37.5,red,yes,a\n,blue,,b\n,red,no,a\n41,green,yes,b')" ]; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL open v2"; cat v2-open.csv; fi
check "seal --categorical twice" 0 "$bin" "${v2[@]}" --csv v2.csv --label y --missing '?' --categorical age \
  --categorical smoker --out v2c.sealed --json --force 3<pass
if /usr/bin/python3 -c 'import json; c={x["name"]: x for x in json.load(open("out.txt"))["schema"]["columns"]}; assert c["age"]["categories"] == 2 and c["smoker"]["categories"] == 2, c'; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL --categorical repeated"; fi
check "seal --no-default-missing" 3 "$bin" "${v2[@]}" --csv v2.csv --label y --missing '?' --no-default-missing \
  --out nd.sealed 3<pass
expect_stderr "v2.csv:3: column 'smoker': empty cell"
expect_absent nd.sealed
printf 'x,y\n1,a\n2,NA\n' >nalabel.csv
check "seal missing label" 3 "$bin" "${v2[@]}" --csv nalabel.csv --label y --out nl.sealed 3<pass
expect_stderr "nalabel.csv:3: column 'y': missing label"
expect_absent nl.sealed
# A continuous label: refused with a hint, sealed with --task regression.
check "seal continuous label" 3 "$bin" "${v2[@]}" --csv "$samples/credit_card_applications.csv" --label income \
  --out inc.sealed 3<pass
expect_stderr "label column 'income' looks continuous (the non-integer value '4.52' on line 2); seal it with --task regression"
expect_absent inc.sealed
check "seal regression" 0 "$bin" "${v2[@]}" --csv "$samples/credit_card_applications.csv" --label income \
  --task regression --out inc.sealed 3<pass
check "inspect regression" 0 "$bin" inspect inc.sealed --json
if /usr/bin/python3 -c 'import json; s=json.load(open("out.txt"))["schema"]; assert s["task"] == "regression" and s["classes"] == [] and s["version"] == 2, s'; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL inspect regression"; fi
check "open regression" 0 "$bin" open inc.sealed "${ks[@]}" --out inc.csv 3<pass
if cmp -s inc.csv "$samples/credit_card_applications.csv"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL regression round trip"; fi
check "seal bad task" 3 "$bin" "${v2[@]}" --csv v2.csv --label y --task clustering --out tk.sealed 3<pass
expect_stderr "--task must be classification or regression"
check "seal regression --positive" 3 "$bin" "${v2[@]}" --csv v2.csv --label y --task regression --positive a \
  --out tk.sealed 3<pass
check "seal --label twice" 2 "$bin" "${v2[@]}" --csv v2.csv --label y --label y --out tk.sealed 3<pass
expect_absent tk.sealed

# Exported models (docs/formats/model-export.md): export keys, the public key file,
# seal-to (no keystore), open-model (owner side), inspect/verify of content type 2.
for verb in "keystore export-key" seal-to open-model; do
  check "help $verb" 0 "$bin" $verb --help
done
check "export-key unknown action" 3 "$bin" keystore export-key frobnicate "${ks[@]}" 3<pass
check "export-key show before create" 6 "$bin" keystore export-key show "${ks[@]}" 3<pass
expect_stderr "no export key"
check "export-key create" 0 "$bin" keystore export-key create "${ks[@]}" --id tenant-export --json 3<pass
fp=$(/usr/bin/python3 -c 'import json; print(json.load(open("out.txt"))["fingerprint"])')
check "export-key create again" 7 "$bin" keystore export-key create "${ks[@]}" --id tenant-export 3<pass
check "export-key create bad name" 3 "$bin" keystore export-key create "${ks[@]}" --id "a b" 3<pass
check "export-key create wrong passphrase" 5 "$bin" keystore export-key create "${ks[@]}" --id x 3<wrong
check "export-key create --out" 3 "$bin" keystore export-key create "${ks[@]}" --id y --out y.pub 3<pass
expect_absent y.pub
check "export-key show" 0 "$bin" keystore export-key show "${ks[@]}" --out tenant.pub 3<pass
if grep -q "\"fingerprint\": \"$fp\"" tenant.pub && grep -q "fingerprint  $fp" out.txt; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL public key file fingerprint"; fi
check "export-key show exists" 7 "$bin" keystore export-key show "${ks[@]}" --out tenant.pub 3<pass
check "export-key show --force" 0 "$bin" keystore export-key show "${ks[@]}" --out tenant.pub --force 3<pass
check "export-key show unknown" 6 "$bin" keystore export-key show "${ks[@]}" --id nope 3<pass
check "list with export key" 0 "$bin" keystore list "${ks[@]}" --json 3<pass
if grep -q '"name": "tenant-export"' out.txt && ! grep -q wrapped out.txt && ! grep -q nonce out.txt; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL keystore list export keys"; fi
check "old verbs still work" 0 "$bin" verify bcw.sealed "${ks[@]}" 3<pass

head -c 300000 /dev/urandom >model.bin
digest=$(sha256sum bcw.sealed | cut -c1-64)
check "seal-to" 0 "$bin" seal-to --pub tenant.pub --in model.bin --out model.sealed --format-id test/v1 \
  --job-digest "$digest" --chunk-bytes 65536 --json
check "seal-to exists" 7 "$bin" seal-to --pub tenant.pub --in model.bin --out model.sealed --format-id test/v1
check "seal-to no pub" 6 "$bin" seal-to --pub absent.pub --in model.bin --out x.sealed --format-id test/v1
check "seal-to no input" 6 "$bin" seal-to --pub tenant.pub --in absent.bin --out x.sealed --format-id test/v1
expect_absent x.sealed
check "seal-to bad format id" 3 "$bin" seal-to --pub tenant.pub --in model.bin --out x.sealed --format-id "a b"
check "seal-to bad job digest" 3 "$bin" seal-to --pub tenant.pub --in model.bin --out x.sealed --format-id t --job-digest 12
check "seal-to bad chunk" 3 "$bin" seal-to --pub tenant.pub --in model.bin --out x.sealed --format-id t --chunk-bytes 0
sed 's/"public_key": "\(..\)/"public_key": "00/' tenant.pub >edited.pub
cmp -s edited.pub tenant.pub && sed -i 's/"public_key": "00/"public_key": "11/' edited.pub
check "seal-to edited public key" 3 "$bin" seal-to --pub edited.pub --in model.bin --out x.sealed --format-id t
expect_stderr "fingerprint does not match"
check "seal-to not a key file" 3 "$bin" seal-to --pub ks.json --in model.bin --out x.sealed --format-id t
expect_absent x.sealed

check "inspect model" 0 "$bin" inspect model.sealed --json
if /usr/bin/python3 -c 'import json,sys; d=json.load(open("out.txt")); assert d["content"]=="exported-model" and d["payload_bytes"]==300000 and d["model_format"]=="test/v1" and d["job_digest"]==sys.argv[1] and d["chunks"]==5 and not d["authenticated"]' "$digest"; then
  passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL inspect --json of a model"; fi
check "inspect model text" 0 "$bin" inspect model.sealed
check "verify model" 0 "$bin" verify model.sealed "${ks[@]}" 3<pass
check "open-model" 0 "$bin" open-model "${ks[@]}" --in model.sealed --out model.out --json 3<pass
if cmp -s model.bin model.out; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL model round trip"; fi
check "open-model exists" 7 "$bin" open-model "${ks[@]}" --in model.sealed --out model.out 3<pass
check "open-model wrong passphrase" 5 "$bin" open-model "${ks[@]}" --in model.sealed --out w.bin 3<wrong
expect_absent w.bin
check "open-model other keystore" 6 "$bin" open-model --keystore other.json --passphrase-fd 3 --in model.sealed --out o.bin 3<pass
expect_stderr "not of this keystore"
expect_absent o.bin
check "open-model of a dataset" 3 "$bin" open-model "${ks[@]}" --in bcw.sealed --out d.bin 3<pass
expect_stderr "not an exported model"
check "open of a model" 3 "$bin" open model.sealed "${ks[@]}" --out m.csv 3<pass
expect_absent m.csv
cp model.sealed mt.sealed
msize=$(stat -c %s mt.sealed)
printf '\x01' | dd of=mt.sealed bs=1 seek=$((msize - 40)) conv=notrunc status=none
check "open-model tampered chunk" 4 "$bin" open-model "${ks[@]}" --in mt.sealed --out mt.bin 3<pass
expect_stderr "failed authentication"
expect_absent mt.bin
head -c $((msize - 1)) model.sealed >ms.sealed
check "open-model truncated" 4 "$bin" open-model "${ks[@]}" --in ms.sealed --out ms.bin 3<pass
expect_stderr "truncated"
expect_absent ms.bin
cp model.sealed mh.sealed  # one byte of the ephemeral public key (metadata offset 36, model id 'model')
printf '\x00' | dd of=mh.sealed bs=1 seek=$((110 + 5 + 36)) conv=notrunc status=none
cmp -s mh.sealed model.sealed && printf '\x01' | dd of=mh.sealed bs=1 seek=$((110 + 5 + 36)) conv=notrunc status=none
check "open-model tampered recipient block" 4 "$bin" open-model "${ks[@]}" --in mh.sealed --out mh.bin 3<pass
expect_absent mh.bin
check "verify tampered model" 4 "$bin" verify mt.sealed "${ks[@]}" 3<pass

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
