#!/usr/bin/env bash
# enclave-train end to end as a user runs it: run and cv on clear CSV and on a sealed
# dataset (keystore from enclave-data), --json lines, the report, the model sealed to the
# tenant's export key -> enclave-data open-model -> predict (same predictions and accuracy
# as the trainer's), encrypted checkpoints with an interruption and --resume (bit-identical
# model), the training-curve SVG, and the documented exit codes for the failures
# (docs/exit-codes.md).
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3 EXAMPLES=$4
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/cli_helpers.sh"

# The tenant's keystore and export key (enclave-data): every run seals its model to it.
pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant-export.pub"

# A job on the clear CSV, output in the temp dir, the model sealed to the export key.
sed -e "s#\.\./data/samples#$SAMPLES#; s#\.\./out/[a-z0-9-]*#$T/out-clear#; s/epochs = 60/epochs = 5/" \
    -e "/^output_dir = /a export_key = \"$T/tenant-export.pub\"" "$EXAMPLES/breast_cancer_mlp.toml" > "$T/clear.toml"
grep -q "^export_key = " "$T/clear.toml" || fail "clear job has no export_key"

expect_rc 0 "run --json" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --json
grep -q "DEVELOPMENT MODE" "$T/err" || fail "no development-mode warning on stderr"
[ "$(grep -c '"event":"epoch"' "$T/out")" = 5 ] || fail "want 5 epoch JSON lines"
tail -1 "$T/out" | grep -q '"event":"done"' || fail "no final JSON line"
python3 - "$T/out" "$T/out-clear/report.json" <<'PY' || fail "JSON output"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert all(0.5 < l["val_accuracy"] <= 1 for l in lines if l["event"] == "epoch"), lines
m = json.load(open(sys.argv[2]))
assert m["mode"] == "development" and m["development_mode"] is True and m["model_exported"] is True
assert m["model_export"]["format_id"] == "enclave-train-mlp/1" and m["signature"] is None
assert len(m["epochs"]) == 5 and m["device"] == "cpu"
assert m["datasets"][0]["format"] == "csv" and len(m["datasets"][0]["sha256"]) == 64
assert m["final"]["val_accuracy"] > 0.9, m["final"]
PY
# Same job again: refuses to overwrite; with --force the model digest is the same.
[ -f "$T/out-clear/model.sealed" ] || fail "no model.sealed"
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters_sha256"])' "$T/out-clear/report.json")
expect_rc 7 "report.json exists" -- "$TRAIN" run --job "$T/clear.toml" --device cpu
expect_rc 0 "run --force" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --force
grep -q "$digest" "$T/out" || fail "a second run gave another model"

expect_rc 0 "cv" -- "$TRAIN" cv --job "$T/clear.toml" --folds 3 --device cpu
grep -q "3-fold cross-validation" "$T/out" || fail "cv summary"
[ -f "$T/out-clear/cv_metrics.json" ] || fail "no cv_metrics.json"
python3 - "$T/out-clear/cv_metrics.json" <<'PY' || fail "cv: pooled out-of-fold metrics"
import json, sys
r = json.load(open(sys.argv[1]))
o = r["out_of_fold_metrics"]
m = o["metrics"]
c = m["confusion"]
assert o["rows"] == 569 and c["tp"] + c["fp"] + c["tn"] + c["fn"] == 569, o
assert c["tp"] + c["fn"] == 212, c  # every malignant row predicted once, out of its fold
assert o["threshold"] == {"rule": "fixed", "value": 0.5}, o["threshold"]
for k in ("sensitivity", "specificity", "ppv", "npv", "f1", "accuracy", "roc_auc", "average_precision", "brier"):
    e = m[k]
    assert e["ci95"][0] <= e["value"] <= e["ci95"][1], (k, e)
# The pooled accuracy is the folds' accuracies weighted by their rows.
folds = r["folds"]
pooled = sum(f["val_accuracy"] * f["val_rows"] for f in folds) / 569
assert abs(pooled - m["accuracy"]["value"]) < 6e-4, (pooled, m["accuracy"])
PY

# Sealed: seal with enclave-data, then train with --keystore.
pass; expect_rc 0 "seal" -- "$DATA" seal --csv "$SAMPLES/breast_cancer_wisconsin.csv" --label diagnosis \
  --positive malignant --suite aes-256-gcm --dataset-id breast-cancer --keystore "$T/ks" --out "$T/bc.sealed" \
  --passphrase-fd 3
sed -e "s#\.\./out/breast_cancer.sealed#$T/bc.sealed#; s#\.\./out/tenant-export.pub#$T/tenant-export.pub#" \
    -e "s#\.\./out/[a-z0-9-]*\"#$T/out-sealed\"#; s/epochs = 60/epochs = 5/; s/every_steps = 200/every_steps = 20/" \
  "$EXAMPLES/breast_cancer_sealed.toml" > "$T/sealed.toml"
