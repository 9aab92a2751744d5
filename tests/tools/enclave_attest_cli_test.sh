#!/usr/bin/env bash
# enclave-attest without a TPM (the swtpm flows are in tests/attest_host): --help for
# every verb, the documented --tcti default, usage errors (2), the no-TPM error (6) when
# neither /dev/tpmrm0 nor out/swtpm/tcti exists, bad values (3) before any TPM call, and
# exit 13 ("could not evaluate") from the verifier verbs, with no output file left behind.
# Usage: enclave_attest_cli_test.sh ENCLAVE_ATTEST
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

expect() {
  local want=$1
  shift
  local rc=0
  "$@" >out.txt 2>err.txt || rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "expected exit $want, got $rc: $*" >&2
    cat out.txt err.txt >&2
    exit 1
  fi
}

# ima-simulate writes PCR 10 as only the kernel may on a real host: refused for a TPM
# device (exit 5) before anything is opened or written.
echo "a program" >prog
expect 5 "$bin" ima-simulate prog --log ima.log --tcti device:/dev/tpmrm0
grep -q "only against a software TPM" err.txt
[ ! -e ima.log ]

for v in enroll challenge activate confirm quote verify check eventlog ima-simulate; do
  expect 0 "$bin" "$v" --help
  grep -q "^Usage: enclave-attest $v" out.txt
done
for v in enroll activate quote check; do
  expect 0 "$bin" "$v" --help
  grep -q -- "--tcti TCTI" out.txt
  grep -q "default: device:/dev/tpmrm0 when it exists, else the swtpm that scripts/swtpm-start started" out.txt
done
expect 0 "$bin" --help
for v in enroll challenge activate confirm quote verify check eventlog ima-simulate; do grep -q "^  $v " out.txt; done

expect 2 "$bin" verify --policy p.json
expect 2 "$bin" quote --nonce 00 --out e.json --bogus
expect 2 "$bin" frobnicate

if [ ! -e /dev/tpmrm0 ]; then
  expect 6 "$bin" enroll --state st --out e.json
  grep -q "no TPM: /dev/tpmrm0 does not exist and no swtpm was started (out/swtpm/tcti does not exist" err.txt
  [ ! -e e.json ]
  # An unreachable TPM is "unavailable" (10).
  expect 10 "$bin" enroll --tcti swtpm:host=127.0.0.1,port=1 --state st --out e.json
  [ ! -e e.json ]
fi
expect 3 "$bin" quote --nonce zz --pcrs sha256:0 --state st --out e.json
grep -q -- "--nonce must be 1 to 32 bytes of hex" err.txt
expect 3 "$bin" quote --nonce "$(printf '%066d' 0)" --pcrs sha256:0 --state st --out e.json
expect 3 "$bin" quote --nonce 00 --pcrs sha256:24 --state st --out e.json
expect 3 "$bin" enroll --ek dsa --state st --out e.json

expect 13 "$bin" verify --evidence missing.json --policy missing.json --nonce 00 --ak missing.json
grep -q "enclave-attest verify: could not evaluate: " err.txt
[ ! -s out.txt ]
echo '{}' >e.json
expect 13 "$bin" challenge --enrolment e.json --policy missing.json --out c.json --json
grep -q '^{"error":{"class":"[a-z ]*","code":"could not evaluate",' out.txt
[ ! -e c.json ]
expect 13 "$bin" confirm --challenge e.json --response e.json --enrolment e.json
grep -q "credential challenge: field 'format': missing" err.txt
echo "ok"
