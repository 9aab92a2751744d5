#!/usr/bin/env bash
# enclave-train tune on the real binary (issue 18 §5): a 2 x 2 grid over the breast-cancer
# sample, 3 folds. tune_metrics.json lists every configuration in grid order, the best is
# the argmax of the listed means, and a configuration's folds are those `enclave-train cv`
# reports for the same job (bit for bit: the same parameter digests), so tune really ran cv
# per configuration. A random search is reproducible; errors exit with the documented codes
# and write nothing.
set -u
TRAIN=$1 SAMPLES=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/cli_helpers.sh"

base() {  # base NAME: the job every search here starts from (5 epochs, lr 0.01)
  cat <<TOML
name = "$1"
seed = 7
device = "cpu"
output_dir = "$T/out-$1"

[[datasets]]
id = "bc"
path = "$SAMPLES/breast_cancer_wisconsin.csv"
format = "csv"
label = "diagnosis"
positive = "malignant"

[training]
epochs = 5

[optimizer]
lr = 0.01
TOML
}
{ base grid; cat <<'TOML'

[tune]
folds = 3
metric = "roc_auc"

[tune.parameters]
"optimizer.lr" = [0.001, 0.05]
model.hidden = [[], [4]]
TOML
} > "$T/grid.toml"

expect_rc 0 "tune --json" -- "$TRAIN" tune --job "$T/grid.toml" --json
python3 - "$T/out" <<'PY' || fail "tune --json lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
conf = [l for l in lines if l.get("event") == "configuration"]
assert [c["configuration"] for c in conf] == [1, 2, 3, 4], lines
assert all(len(c["metric_per_fold"]) == 3 and c["metric"] == "roc_auc" for c in conf), conf
assert lines[-1]["event"] == "done" and lines[-1]["ok"] is True, lines[-1]
assert len(lines) == 5, "one line per configuration and the final line, no epoch lines"
PY
cp "$T/out" "$T/grid.jsonl"
python3 - "$T/out-grid/tune_metrics.json" "$T/grid.jsonl" <<'PY' || fail "tune_metrics.json"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] is True and r["verb"] == "tune" and r["mode"] == "development", r["verb"]
assert r["signature"] is None and r["rows"] == 569, r["signature"]
s = r["search"]
assert s["method"] == "grid" and s["metric"] == "roc_auc" and s["direction"] == "higher is better", s
assert s["folds"] == 3 and s["fold_seed"] == 7 and s["grid_size"] == 4 and s["configurations"] == 4, s
assert [p["key"] for p in s["parameters"]] == ["optimizer.lr", "model.hidden"], s["parameters"]
c = r["configurations"]
# Every configuration, in grid order: the first parameter as written varies slowest.
want = [(0.001, []), (0.001, [4]), (0.05, []), (0.05, [4])]
assert [(x["parameters"]["optimizer.lr"], x["parameters"]["model.hidden"]) for x in c] == want, c
for i, x in enumerate(c):
    assert x["configuration"] == i + 1
    assert x["model"]["hidden"] == want[i][1], x["model"]
    assert len(x["folds"]) == 3 and [f["fold"] for f in x["folds"]] == [1, 2, 3]
    per = x["metric_per_fold"]
    assert per == [f["val_roc_auc"] for f in x["folds"]], (per, x["folds"])
    mean = sum(per) / 3
    assert x["mean"] == mean, (x["mean"], mean)          # the same sum, in fold order
    std = math.sqrt(sum((v - mean) ** 2 for v in per) / 3)
    assert abs(x["std"] - std) < 1e-15, (x["std"], std)
    assert x["mean"] == x["mean_roc_auc"], x
    oof = x["out_of_fold_metrics"]
    assert oof["rows"] == 569 and "roc_auc" in oof["metrics"], oof
# The best is the argmax of the listed means (the first of equal ones); ranks follow the means.
means = [x["mean"] for x in c]
best = max(range(4), key=lambda i: (means[i], -i))
assert r["best"]["configuration"] == best + 1, (r["best"], means)
assert r["best"]["mean"] == means[best] and r["best"]["parameters"] == c[best]["parameters"], r["best"]
order = sorted(range(4), key=lambda i: (-means[i], i))
assert [c[i]["rank"] for i in order] == [1, 2, 3, 4], [x["rank"] for x in c]
# The JSON lines say the same.
lines = [json.loads(l) for l in open(sys.argv[2])]
assert [l["mean"] for l in lines[:4]] == means, lines
assert lines[-1]["best"]["configuration"] == best + 1, lines[-1]

