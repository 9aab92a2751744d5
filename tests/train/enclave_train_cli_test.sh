#!/usr/bin/env bash
# enclave-train end to end as a user runs it: run and cv on clear CSV and on a sealed
# dataset (keystore from enclave-data), --json lines, the metrics file, and the documented
# exit codes for the failures (docs/exit-codes.md).
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3 EXAMPLES=$4
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() {  # expect_rc CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" = "$want" ] || { cat "$T/err" >&2; fail "$what: exit $rc, want $want"; }
}
PASS="correct horse battery staple"
pass() { exec 3<<<"$PASS"; }

# A job on the clear CSV, output in the temp dir.
sed -e "s#\.\./data/samples#$SAMPLES#; s#\.\./out/[a-z0-9-]*#$T/out-clear#; s/epochs = 60/epochs = 5/" \
  "$EXAMPLES/breast_cancer_mlp.toml" > "$T/clear.toml"

expect_rc 0 "run --json" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --json
grep -q "DEVELOPMENT MODE" "$T/err" || fail "no development-mode warning on stderr"
[ "$(grep -c '"event":"epoch"' "$T/out")" = 5 ] || fail "want 5 epoch JSON lines"
tail -1 "$T/out" | grep -q '"event":"done"' || fail "no final JSON line"
python3 - "$T/out" "$T/out-clear/metrics.json" <<'PY' || fail "JSON output"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert all(0.5 < l["val_accuracy"] <= 1 for l in lines if l["event"] == "epoch"), lines
m = json.load(open(sys.argv[2]))
assert m["mode"] == "development" and m["model_exported"] is False
assert len(m["epochs"]) == 5 and m["device"] == "cpu"
assert m["datasets"][0]["format"] == "csv" and len(m["datasets"][0]["sha256"]) == 64
assert m["final"]["val_accuracy"] > 0.9, m["final"]
PY
# Same job again: refuses to overwrite; with --force the model digest is the same.
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters_sha256"])' "$T/out-clear/metrics.json")
expect_rc 7 "metrics.json exists" -- "$TRAIN" run --job "$T/clear.toml" --device cpu
expect_rc 0 "run --force" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --force
grep -q "$digest" "$T/out" || fail "a second run gave another model"

expect_rc 0 "cv" -- "$TRAIN" cv --job "$T/clear.toml" --folds 3 --device cpu
grep -q "3-fold cross-validation" "$T/out" || fail "cv summary"
[ -f "$T/out-clear/cv_metrics.json" ] || fail "no cv_metrics.json"

# Sealed: keystore and seal with enclave-data, then train with --keystore.
pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "seal" -- "$DATA" seal --csv "$SAMPLES/breast_cancer_wisconsin.csv" --label diagnosis \
  --positive malignant --suite aes-256-gcm --dataset-id breast-cancer --keystore "$T/ks" --out "$T/bc.sealed" \
  --passphrase-fd 3
sed -e "s#\.\./out/breast_cancer.sealed#$T/bc.sealed#; s#\.\./out/[a-z0-9-]*#$T/out-sealed#; s/epochs = 60/epochs = 5/" \
  "$EXAMPLES/breast_cancer_sealed.toml" > "$T/sealed.toml"
pass; expect_rc 0 "run sealed" -- "$TRAIN" run --job "$T/sealed.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu
grep -q "local keystore" "$T/err" || fail "no keystore warning"
grep -q '"key_source": "local keystore' "$T/out-sealed/metrics.json" || fail "report does not say where keys came from"

# Failures and their exit codes.
expect_rc 8 "sealed without --keystore" -- "$TRAIN" run --job "$T/sealed.toml" --force
exec 3<<<"wrong passphrase!"
expect_rc 5 "wrong passphrase" -- "$TRAIN" run --job "$T/sealed.toml" --keystore "$T/ks" --passphrase-fd 3 --force
sed -e 's/^id = "breast-cancer" .*/id = "another-dataset"/' "$T/sealed.toml" > "$T/wrong-id.toml"
pass; expect_rc 5 "sealed dataset id differs" -- "$TRAIN" run --job "$T/wrong-id.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --force
grep -q "another-dataset" "$T/err" || fail "id mismatch message"
printf 'output_dir = "o"\n[[datasets]]\nid = "d"\npath = "p"\nepochz = 3\n' > "$T/bad.toml"
expect_rc 3 "unknown key" -- "$TRAIN" run --job "$T/bad.toml"
grep -q "bad.toml:5: unknown key 'datasets\[0\].epochz'" "$T/err" || { cat "$T/err"; fail "unknown key message"; }
expect_rc 6 "job file missing" -- "$TRAIN" run --job "$T/none.toml"
pass; expect_rc 6 "keystore missing" -- "$TRAIN" run --job "$T/sealed.toml" --keystore "$T/none.keystore" --passphrase-fd 3
expect_rc 2 "no --job" -- "$TRAIN" run
expect_rc 3 "bad --device" -- "$TRAIN" run --job "$T/clear.toml" --device tpu
expect_rc 3 "bad --folds" -- "$TRAIN" cv --job "$T/clear.toml" --folds 1
if ! "$TRAIN" run --job "$T/clear.toml" --device gpu --force >/dev/null 2>"$T/err"; then
  grep -q "unavailable" "$T/err" || fail "--device gpu without a GPU: want 'unavailable'"
fi
echo "enclave_train_cli: all checks passed"
