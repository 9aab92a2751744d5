#!/usr/bin/env bash
# enclave-attest eventlog: --json PCRs equal the hashlib replay of make_eventlog.py for
# the crypto-agile, legacy and interop logs; text output; exit codes for bad input.
# Usage: eventlog_cli_test.sh ENCLAVE_ATTEST DATA_DIR
set -euo pipefail
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for pair in crypto_agile:synthetic_crypto_agile.bin legacy_sha1:synthetic_legacy_sha1.bin interop:synthetic_interop.bin; do
  key=${pair%%:*}
  file=${pair#*:}
  "$bin" eventlog "$data/$file" --json >"$tmp/out.json"
  python3 - "$tmp/out.json" "$data/synthetic_expected.json" "$key" <<'PY'
import json, sys
out, exp, key = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert out["ok"] is True, out
assert out["pcrs"] == exp[key]["pcrs"], (key, out["pcrs"], exp[key]["pcrs"])
assert len(out["events"]) == exp[key]["events"], key
for bank, pcrs in out["pcrs"].items():
    assert bank in ("sha1", "sha256", "sha384"), bank
    for v in pcrs.values():
        assert v == v.lower() and all(c in "0123456789abcdef" for c in v), v
print("ok", key, sum(len(p) for p in out["pcrs"].values()), "PCR values")
PY
done

"$bin" eventlog "$data/synthetic_crypto_agile.bin" >"$tmp/out.txt"
grep -q '^pcrs:$' "$tmp/out.txt"
grep -q '^  sha256:$' "$tmp/out.txt"
grep -q 'EventType: EV_NO_ACTION' "$tmp/out.txt"

# Malformed input: exit 3 (invalid input) with the offset in the message; usage: exit 2.
head -c 100 "$data/synthetic_crypto_agile.bin" >"$tmp/truncated.bin"
rc=0
"$bin" eventlog "$tmp/truncated.bin" 2>"$tmp/err" >/dev/null || rc=$?
[ "$rc" -eq 3 ] || { echo "truncated log: exit $rc, expected 3" >&2; exit 1; }
grep -q 'offset' "$tmp/err"
rc=0
"$bin" eventlog --json "$tmp/truncated.bin" >"$tmp/err.json" 2>/dev/null || rc=$?
[ "$rc" -eq 3 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False' "$tmp/err.json"
rc=0
"$bin" eventlog >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "no argument: exit $rc, expected 2" >&2; exit 1; }
"$bin" eventlog --help | grep -q -- '--json'
echo "eventlog CLI: ok"
