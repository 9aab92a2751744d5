// The validation board's metrics (metrics_report.h; definitions in docs/training.md).
//
// Every metric is computed from per-row weights w[i] (how often row i is in the sample):
// all ones for the point estimate, bootstrap counts for a resample. One code path for
// both, so an interval is always an interval of the metric that is reported; and the
// sorts (for AUC and average precision) are done once, a resample only re-walks them.
#include "enclave/trainer/metrics_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "enclave/trainer/locked.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
__extension__ typedef unsigned __int128 U128;  // pair counts: n^2 overflows 64 bits at 2^32 rows
__extension__ typedef __int128 I128;

double Ratio(uint64_t num, uint64_t den) {
  return den == 0 ? kNaN : static_cast<double>(num) / static_cast<double>(den);
}

// Rows sorted by one score column ascending (ties by row; std::sort, since std::stable_sort
// would take an unlocked scratch buffer), with per position whether the row is a positive
// and whether it opens a tie group. Sorted once; a resample walks it touching only weights.
enum : uint8_t { kPositive = 1, kGroupStart = 2 };
struct Ranking {
  LockedArray<uint32_t> order;
  LockedArray<uint8_t> flags;
};

Result<Ranking> MakeRanking(const float* scores, size_t stride, const float* labels, float positive, size_t rows) {
  Ranking r;
  ASSIGN_OR_RETURN(r.order, LockedArray<uint32_t>::Create(rows));
  ASSIGN_OR_RETURN(r.flags, LockedArray<uint8_t>::Create(rows));
  uint32_t* order = r.order.data();
  std::iota(order, order + rows, 0u);
  std::sort(order, order + rows, [&](uint32_t a, uint32_t b) {
    const float sa = scores[a * stride], sb = scores[b * stride];
    return sa < sb || (sa == sb && a < b);
  });
  for (size_t j = 0; j < rows; ++j) {
    const bool starts = j == 0 || scores[order[j] * stride] != scores[order[j - 1] * stride];
    r.flags[j] = static_cast<uint8_t>((labels[order[j]] == positive ? kPositive : 0) | (starts ? kGroupStart : 0));
  }
  return r;
}

// Mann-Whitney AUC with tie groups at half credit, weighted: sum over groups (ascending) of
// pos_g * (2 * neg_below + neg_g), over 2 * P * N. Integer sums, so exact until the division.
double WeightedAuc(const Ranking& r, size_t rows, const uint32_t* w) {
  uint64_t pos_total = 0, neg_total = 0, gp = 0, gn = 0;
  U128 acc = 0;
  const auto close_group = [&] {
    acc += static_cast<U128>(gp) * (2 * neg_total + gn);
    pos_total += gp;
    neg_total += gn;
    gp = gn = 0;
  };
  for (size_t j = 0; j < rows; ++j) {
    if (r.flags[j] & kGroupStart) close_group();
    const uint64_t wi = w == nullptr ? 1 : w[r.order[j]];
    (r.flags[j] & kPositive ? gp : gn) += wi;
  }
  close_group();
  if (pos_total == 0 || neg_total == 0) return kNaN;
  return static_cast<double>(acc) / (2.0 * static_cast<double>(pos_total) * static_cast<double>(neg_total));
}

// Average precision, step-wise (scikit-learn's average_precision_score): thresholds at the
// distinct scores from the largest down; AP = sum (R_k - R_{k-1}) * P_k. `pos_total`: the
// weighted positives.
double WeightedAveragePrecision(const Ranking& r, size_t rows, const uint32_t* w, uint64_t pos_total) {
  if (pos_total == 0) return kNaN;
  uint64_t tp = 0, fp = 0, gp = 0, gn = 0;
  double ap = 0;
  for (size_t i = rows; i > 0; --i) {
    const size_t j = i - 1;
    const uint64_t wi = w == nullptr ? 1 : w[r.order[j]];
    (r.flags[j] & kPositive ? gp : gn) += wi;
    if (!(r.flags[j] & kGroupStart)) continue;  // the group goes on below j
    tp += gp;
    fp += gn;
    if (gp > 0) {
      ap += static_cast<double>(gp) / static_cast<double>(pos_total) * static_cast<double>(tp) /
            static_cast<double>(tp + fp);
    }
    gp = gn = 0;
  }
  return ap;
}