grep -q "^export_key = \"$T/tenant-export.pub\"" "$T/sealed.toml" || fail "example job has no export_key"
pass; expect_rc 0 "run sealed" -- "$TRAIN" run --job "$T/sealed.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu
grep -q "local keystore" "$T/err" || fail "no keystore warning"
grep -q '"key_source": "local keystore' "$T/out-sealed/report.json" || fail "report does not say where keys came from"

# Secrets must be locked into RAM: without CAP_IPC_LOCK and with a 64 KiB RLIMIT_MEMLOCK the
# run stops with exit 8 and one line that names the limit, and writes no output file.
lowmem=(prlimit --memlock=65536)
[ "$(id -u)" = 0 ] && lowmem+=(setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock)
sed -e "s#$T/out-sealed\"#$T/out-lowmem\"#" "$T/sealed.toml" > "$T/lowmem.toml"
pass; expect_rc 8 "run without lockable memory" -- "${lowmem[@]}" "$TRAIN" run --job "$T/lowmem.toml" \
  --keystore "$T/ks" --passphrase-fd 3 --device cpu
grep -v WARNING "$T/err" | grep -q '^enclave-train run: error: failed precondition: cannot lock .*RLIMIT_MEMLOCK soft limit 65536 bytes' \
  || { cat "$T/err" >&2; fail "no one-line memlock error"; }
[ "$(grep -vc WARNING "$T/err")" = 1 ] || fail "memlock error is not one line"
[ -z "$(find "$T/out-lowmem" -type f 2>/dev/null)" ] || fail "a run without lockable memory wrote files"

# Schema v2 (issue 18 §3): categorical columns and missing values train on the loaded CPU
# path (preprocessing fitted on the training rows, stored in a version 2 model that the
# tenant opens and predicts with, unseen categories and missing cells included); the GPU
# backend, [streaming] and regression labels are refused before training with exit 9 and
# one line naming the dataset and column, no output written.
v2_job() {  # v2_job PATH [csv]: the credit card job on PATH, exporting to the tenant's key
  local out="s#\.\./out/[a-z0-9-]*#$T/out-v2#; s/epochs = 200/epochs = 20/"
  local key="/^output_dir = /a export_key = \"$T/tenant-export.pub\""
  if [ "${2:-}" = csv ]; then
    sed -e "s#^path = .*#path = \"$1\"#; $out" -e "$key" "$EXAMPLES/credit_card_logreg.toml"
  else
    sed -e "s#^path = .*#path = \"$1\"#; /^format = /d; /^label = /d; /^positive = /d" -e "$out" -e "$key" \
      "$EXAMPLES/credit_card_logreg.toml"
  fi
}
expect_unsupported() {  # expect_unsupported WHAT MESSAGE -- command...
  local what=$1 msg=$2; shift 2
  rm -rf "$T/out-v2"
  expect_rc 9 "$what" "$@"
  grep -v WARNING "$T/err" | grep -qF -- "$msg" || { cat "$T/err" >&2; fail "$what: no '$msg'"; }
  [ "$(grep -vc WARNING "$T/err")" = 1 ] || { cat "$T/err" >&2; fail "$what: error is not one line"; }
  [ -z "$(find "$T/out-v2" -type f 2>/dev/null)" ] || fail "$what: output written"
}
pass; expect_rc 0 "seal categorical" -- "$DATA" seal --csv "$SAMPLES/credit_card_applications.csv" --label card \
  --positive yes --categorical dependents --suite aes-256-gcm --dataset-id credit-card --keystore "$T/ks" \
  --out "$T/cc-cat.sealed" --passphrase-fd 3
v2_job "$T/cc-cat.sealed" > "$T/v2-cat.toml"
grep -q "^export_key = " "$T/v2-cat.toml" || fail "v2 job has no export_key"
pass; expect_rc 0 "run, categorical column" -- "$TRAIN" run --job "$T/v2-cat.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --device cpu
python3 - "$T/out-v2/report.json" <<'PY' || fail "report: categorical preprocessing"
import json, sys
r = json.load(open(sys.argv[1]))
p = r["model"]["preprocessing"]
# dependents 0..6 sealed as 7 categories: 7 one-hot columns and the unseen one; 10 other features.
assert p == {"impute": "median", "raw_features": 11, "indicator_columns": 0, "categorical_columns": 1,
             "one_hot_columns": 8}, p
assert r["model"]["inputs"] == 18, r["model"]
assert r["model_export"]["format_id"] == "enclave-train-model/2", r["model_export"]
assert r["final"]["val_accuracy"] > 0.9, r["final"]
PY
pass; expect_rc 0 "open-model, categorical" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-v2/model.sealed" --out "$T/model-v2.bin"
# New applicants: a number of dependents never seen (9), and a missing income in a model
# whose training data had none (imputed with the training rows' median).
{ head -1 "$SAMPLES/credit_card_applications.csv"
  sed -n 2p "$SAMPLES/credit_card_applications.csv" | awk -F, -v OFS=, '{ $9 = 9; print }'
  sed -n 3p "$SAMPLES/credit_card_applications.csv" | awk -F, -v OFS=, '{ $4 = "NA"; print }'
} > "$T/new-applicants.csv"
expect_rc 0 "predict: unseen category, missing cell" -- "$TRAIN" predict --model "$T/model-v2.bin" \
  --csv "$T/new-applicants.csv" --out "$T/new-pred.csv"
