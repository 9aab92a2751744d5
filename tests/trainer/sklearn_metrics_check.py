#!/usr/bin/python3
"""Cross-checks trainer/src/metrics_report.cc against scikit-learn on fixed random datasets.

Usage: sklearn_metrics_check.py PATH/TO/metrics_report_check

Each dataset is made with a fixed numpy seed, cast to float32 (what the trainer holds),
written as raw float32, evaluated by the C++ program, and compared with scikit-learn on
the same float32 values widened to float64 (so both sides do double arithmetic on the same
numbers): relative tolerance 1e-9. The bootstrap intervals are checked against an
independent reimplementation of docs/training.md (the project's Rng in Python, the same
resamples, scikit-learn on each, numpy's quantile). Exits 77 (skip) without numpy or
scikit-learn.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    from sklearn import metrics as skm
    from sklearn.calibration import calibration_curve
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

REL = 1e-9
failures = []
checks = 0


def close(name, ours, ref):
    global checks
    checks += 1
    ref = float(ref)
    if ours is None:
        ok = math.isnan(ref)
    else:
        ok = abs(ours - ref) <= REL * max(abs(ours), abs(ref)) or ours == ref
    if not ok:
        failures.append(f"{name}: ours {ours!r}, sklearn {ref!r}")


def equal(name, ours, ref):
    global checks
    checks += 1
    if ours != ref:
        failures.append(f"{name}: ours {ours!r}, reference {ref!r}")


def run(tool, tmp, task, rows, classes, a, b, threshold=0.5, bins=10, resamples=0, seed=0):
    pa, pb = os.path.join(tmp, "a.f32"), os.path.join(tmp, "b.f32")
    a.astype("<f4").tofile(pa)
    b.astype("<f4").tofile(pb)
    args = [tool, task, str(rows), str(classes), pa, pb]
    if task != "regression":
        args += [repr(float(threshold)), str(bins)]
    if resamples:
        args += [str(resamples), str(seed)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check_binary(tool, tmp, name, p32, y32, threshold):
    n = len(p32)
    out = run(tool, tmp, "binary", n, 2, p32, y32, threshold)
    r = out["report"]
    p = p32.astype(np.float64)
    y = y32.astype(np.int64)
    pred = (p >= threshold).astype(np.int64)
    tn, fp, fn, tp = skm.confusion_matrix(y, pred, labels=[0, 1]).ravel()
    for k, v in (("tp", tp), ("fp", fp), ("tn", tn), ("fn", fn)):
        equal(f"{name} confusion {k}", r["confusion"][k], int(v))
    close(f"{name} sensitivity", r["sensitivity"]["value"], skm.recall_score(y, pred))
    close(f"{name} specificity", r["specificity"]["value"], skm.recall_score(y, pred, pos_label=0))
    close(f"{name} ppv", r["ppv"]["value"], skm.precision_score(y, pred))
    close(f"{name} npv", r["npv"]["value"], skm.precision_score(y, pred, pos_label=0))
    close(f"{name} f1", r["f1"]["value"], skm.f1_score(y, pred))
    close(f"{name} accuracy", r["accuracy"]["value"], skm.accuracy_score(y, pred))
    close(f"{name} roc_auc", r["roc_auc"]["value"], skm.roc_auc_score(y, p))
    close(f"{name} average_precision", r["average_precision"]["value"], skm.average_precision_score(y, p))
    close(f"{name} brier", r["brier"]["value"], skm.brier_score_loss(y, p))

    # Reliability: our bins are [k/10, (k+1)/10) on the exact value (floor(p * 10), exact
    # in double for a float32 p); sklearn's are (edge, edge] on np.linspace edges. They agree
    # unless a value sits on an edge, so compare with sklearn only then, and always with
    # numpy on our rule.
    binid = np.minimum(np.floor(p * 10).astype(np.int64), 9)
    curve = r["reliability"]
    ece = 0.0
    for k in range(10):
        m = binid == k
        equal(f"{name} bin {k} count", curve[k]["count"], int(m.sum()))
        if m.any():
            close(f"{name} bin {k} mean_predicted", curve[k]["mean_predicted"], p[m].mean())
            close(f"{name} bin {k} observed_fraction", curve[k]["observed_fraction"], y[m].mean())
            ece += m.sum() / n * abs(y[m].mean() - p[m].mean())
        else:
            equal(f"{name} bin {k} empty", (curve[k]["mean_predicted"], curve[k]["observed_fraction"]), (None, None))
    close(f"{name} ece", r["ece"]["value"], ece)
    on_edge = np.any(np.floor(p * 10) == p * 10)
    if not on_edge:
        prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
        nonempty = [b for b in curve if b["count"] > 0]
        equal(f"{name} calibration_curve bins", len(nonempty), len(prob_true))
        for b, t, q in zip(nonempty, prob_true, prob_pred):
            close(f"{name} calibration_curve observed", b["observed_fraction"], t)
            close(f"{name} calibration_curve mean", b["mean_predicted"], q)

    # Thresholds from roc_curve (all points, thresholds descending). Youden's J compared in
    # integers (J * P * N = tp * N - fp * P) so that ties are ties; the first maximum is the
    # largest threshold, our tie rule.
    fpr, tpr, thr = skm.roc_curve(y, p, drop_intermediate=False)
    P, N = int(y.sum()), int(n - y.sum())
    tps = np.rint(tpr * P).astype(np.int64)
    fps = np.rint(fpr * N).astype(np.int64)
    score = tps[1:] * N - fps[1:] * P  # [0] is sklearn's "above every score" point
    i = int(np.argmax(score)) + 1
    equal(f"{name} youden threshold", out["youden"]["threshold"], float(thr[i]))
    close(f"{name} youden j", out["youden"]["youden_j"], tpr[i] - fpr[i])
    j = int(np.nonzero(tps / P >= 0.9)[0][0])
    equal(f"{name} sensitivity-0.9 threshold", out["sensitivity_0.9"]["threshold"], float(thr[j]))
    close(f"{name} sensitivity-0.9 sensitivity", out["sensitivity_0.9"]["sensitivity"], tpr[j])
    close(f"{name} sensitivity-0.9 specificity", out["sensitivity_0.9"]["specificity"], 1 - fpr[j])


def check_multiclass(tool, tmp, name, p32, y32):
    n, c = p32.shape
    out = run(tool, tmp, "multiclass", n, c, p32.reshape(-1), y32)
    r = out["report"]
    p = p32.astype(np.float64)
    y = y32.astype(np.int64)
    pred = np.argmax(p, axis=1)  # first maximum on ties, as ours
    cm = skm.confusion_matrix(y, pred, labels=list(range(c)))
    equal(f"{name} confusion", r["confusion"]["counts"], cm.tolist())
    rec = skm.recall_score(y, pred, labels=list(range(c)), average=None)
    prec = skm.precision_score(y, pred, labels=list(range(c)), average=None)
    f1 = skm.f1_score(y, pred, labels=list(range(c)), average=None)
    for k in range(c):
        pc = r["per_class"][k]
        equal(f"{name} class {k} support", pc["support"], int((y == k).sum()))
        close(f"{name} class {k} sensitivity", pc["sensitivity"]["value"], rec[k])
        close(f"{name} class {k} ppv", pc["ppv"]["value"], prec[k])
        close(f"{name} class {k} f1", pc["f1"]["value"], f1[k])
    close(f"{name} macro_f1", r["macro_f1"]["value"], skm.f1_score(y, pred, average="macro"))
    close(f"{name} accuracy", r["accuracy"]["value"], skm.accuracy_score(y, pred))
    onehot = np.eye(c)[y]
    # Multiclass Brier (sklearn has none): mean over rows of the sum over classes.
    close(f"{name} brier", r["brier"]["value"], np.mean(np.sum((p - onehot) ** 2, axis=1)))
    # Top-label calibration: bins of the predicted class's probability (floor(conf * 10)).
    conf = p32[np.arange(n), pred].astype(np.float64)
    hit = (pred == y).astype(np.float64)
    binid = np.minimum(np.floor(conf * 10).astype(np.int64), 9)
    ece = 0.0
    for k in range(10):
        m = binid == k
        equal(f"{name} top-label bin {k} count", r["reliability"][k]["count"], int(m.sum()))
        if m.any():
            close(f"{name} top-label bin {k} mean_predicted", r["reliability"][k]["mean_predicted"], conf[m].mean())
            close(f"{name} top-label bin {k} observed_fraction", r["reliability"][k]["observed_fraction"], hit[m].mean())
            ece += m.sum() / n * abs(hit[m].mean() - conf[m].mean())
    close(f"{name} top-label ece", r["ece"]["value"], ece)
    ovr = np.mean([skm.roc_auc_score(y == k, p[:, k]) for k in range(c)])
    close(f"{name} roc_auc_ovr (per class)", r["roc_auc_ovr"]["value"], ovr)
    if np.allclose(p.sum(axis=1), 1.0):
        close(f"{name} roc_auc_ovr", r["roc_auc_ovr"]["value"],
              skm.roc_auc_score(y, p, multi_class="ovr", average="macro", labels=list(range(c))))


def check_regression(tool, tmp, name, pred32, y32):
    n = len(y32)
    r = run(tool, tmp, "regression", n, 0, pred32, y32)["report"]
    pred, y = pred32.astype(np.float64), y32.astype(np.float64)
    close(f"{name} rmse", r["rmse"]["value"], math.sqrt(skm.mean_squared_error(y, pred)))
    close(f"{name} mae", r["mae"]["value"], skm.mean_absolute_error(y, pred))
    close(f"{name} r2", r["r2"]["value"], skm.r2_score(y, pred))


# ---- the bootstrap, reimplemented from docs/training.md ----
# The project's Rng (trainer/src/rng.cc): xoshiro256** seeded through SplitMix64 with
# seed ^ stream * 0xd1b54a32d192ed03; Below is Lemire's multiply-and-reject.
M64 = (1 << 64) - 1
K_STREAM_BOOTSTRAP = 5


class Rng:
    def __init__(self, seed, stream):
        x = (seed ^ (stream * 0xD1B54A32D192ED03)) & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, bound):
        m = self.next() * bound
        if (m & M64) < bound:
            threshold = ((1 << 64) - bound) % bound
            while (m & M64) < threshold:
                m = self.next() * bound
        return m >> 64


def resamples(n, count, seed):
    rng = Rng(seed, K_STREAM_BOOTSTRAP)
    for _ in range(count):
        yield np.array([rng.below(n) for _ in range(n)], dtype=np.int64)


def check_intervals(name, report, values, count):
    """values: metric path -> list of per-resample values (NaN = undefined)."""
    for path, vals in values.items():
        est = report
        for k in path:
            est = est[k]
        v = np.array(vals, dtype=np.float64)
        defined = v[~np.isnan(v)]
        label = f"{name} bootstrap {'/'.join(map(str, path))}"
        equal(f"{label} skipped", est["resamples_skipped"], count - defined.size)
        if defined.size == 0:
            equal(f"{label} ci95", est["ci95"], None)
            continue
        lo, hi = np.quantile(defined, [0.025, 0.975])  # numpy's default: linear
        close(f"{label} ci95 low", est["ci95"][0], lo)
        close(f"{label} ci95 high", est["ci95"][1], hi)


def ratio(a, b):
    return a / b if b else math.nan


def binary_values(p, y, threshold):
    pred = p >= threshold
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    tn = int(np.sum(~pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    both = 0 < y.sum() < y.size
    binid = np.minimum(np.floor(p * 10).astype(np.int64), 9)
    ece = sum(np.sum(binid == k) / y.size * abs(y[binid == k].mean() - p[binid == k].mean())
              for k in range(10) if np.any(binid == k))
    return {
        ("sensitivity",): ratio(tp, tp + fn),
        ("specificity",): ratio(tn, tn + fp),
        ("ppv",): ratio(tp, tp + fp),
        ("npv",): ratio(tn, tn + fn),
        ("f1",): ratio(2 * tp, 2 * tp + fp + fn),
        ("accuracy",): skm.accuracy_score(y, pred),
        ("roc_auc",): skm.roc_auc_score(y, p) if both else math.nan,
        ("average_precision",): skm.average_precision_score(y, p) if y.sum() > 0 else math.nan,
        ("brier",): skm.brier_score_loss(y, p, pos_label=1),
        ("ece",): ece,
    }


def check_binary_bootstrap(tool, tmp, name, p32, y32, threshold, count, seed):
    out = run(tool, tmp, "binary", len(p32), 2, p32, y32, threshold, 10, count, seed)
    p, y = p32.astype(np.float64), y32.astype(np.int64)
    values = {}
    for idx in resamples(len(p), count, seed):
        for k, v in binary_values(p[idx], y[idx], threshold).items():
            values.setdefault(k, []).append(v)
    check_intervals(name, out["report"], values, count)


def check_multiclass_bootstrap(tool, tmp, name, p32, y32, count, seed):
    n, c = p32.shape
    out = run(tool, tmp, "multiclass", n, c, p32.reshape(-1), y32, 0.5, 10, count, seed)
    p, y = p32.astype(np.float64), y32.astype(np.int64)
    pred_all = np.argmax(p, axis=1)
    in_macro = [np.any(y == k) or np.any(pred_all == k) for k in range(c)]
    in_auc = [0 < np.sum(y == k) < n for k in range(c)]
    values = {}
    for idx in resamples(n, count, seed):
        pi, yi, pr = p[idx], y[idx], pred_all[idx]
        cm = skm.confusion_matrix(yi, pr, labels=list(range(c)))
        f1 = [ratio(2 * cm[k, k], cm[k, :].sum() + cm[:, k].sum()) for k in range(c)]
        used = [f1[k] for k in range(c) if in_macro[k]]
        macro = math.nan if any(math.isnan(v) for v in used) else float(np.mean(used))
        aucs = [skm.roc_auc_score(yi == k, pi[:, k]) if 0 < np.sum(yi == k) < n else math.nan
                for k in range(c) if in_auc[k]]
        auc = math.nan if any(math.isnan(v) for v in aucs) else float(np.mean(aucs))
        conf = pi[np.arange(n), pr]
        hit = (pr == yi).astype(np.float64)
        binid = np.minimum(np.floor(conf * 10).astype(np.int64), 9)
        ece = sum(np.sum(binid == k) / n * abs(hit[binid == k].mean() - conf[binid == k].mean())
                  for k in range(10) if np.any(binid == k))
        row = {("macro_f1",): macro, ("accuracy",): skm.accuracy_score(yi, pr),
               ("brier",): np.mean(np.sum((pi - np.eye(c)[yi]) ** 2, axis=1)), ("roc_auc_ovr",): auc,
               ("ece",): ece}
        for k in range(c):
            row[("per_class", k, "sensitivity")] = ratio(cm[k, k], cm[k, :].sum())
            row[("per_class", k, "ppv")] = ratio(cm[k, k], cm[:, k].sum())
            row[("per_class", k, "f1")] = f1[k]
        for k, v in row.items():
            values.setdefault(k, []).append(v)
    check_intervals(name, out["report"], values, count)


def check_regression_bootstrap(tool, tmp, name, pred32, y32, count, seed):
    out = run(tool, tmp, "regression", len(y32), 0, pred32, y32, resamples=count, seed=seed)
    pred, y = pred32.astype(np.float64), y32.astype(np.float64)
    values = {}
    for idx in resamples(len(y), count, seed):
        pi, yi = pred[idx], y[idx]
        row = {("rmse",): math.sqrt(skm.mean_squared_error(yi, pi)), ("mae",): skm.mean_absolute_error(yi, pi),
               ("r2",): math.nan if np.all(yi == yi[0]) else skm.r2_score(yi, pi)}
        for k, v in row.items():
            values.setdefault(k, []).append(v)
    check_intervals(name, out["report"], values, count)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    warnings.filterwarnings("ignore")  # sklearn's zero-division warnings on tiny resamples
    # The reimplemented generator against the pinned first output (rng_metrics_test).
    equal("Rng(0, 0) first output", Rng(0, 0).next(), 0x99EC5F36CB75F2B4)
    rng = np.random.default_rng(20261202)
    with tempfile.TemporaryDirectory() as tmp:
        # Binary, continuous scores (no ties to speak of), imbalanced.
        y = (rng.random(1500) < 0.3).astype(np.float32)
        p = (1 / (1 + np.exp(-(1.6 * (2 * y - 1) + rng.normal(0, 1.2, y.size))))).astype(np.float32)
        check_binary(tool, tmp, "binary-continuous t=0.5", p, y, 0.5)
        check_binary(tool, tmp, "binary-continuous t=0.3", p, y, 0.3)
        # Binary with heavy ties: scores on a 0.05 grid (float32), some on bin edges (0.5, 0, 1).
        y = (rng.random(800) < 0.5).astype(np.float32)
        p = np.clip(np.round((0.5 + 0.25 * (2 * y - 1) + rng.normal(0, 0.25, y.size)) * 20) / 20, 0, 1)
        p = p.astype(np.float32)
        check_binary(tool, tmp, "binary-ties t=0.5", p, y, 0.5)
        check_binary(tool, tmp, "binary-ties t=p-value", p, y, float(np.float32(0.35)))
        # Small binary sample.
        y = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0], dtype=np.float32)
        p = rng.random(y.size).astype(np.float32)
        check_binary(tool, tmp, "binary-small", p, y, 0.5)
        # Multiclass: 4 classes, softmax in float32.
        y = rng.integers(0, 4, 1000)
        logits = rng.normal(0, 1, (1000, 4)) + 1.5 * np.eye(4)[y]
        e = np.exp(logits)
        p = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        check_multiclass(tool, tmp, "multiclass-4", p, y.astype(np.float32))
        # Multiclass with ties: probabilities on a 0.1 grid (rows need not sum to 1).
        y = rng.integers(0, 3, 400)
        p = np.round(rng.random((400, 3)) * 0.6 + 0.4 * np.eye(3)[y], 1).astype(np.float32)
        check_multiclass(tool, tmp, "multiclass-3-ties", p, y.astype(np.float32))
        # Regression.
        yr = rng.normal(3, 2, 700).astype(np.float32)
        pr = (yr + rng.normal(0, 0.8, yr.size)).astype(np.float32)
        check_regression(tool, tmp, "regression", pr, yr)
        yr = rng.normal(-50, 10, 60).astype(np.float32)
        pr = (0.5 * yr + rng.normal(0, 30, yr.size)).astype(np.float32)  # worse than the mean: R2 < 0
        check_regression(tool, tmp, "regression-negative-r2", pr, yr)

        # Bootstrap intervals, from the resamples drawn by the reimplemented generator.
        y = (rng.random(300) < 0.3).astype(np.float32)
        p = (1 / (1 + np.exp(-(1.2 * (2 * y - 1) + rng.normal(0, 1.2, y.size))))).astype(np.float32)
        check_binary_bootstrap(tool, tmp, "binary-300", p, y, 0.5, 200, 7)
        # Two positives in 15: many resamples without one (skipped, counted).
        y = np.zeros(15, dtype=np.float32)
        y[[3, 11]] = 1
        p = rng.random(15).astype(np.float32)
        check_binary_bootstrap(tool, tmp, "binary-15", p, y, 0.5, 300, 2026)
        y = rng.integers(0, 3, 60)
        y[0] = 2
        y[1:] = np.where(y[1:] == 2, 0, y[1:])  # class 2 only once: often missing
        logits = rng.normal(0, 1, (60, 3)) + 1.0 * np.eye(3)[y]
        e = np.exp(logits)
        p = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        check_multiclass_bootstrap(tool, tmp, "multiclass-60", p, y.astype(np.float32), 150, 3)
        yr = rng.normal(0, 1, 200).astype(np.float32)
        pr = (yr + rng.normal(0, 0.5, yr.size)).astype(np.float32)
        check_regression_bootstrap(tool, tmp, "regression-200", pr, yr, 200, 11)
        yr = np.array([1, 1, 1, 2], dtype=np.float32)  # constant targets in many resamples
        check_regression_bootstrap(tool, tmp, "regression-4", yr + 0.5, yr, 100, 5)
    for f in failures:
        print("FAIL", f)
    print(f"{checks} comparisons, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