uint32_t BinOf(float p, uint32_t bins) {
  // p * bins is exact in double for a float p, so this is the exact bin of the value.
  const double k = std::floor(static_cast<double>(p) * bins);
  return std::min(static_cast<uint32_t>(k), bins - 1);
}

// The weights of one bootstrap resample: n draws of Rng::Below(n), in order, from one
// generator for all resamples.
void DrawResample(Rng& rng, size_t n, uint32_t* w) {
  std::fill(w, w + n, 0u);
  for (size_t i = 0; i < n; ++i) ++w[rng.Below(n)];
}

// Runs `compute(w, out)` (out: k scalars) for every resample and fills the intervals of
// `est[0..k-1]`: percentiles of the defined values; NaN ones counted as skipped.
template <typename Compute>
Status Bootstrap(size_t rows, size_t k, const EvalOptions& opt, Compute compute, Estimate* const* est) {
  const size_t b_count = opt.bootstrap_resamples;
  if (b_count == 0) return OkStatus();
  ASSIGN_OR_RETURN(LockedArray<uint32_t> w, LockedArray<uint32_t>::Create(rows));
  ASSIGN_OR_RETURN(LockedArray<double> out, LockedArray<double>::Create(k));
  ASSIGN_OR_RETURN(LockedArray<double> vals, LockedArray<double>::Create(k * b_count));  // metric-major
  Rng rng(opt.seed, kStreamBootstrap);
  for (size_t b = 0; b < b_count; ++b) {
    DrawResample(rng, rows, w.data());
    compute(w.data(), out.data());
    for (size_t j = 0; j < k; ++j) vals[j * b_count + b] = out[j];
  }
  for (size_t j = 0; j < k; ++j) {
    double* col = vals.data() + j * b_count;
    double* end = std::remove_if(col, col + b_count, [](double v) { return std::isnan(v); });
    const size_t m = static_cast<size_t>(end - col);
    std::sort(col, end);
    est[j]->resamples_used = static_cast<uint32_t>(m);
    est[j]->resamples_skipped = static_cast<uint32_t>(b_count - m);
    est[j]->ci_low = QuantileOfSorted(col, m, 0.025);
    est[j]->ci_high = QuantileOfSorted(col, m, 0.975);
  }
  return OkStatus();
}

Status CheckRows(size_t rows) {
  if (rows == 0) return InvalidInput("metrics: no rows");
  if (rows > UINT32_MAX) return InvalidInput("metrics: more than 2^32 - 1 rows");
  return OkStatus();
}

Status CheckProbsLabels(const float* probs, const float* labels, size_t rows, uint32_t classes) {
  const size_t cols = classes == 2 ? 1 : classes;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const float p = probs[r * cols + c];
      if (!(p >= 0.0f && p <= 1.0f)) {  // NaN fails too
        return InvalidInput("metrics: probability of row " + std::to_string(r) + " is NaN or outside [0, 1]");
      }
    }
    const float y = labels[r];
    if (!(y >= 0.0f && y < static_cast<float>(classes) && y == std::floor(y))) {
      return InvalidInput("metrics: label of row " + std::to_string(r) + " is not a class index in [0, " +
                          std::to_string(classes) + ")");
    }
  }
  return OkStatus();
}

// ---- binary ----

enum BinaryIndex { kSens, kSpec, kPpv, kNpv, kF1, kAcc, kAuc, kAp, kBrier, kEce, kBinaryCount };

struct BinaryData {
  const float* p;
  const float* y;
  size_t rows;
  double threshold;
  uint32_t bins;
  Ranking ranking;            // by p
  LockedArray<uint32_t> bin;  // reliability bin per row
};

