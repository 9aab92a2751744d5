#!/usr/bin/env bash
# Issue 17 section 3: an independent peer on Go's golang.org/x/mod/sumdb/note and
# sumdb/tlog (Debian's golang-go and golang-golang-x-mod-dev, built offline in GOPATH mode)
# checks what the real writer and enclave-audit produce: every head's checkpoint as a signed
# note (note.Open with our verifier key), the tree (tlog.TreeHash), inclusion and consistency
# proofs (tlog.CheckRecord, tlog.CheckTree); and enclave-audit checks proofs made by tlog.
# Each side must also refuse a changed byte.
#   go_peer_test.sh ENCLAVE_AUDIT_BINARY PEER_SOURCE_DIR BUILD_DIR
set -euo pipefail
bin=$1 src=$2 build=$3
command -v go >/dev/null || { echo "SKIP: go not installed (scripts/install-deps installs golang-go)"; exit 77; }
[ -d /usr/share/gocode/src/golang.org/x/mod/sumdb ] || { echo "SKIP: golang-golang-x-mod-dev not installed"; exit 77; }
mkdir -p "$build"
peer=$build/auditpeer
(cd "$src/auditpeer" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE=$build/go-cache GOTOOLCHAIN=local \
  go build -o "$peer" .)
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT; echo "work: $work"
cd "$work"
"$bin" init --log log --signing-key log.key --public-key log.pub >/dev/null
for i in $(seq 0 16); do
  echo "{\"type\":\"key.released\",\"actor\":\"broker@tenant\",\"dataset_id\":\"ds-$i\",\"lease_id\":\"lease-$i\",\"host\":\"gpu-$((i % 3))\",\"job_digest\":\"sha256:$(printf '%064d' $i)\"}"
done > events.jsonl
"$bin" append --log log --signing-key log.key --events-file events.jsonl >/dev/null
"$bin" verifier-key --key log.pub --out log.vkey >/dev/null
"$bin" checkpoint --log log --key log.pub --out checkpoint >/dev/null
proofs=()
for i in 0 5 16; do "$bin" prove --log log --key log.pub --entry $i --out "i$i.json" >/dev/null; proofs+=("i$i.json"); done
"$bin" prove --log log --key log.pub --entry 3 --tree-size 9 --out i3-9.json >/dev/null; proofs+=(i3-9.json)
for c in "1 17" "4 7" "8 16" "6 17" "17 17"; do
  "$bin" prove --log log --key log.pub --consistency $c --out "c${c/ /-}.json" >/dev/null; proofs+=("c${c/ /-}.json")
done
"$peer" verify log log.vkey checkpoint "${proofs[@]}"

# The other way: proofs made by tlog, checked by enclave-audit with the log key.
mkdir goproofs
"$peer" prove log log.vkey goproofs
n=0
for f in goproofs/*.json; do "$bin" verify-proof --proof "$f" --key log.vkey >/dev/null; n=$((n + 1)); done
[ "$n" = 6 ] || { echo "FAIL: expected 6 proofs from tlog, got $n"; exit 1; }

expect_fail() {  # expect_fail WHAT COMMAND...: the command must fail
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "FAIL: accepted $what"; exit 1; fi
}
flip_hash() {  # flip_hash IN OUT: the first path hash of a proof changed
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); h=b["path"][0]; b["path"][0]=("1" if h[0]=="0" else "0")+h[1:]; json.dump(b,open(sys.argv[2],"w"))' "$1" "$2"
}
# A checkpoint whose size line was changed (its signature no longer matches).
sed '2s/^17$/18/' checkpoint > checkpoint.bad
cmp -s checkpoint checkpoint.bad && { echo "FAIL: the checkpoint was not changed"; exit 1; }
expect_fail "a checkpoint with a changed tree size (Go peer)" "$peer" verify log log.vkey checkpoint.bad
flip_hash c4-7.json c.bad.json
expect_fail "a consistency proof with a changed hash (Go peer)" "$peer" verify log log.vkey checkpoint c.bad.json
flip_hash i5.json i.bad.json
expect_fail "an inclusion proof with a changed hash (Go peer)" "$peer" verify log log.vkey checkpoint i.bad.json
flip_hash goproofs/go-consistency-8.json go.bad.json
rc=0; "$bin" verify-proof --proof go.bad.json --key log.pub >/dev/null 2>&1 || rc=$?
[ "$rc" = 4 ] || { echo "FAIL: enclave-audit verify-proof of a changed tlog proof exited $rc, not 4"; exit 1; }
# A tree-head record deleted from the log: the Go peer's own chain check refuses it.
python3 - <<'PY'
import struct
b = open("log/audit.log", "rb").read()
pos, out, heads = 48, bytearray(b[:48]), 0
while pos < len(b):
    (length,) = struct.unpack("<I", b[pos + 8:pos + 12])
    rec = b[pos:pos + 20 + length]
    if rec[4] == 3:
        heads += 1
    if not (rec[4] == 3 and heads == 6):
        out += rec
    pos += len(rec)
open("log/audit.log", "wb").write(out)
PY
expect_fail "a log with a deleted tree head (Go peer)" "$peer" verify log log.vkey checkpoint
echo "OK: the Go peer (x/mod sumdb/note, sumdb/tlog) and enclave-audit agree, and both refuse changed bytes"
