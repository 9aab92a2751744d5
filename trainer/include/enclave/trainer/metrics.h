// Classification metrics on host arrays (in locked memory: predictions and labels derive
// from the plaintext data).
#pragma once

#include <cstddef>
#include <cstdint>

namespace enclave::trainer {

// probs: rows x 1 (binary: P(class 1)) or rows x classes; labels: class indices.
// Binary: predicted class 1 when p >= threshold (the per-epoch metrics use 0.5; a model's
// own threshold, model_file.h, for its predictions); multiclass: argmax (first maximum on ties).
double Accuracy(const float* probs, const float* labels, size_t rows, uint32_t classes, float threshold = 0.5f);

// ROC AUC as the Mann-Whitney statistic with ties given half credit (average ranks):
// binary on P(class 1); multiclass the unweighted mean of one-vs-rest AUCs over classes
// present and absent in `labels` (a class with no positives or no negatives is skipped,
// as is a split with one class: then the result is NaN).
double RocAuc(const float* probs, const float* labels, size_t rows, uint32_t classes);

// Regression: root mean squared error, mean absolute error and R^2 = 1 - SSE / SST (NaN
// when the targets are all equal), of predictions against targets (same units), sums in
// double in row order. rows > 0.
struct RegressionErrors {
  double rmse = 0, mae = 0, r2 = 0;
};
RegressionErrors RegressionErrorsOf(const float* pred, const float* targets, size_t rows);

// AUC of scores against binary targets (1 = positive); NaN without both kinds.
double BinaryAuc(const float* scores, size_t stride, const float* labels, float positive, size_t rows);

}  // namespace enclave::trainer