// Rows tallied by reliability bin (binary: by P(class 1), observed = positive; multiclass:
// by the predicted class's probability, observed = predicted class is the true one).
struct ReliabilityTally {
  explicit ReliabilityTally(uint32_t bins) : n(bins, 0), p(bins, 0.0), hit(bins, 0.0) {}
  void Add(uint32_t bin, uint64_t w, double prob, bool observed) {
    n[bin] += w;
    p[bin] += static_cast<double>(w) * prob;
    hit[bin] += observed ? static_cast<double>(w) : 0.0;
  }
  double Ece(uint64_t total) const {
    double ece = 0;
    for (size_t k = 0; k < n.size(); ++k) {
      if (n[k] == 0) continue;
      const double c = static_cast<double>(n[k]);
      ece += c / static_cast<double>(total) * std::fabs(hit[k] / c - p[k] / c);
    }
    return ece;
  }
  void Curve(std::vector<ReliabilityBin>* curve) const {
    const uint32_t bins = static_cast<uint32_t>(n.size());
    curve->assign(bins, ReliabilityBin{});
    for (uint32_t k = 0; k < bins; ++k) {
      ReliabilityBin& b = (*curve)[k];
      b.lower = static_cast<double>(k) / bins;
      b.upper = static_cast<double>(k + 1) / bins;
      b.count = n[k];
      if (n[k] > 0) {
        b.mean_predicted = p[k] / static_cast<double>(n[k]);
        b.observed_fraction = hit[k] / static_cast<double>(n[k]);
      }
    }
  }
  std::vector<uint64_t> n;
  std::vector<double> p, hit;
};

void BinaryScalars(const BinaryData& d, const uint32_t* w, double* out, BinaryConfusion* confusion,
                   std::vector<ReliabilityBin>* curve) {
  BinaryConfusion cm;
  uint64_t total = 0;
  double brier = 0;
  ReliabilityTally tally(d.bins);
  for (size_t i = 0; i < d.rows; ++i) {
    const uint64_t wi = w == nullptr ? 1 : w[i];
    if (wi == 0) continue;
    const double p = d.p[i];
    const bool pos = d.y[i] == 1.0f;
    const bool pred = p >= d.threshold;
    (pred ? (pos ? cm.tp : cm.fp) : (pos ? cm.fn : cm.tn)) += wi;
    total += wi;
    const double e = p - (pos ? 1.0 : 0.0);
    brier += static_cast<double>(wi) * e * e;
    tally.Add(d.bin[i], wi, p, pos);
  }
  out[kSens] = Ratio(cm.tp, cm.tp + cm.fn);
  out[kSpec] = Ratio(cm.tn, cm.tn + cm.fp);
  out[kPpv] = Ratio(cm.tp, cm.tp + cm.fp);
  out[kNpv] = Ratio(cm.tn, cm.tn + cm.fn);
  out[kF1] = Ratio(2 * cm.tp, 2 * cm.tp + cm.fp + cm.fn);
  out[kAcc] = Ratio(cm.tp + cm.tn, total);
  out[kAuc] = WeightedAuc(d.ranking, d.rows, w);
  out[kAp] = WeightedAveragePrecision(d.ranking, d.rows, w, cm.tp + cm.fn);
  out[kBrier] = brier / static_cast<double>(total);
  out[kEce] = tally.Ece(total);
  if (confusion != nullptr) *confusion = cm;
  if (curve != nullptr) tally.Curve(curve);
}

