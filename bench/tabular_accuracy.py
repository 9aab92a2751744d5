#!/usr/bin/python3
"""Accuracy of enclave-train against scikit-learn and XGBoost under one protocol (issue 18 section 8).

For each sample dataset (data/samples/), complete and with a share of its feature cells
deleted at random, and each model family below, both sides run stratified K-fold
cross-validation (default 5 folds) for each of several seeds (default 0..4) and report the
mean over all seeds x folds of the per-fold accuracy and ROC AUC:

  ours:    enclave-train cv --job J --folds K --device cpu --json   (J: the family's example
           job of examples/ with `seed`, `path` and `output_dir` replaced and the
           [preprocess] table stated: impute = "median", indicators = true; the job seed
           chooses the folds, the initialization and the shuffles. trees: the job is built
           here, below)
  sklearn: Pipeline(SimpleImputer(strategy="median", add_indicator=True), StandardScaler(),
           estimator) over StratifiedKFold(K, shuffle=True, random_state=seed)
           (trees: Pipeline(xgboost.XGBClassifier) alone, no imputer, no scaler, below)

The folds are not the same rows on the two sides (each uses its own shuffle); the spread
over seeds printed with each mean shows how much that alone moves it.

Damage: `--damage` (default 0.2) of the feature cells, chosen uniformly without replacement
with numpy's default_rng(--damage-seed), become empty cells (missing for both sides); the
label column is never touched. The damaged CSVs are written to the work directory (a
temporary directory unless --workdir).

How the job's hyperparameters map to scikit-learn (computed from the example job, per fold):

  logistic regression (model.hidden = []): LogisticRegression(C = 1 / (l2 * n_train),
    solver="lbfgs"), the exact optimum of the penalized mean log-loss that our AdamW
    epochs approach. Ours minimizes mean(logloss) + 0.5 * l2 * |W|^2; scikit-learn
    minimizes C * sum(logloss) + 0.5 * |W|^2, the same objective divided by C * n_train.
    Neither penalizes the intercept. epochs, lr, batch_size and schedule have no
    counterpart (lbfgs runs to convergence, max_iter=10000).
  MLP (model.hidden = [64], ...): MLPClassifier(hidden_layer_sizes=hidden, activation
    relu/tanh/logistic, solver="adam" (optimizer "adamw" with weight_decay 0 is Adam with
    the L2 term in the gradient, as scikit-learn's) or "sgd" (momentum, nesterovs_momentum
    =False), learning_rate_init=lr, beta_1, beta_2, epsilon as the job, batch_size as the
    job, alpha = l2 * batch_size (scikit-learn adds alpha * W / n_batch to the batch-mean
    gradient, ours l2 * W), max_iter = epochs with tol=0 and n_iter_no_change > epochs (no
    early stop: exactly `epochs` passes), shuffle=True, random_state=seed. Not mappable:
    the schedule (scikit-learn's adam keeps lr constant; the examples' MLP jobs decay it
    with a cosine to 0) and a nonzero decoupled weight_decay (none in the examples). The
    initialization is the same rule (Glorot uniform, factor 6 for relu/tanh, 2 sigmoid).
  trees ([model] family = "xgboost"): no example job has trees, so the job is the
    dataset's logreg example's [[datasets]] entry with [model] family = "xgboost",
    [training] validation_fraction and metrics only, and [trees] = TREES below (100
    rounds, max_depth 4, eta 0.1, max_bin 256, 2 threads, no early stopping, XGBoost's
    defaults for the rest, all written out). The reference is python3-xgboost (Debian,
    the same libxgboost 1.7.4 that enclave-train links) through its scikit-learn API:
    XGBClassifier(n_estimators=rounds, max_depth, learning_rate=eta, min_child_weight,
    subsample, colsample_bytree, reg_lambda=lambda, reg_alpha=alpha, gamma, max_bin,
    tree_method="hist", objective="binary:logistic", n_jobs=threads, random_state=seed,
    missing=NaN), the parameters enclave-train sets on its booster (trainer/src/trees.cc).
    Missing cells stay NaN on both sides (XGBoost's default direction per split), with no
    imputation, no indicators and no scaling: enclave-train's trees one-hot categorical
    columns (plus an unseen-category column) and keep missing values as NaN, and the two
    sample datasets have no categorical column (load_xy refuses one), so both sides'
    inputs are the same float32 values, column for column (the width check below checks
    the count: 30 and 11). With subsample = colsample_bytree = 1 the seed chooses only
    the folds. OMP_WAIT_POLICY defaults to passive here (the whole process and the
    enclave-train runs; see the README's trees benchmark: libgomp's spin-waiting makes
    2 threads on a loaded 2-core machine several times slower).

Preprocessing differences (logreg, mlp), checked by the script on every fold: scikit-learn's
add_indicator adds an indicator only for a column with a missing value in the training
fold; enclave-train adds one for every column the schema lets be missing (inferred from
the whole CSV). They differ only for a column whose missing cells all fall in one
validation fold. The script compares the model input width of both sides (ours: `inputs`
in cv_metrics.json; scikit-learn: n_features_in_ of the estimator) and reports every fold
where they differ. Values are rounded to float32 on both sides (ours parses cells to the
nearest float32); yes/no columns are 1/0.

Adding a model family: one entry in FAMILIES (its example job per dataset, optionally a
function that derives the family's job from it, and a function that builds the reference
pipeline from the parsed job, the training rows and the seed).

Usage: bench/tabular_accuracy.py --enclave-train build/release/tools/enclave-train
         [--seeds 0,1,2,3,4] [--folds 5] [--damage 0.2] [--damage-seed 20261202]
         [--datasets breast_cancer,credit_card] [--models logreg,mlp,trees] [--json OUT.json]
         [--override TABLE.KEY=TOML_VALUE]... [--workdir DIR]
Run with /usr/bin/python3 (Debian's python3-sklearn and python3-xgboost). Exit status 0 whether or not the rows
pass (the table says); 2 on a usage error or a failed enclave-train run.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as enclave-train (one BLAS thread)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before libgomp loads (xgboost); inherited by enclave-train

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import accuracy_score, roc_auc_score  # noqa: E402
from sklearn.model_selection import StratifiedKFold  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
import xgboost  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL_ACCURACY = 0.01  # issue 18: within 1 point of accuracy
TOL_AUC = 0.01  # and 0.01 of ROC AUC
MISSING = {"", "NA", "NaN", "null"}  # enclave-data seal's default missing cells
PREPROCESS = {"impute": "median", "indicators": True}  # stated in every job, also the defaults

# The sample datasets: the file and the prefix of their example jobs (examples/PREFIX_FAMILY.toml);
# label and positive class come from the example job's [[datasets]] entry.
DATASETS = {
    "breast_cancer": {"csv": "data/samples/breast_cancer_wisconsin.csv", "prefix": "breast_cancer"},
    "credit_card": {"csv": "data/samples/credit_card_applications.csv", "prefix": "credit_card"},
}


def imputer_scaler():
    return [("impute", SimpleImputer(strategy="median", add_indicator=True)), ("scale", StandardScaler())]


def sklearn_logreg(job, n_train, seed):
    l2 = float(job.get("optimizer", {}).get("l2", 0.0))
    if job.get("model", {}).get("hidden", []):
        raise ValueError("logreg family needs model.hidden = []")
    est = (LogisticRegression(C=1.0 / (l2 * n_train), solver="lbfgs", max_iter=10000) if l2 > 0 else
           LogisticRegression(penalty=None, solver="lbfgs", max_iter=10000))
    return Pipeline(imputer_scaler() + [("model", est)])


def sklearn_mlp(job, n_train, seed):
    model, train, opt = job.get("model", {}), job.get("training", {}), job.get("optimizer", {})
    hidden = tuple(model["hidden"])
    act = {"relu": "relu", "tanh": "tanh", "sigmoid": "logistic"}[model.get("activation", "relu")]
    epochs, batch = int(train.get("epochs", 100)), int(train.get("batch_size", 32))
    kind = opt.get("type", "adamw")
    common = dict(hidden_layer_sizes=hidden, activation=act, alpha=float(opt.get("l2", 0.0)) * batch,
                  batch_size=min(batch, n_train), learning_rate_init=float(opt.get("lr", 0.001)),
                  max_iter=epochs, tol=0.0, n_iter_no_change=epochs + 1, shuffle=True, random_state=seed,
                  early_stopping=False)
    if kind == "adamw":
        est = MLPClassifier(solver="adam", beta_1=float(opt.get("beta1", 0.9)), beta_2=float(opt.get("beta2", 0.999)),
                            epsilon=float(opt.get("eps", 1e-8)), **common)
    else:
        est = MLPClassifier(solver="sgd", momentum=float(opt.get("momentum", 0.9)), nesterovs_momentum=False,
                            learning_rate="constant", **common)
    return Pipeline(imputer_scaler() + [("model", est)])


# The trees family's [trees] table (docs/formats/job.md; every key written, XGBoost's defaults
# where not chosen here).
TREES = {"rounds": 100, "max_depth": 4, "eta": 0.1, "min_child_weight": 1.0, "subsample": 1.0,
         "colsample_bytree": 1.0, "lambda": 1.0, "alpha": 0.0, "gamma": 0.0, "max_bin": 256,
         "threads": 2, "early_stopping_rounds": 0}


def trees_job(example):
    """The trees job from a dataset's (logreg) example: its name, seed and [[datasets]] kept."""
    return {"name": example["name"].replace("logreg", "trees"), "seed": example["seed"], "device": "cpu",
            "output_dir": example["output_dir"], "datasets": example["datasets"],
            "model": {"family": "xgboost"},
            "training": {"validation_fraction": example.get("training", {}).get("validation_fraction", 0.2),
                         "metrics": ["loss", "accuracy", "roc_auc"]},
            "trees": dict(TREES)}


