#!/usr/bin/env bash
# A binary model's decision threshold travels with it (issue 18 §5): a run whose
# [evaluation] threshold is chosen on the validation rows (Youden's J) or given exports a
# model of format enclave-train-model/3 carrying exactly the report's threshold; predict
# labels a row positive iff P >= that threshold, and its accuracy on the job's rows equals
# the report's all_rows accuracy. A chosen threshold without validation rows is refused
# before training (exit 3). At the default 0.5 the model stays enclave-train-mlp/1.
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/cli_helpers.sh"
CSV="$SAMPLES/breast_cancer_wisconsin.csv"

pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant.pub"
job() {  # job NAME FAMILY [EVALUATION-LINES...]
  local name=$1 family=$2; shift 2
  {
    printf 'name = "%s"\nseed = 4\noutput_dir = "%s"\nexport_key = "%s"\n' "$name" "$T/out-$name" "$T/tenant.pub"
    printf '[[datasets]]\nid = "bc"\npath = "%s"\nformat = "csv"\nlabel = "diagnosis"\npositive = "malignant"\n' "$CSV"
    printf '[model]\nfamily = "%s"\n' "$family"
    if [ "$family" = mlp ]; then printf '[training]\nepochs = 8\n'; else printf '[trees]\nrounds = 10\nthreads = 1\n'; fi
    printf '[evaluation]\nbootstrap_resamples = 0\n'
    printf '%s\n' "$@"
  } > "$T/$name.toml"
}
check() {  # check NAME FORMAT: the report's threshold is the model's, and predict applies it
  local name=$1 format=$2
  expect_rc 0 "$name: run" -- "$TRAIN" run --job "$T/$name.toml" --device cpu
  pass; expect_rc 0 "$name: open-model" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
    --in "$T/out-$name/model.sealed" --out "$T/$name.bin"
  expect_rc 0 "$name: predict" -- "$TRAIN" predict --model "$T/$name.bin" --csv "$CSV" --json
  cp "$T/out" "$T/$name.predict.json"
  python3 - "$T/out-$name/report.json" "$T/$name.predict.json" "$format" <<'PY' || fail "$name: threshold"
import json, struct, sys
r, p, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
th = r["validation_metrics"]["threshold"]["value"]
assert r["model_export"]["format_id"] == want and p["model_format"] == want, (r["model_export"], p["model_format"])
# The model's f32 threshold is the report's value exactly.
assert p["threshold"] == th == struct.unpack("<f", struct.pack("<f", th))[0], (p["threshold"], th)
pos = p["classes"][1]
for row in p["predictions"]:
    assert (row["predicted"] == pos) == (row["probabilities"][1] >= th), (row, th)
assert p["accuracy"] == r["all_rows"]["accuracy"], (p["accuracy"], r["all_rows"])
print(want, th)
PY
}
job youden mlp 'threshold = "youden"'
check youden enclave-train-model/3
job given xgboost 'threshold = 0.3'
check given enclave-train-model/3
python3 -c "import json; v=json.load(open('$T/out-given/report.json'))['validation_metrics']['threshold']['value']; assert abs(v-0.3)<1e-7 and v!=0.5, v" \
  || fail "given threshold not the job's"
job default mlp
check default enclave-train-mlp/1

# Chosen on validation rows that do not exist: refused before anything is trained or written.
job novalidation mlp 'target_sensitivity = 0.9'
sed -i 's/^epochs = 8$/epochs = 8\nvalidation_fraction = 0/' "$T/novalidation.toml"
expect_rc 3 "a chosen threshold without validation rows" -- "$TRAIN" run --job "$T/novalidation.toml" --device cpu
grep -q "novalidation.toml:[0-9]*: evaluation.target_sensitivity: the threshold is chosen on the validation rows, and this run has no validation split" "$T/err" \
  || fail "no-validation message: $(cat "$T/err")"
[ ! -e "$T/out-novalidation/report.json" ] || fail "a report was written"
echo "threshold: ok"
