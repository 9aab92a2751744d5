#!/usr/bin/python3
"""The baseline of bench/train_bench.cc: scikit-learn's MLPClassifier (Debian
python3-sklearn) on the same data and architecture as enclave-train's CPU backend, one
epoch of mini-batch Adam. Reads the records file the benchmark wrote (float32 little-endian,
FEATURES values then the class index per row: the sealed format's record layout),
standardizes, and times MLPClassifier.fit with max_iter=1 in CPU time (time.process_time,
best of REPEATS; with one BLAS thread that is the one thread's time). Prints one
JSON line: {"seconds": ..., "samples_per_second": ..., "rows": ..., "threads": ...}.

Usage: sklearn_mlp.py RECORDS FEATURES HIDDEN BATCH [REPEATS]
BLAS threads follow OPENBLAS_NUM_THREADS (the benchmark sets 1, as enclave-train uses)."""

import json
import os
import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler


def main():
    path, features, hidden, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    rec = np.fromfile(path, dtype="<f4").reshape(-1, features + 1)
    X = StandardScaler().fit_transform(rec[:, :features]).astype(np.float32)
    y = rec[:, features].astype(np.int64)
    best = None
    for r in range(repeats):
        clf = MLPClassifier(hidden_layer_sizes=(hidden,), activation="relu", solver="adam", batch_size=batch,
                            learning_rate_init=1e-3, alpha=1e-4, max_iter=1, shuffle=True, random_state=r,
                            tol=0.0, n_iter_no_change=10**9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t0 = time.process_time()
            clf.fit(X, y)
            dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    print(json.dumps({"seconds": best, "samples_per_second": len(y) / best, "rows": int(len(y)),
                      "threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}))


if __name__ == "__main__":
    main()
