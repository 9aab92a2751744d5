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
python3 "$py" log log.pub p0.json p11.json
python3 - <<'PY'
b = bytearray(open("log/audit.log", "rb").read()); b[300] ^= 1; open("log/audit.log", "wb").write(b)
PY
if python3 "$py" log log.pub >/dev/null; then echo "FAIL: the independent verifier accepted a changed byte"; exit 1; fi
echo "OK: the independent verifier rejects a changed byte"