[ "$(wc -l < "$T/new-pred.csv")" = 3 ] || { cat "$T/new-pred.csv"; fail "two predictions expected"; }
grep -q '^1,yes,' "$T/new-pred.csv" || { cat "$T/new-pred.csv"; fail "row 1 not predicted yes"; }
expect_rc 0 "predict: training rows" -- "$TRAIN" predict --model "$T/model-v2.bin" \
  --csv "$SAMPLES/credit_card_applications.csv" --json --out "$T/v2-all.csv"
{ cat "$T/v2-cat.toml"; printf '[streaming]\nblock_rows = 32\nwindow_blocks = 3\n'; } > "$T/v2-cat-stream.toml"
pass; expect_unsupported "categorical, streamed" \
  "dataset 'credit-card' ($T/cc-cat.sealed): column 'dependents' is categorical, which [streaming] does not support yet" \
  -- "$TRAIN" run --job "$T/v2-cat-stream.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu
pass; expect_rc 0 "seal regression" -- "$DATA" seal --csv "$SAMPLES/credit_card_applications.csv" --label income \
  --task regression --suite aes-256-gcm --dataset-id credit-card --keystore "$T/ks" --out "$T/cc-reg.sealed" \
  --passphrase-fd 3
# The regression metrics by name (the example names the classification ones).
v2_job "$T/cc-reg.sealed" | sed 's/^metrics = .*/metrics = ["loss", "rmse", "mae", "r2"]/' > "$T/v2-reg.toml"
grep -q '^metrics = \["loss", "rmse"' "$T/v2-reg.toml" || fail "regression job: metrics line"
rm -rf "$T/out-v2"
pass; expect_rc 0 "cv, regression" -- "$TRAIN" cv --job "$T/v2-reg.toml" --folds 3 --keystore "$T/ks" \
  --passphrase-fd 3 --device cpu --json
python3 - "$T/out-v2/cv_metrics.json" <<'PY' || fail "cv report: regression"
import json, sys
r = json.load(open(sys.argv[1]))
# income from the other columns (share = expenditure / income among them): a clear signal.
assert r["mean_accuracy"] is None and r["mean_rmse"] > 0 and r["mean_r2"] > 0.3, r
assert all("val_rmse" in f and "val_r2" in f and "val_accuracy" not in f for f in r["folds"]), r["folds"]
o = r["out_of_fold_metrics"]["metrics"]
assert r["out_of_fold_metrics"]["rows"] == 1319 and o["rmse"]["ci95"][0] <= o["rmse"]["value"] <= o["rmse"]["ci95"][1], o
PY
# A threshold chosen by Youden's J on the validation rows, said to be chosen there.
sed -e 's/^\[training\]/[evaluation]\nthreshold = "youden"\nbootstrap_resamples = 100\ncoefficients = true\n\n[training]/' \
  "$T/v2-cat.toml" > "$T/v2-youden.toml"
rm -rf "$T/out-v2"
pass; expect_rc 0 "run, Youden threshold" -- "$TRAIN" run --job "$T/v2-youden.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --device cpu
python3 - "$T/out-v2/report.json" <<'PY' || fail "report: Youden threshold"
import json, sys
v = json.load(open(sys.argv[1]))["validation_metrics"]
t = v["threshold"]
assert t["rule"] == "youden" and "optimistic" in t["chosen_on"] and 0 < t["value"] < 1, t
b = v["metrics"]
assert b["threshold"] == t["value"] and v["metrics"]["bootstrap"]["resamples"] == 100, v["metrics"]
j = t["choice"]["youden_j"]
assert abs(j - (b["sensitivity"]["value"] + b["specificity"]["value"] - 1)) < 1e-3, (j, b)
PY
# The coefficients (asked for: they are the model) describe the model predict uses: the
# logit from intercept_raw and the per-unit coefficients on one applicant's expanded row
# gives predict's probability.
expect_rc 0 "predict, Youden model" -- "$TRAIN" predict --model "$T/out-v2/model.sealed" --keystore "$T/ks" \
  --passphrase-fd 3 --csv "$SAMPLES/credit_card_applications.csv" --out "$T/youden-pred.csv" 3<<<"$PASS"
python3 - "$T/out-v2/report.json" "$SAMPLES/credit_card_applications.csv" "$T/youden-pred.csv" <<'PY' \
  || fail "coefficients do not reproduce predict"
import csv, json, math, sys
r = json.load(open(sys.argv[1]))
c = r["coefficients"]
assert c["kind"] == "logistic" and len(c["outputs"]) == 1 and c["outputs"][0]["output"] == "yes", c["kind"]
out = c["outputs"][0]
coef = {e["input"]: e for e in out["coefficients"]}
assert len(coef) == 18, len(coef)
for e in coef.values():
    assert abs(e["odds_ratio_per_sd"] - math.exp(e["per_sd"])) <= 1e-9 * e["odds_ratio_per_sd"], e