Status EvaluateBinary(const float* probs, const float* labels, size_t rows, const EvalOptions& opt,
                      BinaryMetrics* m) {
  BinaryData d{probs, labels, rows, opt.threshold, opt.calibration_bins, {}, {}};
  ASSIGN_OR_RETURN(d.ranking, MakeRanking(probs, 1, labels, 1.0f, rows));
  ASSIGN_OR_RETURN(d.bin, LockedArray<uint32_t>::Create(rows));
  for (size_t i = 0; i < rows; ++i) d.bin[i] = BinOf(probs[i], d.bins);

  m->threshold = opt.threshold;
  Estimate* est[kBinaryCount] = {&m->sensitivity, &m->specificity, &m->ppv, &m->npv, &m->f1,
                                 &m->accuracy, &m->roc_auc, &m->average_precision, &m->brier, &m->ece};
  double point[kBinaryCount];
  BinaryScalars(d, nullptr, point, &m->confusion, &m->reliability);
  for (int j = 0; j < kBinaryCount; ++j) est[j]->value = point[j];
  return Bootstrap(
      rows, kBinaryCount, opt, [&](const uint32_t* w, double* out) { BinaryScalars(d, w, out, nullptr, nullptr); },
      est);
}

// ---- multiclass ----

struct MulticlassData {
  const float* p;
  const float* y;
  size_t rows;
  uint32_t classes;
  uint32_t bins;
  LockedArray<uint32_t> pred;    // argmax per row
  LockedArray<double> brier;     // sum_c (p_c - [y == c])^2 per row
  LockedArray<uint32_t> bin;     // top-label reliability bin per row (of p[pred])
  std::vector<Ranking> rankings;  // per class c: by p[:, c], positive = class c
  std::vector<bool> f1_in_macro, auc_in_mean;  // decided by the full sample
};

// out: per class (sensitivity, ppv, f1), then macro F1, accuracy, Brier, mean OvR AUC,
// top-label ECE.
void MulticlassScalars(const MulticlassData& d, const uint32_t* w, double* out, std::vector<uint64_t>* confusion,
                       std::vector<ReliabilityBin>* curve) {
  const uint32_t C = d.classes;
  std::vector<uint64_t> cm(static_cast<size_t>(C) * C, 0);
  uint64_t total = 0;
  double brier = 0;
  ReliabilityTally tally(d.bins);
  for (size_t i = 0; i < d.rows; ++i) {
    const uint64_t wi = w == nullptr ? 1 : w[i];
    if (wi == 0) continue;
    cm[static_cast<size_t>(d.y[i]) * C + d.pred[i]] += wi;
    total += wi;
    brier += static_cast<double>(wi) * d.brier[i];
    tally.Add(d.bin[i], wi, d.p[i * C + d.pred[i]], d.y[i] == static_cast<float>(d.pred[i]));
  }
  uint64_t correct = 0;
  double f1_sum = 0;
  bool macro_ok = true;
  size_t macro_n = 0;
  for (uint32_t c = 0; c < C; ++c) {
    uint64_t row = 0, col = 0;
    for (uint32_t k = 0; k < C; ++k) {
      row += cm[static_cast<size_t>(c) * C + k];
      col += cm[static_cast<size_t>(k) * C + c];
    }
    const uint64_t tp = cm[static_cast<size_t>(c) * C + c];
    correct += tp;
    out[3 * c] = Ratio(tp, row);
    out[3 * c + 1] = Ratio(tp, col);
    out[3 * c + 2] = Ratio(2 * tp, row + col);
    if (d.f1_in_macro.empty() ? row + col > 0 : d.f1_in_macro[c]) {
      if (row + col == 0) macro_ok = false;
      f1_sum += out[3 * c + 2];
      ++macro_n;
    }
  }
  double* tail = out + 3 * static_cast<size_t>(C);
  tail[0] = macro_ok && macro_n > 0 ? f1_sum / static_cast<double>(macro_n) : kNaN;
  tail[1] = Ratio(correct, total);
  tail[2] = brier / static_cast<double>(total);
  double auc_sum = 0;
  size_t auc_n = 0;
  bool auc_ok = true;
  for (uint32_t c = 0; c < C && auc_ok; ++c) {
    if (!d.auc_in_mean.empty() && !d.auc_in_mean[c]) continue;
    const double a = WeightedAuc(d.rankings[c], d.rows, w);
    if (std::isnan(a)) {
      if (!d.auc_in_mean.empty()) auc_ok = false;  // a class of the full-sample mean vanished
      continue;
    }
    auc_sum += a;
    ++auc_n;
  }
  tail[3] = auc_ok && auc_n > 0 ? auc_sum / static_cast<double>(auc_n) : kNaN;
  tail[4] = tally.Ece(total);
  if (confusion != nullptr) *confusion = std::move(cm);
  if (curve != nullptr) tally.Curve(curve);
}

