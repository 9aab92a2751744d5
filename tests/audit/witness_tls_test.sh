#!/usr/bin/env bash
# docs/formats/witness.md section 4: the witness speaks plain HTTP and is reached over a
# network through a TLS terminator. Here the terminator is a few lines of Python (ssl and
# asyncio) in front of a real `enclave-audit witness serve`; `enclave-audit cosign` reaches
# it by an https:// URL, checks its certificate with OpenSSL's default trust store (pointed
# at the test's certificate with SSL_CERT_FILE), and refuses an untrusted certificate and
# a certificate for another name.
#   witness_tls_test.sh ENCLAVE_AUDIT_BINARY
set -euo pipefail
bin=$1
command -v openssl >/dev/null || { echo "SKIP: openssl not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
echo "work: $work"
cd "$work"
wait_line() {  # wait_line FILE: until FILE has a line
  for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "FAIL: $1 stayed empty for 60 s"; exit 1
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=witness-tls-test \
  -addext subjectAltName=IP:127.0.0.1 -keyout tls.key -out tls.crt >/dev/null 2>&1
"$bin" init --log log --signing-key log.key --public-key log.pub >/dev/null
"$bin" verifier-key --key log.pub --out log.vkey >/dev/null
event='{"type":"revoked","actor":"custodian@tenant","subject":"host","subject_id":"gpu-1","reason":"test"}'
"$bin" append --log log --signing-key log.key --event "$event" >/dev/null
"$bin" witness keygen --name witness.test/tls --key w.key --vkey-out w.vkey >/dev/null
"$bin" witness serve --key w.key --state st --listen 127.0.0.1:0 --log-key log.vkey >w.out 2>w.err &
pids+=($!)
wait_line w.out
wport=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' w.out)
cat > proxy.py <<'PY'
import asyncio, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    finally:
        w.close()
async def handle(cr, cw):
    ur, uw = await asyncio.open_connection("127.0.0.1", int(sys.argv[3]))
    await asyncio.gather(pipe(cr, uw), pipe(ur, cw), return_exceptions=True)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
PY
python3 proxy.py tls.crt tls.key "$wport" >proxy.out 2>proxy.err &
pids+=($!)
wait_line proxy.out
pport=$(head -n 1 proxy.out)
policy() {  # policy URL
  printf 'log %s\nwitness w %s %s\nquorum w\n' "$(cat log.vkey)" "$(cat w.vkey)" "$1" > policy
}
policy "https://127.0.0.1:$pport"
SSL_CERT_FILE=$work/tls.crt "$bin" cosign --log log --key log.pub --witness-policy policy >/dev/null
"$bin" verify --log log --key log.pub --witness-policy policy >/dev/null
grep -q "^— witness.test/tls " log/cosigned-checkpoint || { echo "FAIL: no cosignature in the file"; exit 1; }
grep -q "cosigned .* size 1$" w.err || { echo "FAIL: the witness did not cosign through TLS"; exit 1; }
"$bin" append --log log --signing-key log.key --event "$event" >/dev/null
rc=0; "$bin" cosign --log log --key log.pub --witness-policy policy --timeout 5 >/dev/null 2>err.txt || rc=$?
[ "$rc" = 10 ] || { echo "FAIL: an untrusted certificate gave exit $rc, not 10: $(cat err.txt)"; exit 1; }
policy "https://localhost:$pport"
rc=0; SSL_CERT_FILE=$work/tls.crt "$bin" cosign --log log --key log.pub --witness-policy policy --timeout 5 \
  >/dev/null 2>err.txt || rc=$?
[ "$rc" = 10 ] || { echo "FAIL: a certificate for another name gave exit $rc, not 10: $(cat err.txt)"; exit 1; }
grep -q "size 2" w.err && { echo "FAIL: the witness was reached although the certificate was refused"; exit 1; }
policy "https://127.0.0.1:$pport"
SSL_CERT_FILE=$work/tls.crt "$bin" cosign --log log --key log.pub --witness-policy policy >/dev/null
echo "OK: cosign reaches a witness behind TLS, and refuses an untrusted certificate and one for another name"
