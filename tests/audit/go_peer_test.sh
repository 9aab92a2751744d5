#!/usr/bin/env bash
# Issue 17 section 3: an independent peer on Go's golang.org/x/mod/sumdb/note and
# sumdb/tlog (Debian's golang-go and golang-golang-x-mod-dev, built offline in GOPATH mode)
# checks what the real writer and enclave-audit produce: every head's checkpoint as a signed
# note (note.Open with our verifier key), the tree (tlog.TreeHash), inclusion and consistency
# proofs (tlog.CheckRecord, tlog.CheckTree); and enclave-audit checks proofs made by tlog.
# Each side must also refuse a changed byte. Tiles: the peer reads the log's tlog-tiles with
# tlog.TileHashReader for several checkpoints and refuses changed or missing tiles. Witnesses: the peer checks cosignatures with
# crypto/ed25519 and is the add-checkpoint client of a real `enclave-audit witness serve`.
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
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
echo "work: $work"
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

# Witness cosignatures (docs/formats/witness.md) on a second log: two witnesses cosign through
# `enclave-audit cosign`; the Go peer checks the cosignatures with crypto/ed25519 against the
# policy's quorum, refuses a changed one, and is itself the add-checkpoint client of a third.
start_witness() {  # start_witness N: witness.test/wN on key wN.key, state stN; sets $port
  "$bin" witness keygen --name "witness.test/w$1" --key "w$1.key" --vkey-out "w$1.vkey" >/dev/null
  "$bin" witness serve --key "w$1.key" --state "st$1" --listen 127.0.0.1:0 --log-key wlog.vkey >"w$1.out" 2>"w$1.err" &
  pids+=($!)
  for _ in $(seq 600); do [ -s "w$1.out" ] && break; sleep 0.1; done
  port=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "w$1.out")
}
"$bin" init --log wlog --signing-key wlog.key --public-key wlog.pub >/dev/null
"$bin" verifier-key --key wlog.pub --out wlog.vkey >/dev/null
head -n 9 events.jsonl | "$bin" append --log wlog --signing-key wlog.key --events-file - >/dev/null
start_witness 1; p1=$port
start_witness 2; p2=$port
start_witness 3; p3=$port
{
  echo "log $(cat wlog.vkey)"
  echo "witness w1 $(cat w1.vkey) http://127.0.0.1:$p1"
  echo "witness w2 $(cat w2.vkey) http://127.0.0.1:$p2"
  echo "group both 2 w1 w2"
  echo "quorum both"
} > policy
"$bin" cosign --log wlog --key wlog.pub --witness-policy policy >/dev/null
"$peer" cosigned wlog wlog.vkey policy wlog/cosigned-checkpoint
python3 - <<'PY'
b = open("wlog/cosigned-checkpoint").read()
i = len(b) - 8  # inside the last cosignature's Ed25519 signature
open("cosigned.bad", "w").write(b[:i] + ("B" if b[i] == "A" else "A") + b[i + 1:])
PY
expect_fail "a cosignature with a changed byte (Go peer)" "$peer" cosigned wlog wlog.vkey policy cosigned.bad
{ head -n 3 policy; echo "witness w3 $(cat w3.vkey)"; echo "group all3 all w1 w2 w3"; echo "quorum all3"; } > policy3
expect_fail "a checkpoint without the third witness's cosignature (Go peer)" "$peer" cosigned wlog wlog.vkey policy3 wlog/cosigned-checkpoint
# The Go peer submits to witness 3 (old 0: trusted on first use) and checks its answer;
# enclave-audit verify accepts that cosignature under the three-witness policy.
"$peer" submit wlog wlog.vkey "http://127.0.0.1:$p3" "$(cat w3.vkey)" > go.cosig
cat wlog/cosigned-checkpoint go.cosig > cosigned3
"$bin" verify --log wlog --key wlog.pub --witness-policy policy3 --cosigned cosigned3 >/dev/null
"$peer" cosigned wlog wlog.vkey policy3 cosigned3
# The log grows: the Go client learns the witness's size from its 409 and proves
# consistency with tlog.ProveTree.
tail -n 4 events.jsonl | "$bin" append --log wlog --signing-key wlog.key --events-file - >/dev/null
"$peer" submit wlog wlog.vkey "http://127.0.0.1:$p3" "$(cat w3.vkey)" > go.cosig2
grep -q "refused .* size 13: 409 old size 0 is not the size last cosigned, 9" w3.err \
  || { echo "FAIL: the witness did not answer the Go client's old 0 with 409"; exit 1; }
grep -q "cosigned .* size 13" w3.err || { echo "FAIL: the witness did not cosign size 13 for the Go client"; exit 1; }

# The log as C2SP tlog-tiles (section 13): checkpoints at sizes 17, 300 and 400, one entry
# per batch, so each is a checkpoint the tiles must still serve when the log is at 400.
"$bin" init --log tl --signing-key tl.key --public-key tl.pub >/dev/null
"$bin" verifier-key --key tl.pub --out tl.vkey >/dev/null
for i in $(seq 0 399); do
  echo "{\"type\":\"revoked\",\"actor\":\"custodian@tenant\",\"subject\":\"lease\",\"subject_id\":\"lease-$i\",\"reason\":\"test\"}"
done > tl-events.jsonl
cps=()
for range in 1,17 18,300 301,400; do
  sed -n "${range}p" tl-events.jsonl | "$bin" append --log tl --signing-key tl.key --events-file - >/dev/null
  "$bin" checkpoint --log tl --key tl.pub --out "tl-cp-${range#*,}" >/dev/null
  cps+=("tl-cp-${range#*,}")
done
"$peer" tiles tl tl.vkey tl/tiles "${cps[@]}"
tamper_tiles() {  # tamper_tiles WHAT PYTHON: a copy of the tiles, changed, must be refused
  local what=$1 code=$2
  rm -rf tl-bad && cp -r tl/tiles tl-bad
  python3 -c "$code"
  expect_fail "$what (Go peer)" "$peer" tiles tl tl.vkey tl-bad "${cps[@]}"
}
tamper_tiles "a hash tile with a changed byte" \
  'p="tl-bad/tile/0/000"; b=bytearray(open(p,"rb").read()); b[100]^=1; open(p,"wb").write(b)'
tamper_tiles "an entry bundle with a changed entry" \
  'p="tl-bad/tile/entries/001.p/144"; b=bytearray(open(p,"rb").read()); b[50]^=1; open(p,"wb").write(b)'
tamper_tiles "tiles without the partial tile of an older checkpoint" 'import os; os.remove("tl-bad/tile/0/001.p/44")'
tamper_tiles "a served checkpoint that is not the newest" 'import shutil; shutil.copy("tl-cp-300", "tl-bad/checkpoint")'
echo "OK: the Go peer (x/mod sumdb/note, sumdb/tlog, crypto/ed25519) and enclave-audit agree, and both refuse changed bytes"