Status EvaluateMulticlass(const float* probs, const float* labels, size_t rows, uint32_t classes,
                          const EvalOptions& opt, MulticlassMetrics* m) {
  const uint32_t C = classes;
  MulticlassData d{probs, labels, rows, C, opt.calibration_bins, {}, {}, {}, {}, {}, {}};
  ASSIGN_OR_RETURN(d.pred, LockedArray<uint32_t>::Create(rows));
  ASSIGN_OR_RETURN(d.brier, LockedArray<double>::Create(rows));
  ASSIGN_OR_RETURN(d.bin, LockedArray<uint32_t>::Create(rows));
  for (size_t i = 0; i < rows; ++i) {
    const float* p = probs + i * C;
    uint32_t best = 0;
    double b = 0;
    for (uint32_t c = 0; c < C; ++c) {
      if (p[c] > p[best]) best = c;  // first maximum on ties, as Accuracy()
      const double e = static_cast<double>(p[c]) - (labels[i] == static_cast<float>(c) ? 1.0 : 0.0);
      b += e * e;
    }
    d.pred[i] = best;
    d.brier[i] = b;
    d.bin[i] = BinOf(p[best], d.bins);
  }
  for (uint32_t c = 0; c < C; ++c) {
    ASSIGN_OR_RETURN(Ranking rk, MakeRanking(probs + c, C, labels, static_cast<float>(c), rows));
    d.rankings.push_back(std::move(rk));
  }
  const size_t k = 3 * static_cast<size_t>(C) + 5;
  ASSIGN_OR_RETURN(LockedArray<double> point, LockedArray<double>::Create(k));
  MulticlassScalars(d, nullptr, point.data(), &m->confusion, &m->reliability);

  // Which classes the full-sample averages use; a resample missing one of them is skipped.
  d.f1_in_macro.assign(C, false);
  d.auc_in_mean.assign(C, false);
  m->per_class.assign(C, ClassMetrics{});
  std::vector<Estimate*> est;
  for (uint32_t c = 0; c < C; ++c) {
    uint64_t row = 0, col = 0;
    for (uint32_t j = 0; j < C; ++j) {
      row += m->confusion[static_cast<size_t>(c) * C + j];
      col += m->confusion[static_cast<size_t>(j) * C + c];
    }
    d.f1_in_macro[c] = row + col > 0;
    d.auc_in_mean[c] = row > 0 && row < rows;
    ClassMetrics& cm = m->per_class[c];
    cm.label = c;
    cm.support = row;
    est.insert(est.end(), {&cm.sensitivity, &cm.ppv, &cm.f1});
  }
  est.insert(est.end(), {&m->macro_f1, &m->accuracy, &m->brier, &m->roc_auc_ovr, &m->ece});
  for (size_t j = 0; j < k; ++j) est[j]->value = point[j];
  return Bootstrap(
      rows, k, opt, [&](const uint32_t* w, double* out) { MulticlassScalars(d, w, out, nullptr, nullptr); },
      est.data());
}

// ---- regression ----