rows = list(csv.DictReader(open(sys.argv[2])))
pred = list(csv.DictReader(open(sys.argv[3])))
for i in (0, 1, 7):
    z = out["intercept_raw"]
    for name, v in rows[i].items():
        if name == "card":
            continue
        if name == "dependents":
            z += coef["dependents=" + v.strip()]["per_unit"]
        else:
            z += coef[name]["per_unit"] * (1.0 if v == "yes" else 0.0 if v == "no" else float(v))
    p = 1 / (1 + math.exp(-z))
    assert abs(p - float(pred[i]["p_yes"])) < 2e-4, (i, p, pred[i]["p_yes"])
imp = r["importance"]["permutation"]
assert len(imp) == 11 and "gain" not in r["importance"], r["importance"]
PY
{ cat "$T/v2-reg.toml"; printf '[streaming]\nblock_rows = 32\nwindow_blocks = 3\n'; } > "$T/v2-reg-stream.toml"
pass; expect_unsupported "regression, streamed" \
  "dataset 'credit-card' ($T/cc-reg.sealed): regression label, which [streaming] does not support yet" \
  -- "$TRAIN" cv --job "$T/v2-reg-stream.toml" --folds 3 --keystore "$T/ks" --passphrase-fd 3 --device cpu
# A clear CSV with a missing cell: income allows missing values, gets an indicator.
sed -e '2s/^yes,0,37.66667,4.52,/yes,0,37.66667,NA,/' "$SAMPLES/credit_card_applications.csv" > "$T/cc-missing.csv"
grep -q '^yes,0,37.66667,NA,' "$T/cc-missing.csv" || fail "no missing cell in the CSV"
v2_job "$T/cc-missing.csv" csv > "$T/v2-missing.toml"
rm -rf "$T/out-v2"
expect_rc 0 "run, a missing cell" -- "$TRAIN" run --job "$T/v2-missing.toml" --device cpu
python3 - "$T/out-v2/report.json" <<'PY' || fail "report: missing-value preprocessing"
import json, sys
p = json.load(open(sys.argv[1]))["model"]["preprocessing"]
assert p["indicator_columns"] == 1 and p["categorical_columns"] == 0 and p["impute"] == "median", p
PY
sed -e 's/^\[training\]/[preprocess]\nimpute = "mean"\nindicators = false\n\n[training]/' "$T/v2-missing.toml" \
  > "$T/v2-mean.toml"
rm -rf "$T/out-v2"
expect_rc 0 "run, mean imputation" -- "$TRAIN" run --job "$T/v2-mean.toml" --device cpu
python3 - "$T/out-v2/report.json" <<'PY' || fail "report: mean imputation"
import json, sys
p = json.load(open(sys.argv[1]))["model"]["preprocessing"]
assert p["indicator_columns"] == 0 and p["impute"] == "mean", p
PY

# Gradient-boosted trees (issue 18 §4) on the categorical sealed table: XGBoost in a locked
# process, the booster sealed as a version 2 model (family 1) that the tenant opens and
# predicts with, the same accuracy over every row as the report says.
sed -e '/^\[model\]/,$d' "$T/v2-cat.toml" > "$T/trees.toml"
printf '[model]\nfamily = "xgboost"\n\n[trees]\nrounds = 40\nmax_depth = 3\neta = 0.2\nthreads = 2\nearly_stopping_rounds = 8\n' \
  >> "$T/trees.toml"
rm -rf "$T/out-v2"
pass; expect_rc 0 "run, trees" -- "$TRAIN" run --job "$T/trees.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --json
python3 - "$T/out-v2/report.json" <<'PY' || fail "report: trees"
import json, sys
r = json.load(open(sys.argv[1]))
m = r["model"]
assert m["family"] == "xgboost" and m["inputs"] == 18 and m["rounds"] == 40 and 1 <= m["rounds_kept"] <= 40, m
gain = r["importance"]["gain"]
names = [g["column"] for g in gain]
assert len(names) == 11 and "card" not in names and gain[0]["total_gain"] > 0, names
perm = r["importance"]["permutation"]
assert sorted(p["column"] for p in perm) == sorted(names) and perm[0]["mean_drop"] > 0, perm
assert r["coefficients"] is None
assert r["model_export"]["format_id"] == "enclave-train-model/2", r["model_export"]
assert r["final"]["val_accuracy"] > 0.93 and r["validation_metrics"]["rows"] == r["val_rows"], r["final"]
assert len(r["epochs"]) >= m["rounds_kept"], len(r["epochs"])
# Early stopping kept round rounds_kept: the report's final metrics are that round's.
if m["rounds_kept"] < len(r["epochs"]):
    assert r["best_epoch"] == m["rounds_kept"] == r["final"]["epoch"], (r["best_epoch"], r["final"])
else:
    assert r["best_epoch"] is None, r["best_epoch"]
