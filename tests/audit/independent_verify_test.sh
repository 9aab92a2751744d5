#!/usr/bin/env bash
# Builds a log with enclave-audit, then checks it and two inclusion proofs with the
# independent Python verifier (written from docs/formats/audit-log.md only), and checks
# that the Python verifier, too, rejects a changed byte.
#   independent_verify_test.sh ENCLAVE_AUDIT_BINARY INDEPENDENT_VERIFY_PY
set -euo pipefail
bin=$1 py=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$bin" init --log log --signing-key log.key --public-key log.pub >/dev/null
for i in $(seq 0 12); do
  echo "{\"type\":\"key.released\",\"actor\":\"broker@tenant\",\"dataset_id\":\"ds-$i\",\"lease_id\":\"lease-$i\",\"host\":\"gpu-$((i % 3))\",\"job_digest\":\"sha256:$(printf '%064d' $i)\",\"expires\":\"2030-01-01T00:00:00Z\"}"
done > events.jsonl
"$bin" append --log log --signing-key log.key --events-file events.jsonl >/dev/null
"$bin" prove --log log --key log.pub --entry 0 --out p0.json >/dev/null
"$bin" prove --log log --key log.pub --entry 11 --tree-size 12 --out p11.json >/dev/null
for c in "1 13" "4 7" "8 13" "0 5" "6 6"; do
  "$bin" prove --log log --key log.pub --consistency $c --out "c-${c/ /-}.json" >/dev/null
done
python3 "$py" log log.pub p0.json p11.json c-*.json
# A consistency proof with one hash changed is refused by the independent verifier too.
python3 - <<'PY'
import json
b = json.load(open("c-4-7.json")); h = b["path"][0]; b["path"][0] = ("1" if h[0] == "0" else "0") + h[1:]
json.dump(b, open("bad-c.json", "w"))
PY
if python3 "$py" log log.pub bad-c.json >/dev/null; then echo "FAIL: the independent verifier accepted a bad consistency proof"; exit 1; fi
# With an auditor state (section 6, steps 0 and 6): the state enclave-audit accepted verifies,
# and a log cut inside its header is truncation for both verifiers (exit 4 for enclave-audit).
"$bin" verify --log log --key log.pub --state state.json >/dev/null
python3 "$py" --state state.json log log.pub
cp log/audit.log full.log
head -c 20 full.log > log/audit.log
if python3 "$py" --state state.json log log.pub; then echo "FAIL: the independent verifier accepted a truncated log"; exit 1; fi
rc=0; "$bin" verify --log log --key log.pub --state state.json --no-update 2>/dev/null || rc=$?
if [ "$rc" != 4 ]; then echo "FAIL: enclave-audit verify of a log cut inside its header exited $rc, not 4"; exit 1; fi
# Section 4 / 6 step 4: a deleted tree-head record (here the one of size 5) is caught by both.
cp full.log log/audit.log
python3 - <<'PY'
import struct
b = open("log/audit.log", "rb").read()
pos, out = 48, bytearray(b[:48])
while pos < len(b):
    (length,) = struct.unpack("<I", b[pos + 8:pos + 12])
    rec = b[pos:pos + 20 + length]
    if not (rec[4] in (2, 3) and struct.unpack("<Q", rec[12:20])[0] == 5):
        out += rec
    pos += len(rec)
assert len(out) < len(b)
open("log/audit.log", "wb").write(out)
PY
if python3 "$py" log log.pub >/dev/null; then echo "FAIL: the independent verifier accepted a deleted tree head"; exit 1; fi
rc=0; "$bin" verify --log log --key log.pub >/dev/null 2>&1 || rc=$?
if [ "$rc" != 4 ]; then echo "FAIL: enclave-audit verify of a log without a tree head exited $rc, not 4"; exit 1; fi
cp full.log log/audit.log
python3 - <<'PY'
b = bytearray(open("log/audit.log", "rb").read()); b[300] ^= 1; open("log/audit.log", "wb").write(b)
PY
if python3 "$py" log log.pub >/dev/null; then echo "FAIL: the independent verifier accepted a changed byte"; exit 1; fi
echo "OK: the independent verifier rejects a changed byte"