void RegressionScalars(const float* pred, const float* y, size_t rows, const uint32_t* w, double* out) {
  double total = 0, sum_y = 0, se = 0, ae = 0;
  float y_min = 0, y_max = 0;
  bool first = true;
  for (size_t i = 0; i < rows; ++i) {
    const double wi = w == nullptr ? 1.0 : static_cast<double>(w[i]);
    if (wi == 0) continue;
    const double e = static_cast<double>(pred[i]) - static_cast<double>(y[i]);
    total += wi;
    sum_y += wi * y[i];
    se += wi * e * e;
    ae += wi * std::fabs(e);
    y_min = first ? y[i] : std::min(y_min, y[i]);
    y_max = first ? y[i] : std::max(y_max, y[i]);
    first = false;
  }
  const double mean_y = sum_y / total;
  double ss_tot = 0;
  for (size_t i = 0; i < rows; ++i) {
    const double wi = w == nullptr ? 1.0 : static_cast<double>(w[i]);
    const double dy = static_cast<double>(y[i]) - mean_y;
    ss_tot += wi * dy * dy;
  }
  out[0] = std::sqrt(se / total);
  out[1] = ae / total;
  // Constant targets: R² is 0/0. Decided on the values, not on ss_tot, which rounding can
  // leave a hair above zero.
  out[2] = y_min == y_max ? kNaN : 1.0 - se / ss_tot;
}

// ---- JSON ----

nlohmann::json Number(double v, JsonNumbers numbers) {
  if (!std::isfinite(v)) return nullptr;
  if (numbers == JsonNumbers::kExact) return v;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return std::strtod(buf, nullptr);
}

nlohmann::json EstimateJson(const Estimate& e, const BootstrapInfo& b, JsonNumbers numbers) {
  nlohmann::json j = {{"value", Number(e.value, numbers)}};
  if (b.resamples == 0) return j;
  if (std::isnan(e.ci_low)) {
    j["ci95"] = nullptr;
  } else {
    j["ci95"] = {Number(e.ci_low, numbers), Number(e.ci_high, numbers)};
  }
  j["resamples_skipped"] = e.resamples_skipped;
  return j;
}

nlohmann::json BootstrapJson(const BootstrapInfo& b) {
  return {{"resamples", b.resamples},
          {"seed", b.seed},
          {"stream", b.stream},
          {"interval", "percentile 2.5/97.5, linear interpolation (numpy default)"}};
}

}  // namespace

