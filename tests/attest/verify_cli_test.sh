#!/usr/bin/env bash
# `enclave-attest verify` when it cannot evaluate (issue 20 §4): exit 13 and one line on
# stderr that names the file once ("FILE: evidence bundle: ..."), never "FILE: : ...".
# Usage: verify_cli_test.sh ENCLAVE_ATTEST
set -euo pipefail
cli=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat >policy.json <<'JSON'
{"version": 1, "name": "cli", "quote_pcrs": {"sha256": [0]}, "ak_forms": ["tpm2b_public", "public_key"],
 "max_evidence_age_s": 60, "event_log": {"required": false}}
JSON
printf '\x00\x04\x00\x23\x00\x0b' >ak.pub  # a TPM2B_PUBLIC that ends inside TPMT_PUBLIC
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout -out ak.pem 2>/dev/null
echo '{"format": "enclave-attest evidence v1"}' >evidence.json
expect13() {  # expect13 PATTERN ARGS...
  local pattern=$1 rc=0
  shift
  "$cli" verify "$@" >out.txt 2>err.txt || rc=$?
  [ $rc -eq 13 ] || { echo "expected exit 13, got $rc: $*" >&2; cat out.txt err.txt >&2; exit 1; }
  [ "$(wc -l <err.txt)" -eq 1 ] || { echo "expected one line on stderr" >&2; cat err.txt >&2; exit 1; }
  grep -q -- "$pattern" err.txt || { echo "stderr lacks '$pattern'" >&2; cat err.txt >&2; exit 1; }
  if grep -q ': :' err.txt; then echo "doubled colon" >&2; cat err.txt >&2; exit 1; fi
}
expect13 "could not evaluate: invalid input: evidence.json: evidence bundle: " \
  --evidence evidence.json --policy policy.json --nonce 01 --ak ak.pem
echo '{"version": 1, "name": "x", "unknown": 1}' >bad-policy.json
expect13 "bad-policy.json: policy \$.unknown: unknown key" --evidence evidence.json --policy bad-policy.json --nonce 01 --ak ak.pem
[ "$(grep -o 'bad-policy.json' err.txt | wc -l)" -eq 1 ] || { echo "policy file named more than once" >&2; cat err.txt >&2; exit 1; }
expect13 "ak.pub: AK public: " --evidence evidence.json --policy policy.json --nonce 01 --ak ak.pub
expect13 "give --evidence BUNDLE, or --quote" --policy policy.json --nonce 01 --ak ak.pem
echo "ok verify: could-not-evaluate messages name the file once"