PY
pass; expect_rc 0 "open-model, trees" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-v2/model.sealed" --out "$T/model-trees.bin"
expect_rc 0 "predict, trees" -- "$TRAIN" predict --model "$T/model-trees.bin" \
  --csv "$SAMPLES/credit_card_applications.csv" --json --out "$T/trees-pred.csv"
python3 - "$T/out" "$T/out-v2/report.json" <<'PY' || fail "predict: trees accuracy differs from the report's"
import json, sys
p = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert p["rows"] == 1319 and p["accuracy"] == r["all_rows"]["accuracy"], (p["accuracy"], r["all_rows"])
assert p["model_format"] == "enclave-train-model/2", p["model_format"]
PY
expect_rc 0 "predict, trees: unseen category, missing cell" -- "$TRAIN" predict --model "$T/model-trees.bin" \
  --csv "$T/new-applicants.csv" --out "$T/trees-new.csv"
[ "$(wc -l < "$T/trees-new.csv")" = 3 ] || { cat "$T/trees-new.csv"; fail "two tree predictions expected"; }
expect_rc 3 "trees: --stop-after-step" -- "$TRAIN" run --job "$T/trees.toml" --device cpu --stop-after-step 3 \
  --force
grep -q 'does not apply to \[model\] family = "xgboost"' "$T/err" || { cat "$T/err"; fail "trees: no refusal"; }
rm -rf "$T/out-v2"
pass; expect_rc 0 "cv, trees" -- "$TRAIN" cv --job "$T/trees.toml" --folds 3 --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu
python3 - "$T/out-v2/cv_metrics.json" <<'PY' || fail "cv: trees"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["model"]["family"] == "xgboost" and r["mean_accuracy"] > 0.93, r["mean_accuracy"]
assert r["out_of_fold_metrics"]["rows"] == 1319, r["out_of_fold_metrics"]["rows"]
PY

# The model leaves only sealed: the tenant opens it and predicts; the predictions and the
# accuracy on the training CSV are the trainer's own.
[ -f "$T/out-sealed/model.sealed" ] || fail "no model.sealed"
python3 - "$T/out-sealed/report.json" "$T/out-sealed/model.sealed" <<'PY' || fail "report: model export"
import hashlib, json, sys
r = json.load(open(sys.argv[1]))
e = r["model_export"]
assert r["model_exported"] is True and e["format_id"] == "enclave-train-mlp/1", e
assert e["sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(), "ciphertext digest"
assert len(e["export_key"]["fingerprint"]) == 64
assert len(r["epochs"]) == 5 and r["final"]["val_accuracy"] > 0.9 and 0.9 < r["all_rows"]["accuracy"] <= 1
assert r["job"]["sha256"] and all(len(d["sha256"]) == 64 for d in r["datasets"])
assert r["signature"] is None and "broker" in r["signature_note"]
assert r["checkpoints"]["written"] > 0, r["checkpoints"]
v = r["validation_metrics"]
b = v["metrics"]
assert v["rows"] == r["val_rows"] == sum(b["confusion"].values()), v
assert abs(b["accuracy"]["value"] - r["final"]["val_accuracy"]) < 6e-4, (b["accuracy"], r["final"])
assert abs(b["roc_auc"]["value"] - r["final"]["val_roc_auc"]) < 6e-4, (b["roc_auc"], r["final"])
assert len(b["reliability"]) == 10 and sum(x["count"] for x in b["reliability"]) == v["rows"], b["reliability"]
# ROC, precision-recall and calibration beside the training curve: well-formed, three
# panels, the ROC from (0,0) to (1,1) without going back, as many calibration points as
# non-empty bins.
import xml.etree.ElementTree as ET
svg = ET.parse(r["evaluation_plot"]).getroot()
ns = "{http://www.w3.org/2000/svg}"
panels = {g.get("id"): g for g in svg.iter(ns + "g")}
assert set(panels) == {"roc", "pr", "calibration"}, panels.keys()
def points(panel):
    line = panels[panel].find(ns + "polyline")
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]
roc = points("roc")
xs = [p[0] for p in roc]
assert xs == sorted(xs) and len(roc) >= 3, roc[:5]
assert len(points("calibration")) == sum(1 for x in b["reliability"] if x["count"] > 0)
assert "AUC " + ("%.4g" % b["roc_auc"]["value"])[:4] in ET.tostring(panels["roc"], encoding="unicode")
PY
"$DATA" inspect "$T/out-sealed/model.sealed" --json > "$T/inspect.json" 2>"$T/err" || fail "inspect model"
grep -q '"model_format": "enclave-train-mlp/1"' "$T/inspect.json" || { cat "$T/inspect.json"; fail "format id in the envelope"; }
pass; expect_rc 0 "open-model" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-sealed/model.sealed" --out "$T/model.bin"
python3 - "$T/out-sealed/report.json" "$T/model.bin" <<'PY' || fail "plaintext model digest"
import hashlib, json, sys
r = json.load(open(sys.argv[1]))
m = open(sys.argv[2], "rb").read()
assert m[:8] == b"ENCLMODL" and hashlib.sha256(m[:-32]).digest() == m[-32:]
assert r["model_export"]["plaintext_sha256"] == hashlib.sha256(m).hexdigest()
assert r["model_export"]["plaintext_bytes"] == len(m)
assert r["model_export"]["sealed_on"] == r["device"], (r["model_export"]["sealed_on"], r["device"])
PY
CSV="$SAMPLES/breast_cancer_wisconsin.csv"
expect_rc 0 "predict (plaintext model)" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --out "$T/pred1.csv" --json
python3 - "$T/out" "$T/out-sealed/report.json" "$T/pred1.csv" "$CSV" <<'PY' || fail "predict output"
import csv, json, sys
out = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert out["rows"] == r["rows"] == 569, out
# The accuracy on the training CSV equals the report's, to the last bit.
assert out["accuracy"] == r["all_rows"]["accuracy"], (out["accuracy"], r["all_rows"])
rows = list(csv.DictReader(open(sys.argv[3])))
data = list(csv.DictReader(open(sys.argv[4])))
assert len(rows) == 569 and set(rows[0]) == {"row", "predicted", "p_benign", "p_malignant"}
right = sum(p["predicted"] == d["diagnosis"] for p, d in zip(rows, data))
assert right / 569 == out["accuracy"], (right, out["accuracy"])
for p in rows:
    pb, pm = float(p["p_benign"]), float(p["p_malignant"])
    assert abs(pb + pm - 1) < 1e-6 and p["predicted"] == ("malignant" if pm >= 0.5 else "benign"), p