double QuantileOfSorted(const double* sorted, size_t m, double q) {
  if (m == 0) return kNaN;
  const double h = q * static_cast<double>(m - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= m) return sorted[m - 1];
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

Result<ClassificationReport> EvaluateClassification(const float* probs, const float* labels, size_t rows,
                                                    uint32_t classes, const EvalOptions& opt) {
  RETURN_IF_ERROR(CheckRows(rows));
  if (classes < 2) return InvalidInput("metrics: classes must be >= 2, got " + std::to_string(classes));
  if (!(opt.threshold >= 0.0 && opt.threshold <= 1.0)) return InvalidInput("metrics: threshold outside [0, 1]");
  if (opt.calibration_bins == 0 || opt.calibration_bins > 1000000) {
    return InvalidInput("metrics: calibration_bins must be in [1, 1000000]");
  }
  if (probs == nullptr || labels == nullptr) return InvalidInput("metrics: null input");
  RETURN_IF_ERROR(CheckProbsLabels(probs, labels, rows, classes));
  ClassificationReport r;
  r.rows = rows;
  r.classes = classes;
  r.bootstrap = {opt.bootstrap_resamples, opt.seed, kStreamBootstrap};
  r.binary = classes == 2;
  if (r.binary) {
    RETURN_IF_ERROR(EvaluateBinary(probs, labels, rows, opt, &r.binary_metrics));
  } else {
    RETURN_IF_ERROR(EvaluateMulticlass(probs, labels, rows, classes, opt, &r.multiclass_metrics));
  }
  return r;
}

Result<RegressionReport> EvaluateRegression(const float* predictions, const float* targets, size_t rows,
                                            const EvalOptions& opt) {
  RETURN_IF_ERROR(CheckRows(rows));
  if (predictions == nullptr || targets == nullptr) return InvalidInput("metrics: null input");
  for (size_t i = 0; i < rows; ++i) {
    if (!std::isfinite(predictions[i])) {
      return InvalidInput("metrics: prediction of row " + std::to_string(i) + " is not finite");
    }
    if (!std::isfinite(targets[i])) return InvalidInput("metrics: target of row " + std::to_string(i) + " is not finite");
  }
  RegressionReport r;
  r.rows = rows;
  r.bootstrap = {opt.bootstrap_resamples, opt.seed, kStreamBootstrap};
  double point[3];
  RegressionScalars(predictions, targets, rows, nullptr, point);
  Estimate* est[3] = {&r.rmse, &r.mae, &r.r2};
  for (int j = 0; j < 3; ++j) est[j]->value = point[j];
  RETURN_IF_ERROR(Bootstrap(
      rows, 3, opt, [&](const uint32_t* w, double* out) { RegressionScalars(predictions, targets, rows, w, out); },
      est));
  return r;
}

namespace {

// Walks the distinct predicted values from the largest down; `pick(tp, fp, P, N)` says
// whether the threshold at the current value replaces the best so far (true) and whether
// to stop (through `stop`).
template <typename Pick>
Result<ThresholdChoice> WalkThresholds(const float* probs, const float* labels, size_t rows, bool need_negatives,
                                       Pick pick) {
  if (rows == 0) return InvalidInput("threshold: no rows");
  if (rows > UINT32_MAX) return InvalidInput("threshold: more than 2^32 - 1 rows");
  if (probs == nullptr || labels == nullptr) return InvalidInput("threshold: null input");
  RETURN_IF_ERROR(CheckProbsLabels(probs, labels, rows, 2));
  uint64_t pos = 0;
  for (size_t i = 0; i < rows; ++i) pos += labels[i] == 1.0f ? 1 : 0;
  const uint64_t neg = rows - pos;
  if (pos == 0) return FailedPrecondition("threshold: no positive rows");
  if (need_negatives && neg == 0) return FailedPrecondition("threshold: no negative rows");
  ASSIGN_OR_RETURN(const Ranking r, MakeRanking(probs, 1, labels, 1.0f, rows));
  uint64_t tp = 0, fp = 0;
  bool have = false;
  ThresholdChoice best;
  for (size_t i = rows; i > 0; --i) {  // from the largest value down, a tie group at a time
    const size_t j = i - 1;
    (r.flags[j] & kPositive ? tp : fp) += 1;
    if (!(r.flags[j] & kGroupStart)) continue;
    const float s = probs[r.order[j]];
    bool stop = false;
    if (pick(tp, fp, pos, neg, have, &stop)) {
      best.threshold = s;
      best.sensitivity = Ratio(tp, pos);
      best.specificity = Ratio(neg - fp, neg);
      best.youden_j = best.sensitivity + best.specificity - 1.0;
      have = true;
    }
    if (stop) break;
  }
  return best;
}

}  // namespace

Result<ThresholdChoice> ChooseThresholdYouden(const float* probs, const float* labels, size_t rows) {
  // J * P * N = tp * N - fp * P: compared in integers, so equal J are ties, not rounding.
  I128 best = 0;
  return WalkThresholds(probs, labels, rows, true,
                        [&](uint64_t tp, uint64_t fp, uint64_t p, uint64_t n, bool have, bool*) {
                          const I128 j = static_cast<I128>(tp) * n - static_cast<I128>(fp) * p;
                          if (have && j <= best) return false;  // ties keep the larger threshold
                          best = j;
                          return true;
                        });
}

Result<ThresholdChoice> ChooseThresholdForSensitivity(const float* probs, const float* labels, size_t rows,
                                                      double target_sensitivity) {
  if (!(target_sensitivity > 0.0 && target_sensitivity <= 1.0)) {
    return InvalidInput("threshold: target sensitivity must be in (0, 1]");
  }
  return WalkThresholds(probs, labels, rows, false,
                        [&](uint64_t tp, uint64_t, uint64_t p, uint64_t, bool, bool* stop) {
                          if (Ratio(tp, p) < target_sensitivity) return false;
                          *stop = true;  // the first (largest) threshold that reaches it
                          return true;
                        });
}

namespace {
nlohmann::json ReliabilityJson(const std::vector<ReliabilityBin>& curve, JsonNumbers numbers) {
  nlohmann::json bins = nlohmann::json::array();
  for (const ReliabilityBin& b : curve) {
    bins.push_back({{"lower", b.lower},
                    {"upper", b.upper},
                    {"count", b.count},
                    {"mean_predicted", Number(b.mean_predicted, numbers)},
                    {"observed_fraction", Number(b.observed_fraction, numbers)}});
  }
  return bins;
}
}  // namespace

nlohmann::json ToJson(const ClassificationReport& r, JsonNumbers numbers) {
  const auto E = [&](const Estimate& e) { return EstimateJson(e, r.bootstrap, numbers); };
  nlohmann::json j = {{"task", r.binary ? "binary" : "multiclass"},
                      {"rows", r.rows},
                      {"classes", r.classes},
                      {"bootstrap", BootstrapJson(r.bootstrap)}};
  if (r.binary) {
    const BinaryMetrics& m = r.binary_metrics;
    j["threshold"] = m.threshold;  // the operator's choice: never rounded
    j["confusion"] = {{"tp", m.confusion.tp}, {"fp", m.confusion.fp}, {"tn", m.confusion.tn}, {"fn", m.confusion.fn}};
    j["sensitivity"] = E(m.sensitivity);
    j["specificity"] = E(m.specificity);
    j["ppv"] = E(m.ppv);
    j["npv"] = E(m.npv);
    j["f1"] = E(m.f1);
    j["accuracy"] = E(m.accuracy);
    j["roc_auc"] = E(m.roc_auc);
    j["average_precision"] = E(m.average_precision);
    j["brier"] = E(m.brier);
    j["ece"] = E(m.ece);
    j["reliability"] = ReliabilityJson(m.reliability, numbers);
  } else {
    const MulticlassMetrics& m = r.multiclass_metrics;
    nlohmann::json cm = nlohmann::json::array();
    for (uint32_t t = 0; t < r.classes; ++t) {
      cm.push_back(std::vector<uint64_t>(m.confusion.begin() + static_cast<ptrdiff_t>(t) * r.classes,
                                         m.confusion.begin() + static_cast<ptrdiff_t>(t + 1) * r.classes));
    }
    j["confusion"] = {{"rows", "true class"}, {"columns", "predicted class"}, {"counts", std::move(cm)}};
    nlohmann::json per = nlohmann::json::array();
    for (const ClassMetrics& c : m.per_class) {
      per.push_back({{"class", c.label},
                     {"support", c.support},
                     {"sensitivity", E(c.sensitivity)},
                     {"ppv", E(c.ppv)},
                     {"f1", E(c.f1)}});
    }
    j["per_class"] = std::move(per);
    j["macro_f1"] = E(m.macro_f1);
    j["accuracy"] = E(m.accuracy);
    j["brier"] = E(m.brier);
    j["roc_auc_ovr"] = E(m.roc_auc_ovr);
    j["ece"] = E(m.ece);
    j["reliability_of"] = "top label: the predicted class's probability against whether it is the true class";
    j["reliability"] = ReliabilityJson(m.reliability, numbers);
  }
  return j;
}

nlohmann::json ToJson(const RegressionReport& r, JsonNumbers numbers) {
  return {{"task", "regression"},
          {"rows", r.rows},
          {"bootstrap", BootstrapJson(r.bootstrap)},
          {"rmse", EstimateJson(r.rmse, r.bootstrap, numbers)},
          {"mae", EstimateJson(r.mae, r.bootstrap, numbers)},
          {"r2", EstimateJson(r.r2, r.bootstrap, numbers)}};
}

nlohmann::json ToJson(const ThresholdChoice& c, JsonNumbers numbers) {
  return {{"threshold", c.threshold},
          {"sensitivity", Number(c.sensitivity, numbers)},
          {"specificity", Number(c.specificity, numbers)},
          {"youden_j", Number(c.youden_j, numbers)}};
}

}  // namespace enclave::trainer
