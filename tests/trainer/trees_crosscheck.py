#!/usr/bin/python3
"""Cross-check of trainer::TrainTrees / PredictTrees (trainer/src/trees.cc) against XGBoost's
own Python package (Debian python3-xgboost 1.7.4, the same libxgboost underneath): the same
rows, parameters, thread count and seed through xgboost.train, then the predictions of both
on held-out rows are compared, for the three tasks (binary with missing values and row and
column sampling, multiclass, regression).

Tolerance: |ours - python| <= 1e-6 * max(1, |python|) per value. Both sides run the same
library code on the same float32 rows with the same parameters, so the trees should be the
same and the predictions equal bit for bit; the margin covers only a different summation
order (about 16 float32 ulps of a probability near 1, and relative for regression values
in the hundreds). A wrong parameter (another eta, depth, lambda, seed, missing handling)
moves predictions by 1e-3 or more. The booster bytes (UBJ) must be identical too, once the
two attributes xgboost.train adds (best_iteration, best_ntree_limit) are removed: the
trees themselves, split for split.

Usage: trees_crosscheck.py TREES_CROSSCHECK_BINARY SAMPLE_DATA_DIR"""

import csv
import os
import subprocess
import sys
import tempfile

import numpy as np
import xgboost as xgb

THREADS = 2
TOL = 1e-6


def breast_cancer(sample_dir):
    with open(os.path.join(sample_dir, "breast_cancer_wisconsin.csv"), newline="") as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    x = np.array([[float(v) for v in r[:-1]] for r in body], dtype=np.float32)
    y = np.array([1.0 if r[-1] == "malignant" else 0.0 for r in body], dtype=np.float32)
    return head[:-1], x, y


def blobs(rows, seed):
    rng = np.random.default_rng(seed)
    c = np.arange(rows) % 3
    centers = np.array([[0, 0, 0, 0], [2, 0, 1, 0], [0, 2, -1, 1]], dtype=np.float32)
    x = rng.normal(size=(rows, 8)).astype(np.float32)
    x[:, :4] += centers[c]
    return x, c.astype(np.float32)


def python_side(task, classes, x, y, tx, params, seed):
    p = {"tree_method": "hist", "seed": seed, "nthread": THREADS, "verbosity": 0}
    p.update({k: v for k, v in params.items() if k not in ("rounds", "threads")})
    if task == "binary":
        p.update(objective="binary:logistic", eval_metric="logloss")
    elif task == "multiclass":
        p.update(objective="multi:softprob", eval_metric="mlogloss", num_class=classes)
    else:
        p.update(objective="reg:squarederror", eval_metric="rmse")
    dtrain = xgb.DMatrix(x, label=y, missing=np.nan, nthread=THREADS)
    bst = xgb.train(p, dtrain, num_boost_round=params["rounds"], evals=[(dtrain, "train")], verbose_eval=False)
    pred = bst.predict(xgb.DMatrix(tx, missing=np.nan, nthread=THREADS), strict_shape=True)
    # xgboost.train records these two attributes in every booster (TrainTrees does not:
    # TreeModel::best_rounds says it); without them the model bytes should be ours.
    bst.set_attr(best_iteration=None, best_ntree_limit=None)
    return pred.astype(np.float32).reshape(-1), bytes(bst.save_raw("ubj"))


def cpp_side(binary, task, classes, x, y, tx, params, seed, tmp):
    paths = {k: os.path.join(tmp, task + "." + k) for k in ("x", "y", "tx", "pred", "model")}
    x.astype("<f4").tofile(paths["x"])
    y.astype("<f4").tofile(paths["y"])
    tx.astype("<f4").tofile(paths["tx"])
    args = [binary, task, str(classes), str(len(y)), str(x.shape[1]), paths["x"], paths["y"], paths["tx"],
            str(len(tx)), paths["pred"], paths["model"], str(seed)]
    args += ["%s=%r" % (k, v) for k, v in params.items()] + ["threads=%d" % THREADS]
    subprocess.run(args, check=True)
    with open(paths["model"], "rb") as f:
        model = f.read()
    return np.fromfile(paths["pred"], dtype="<f4"), model


def main():
    binary, sample_dir = sys.argv[1], sys.argv[2]
    names, x, y = breast_cancer(sample_dir)
    rng = np.random.default_rng(2026)
    x_missing = x.copy()
    x_missing[rng.random(x.shape) < 0.1] = np.nan  # float32 NaN from numpy: 0x7fc00000, the missing value
    assert np.isnan(x_missing).view(np.uint8).any()
    assert (x_missing.view(np.uint32)[np.isnan(x_missing)] == 0x7FC00000).all()
    area = names.index("mean_area")
    x_reg = np.delete(x, area, axis=1)
    y_reg = x[:, area].copy()
    bx, by = blobs(3000, 7)
    test = np.arange(len(y)) % 5 == 4
    btest = np.arange(len(by)) % 5 == 4

    cases = [
        ("binary", 2, x_missing[~test], y[~test], x_missing[test],
         {"rounds": 50, "subsample": 0.8, "colsample_bytree": 0.7}, 7),
        ("multiclass", 3, bx[~btest], by[~btest], bx[btest],
         {"rounds": 30, "max_depth": 4, "eta": 0.2, "lambda": 2.0, "alpha": 0.1, "gamma": 0.1,
          "min_child_weight": 2.0, "max_bin": 64}, 11),
        ("regression", 0, x_reg[~test], y_reg[~test], x_reg[test], {"rounds": 100, "eta": 0.1, "max_depth": 5}, 3),
    ]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for task, classes, xt, yt, tx, params, seed in cases:
            ours, our_model = cpp_side(binary, task, classes, xt, yt, tx, params, seed, tmp)
            theirs, their_model = python_side(task, classes, xt, yt, tx, params, seed)
            if ours.shape != theirs.shape:
                print("%s: %d predictions from us, %d from python" % (task, len(ours), len(theirs)))
                failed = True
                continue
            diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
            bound = TOL * np.maximum(1.0, np.abs(theirs.astype(np.float64)))
            ok = bool((diff <= bound).all()) and np.isfinite(ours).all() and our_model == their_model
            print("%-10s %5d predictions, max |diff| %.3g (bound %.3g), booster bytes %s: %s" %
                  (task, len(ours), diff.max(), bound.max(),
                   "identical" if our_model == their_model else "differ (%d vs %d)" % (len(our_model), len(their_model)),
                   "ok" if ok else "FAIL"))
            failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