def sklearn_trees(job, n_train, seed):
    t = job["trees"]
    if job.get("model", {}).get("family") != "xgboost" or t.get("early_stopping_rounds", 0):
        raise ValueError("trees family needs model.family = \"xgboost\" and no early stopping")
    est = xgboost.XGBClassifier(
        n_estimators=int(t["rounds"]), max_depth=int(t["max_depth"]), learning_rate=float(t["eta"]),
        min_child_weight=float(t["min_child_weight"]), subsample=float(t["subsample"]),
        colsample_bytree=float(t["colsample_bytree"]), reg_lambda=float(t["lambda"]), reg_alpha=float(t["alpha"]),
        gamma=float(t["gamma"]), max_bin=int(t["max_bin"]), tree_method="hist", objective="binary:logistic",
        eval_metric="logloss", n_jobs=int(t["threads"]), random_state=seed, missing=np.nan, verbosity=0)
    return Pipeline([("model", est)])


# Model families: the example job (per dataset prefix) whose hyperparameters both sides use
# ("job": a function that derives the family's job from it), the reference pipeline built
# from that job, whether enclave-train's side gets the [preprocess] table (median, indicators)
# and what the reference is called in the table.
FAMILIES = {
    "logreg": {"example": "{prefix}_logreg.toml", "sklearn": sklearn_logreg, "preprocess": True,
               "reference": "scikit-learn"},
    "mlp": {"example": "{prefix}_mlp.toml", "sklearn": sklearn_mlp, "preprocess": True, "reference": "scikit-learn"},
    "trees": {"example": "{prefix}_logreg.toml", "job": trees_job, "sklearn": sklearn_trees, "preprocess": False,
              "reference": "xgboost"},
}


