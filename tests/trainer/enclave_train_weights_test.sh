#!/usr/bin/env bash
# [training] class_weight and sample_weight_column on the real binary (issue 18 §5): a run
# with both reports what it applied and exports a model that does not need the weight
# column; cv reports each fold's class weights; a negative weight is refused with one line
# naming the data row (exit 3) and nothing is written.
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/cli_helpers.sh"

pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant.pub"
# The breast-cancer sample with a weight column "w" after the first column: 1, 2, 3, 1, ...
python3 - "$SAMPLES/breast_cancer_wisconsin.csv" "$T/weighted.csv" "$T/negative.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
for path, bad in ((sys.argv[2], None), (sys.argv[3], 7)):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(rows[0][:1] + ["w"] + rows[0][1:])
        for i, r in enumerate(rows[1:], start=1):
            w.writerow(r[:1] + [str(-1.5 if i == bad else 1 + (i - 1) % 3)] + r[1:])
PY
label=$(head -1 "$SAMPLES/breast_cancer_wisconsin.csv" | tr ',' '\n' | grep -n . | tail -1 | cut -d: -f2)
job() {  # job NAME CSV: a 20-epoch logistic regression with both weights
  cat > "$T/$1.toml" <<TOML
name = "$1"
seed = 3
output_dir = "$T/out-$1"
export_key = "$T/tenant.pub"
[[datasets]]
id = "bc"
path = "$2"
format = "csv"
label = "$label"
positive = "malignant"
[optimizer]
lr = 0.01
[training]
epochs = 20
class_weight = "balanced"
sample_weight_column = "w"
TOML
}
job weighted "$T/weighted.csv"
expect_rc 0 "run with weights" -- "$TRAIN" run --job "$T/weighted.toml" --device cpu
python3 - "$T/out-weighted/report.json" <<'PY' || fail "run report's weights"
import json, sys
r = json.load(open(sys.argv[1]))
w = r["weights"]
assert w["class_weight"] == "balanced" and w["sample_weight_column"] == "w", w
cw = w["class_weights"]
assert set(cw) == set(r["classes"]), (cw, r["classes"])
# balanced: n / (2 n_c) per class, so sum over classes of n_c * w_c = n and
# 1/w_0 + 1/w_1 = 2 (n_0 + n_1) / n = 2.
inv = sum(1 / v for v in cw.values())
assert abs(inv - 2) < 1e-9, cw
assert cw["malignant"] > cw["benign"], cw   # the smaller class weighs more
assert r["features"] == 30 and r["model"]["inputs"] == 30, (r["features"], r["model"]["inputs"])
assert r["final"]["val_accuracy"] > 0.9, r["final"]
PY
# The exported model takes the rows without the weight column.
pass; expect_rc 0 "open-model" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-weighted/model.sealed" --out "$T/model.bin"
expect_rc 0 "predict without w" -- "$TRAIN" predict --model "$T/model.bin" --csv "$SAMPLES/breast_cancer_wisconsin.csv" --json
python3 -c "import json,sys; d=json.load(open('$T/out')); assert d['rows']==569 and d['accuracy']>0.9, d" \
  || fail "predict on the sample without the weight column"

# cv: each fold's class weights.
expect_rc 0 "cv with weights" -- "$TRAIN" cv --job "$T/weighted.toml" --folds 3
python3 - "$T/out-weighted/cv_metrics.json" <<'PY' || fail "cv report's weights"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["weights"]["class_weight"] == "balanced" and r["weights"]["class_weights"] is None, r["weights"]
for f in r["folds"]:
    assert len(f["class_weights"]) == 2 and abs(sum(1 / v for v in f["class_weights"]) - 2) < 1e-9, f
PY

# A negative weight: exit 3, one line naming the column and the data row, no output.
job negative "$T/negative.csv"
expect_rc 3 "a negative weight" -- "$TRAIN" run --job "$T/negative.toml" --device cpu
[ "$(grep -vc 'enclave-train: WARNING: ' "$T/err")" = 1 ] || fail "not one error line: $(cat "$T/err")"
grep -q "training.sample_weight_column 'w': data row 7 has weight -1.5 (weights must be finite and >= 0)" "$T/err" \
  || fail "negative weight message: $(cat "$T/err")"
[ ! -e "$T/out-negative/model.sealed" ] && [ ! -e "$T/out-negative/report.json" ] || fail "output written"
# A class the data does not have: exit 3, named.
sed -i 's/^class_weight = .*/class_weight = { benign = 1, malignant = 2, unknown = 3 }/' "$T/weighted.toml"
expect_rc 3 "an unknown class" -- "$TRAIN" run --job "$T/weighted.toml" --device cpu --force
grep -q "training.class_weight names class 'unknown', which the data does not have" "$T/err" || fail "unknown class: $(cat "$T/err")"
echo "weights: ok"