PY
pass; expect_rc 0 "predict --keystore (exported model)" -- "$TRAIN" predict --model "$T/out-sealed/model.sealed" \
  --keystore "$T/ks" --passphrase-fd 3 --csv "$CSV" --out "$T/pred2.csv"
cmp -s "$T/pred1.csv" "$T/pred2.csv" || fail "predictions differ between the opened and the exported model"
expect_rc 0 "seal-to another format id" -- "$DATA" seal-to --pub "$T/tenant-export.pub" --in "$T/model.bin" \
  --out "$T/other-format.sealed" --format-id other-format/1
pass; expect_rc 9 "predict: exported model of another format" -- "$TRAIN" predict --model "$T/other-format.sealed" \
  --keystore "$T/ks" --passphrase-fd 3 --csv "$CSV"
grep -q "other-format/1" "$T/err" || fail "format id message"
expect_rc 8 "predict on a sealed model without --keystore" -- "$TRAIN" predict --model "$T/out-sealed/model.sealed" --csv "$CSV"
printf 'radius_mean,texture_mean\n1,2\n' > "$T/few.csv"
expect_rc 3 "predict: missing feature column" -- "$TRAIN" predict --model "$T/model.bin" --csv "$T/few.csv"
grep -q "missing feature column" "$T/err" || fail "missing column message"
head -c 100 "$T/model.bin" > "$T/cut.bin"
expect_rc 6 "predict: model missing" -- "$TRAIN" predict --model "$T/model.bin.none" --csv "$CSV"
expect_rc 3 "predict: damaged model" -- "$TRAIN" predict --model "$T/cut.bin" --csv "$CSV"

# The training-curve plot: well-formed SVG with the four series, one point per epoch.
python3 - "$T/out-sealed/training-curve.svg" <<'PY' || fail "training-curve.svg"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
series = {g.get("data-series"): int(g.get("data-points")) for g in root.iter("{http://www.w3.org/2000/svg}g")
          if g.get("class") == "series"}
assert series == {"train_loss": 5, "val_loss": 5, "val_accuracy": 5, "val_roc_auc": 5}, series
PY
if command -v chromium >/dev/null 2>&1; then
  timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$T/chromium" \
    --screenshot="$T/plot.png" --window-size=760,720 "file://$T/out-sealed/training-curve.svg" >/dev/null 2>&1
  python3 - "$T/plot.png" <<'PY' || fail "the plot does not render"