PY
best=$(python3 -c "import json; print(json.load(open('$T/out-grid/tune_metrics.json'))['best']['configuration'])")

# The summary for people: every configuration, 4 significant digits, the best.
expect_rc 0 "tune (summary)" -- "$TRAIN" tune --job "$T/grid.toml" --force
grep -q "^grid search of grid: 4 configuration(s), 3-fold cross-validation on 569 rows" "$T/out" || { cat "$T/out"; fail "summary title"; }
[ "$(grep -cE '^ +[1-4] +[1-4]  [0-9]\.[0-9]{4} ' "$T/out")" = 4 ] || { cat "$T/out"; fail "one row per configuration"; }
grep -q "^best: configuration $best (" "$T/out" || { cat "$T/out"; fail "summary names the best ($best)"; }
grep -q "grid search: 4 configuration(s), 3-fold cross-validation each, by roc_auc" "$T/err" || fail "stderr"

# Honesty: each of two configurations, written out as a plain job, cross-validated by cv:
# the same folds (rows, metrics, parameter digests bit for bit) and the same pooled metrics.
for k in 2 3; do
  lr=$(python3 -c "import json; print(json.load(open('$T/out-grid/tune_metrics.json'))['configurations'][$k-1]['parameters']['optimizer.lr'])")
  hidden=$(python3 -c "import json; print(json.load(open('$T/out-grid/tune_metrics.json'))['configurations'][$k-1]['parameters']['model.hidden'])")
  base "cv$k" | sed "s/^lr = 0.01$/lr = $lr/" > "$T/cv$k.toml"
  printf '\n[model]\nhidden = %s\n' "$hidden" >> "$T/cv$k.toml"
  expect_rc 0 "cv of configuration $k" -- "$TRAIN" cv --job "$T/cv$k.toml" --folds 3
  python3 - "$T/out-grid/tune_metrics.json" "$T/out-cv$k/cv_metrics.json" "$k" "$T/out" <<'PY' || fail "configuration $k is not what cv reports"
import json, sys
t = json.load(open(sys.argv[1]))["configurations"][int(sys.argv[3]) - 1]
cv = json.load(open(sys.argv[2]))
strip = lambda folds: [{k: v for k, v in f.items() if k != "seconds"} for f in folds]
assert strip(t["folds"]) == strip(cv["folds"]), (t["folds"], cv["folds"])
assert t["out_of_fold_metrics"] == cv["out_of_fold_metrics"]
for key in ("mean_accuracy", "std_accuracy", "mean_roc_auc"):
    assert t[key] == cv[key], key
assert t["mean"] == cv["mean_roc_auc"]
# and to the digits cv prints
printed = [l for l in open(sys.argv[4]) if "mean ROC AUC" in l][0].split("mean ROC AUC ")[1].strip()
assert printed == "%#.4g" % t["mean"], (printed, t["mean"])
PY
done

# An existing tune_metrics.json is kept without --force (exit 7), before any training.
before=$(sha256sum "$T/out-grid/tune_metrics.json")
expect_rc 7 "tune without --force" -- "$TRAIN" tune --job "$T/grid.toml"
grep -q "tune_metrics.json exists (use --force to overwrite)" "$T/err" || fail "exit 7 names --force"
[ "$(sha256sum "$T/out-grid/tune_metrics.json")" = "$before" ] || fail "tune_metrics.json changed"

# A random search: trials distinct configurations, the same for the same seed.
{ base random; cat <<'TOML'

[tune]
method = "random"
trials = 2
seed = 4
folds = 2
metric = "log_loss"

[tune.parameters]
"optimizer.lr" = [0.001, 0.01, 0.05, 0.1]
"training.batch_size" = [16, 64]
TOML
} > "$T/random.toml"
expect_rc 0 "random tune" -- "$TRAIN" tune --job "$T/random.toml" --json
cp "$T/out-random/tune_metrics.json" "$T/random1.json"
expect_rc 0 "random tune again" -- "$TRAIN" tune --job "$T/random.toml" --json --force
python3 - "$T/random1.json" "$T/out-random/tune_metrics.json" <<'PY' || fail "random search"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
s = a["search"]
assert s["method"] == "random" and s["trials"] == 2 and s["seed"] == 4 and s["grid_size"] == 8, s
assert s["direction"] == "lower is better", s
pa = [c["parameters"] for c in a["configurations"]]
assert len(pa) == 2 and pa[0] != pa[1], pa
assert pa == [c["parameters"] for c in b["configurations"]], "same seed, same draws"
for c in a["configurations"]:
    assert c["metric_per_fold"] == [f["val_loss"] for f in c["folds"]], c
