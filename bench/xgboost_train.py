#!/usr/bin/python3
"""The baseline of bench/trees_bench.cc: XGBoost's own Python package (Debian
python3-xgboost 1.7.4, the libxgboost that trainer::TrainTrees calls) on the same records
and parameters. Reads the records file the benchmark wrote (float32 little-endian,
FEATURES values then the label per row), then times what TrainTrees does: the DMatrix from
the rows (missing = NaN), xgboost.train with the training rows as the one evaluation set
(TrainTrees evaluates them every round), and the model saved as UBJ. Prints one JSON line:
{"seconds": wall, "cpu_seconds": process CPU, "rows": ..., "threads": ...}.

Usage: xgboost_train.py RECORDS FEATURES ROUNDS THREADS SEED"""

import json
import sys
import time

import numpy as np
import xgboost as xgb


def main():
    path, features, rounds, threads, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rec = np.fromfile(path, dtype="<f4").reshape(-1, features + 1)
    x = np.ascontiguousarray(rec[:, :features])
    y = np.ascontiguousarray(rec[:, features])
    params = {"objective": "binary:logistic", "eval_metric": "logloss", "tree_method": "hist", "seed": seed,
              "nthread": threads, "verbosity": 0, "max_depth": 6, "eta": 0.3, "max_bin": 256}
    w0, c0 = time.perf_counter(), time.process_time()
    dtrain = xgb.DMatrix(x, label=y, missing=np.nan, nthread=threads)
    bst = xgb.train(params, dtrain, num_boost_round=rounds, evals=[(dtrain, "train")], verbose_eval=False)
    raw = bst.save_raw("ubj")
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert len(raw) > 0
    print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "rows": int(len(y)), "threads": threads}))


if __name__ == "__main__":
    main()