import struct, sys
png = open(sys.argv[1], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
w, h = struct.unpack(">II", png[16:24])
assert (w, h) == (760, 720), (w, h)
PY
fi

# Checkpoints: interrupted after step 23 (a checkpoint is written, nothing else), resumed,
# and the model is bit-identical to the uninterrupted run's above (same job, other output dir).
sed -e "s#$T/out-sealed\"#$T/out-resume\"#" "$T/sealed.toml" > "$T/resume.toml"
cmp -s <(grep -v output_dir "$T/sealed.toml") <(grep -v output_dir "$T/resume.toml") || fail "resume job differs"
pass; expect_rc 0 "run, stop after step 23" -- "$TRAIN" run --job "$T/resume.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --stop-after-step 23 --json
tail -1 "$T/out" | grep -q '"event":"stopped"' || fail "no stopped event"
[ -f "$T/out-resume/checkpoints/step-000000000023.ckpt" ] || fail "no checkpoint at step 23"
[ ! -e "$T/out-resume/report.json" ] && [ ! -e "$T/out-resume/model.sealed" ] || fail "outputs after a stop"
cp "$T/out-resume/checkpoints/step-000000000023.ckpt" "$T/good.ckpt"
# Tampered: one byte of the ciphertext -> authentication failed (4), before any training.
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[500]^=1; open(sys.argv[1],"wb").write(b)' \
  "$T/out-resume/checkpoints/step-000000000023.ckpt"
pass; expect_rc 4 "tampered checkpoint" -- "$TRAIN" run --job "$T/resume.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --resume
grep -q "failed authentication" "$T/err" || fail "tamper message"
# Foreign: the same checkpoint offered to another job (another seed) -> permission denied (5).
cp "$T/good.ckpt" "$T/out-resume/checkpoints/step-000000000023.ckpt"
sed -e 's/^seed = .*/seed = 8/' "$T/resume.toml" > "$T/other.toml"
pass; expect_rc 5 "another job's checkpoint" -- "$TRAIN" run --job "$T/other.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --resume
grep -q "checkpoint of another job" "$T/err" || fail "foreign checkpoint message"
pass; expect_rc 0 "resume" -- "$TRAIN" run --job "$T/resume.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu --resume
grep -q "resuming from .*step-000000000023.ckpt" "$T/err" || fail "resume message"
pass; expect_rc 0 "open resumed model" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-resume/model.sealed" --out "$T/model-resumed.bin"
cmp -s "$T/model.bin" "$T/model-resumed.bin" || fail "the resumed run's model differs from the uninterrupted run's"
python3 - "$T/out-sealed/report.json" "$T/out-resume/report.json" <<'PY' || fail "resumed report"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["parameters_sha256"] == b["parameters_sha256"]
assert b["resumed_from"]["step"] == 23 and a["resumed_from"] is None
assert [e["train_loss"] for e in a["epochs"]] == [e["train_loss"] for e in b["epochs"]]
assert a["model_export"]["sha256"] != b["model_export"]["sha256"]  # fresh envelope keys each time
PY
# [streaming]: the same sealed job re-reads and decrypts its rows every epoch, a window of
# blocks at a time; stopped after step 23 and resumed, it ends with the uninterrupted
# streamed run's parameters.
for d in stream stream-resume; do
  sed -e "s#$T/out-sealed\"#$T/out-$d\"#" "$T/sealed.toml" > "$T/$d.toml"
  printf '[streaming]\nblock_rows = 32\nwindow_blocks = 3\n' >> "$T/$d.toml"
done
pass; expect_rc 0 "run streamed" -- "$TRAIN" run --job "$T/stream.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu
pass; expect_rc 0 "run streamed, stop after step 23" -- "$TRAIN" run --job "$T/stream-resume.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --device cpu --stop-after-step 23
pass; expect_rc 0 "resume streamed" -- "$TRAIN" run --job "$T/stream-resume.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --resume
python3 - "$T/out-sealed/report.json" "$T/out-stream/report.json" "$T/out-stream-resume/report.json" <<'PY' || fail "streamed reports"
import json, sys
loaded, streamed, resumed = (json.load(open(p)) for p in sys.argv[1:])
assert loaded["streaming"] is None and streamed["streaming"] == {"block_rows": 32, "window_blocks": 3}, streamed["streaming"]
assert streamed["final"]["val_accuracy"] > 0.9, streamed["final"]
assert streamed["parameters_sha256"] != loaded["parameters_sha256"]  # another shuffle
assert resumed["parameters_sha256"] == streamed["parameters_sha256"] and resumed["resumed_from"]["step"] == 23
PY
# The report's accuracy over all rows (read again in pieces) is what predict gets.
pass; expect_rc 0 "predict with the streamed model" -- "$TRAIN" predict --model "$T/out-stream/model.sealed" \
  --keystore "$T/ks" --passphrase-fd 3 --csv "$CSV" --json
python3 - "$T/out" "$T/out-stream/report.json" <<'PY' || fail "streamed model's predictions"
import json, sys
out, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert out["accuracy"] == r["all_rows"]["accuracy"] and r["all_rows"]["rows"] == 569, (out, r["all_rows"])
PY
# More rows than one piece of the all-rows pass (65,536): 70,000 synthetic rows, streamed
# from a clear CSV with an export key; predict agrees with the report to the last bit.
python3 - "$T/big.csv" <<'PY'
import random, sys
random.seed(3)
with open(sys.argv[1], "w") as f:
    f.write("a,b,c,y\n")
    for _ in range(70000):
        a, b, c = (random.gauss(0, 1) for _ in range(3))
        f.write(f"{a:.5f},{b:.5f},{c:.5f},{'yes' if a + 0.5 * b - c + random.gauss(0, 0.5) > 0 else 'no'}\n")
PY
cat > "$T/big.toml" <<EOF
seed = 2
output_dir = "$T/out-big"
export_key = "$T/tenant-export.pub"
[[datasets]]
id = "big"
path = "$T/big.csv"
format = "csv"
label = "y"
positive = "yes"
[training]
epochs = 1
batch_size = 256
[optimizer]
lr = 0.01
[streaming]
block_rows = 4096
window_blocks = 2
EOF
expect_rc 0 "run streamed, 70,000 rows" -- "$TRAIN" run --job "$T/big.toml" --device cpu
pass; expect_rc 0 "predict 70,000 rows" -- "$TRAIN" predict --model "$T/out-big/model.sealed" --keystore "$T/ks" \
  --passphrase-fd 3 --csv "$T/big.csv" --json
python3 - "$T/out" "$T/out-big/report.json" <<'PY' || fail "70,000-row streamed model's predictions"
import json, sys
out, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["all_rows"]["rows"] == 70000 and 0.8 < out["accuracy"] == r["all_rows"]["accuracy"], (out, r["all_rows"])
PY
sed -e 's/^window_blocks = 3/window_blocks = 3\nblock_size = 4/' "$T/stream.toml" > "$T/stream-bad.toml"
expect_rc 3 "unknown [streaming] key" -- "$TRAIN" run --job "$T/stream-bad.toml" --keystore "$T/ks" --device cpu --json
grep -q "streaming.block_size" "$T/err" || fail "unknown streaming key message"
python3 - "$T/out" <<'PY' || fail "--json error: one JSON line"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
e = json.loads(lines[0])
assert e["ok"] is False and e["error"]["code"] == "invalid input" and "streaming.block_size" in e["error"]["message"], e
PY

# A stop signal during training: the step finishes, a final checkpoint is written, exit 15
# (interrupted), nothing else; --resume continues from that checkpoint.
sed -e "s#$T/out-sealed\"#$T/out-signal\"#; s/^epochs = .*/epochs = 20000/; s/^every_steps = [0-9]*/every_steps = 1000/" \
  "$T/sealed.toml" > "$T/signal.toml"
grep -q "^every_steps = 1000" "$T/signal.toml" || fail "signal job has no [checkpoint] every_steps"
wait_for() {  # wait_for FILE PATTERN: up to 30 s
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
pass; "$TRAIN" run --job "$T/signal.toml" --keystore "$T/ks" --passphrase-fd 3 --device cpu --json \
  >"$T/signal.out" 2>"$T/signal.err" &
pid=$!
wait_for "$T/signal.out" '"event":"checkpoint"' || { kill -9 $pid; fail "no periodic checkpoint within 30 s"; }
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" = 15 ] || { cat "$T/signal.err" >&2; fail "SIGTERM: exit $rc, want 15"; }
grep -q "interrupted: SIGTERM: stopped after step [0-9]*, checkpoint .*--resume" "$T/signal.err" ||
  { cat "$T/signal.err" >&2; fail "SIGTERM message"; }
last=$(ls "$T/out-signal/checkpoints" | tail -1)
step=$((10#$(sed 's/step-\([0-9]*\)\.ckpt/\1/' <<<"$last")))
[ $((step % 1000)) != 0 ] || fail "the signal's checkpoint should be off the periodic grid (step $step)"
[ ! -e "$T/out-signal/report.json" ] && [ ! -e "$T/out-signal/model.sealed" ] || fail "outputs after a signal"
pass; expect_rc 0 "resume after SIGTERM" -- "$TRAIN" run --job "$T/signal.toml" --keystore "$T/ks" --passphrase-fd 3 \
  --device cpu --resume --stop-after-step $((step + 7))
grep -q "resuming from .*$last (step $step" "$T/err" || { cat "$T/err" >&2; fail "did not resume from the signal's checkpoint"; }
# Without [checkpoint] (clear CSV, no keystore): exit 15, and it says there is nothing to resume.
sed -e "s#$T/out-clear\"#$T/out-signal2\"#; s/^epochs = .*/epochs = 20000/" "$T/clear.toml" > "$T/signal2.toml"
"$TRAIN" run --job "$T/signal2.toml" --device cpu --json >"$T/signal.out" 2>"$T/signal.err" &
pid=$!
wait_for "$T/signal.out" '"event":"epoch"' || { kill -9 $pid; fail "no epoch within 30 s"; }
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" = 15 ] || fail "SIGTERM without checkpoints: exit $rc, want 15"
grep -q "no checkpoint (the job has no \[checkpoint\] table), nothing written" "$T/signal.err" || fail "SIGTERM message 2"
[ ! -e "$T/out-signal2/report.json" ] || fail "a report after a signal"

rm -rf "$T/out-none"
sed -e "s#$T/out-sealed\"#$T/out-none\"#" "$T/sealed.toml" > "$T/no-ckpt.toml"
pass; expect_rc 6 "--resume without a checkpoint" -- "$TRAIN" run --job "$T/no-ckpt.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --device cpu --resume
expect_rc 8 "checkpoints without --keystore" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --force --stop-after-step 2
printf '{"format": "enclave-export-public-key"}\n' > "$T/bad.pub"
expect_rc 3 "bad export key file" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --force --export-key "$T/bad.pub"
expect_rc 6 "export key file missing" -- "$TRAIN" run --job "$T/clear.toml" --device cpu --force --export-key "$T/none.pub"

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
