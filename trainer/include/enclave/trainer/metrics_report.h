// The metrics a validation board or regulator asks for (issue 18 §5-6), on host arrays:
// confusion matrices, sensitivity/specificity/PPV/NPV/F1 at a threshold, ROC AUC, average
// precision, Brier score, a reliability curve with ECE, regression errors, a bootstrap 95%
// interval for every scalar, threshold choice, and a JSON rendering. Every definition is in
// docs/training.md ("Metrics a validation board asks for"), precisely enough to reproduce.
//
// probs: binary rows x 1 = P(class 1); multiclass rows x classes. labels: class indices as
// float. The inputs derive from plaintext, so every per-row scratch array is locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/common/status.h"

namespace enclave::trainer {

struct EvalOptions {
  double threshold = 0.5;               // binary only: predicted positive when p >= threshold
  uint32_t calibration_bins = 10;       // binary only: equal-width bins on [0, 1] (reliability, ECE)
  uint32_t bootstrap_resamples = 1000;  // 0: no intervals. Cost ~ resamples x rows x classes
  uint64_t seed = 0;                    // with kStreamBootstrap (rng.h)
};

// A scalar metric with its percentile bootstrap interval. NaN where undefined (JSON null).
struct Estimate {
  double value = std::numeric_limits<double>::quiet_NaN();
  double ci_low = std::numeric_limits<double>::quiet_NaN();   // 2.5th percentile
  double ci_high = std::numeric_limits<double>::quiet_NaN();  // 97.5th percentile
  uint32_t resamples_used = 0;     // resamples where the metric was defined
  uint32_t resamples_skipped = 0;  // resamples where it was not (e.g. one class only)
};

struct BinaryConfusion {
  uint64_t tp = 0, fp = 0, tn = 0, fn = 0;
};

// Bin k holds k/bins <= p < (k+1)/bins (the last bin also p = 1).
struct ReliabilityBin {
  double lower = 0, upper = 0;
  uint64_t count = 0;
  double mean_predicted = std::numeric_limits<double>::quiet_NaN();     // NaN when empty
  double observed_fraction = std::numeric_limits<double>::quiet_NaN();  // of label 1; NaN when empty
};

struct BinaryMetrics {
  double threshold = 0.5;
  BinaryConfusion confusion;
  Estimate sensitivity, specificity, ppv, npv, f1, accuracy;  // at `threshold`
  Estimate roc_auc, average_precision, brier, ece;           // threshold-free
  std::vector<ReliabilityBin> reliability;
};

struct ClassMetrics {  // one-vs-rest
  uint32_t label = 0;
  uint64_t support = 0;  // rows whose true class is `label`
  Estimate sensitivity, ppv, f1;
};

struct MulticlassMetrics {
  // confusion[t * classes + p]: rows of true class t predicted p (argmax, first on ties).
  std::vector<uint64_t> confusion;
  std::vector<ClassMetrics> per_class;
  Estimate macro_f1, accuracy, brier, roc_auc_ovr;
  // Top-label calibration: rows binned by the predicted class's probability (the
  // confidence); a bin's mean_predicted is its mean confidence, observed_fraction the
  // share of its rows whose predicted class is the true one; ECE as for binary.
  std::vector<ReliabilityBin> reliability;
  Estimate ece;
};

struct BootstrapInfo {
  uint32_t resamples = 0;
  uint64_t seed = 0;
  uint64_t stream = 0;
};

struct ClassificationReport {
  size_t rows = 0;
  uint32_t classes = 0;
  BootstrapInfo bootstrap;
  bool binary = false;          // classes == 2: `binary_metrics`; otherwise `multiclass_metrics`
  BinaryMetrics binary_metrics;
  MulticlassMetrics multiclass_metrics;
};

struct RegressionReport {
  size_t rows = 0;
  BootstrapInfo bootstrap;
  Estimate rmse, mae, r2;  // r2: NaN when the targets are constant
};

// Refuses (InvalidInput) empty input, classes < 2, a threshold outside [0, 1], bins == 0,
// a NaN or out-of-[0, 1] probability and a label that is not a class index (messages name
// the row, never the value).
Result<ClassificationReport> EvaluateClassification(const float* probs, const float* labels, size_t rows,
                                                    uint32_t classes, const EvalOptions& opt);
// Refuses empty input and NaN or infinite predictions or targets.
Result<RegressionReport> EvaluateRegression(const float* predictions, const float* targets, size_t rows,
                                            const EvalOptions& opt);

// A threshold chosen on validation rows (binary probs rows x 1), among the distinct
// predicted values (predicted positive when p >= threshold).
struct ThresholdChoice {
  double threshold = 0;
  double sensitivity = 0, specificity = 0;
  double youden_j = 0;  // sensitivity + specificity - 1
};
// Maximizes Youden's J; ties go to the largest threshold. Needs both classes.
Result<ThresholdChoice> ChooseThresholdYouden(const float* probs, const float* labels, size_t rows);
// The largest threshold whose sensitivity is >= target_sensitivity (in (0, 1]). Needs positives.
Result<ThresholdChoice> ChooseThresholdForSensitivity(const float* probs, const float* labels, size_t rows,
                                                      double target_sensitivity);

// kDisplay rounds every metric to 4 significant digits (printf "%.4g"); kExact keeps the
// doubles. Counts stay integers, NaN is null.
enum class JsonNumbers { kDisplay, kExact };
nlohmann::json ToJson(const ClassificationReport& report, JsonNumbers numbers = JsonNumbers::kDisplay);
nlohmann::json ToJson(const RegressionReport& report, JsonNumbers numbers = JsonNumbers::kDisplay);
nlohmann::json ToJson(const ThresholdChoice& choice, JsonNumbers numbers = JsonNumbers::kDisplay);

// The percentile rule of the intervals: the q-quantile of ascending values v[0..m-1] is
// linear interpolation at position h = q * (m - 1): v[floor(h)] + (h - floor(h)) *
// (v[floor(h) + 1] - v[floor(h)]) (numpy's default "linear", Hyndman-Fan type 7). NaN when m == 0.
double QuantileOfSorted(const double* sorted, size_t m, double q);

}  // namespace enclave::trainer