means = [c["mean"] for c in a["configurations"]]
best = min(range(2), key=lambda i: (means[i], i))
assert a["best"]["configuration"] == best + 1, (a["best"], means)
PY

# cv and run of a job with [tune] train the job as written, and say so.
expect_rc 0 "cv of a tune job" -- "$TRAIN" cv --job "$T/grid.toml" --folds 2 --force
grep -q "note: \[tune\] is read by enclave-train tune" "$T/err" || fail "cv's note on [tune]"

# Errors: one line naming the key and line, exit 3, nothing written.
err_job() {  # err_job NAME PARAMETERS [TUNE KEYS]
  { base "$1"; printf '\n[tune]\n%s\n[tune.parameters]\n%s\n' "${3:-}" "$2"; } > "$T/$1.toml"
}
expect_err() {  # expect_err CODE NAME MESSAGE
  expect_rc "$1" "$2" -- "$TRAIN" tune --job "$T/$2.toml"
  grep -qF -- "$3" "$T/err" || { cat "$T/err" >&2; fail "$2: message lacks: $3"; }
  [ "$(grep -c 'error:' "$T/err")" = 1 ] || fail "$2: one error line"
  [ ! -e "$T/out-$2/tune_metrics.json" ] || fail "$2: wrote tune_metrics.json"
}
line_of() { grep -n -- "$2" "$T/$1.toml" | head -1 | cut -d: -f1; }
err_job untunable '"seed" = [1, 2]'
expect_err 3 untunable "$T/untunable.toml:$(line_of untunable '"seed"'): 'tune.parameters' \"seed\" cannot be tuned"
err_job unknown '"model.hiden" = [[8]]'
expect_err 3 unknown "$T/unknown.toml:$(line_of unknown hiden): 'tune.parameters' \"model.hiden\": no such job key"
err_job wrongtype '"optimizer.lr" = [0.01, "fast"]'
expect_err 3 wrongtype "$T/wrongtype.toml:$(line_of wrongtype fast): 'optimizer.lr' must be a number (candidate 2 of"
err_job empty '"optimizer.lr" = []'
expect_err 3 empty "'tune.parameters' \"optimizer.lr\" must list at least one candidate"
err_job trials '"optimizer.lr" = [0.01, 0.1]' 'trials = 2'
expect_err 3 trials "'tune.trials' applies only to method = \"random\""
err_job toomany '"optimizer.lr" = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.2]
"optimizer.l2" = [0, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01]
"optimizer.weight_decay" = [0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1]'
expect_err 3 toomany "[tune] grid of 1331 configurations: at most 1000"
err_job combo '"schedule.warmup_epochs" = [0, 3]
"training.epochs" = [2, 10]'
# Each candidate is valid alone; warmup 3 with 2 epochs (configuration 3) is not.
expect_err 3 combo "[tune] configuration 3 of 4 (schedule.warmup_epochs = 3, training.epochs = 2): "
grep -qF "'schedule.warmup_epochs' must be below 'training.epochs'" "$T/err" || fail "combination error says why"
# The metric must fit the label: found once the data are read, before any training.
err_job metric '"optimizer.lr" = [0.01]' 'metric = "rmse"'
expect_err 3 metric "'tune.metric' \"rmse\" is a regression metric and the label has classes"
# The metric leaves in clear: it must be one of the job's clear outputs (brier: board_metrics).
{ base noclear; printf '\n[evaluation]\nboard_metrics = false\n\n[tune]\nmetric = "brier"\n[tune.parameters]\n"optimizer.lr" = [0.01]\n'; } \
  > "$T/noclear.toml"
expect_err 3 noclear "[tune] metric 'brier' is shown in clear as 'board_metrics', which this job does not show"
base notune > "$T/notune.toml"
expect_err 3 notune "the job has no [tune] table"
expect_rc 2 "tune --folds" -- "$TRAIN" tune --job "$T/grid.toml" --folds 3

# Help of its own.
expect_rc 0 "tune --help" -- "$TRAIN" tune --help
grep -q "tune_metrics.json" "$T/out" || fail "tune --help"
echo "enclave_train_tune_test: all passed"