def unmapped(job):
    """Job settings the scikit-learn side cannot reproduce (reported per row)."""
    out = []
    sched = job.get("schedule", {})
    hidden = job.get("model", {}).get("hidden", [])
    if hidden and (sched.get("type", "constant") != "constant" or sched.get("warmup_epochs", 0)):
        out.append(f"schedule {sched.get('type')} (sklearn: constant lr)")
    if float(job.get("optimizer", {}).get("weight_decay", 0.0)) != 0.0:
        out.append("weight_decay (no sklearn counterpart)")
    return out


# ---- TOML writing (the few value types a job has) ----

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string of printable text is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v)}")


def toml_dump(doc):
    lines = [f"{k} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict) and
             not (isinstance(v, list) and v and isinstance(v[0], dict))]
    for k, v in doc.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{ik} = {toml_value(iv)}" for ik, iv in item.items()]
        elif isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{ik} = {toml_value(iv)}" for ik, iv in v.items()]
    return "\n".join(lines) + "\n"


# ---- data ----

def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def damage_csv(src, dst, label, share, seed):
    """Empties `share` of the feature cells of src (uniform, without replacement), writes dst."""
    header, rows = read_csv(src)
    features = [j for j, name in enumerate(header) if name != label]
    cells = len(rows) * len(features)
    k = int(round(share * cells))
    pick = np.random.default_rng(seed).choice(cells, size=k, replace=False)
    for c in pick:
        rows[c // len(features)][features[c % len(features)]] = ""
    with open(dst, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return k, cells


def load_xy(path, label, positive):
    """The CSV as enclave-train encodes it: numbers to float32, yes/no to 1/0, missing cells NaN."""
    header, rows = read_csv(path)
    li = header.index(label)
    cols = [j for j in range(len(header)) if j != li]
    X = np.empty((len(rows), len(cols)), dtype=np.float64)
    for jj, j in enumerate(cols):
        vals = [r[j] for r in rows]
        present = {v for v in vals if v not in MISSING}
        yesno = present <= {"yes", "no"}
        for i, v in enumerate(vals):
            if v in MISSING:
                X[i, jj] = np.nan
            elif yesno:
                X[i, jj] = 1.0 if v == "yes" else 0.0
            else:
                try:
                    X[i, jj] = float(v)
                except ValueError:
                    raise SystemExit(f"{path}: column '{header[j]}' is categorical ('{v}'); "
                                     "this script handles numeric and yes/no columns only")
    X = X.astype(np.float32).astype(np.float64)
    y = np.array([1 if r[li] == positive else 0 for r in rows], dtype=np.int64)
    return X, y, [header[j] for j in cols]


# ---- the two sides ----

def run_ours(binary, job, csv_path, seed, folds, workdir, tag, preprocess=True):
    job = json.loads(json.dumps(job))
    job["seed"] = seed
    job["device"] = "cpu"
    out_dir = os.path.join(workdir, "out", f"{tag}-seed{seed}")
    job["output_dir"] = out_dir
    job.pop("export_key", None)
    job.pop("checkpoint", None)
    job["datasets"][0]["path"] = csv_path
    if preprocess:
        job["preprocess"] = dict(PREPROCESS)
    job_path = os.path.join(workdir, "jobs", f"{tag}-seed{seed}.toml")
    with open(job_path, "w") as f:
        f.write(toml_dump(job))
    cmd = [binary, "cv", "--job", job_path, "--folds", str(folds), "--device", "cpu", "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        print(f"error: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}", file=sys.stderr)
        sys.exit(2)
    with open(os.path.join(out_dir, "cv_metrics.json")) as f:
        m = json.load(f)
    return {"accuracy": [fo["val_accuracy"] for fo in m["folds"]],
            "roc_auc": [fo["val_roc_auc"] for fo in m["folds"]],
            "train_rows": [fo["train_rows"] for fo in m["folds"]],
            "inputs": m["model"]["inputs"], "preprocessing": m["model"]["preprocessing"],
            "seconds": dt}


def run_sklearn(build, job, X, y, seed, folds, indicators=True):
    acc, auc, inputs, train_rows, mismatch = [], [], [], [], 0
    missing_anywhere = np.isnan(X).any(axis=0)
    # What enclave-train's plan gives: an indicator per column that may be missing (trees: none).
    ours_width = X.shape[1] + (int(missing_anywhere.sum()) if indicators else 0)
    t0 = time.monotonic()
    for tr, va in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(X, y):
        pipe = build(job, len(tr), seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            pipe.fit(X[tr], y[tr])
        p = pipe.predict_proba(X[va])[:, 1]
        acc.append(accuracy_score(y[va], (p >= 0.5).astype(np.int64)))  # ours: p >= 0.5 is class 1
        auc.append(roc_auc_score(y[va], p))
        width = pipe.named_steps["model"].n_features_in_
        inputs.append(int(width))
        mismatch += int(width != ours_width)
        train_rows.append(int(len(tr)))
    return {"accuracy": acc, "roc_auc": auc, "inputs": inputs, "train_rows": train_rows,
            "indicator_mismatch_folds": mismatch, "seconds": time.monotonic() - t0}


def summarize(per_seed):
    flat_acc = [a for s in per_seed for a in s["accuracy"]]
    flat_auc = [a for s in per_seed for a in s["roc_auc"]]
    seed_acc = [float(np.mean(s["accuracy"])) for s in per_seed]
    seed_auc = [float(np.mean(s["roc_auc"])) for s in per_seed]
    return {"accuracy": float(np.mean(flat_acc)), "roc_auc": float(np.mean(flat_auc)),
            "accuracy_seed_range": [min(seed_acc), max(seed_acc)],
            "roc_auc_seed_range": [min(seed_auc), max(seed_auc)],
            "accuracy_per_seed": seed_acc, "roc_auc_per_seed": seed_auc,
            "seconds": sum(s["seconds"] for s in per_seed)}


def verdict(ours, ref, tol):
    d = ours - ref
    if d < -tol:
        return "FAIL"
    return "pass" if d <= tol else "above"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--enclave-train", required=True, help="path of the enclave-train binary")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--damage", type=float, default=0.2, help="share of feature cells deleted")
    ap.add_argument("--damage-seed", type=int, default=20261202)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--models", default=",".join(FAMILIES))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--override", action="append", default=[], metavar="TABLE.KEY=TOML_VALUE",
                    help="change a key of every example job, on both sides (a diagnostic, e.g. "
                         "schedule.type='\"constant\"'); the table then names the overrides")
    ap.add_argument("--workdir", help="keep jobs, damaged CSVs and outputs here (default: a temporary directory)")
    a = ap.parse_args()
    binary = os.path.abspath(a.enclave_train)
    if not os.access(binary, os.X_OK):
        ap.error(f"{binary}: not an executable")
    seeds = [int(s) for s in a.seeds.split(",")]
    overrides = []
    for o in a.override:
        key, eq, val = o.partition("=")
        if not eq or key.count(".") != 1:
            ap.error(f"--override {o}: expected TABLE.KEY=TOML_VALUE")
        overrides.append((*key.split("."), tomllib.loads("v = " + val)["v"]))
    datasets, models = a.datasets.split(","), a.models.split(",")
    for d in datasets:
        if d not in DATASETS:
            ap.error(f"unknown dataset {d} (known: {', '.join(DATASETS)})")
    for m in models:
        if m not in FAMILIES:
            ap.error(f"unknown model {m} (known: {', '.join(FAMILIES)})")
    workdir = a.workdir or tempfile.mkdtemp(prefix="tabular-accuracy-")
    if a.workdir and os.path.exists(os.path.join(workdir, "out")):
        shutil.rmtree(os.path.join(workdir, "out"))
    for sub in ("jobs", "out", "data"):
        os.makedirs(os.path.join(workdir, sub), exist_ok=True)

    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"{started:%Y-%m-%d %H:%M} UTC  {platform.node()}  {os.cpu_count()} CPUs  "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}  scikit-learn {sklearn.__version__}  "
          f"numpy {np.__version__}  xgboost {xgboost.__version__}  OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}", flush=True)
    if overrides:
        print("OVERRIDES (every job, both sides): " + ", ".join(a.override), flush=True)
    print(f"{a.folds}-fold stratified CV x seeds {a.seeds}; damage {a.damage:.0%} of feature cells "
          f"(default_rng({a.damage_seed})); work dir {workdir}", flush=True)

    rows = []
    for dname in datasets:
        ds = DATASETS[dname]
        src = os.path.join(REPO, ds["csv"])
        for damage in (0.0, a.damage):
            for mname in models:
                fam = FAMILIES[mname]
                with open(os.path.join(REPO, "examples", fam["example"].format(prefix=ds["prefix"])), "rb") as f:
                    job = tomllib.load(f)
                if "job" in fam:
                    job = fam["job"](job)
                for table, key, val in overrides:
                    job.setdefault(table, {})[key] = val
                label, positive = job["datasets"][0]["label"], job["datasets"][0]["positive"]
                if damage > 0:
                    path = os.path.join(workdir, "data", f"{dname}-damaged.csv")
                    if not os.path.exists(path):
                        k, cells = damage_csv(src, path, label, damage, a.damage_seed)
                        print(f"{dname}: {k} of {cells} feature cells deleted -> {path}", flush=True)
                else:
                    path = src
                X, y, _ = load_xy(path, label, positive)
                tag = f"{dname}-{'damaged' if damage else 'complete'}-{mname}"
                ours = [run_ours(binary, job, path, s, a.folds, workdir, tag, fam["preprocess"]) for s in seeds]
                ref = [run_sklearn(fam["sklearn"], job, X, y, s, a.folds, fam["preprocess"]) for s in seeds]
                o, r = summarize(ours), summarize(ref)
                jobname = fam["example"].format(prefix=ds["prefix"]) + (" [[datasets]] + TREES" if "job" in fam else "")
                row = {"dataset": dname, "damage": damage, "model": mname, "job": jobname,
                       "reference": fam["reference"], "enclave": o, "sklearn": r,
                       "diff_accuracy": o["accuracy"] - r["accuracy"], "diff_roc_auc": o["roc_auc"] - r["roc_auc"],
                       "accuracy_verdict": verdict(o["accuracy"], r["accuracy"], TOL_ACCURACY),
                       "roc_auc_verdict": verdict(o["roc_auc"], r["roc_auc"], TOL_AUC),
                       "inputs": {"enclave": ours[0]["inputs"], "sklearn": sorted({w for s in ref for w in s["inputs"]})},
                       "preprocessing": ours[0]["preprocessing"],
                       "indicator_mismatch_folds": sum(s["indicator_mismatch_folds"] for s in ref),
                       "unmapped": unmapped(job),
                       "trees": job.get("trees"),
                       "per_fold": {"enclave": [{k: s[k] for k in ("accuracy", "roc_auc", "train_rows")} for s in ours],
                                    "sklearn": [{k: s[k] for k in ("accuracy", "roc_auc", "train_rows")} for s in ref]}}
                rows.append(row)
                print(f"  {tag}: ours {o['accuracy']:.4f}/{o['roc_auc']:.4f} ({o['seconds']:.1f} s), "
                      f"{fam['reference']} {r['accuracy']:.4f}/{r['roc_auc']:.4f} ({r['seconds']:.1f} s)", flush=True)

    n = len(seeds) * a.folds
    print()
    print(f"mean over {len(seeds)} seeds x {a.folds} folds = {n} folds; [min..max] of the per-seed means; "
          f"target: ours not more than {TOL_ACCURACY * 100:.0f} point of accuracy / {TOL_AUC} of ROC AUC "
          f"below the reference: scikit-learn for logreg/mlp, python3-xgboost for trees ('above': more than that above)")
    head = (f"{'dataset':<14} {'cells':<8} {'model':<6} | {'ours acc':>20} {'reference acc':>20} {'diff':>7} {'':5} | "
            f"{'ours AUC':>20} {'reference AUC':>20} {'diff':>7} {'':5}")
    print(head)
    print("-" * len(head))

    def cell(s, key):
        lo, hi = s[key + "_seed_range"]
        return f"{s[key]:.4f} [{lo:.3f}..{hi:.3f}]"

    for row in rows:
        cells = "complete" if row["damage"] == 0 else f"-{row['damage']:.0%}"
        print(f"{row['dataset']:<14} {cells:<8} {row['model']:<6} | {cell(row['enclave'], 'accuracy'):>20} "
              f"{cell(row['sklearn'], 'accuracy'):>20} {row['diff_accuracy']:+7.4f} {row['accuracy_verdict']:5} | "
              f"{cell(row['enclave'], 'roc_auc'):>20} {cell(row['sklearn'], 'roc_auc'):>20} "
              f"{row['diff_roc_auc']:+7.4f} {row['roc_auc_verdict']:5}")
    print()
    for row in rows:
        notes = []
        if row["inputs"]["sklearn"] != [row["inputs"]["enclave"]]:
            notes.append(f"model inputs differ: ours {row['inputs']['enclave']}, reference {row['inputs']['sklearn']} "
                         f"({row['indicator_mismatch_folds']} folds: a column missing only in the validation fold "
                         "gets no sklearn indicator, or the trees' inputs differ)")
        if row["unmapped"]:
            notes.append("not mapped to sklearn: " + ", ".join(row["unmapped"]))
        if notes:
            print(f"{row['dataset']} {'complete' if row['damage'] == 0 else 'damaged'} {row['model']}: " + "; ".join(notes))
    if all(r["inputs"]["sklearn"] == [r["inputs"]["enclave"]] for r in rows):
        print("model input width equal on both sides in every row and fold ("
              + ", ".join(f"{r['dataset']} {'damaged' if r['damage'] else 'complete'} {r['model']}: {r['inputs']['enclave']}"
                          for r in rows)
              + "): the two indicator rules gave the same columns; the trees see the raw columns on both sides")

    def named(rs):
        return "" if not rs else " (" + ", ".join(
            f"{r['dataset']}/{'damaged' if r['damage'] else 'complete'}/{r['model']}" for r in rs) + ")"

    failed = [r for r in rows if "FAIL" in (r["accuracy_verdict"], r["roc_auc_verdict"])]
    above = [r for r in rows if r not in failed and "above" in (r["accuracy_verdict"], r["roc_auc_verdict"])]
    print(f"rows within the tolerance on both metrics: {len(rows) - len(failed) - len(above)} of {len(rows)}; "
          f"more than the tolerance above the reference (ours better): {len(above)}{named(above)}; "
          f"FAIL (more than the tolerance below): {len(failed)}{named(failed)}")
    print(f"total wall time {(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds():.0f} s")

    if a.json:
        doc = {"date": started.isoformat(), "host": platform.node(), "cpus": os.cpu_count(),
               "command": " ".join(sys.argv), "binary": binary, "sklearn_version": sklearn.__version__,
               "numpy_version": np.__version__, "xgboost_version": xgboost.__version__,
               "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "trees": TREES, "seeds": seeds, "folds": a.folds, "damage": a.damage,
               "damage_seed": a.damage_seed, "preprocess": PREPROCESS, "overrides": a.override,
               "tolerance": {"accuracy": TOL_ACCURACY, "roc_auc": TOL_AUC}, "rows": rows}
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {a.json}")
    if not a.workdir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
