#!/usr/bin/env bash
# Interop (issue 20 §1): quotes that tpm2-tools makes on swtpm with a raw nonce as qualifying
# data (tpm2_quote -q, as Keylime does), verified by `enclave-attest verify` from tpm2-tools'
# own files: -m TPMS_ATTEST, -s TPMT_SIGNATURE, -o PCRs (-F values and serialized), and the
# AK as TPM2B_PUBLIC, PEM public key or PEM AK certificate (openssl CA), with a boot event
# log built here whose events are extended into swtpm (one EV_NO_ACTION with pcrIndex
# 0xFFFFFFFF among them). Then every single change is refused with its finding, and
# unusable inputs are "could not evaluate". Skips (77) without swtpm, tpm2-tools or openssl.
# Usage: tpm2_quote_verify_test.sh ENCLAVE_ATTEST
set -euo pipefail
cli=$1
for t in swtpm tpm2_pcrread tpm2_createek tpm2_createak tpm2_readpublic tpm2_quote tpm2_pcrextend tpm2_flushcontext openssl python3; do
  command -v "$t" >/dev/null || { echo "$t not installed: skipped"; exit 77; }
done
tmp=$(mktemp -d)
swtpm_pid=""
cleanup() {
  [ -n "$swtpm_pid" ] && kill "$swtpm_pid" 2>/dev/null && wait "$swtpm_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/swtpm_start.sh"
start_swtpm "$tmp"
cd "$tmp"
q() { "$@" >/dev/null 2>>tools.log || { cat tools.log >&2; exit 1; }; }
flush() { q tpm2_flushcontext -t; q tpm2_flushcontext -s; }

# A crypto-agile SHA-256 log (TCG PC Client PFP section 10), its events extended into swtpm.
python3 - <<'PY'
import hashlib, struct, subprocess
events = [(0, 0x8, b"firmware 1.0"), (0xFFFFFFFF, 0x3, b"no PCR, as Windows logs it"),
          (7, 0x80000001, b"SecureBoot variable"), (0, 0x4, b"\0\0\0\0"), (7, 0x4, b"\0\0\0\0")]
spec = b"Spec ID Event03\0" + struct.pack("<IBBBBI", 0, 0, 2, 0, 2, 1) + struct.pack("<HH", 0x000B, 32) + b"\0"
log = struct.pack("<II", 0, 3) + bytes(20) + struct.pack("<I", len(spec)) + spec
for pcr, typ, data in events:
    d = bytes(32) if typ == 3 else hashlib.sha256(data).digest()
    log += struct.pack("<IIIH", pcr, typ, 1, 0x000B) + d + struct.pack("<I", len(data)) + data
    if typ != 3:
        r = subprocess.run(["tpm2_pcrextend", "%d:sha256=%s" % (pcr, d.hex())], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("tpm2_pcrextend %d failed: %s" % (pcr, r.stderr.strip()))
open("boot.log", "wb").write(log)
bad = bytearray(log); i = bad.index(hashlib.sha256(b"firmware 1.0").digest()); bad[i] ^= 1  # one event's digest changed
open("boot-changed.log", "wb").write(bytes(bad))
PY

# An AK certificate authority, and another one.
for ca in ca other-ca; do
  q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $ca.key -out $ca.pem -days 2 \
    -subj "/CN=$ca" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
done
cat >policy.json <<'JSON'
{"version": 1, "name": "tpm2-tools interop", "quote_pcrs": {"sha256": [0, 7]},
 "ak_forms": ["tpm2b_public", "public_key", "certificate"], "ak_roots": {"files": ["ca.pem"]},
 "max_evidence_age_s": 300, "event_log": {"required": true}}
JSON
sed 's/"public_key", //' policy.json >policy-no-pem.json

q tpm2_createek -c ek.ctx -G ecc -u ek.pub
flush
verify() {  # verify EXPECTED_EXIT OUTPUT_FILE ARGS...
  local want=$1 out=$2 rc=0
  shift 2
  "$cli" verify --policy policy.json "$@" >"$out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || { echo "expected exit $want, got $rc: verify $*" >&2; cat "$out" >&2; exit 1; }
}
for kind in ecc rsa; do
  alg="-G ecc -g sha256 -s ecdsa"
  [ $kind = rsa ] && alg="-G rsa -g sha256 -s rsassa"
  q tpm2_createak -C ek.ctx -c ak.ctx $alg -u ak.pub -n ak.name -r ak.priv
  flush
  q tpm2_readpublic -c ak.ctx -f pem -o ak.pem
  flush
  q openssl req -new -key ca.key -subj "/CN=ak" -out ak.csr
  for ca in ca other-ca; do
    q openssl x509 -req -in ak.csr -CA $ca.pem -CAkey $ca.key -CAcreateserial -force_pubkey ak.pem -days 1 \
      -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n') -out ak-$ca.pem
  done
  nonce=$(python3 -c 'import os; print(os.urandom(20).hex())')
  q tpm2_quote -c ak.ctx -l sha256:0,7 -q "$nonce" -m q.msg -s q.sig -o pcrs.values -F values -g sha256
  flush
  q tpm2_quote -c ak.ctx -l sha256:0,7 -q "$nonce" -m q2.msg -s q2.sig -o pcrs.serialized -F serialized -g sha256
  flush
  files=(--quote q.msg --signature q.sig --pcrs pcrs.values --pcrs-format values --event-log boot.log)
  raw=(--nonce "$nonce" --qualifying-data raw-nonce)
  # Passes: every AK form, both PCR formats.
  verify 0 out.txt "${files[@]}" "${raw[@]}" --ak ak.pub
  grep -q '"quote.signature"' out.txt && grep -q '"eventlog.pcrs"' out.txt && ! grep -q not_evaluated out.txt
  verify 0 out.txt "${files[@]}" "${raw[@]}" --ak ak.pem
  grep -q '"not_evaluated":\[{"check":"ak.attributes"' out.txt
  ! grep -q '"passed":\[[^]]*"ak.attributes"' out.txt
  verify 0 out.txt "${files[@]}" "${raw[@]}" --ak ak-ca.pem
  grep -q '"ak.cert.chain"' out.txt
  verify 0 out.txt --quote q2.msg --signature q2.sig --pcrs pcrs.serialized --pcrs-format serialized \
    --event-log boot.log "${raw[@]}" --ak ak.pub
  # Refused, each with its finding (exit 12).
  verify 12 out.txt "${files[@]}" --nonce "$nonce" --ak ak.pub  # the default expects this project's formula
  grep -q quote.extra_data.mismatch out.txt
  verify 12 out.txt "${files[@]}" --nonce "00$nonce" --qualifying-data raw-nonce --ak ak.pub
  grep -q quote.extra_data.mismatch out.txt
  python3 -c 'b=bytearray(open("pcrs.values","rb").read()); b[40]^=1; open("pcrs-changed","wb").write(b)'
  verify 12 out.txt --quote q.msg --signature q.sig --pcrs pcrs-changed --pcrs-format values --event-log boot.log \
    "${raw[@]}" --ak ak.pub
  grep -q quote.pcr_digest.mismatch out.txt
  verify 12 out.txt --quote q.msg --signature q.sig --pcrs pcrs.values --pcrs-format values \
    --event-log boot-changed.log "${raw[@]}" --ak ak.pub
  grep -q eventlog.pcr.mismatch out.txt
  verify 12 out.txt "${files[@]}" "${raw[@]}" --ak ak-other-ca.pem
  grep -q ak.cert.chain.untrusted out.txt
  verify 12 out.txt --quote q.msg --signature q2.sig --pcrs pcrs.values --pcrs-format values --event-log boot.log \
    "${raw[@]}" --ak ak.pub  # another quote's signature
  grep -q quote.signature.invalid out.txt
  # Could not evaluate (exit 13): a form the policy does not accept, the wrong PCR format,
  # a raw nonce with data to bind.
  rc=0; "$cli" verify --policy policy-no-pem.json "${files[@]}" "${raw[@]}" --ak ak.pem >out.txt 2>&1 || rc=$?
  [ $rc -eq 13 ] && grep -q "does not accept an AK given as public_key" out.txt
  verify 13 out.txt --quote q.msg --signature q.sig --pcrs pcrs.values --pcrs-format serialized \
    --event-log boot.log "${raw[@]}" --ak ak.pub
  grep -q "tpm2-tools serialized PCR file" out.txt
  verify 13 out.txt "${files[@]}" "${raw[@]}" --ak ak.pub --bind policy.json
  echo "ok $kind AK: tpm2_quote with a raw nonce verifies (TPM2B_PUBLIC, PEM, certificate; values, serialized)"
  rm -f ak.ctx
done
