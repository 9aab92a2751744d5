#!/usr/bin/env bash
# Interop: a quote made by tpm2-tools (tpm2_quote) on swtpm verifies with attest/, and
# fails with the right reason after a changed nonce, PCR value or AK. Skips (77) when
# swtpm or tpm2-tools are not installed.
# Usage: tpm2_quote_interop_test.sh ATTEST_QUOTE_INTEROP
set -euo pipefail
drv=$1
for t in swtpm tpm2_createprimary tpm2_create tpm2_load tpm2_quote tpm2_pcrread tpm2_pcrextend; do
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
q() { "$@" >/dev/null 2>>"$tmp/tools.log" || { cat "$tmp/tools.log" >&2; exit 1; }; }
q tpm2_createprimary -C o -g sha256 -G ecc -c prim.ctx
attrs="fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign"
for kind in ecc rsa; do
  alg=ecc256:ecdsa-sha256:null
  [ $kind = rsa ] && alg=rsa2048:rsassa-sha256:null
  q tpm2_flushcontext -t
  q tpm2_create -C prim.ctx -G "$alg" -a "$attrs" -u ak-$kind.pub -r ak-$kind.priv
  q tpm2_flushcontext -t
  q tpm2_load -C prim.ctx -u ak-$kind.pub -r ak-$kind.priv -c ak-$kind.ctx
  q tpm2_pcrextend 7:sha256=$(printf '%064x' 7)
  nonce=$(python3 -c 'import os; print(os.urandom(32).hex())')
  q tpm2_quote -c ak-$kind.ctx -l sha256:0,1,7+sha1:10 -q "$nonce" -m q.msg -s q.sig -g sha256
  q tpm2_pcrread sha256:0,1,7+sha1:10 -o pcrs.bin
  q tpm2_flushcontext -t
  "$drv" ak-$kind.pub q.msg q.sig pcrs.bin sha256:0,1,7+sha1:10 "$nonce"
  # Wrong nonce.
  rc=0; "$drv" ak-$kind.pub q.msg q.sig pcrs.bin sha256:0,1,7+sha1:10 "00$nonce" >out.txt || rc=$?
  [ $rc -eq 1 ] && grep -q 'quote.extra_data.mismatch' out.txt
  # Changed PCR value.
  python3 -c 'import sys; b=bytearray(open("pcrs.bin","rb").read()); b[40]^=1; open("pcrs2.bin","wb").write(b)'
  rc=0; "$drv" ak-$kind.pub q.msg q.sig pcrs2.bin sha256:0,1,7+sha1:10 "$nonce" >out.txt || rc=$?
  [ $rc -eq 1 ] && grep -q 'quote.pcr_digest.mismatch' out.txt
  echo "ok $kind AK: tpm2_quote verifies, wrong nonce and changed PCR rejected"
done
# A quote by one AK checked against the other AK's public (different key type too).
rc=0; "$drv" ak-ecc.pub q.msg q.sig pcrs.bin sha256:0,1,7+sha1:10 "$nonce" >out.txt || rc=$?
[ $rc -eq 1 ] && grep -q 'quote.signature' out.txt
echo "ok different AK rejected"
