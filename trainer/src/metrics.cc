#include "enclave/trainer/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "enclave/trainer/locked.h"

namespace enclave::trainer {

double Accuracy(const float* probs, const float* labels, size_t rows, uint32_t classes, float threshold) {
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  size_t correct = 0;
  for (size_t r = 0; r < rows; ++r) {
    uint32_t pred = 0;
    if (classes == 2) {
      pred = probs[r] >= threshold ? 1u : 0u;
    } else {
      const float* p = probs + r * classes;
      for (uint32_t c = 1; c < classes; ++c) pred = p[c] > p[pred] ? c : pred;
    }
    correct += static_cast<float>(pred) == labels[r] ? 1u : 0u;
  }
  return static_cast<double>(correct) / static_cast<double>(rows);
}

RegressionErrors RegressionErrorsOf(const float* pred, const float* y, size_t rows) {
  double sse = 0, sae = 0, sum = 0;
  for (size_t r = 0; r < rows; ++r) {
    const double d = static_cast<double>(pred[r]) - y[r];
    sse += d * d;
    sae += std::fabs(d);
    sum += y[r];
  }
  const double n = static_cast<double>(rows), mean = sum / n;
  double sst = 0;
  for (size_t r = 0; r < rows; ++r) sst += (y[r] - mean) * (y[r] - mean);
  RegressionErrors e;
  e.rmse = std::sqrt(sse / n);
  e.mae = sae / n;
  e.r2 = sst > 0 ? 1.0 - sse / sst : std::numeric_limits<double>::quiet_NaN();
  return e;
}

double BinaryAuc(const float* scores, size_t stride, const float* labels, float positive, size_t rows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t r = 0; r < rows; ++r) {
    if (std::isnan(scores[r * stride])) return nan;  // no ranking (a diverged model)
  }
  auto order_or = LockedArray<uint32_t>::Create(rows);
  if (!order_or.ok()) return nan;
  LockedArray<uint32_t> order = std::move(order_or).value();
  std::iota(order.begin(), order.end(), 0u);
  // Ties by row: the order std::stable_sort gives, without its unlocked scratch buffer.
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const float sa = scores[a * stride], sb = scores[b * stride];
    return sa < sb || (sa == sb && a < b);
  });
  // Sum of the (average) ranks of the positives.
  double rank_sum = 0;
  size_t pos = 0;
  for (size_t i = 0; i < rows;) {
    size_t j = i;
    while (j < rows && scores[order[j] * stride] == scores[order[i] * stride]) ++j;
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] == positive) {
        rank_sum += avg_rank;
        ++pos;
      }
    }
    i = j;
  }
  const size_t neg = rows - pos;
  if (pos == 0 || neg == 0) return nan;
  const double p = static_cast<double>(pos), n = static_cast<double>(neg);
  return (rank_sum - p * (p + 1) / 2.0) / (p * n);
}

double RocAuc(const float* probs, const float* labels, size_t rows, uint32_t classes) {
  if (classes == 2) return BinaryAuc(probs, 1, labels, 1.0f, rows);
  for (size_t i = 0; i < rows * classes; ++i) {  // a NaN anywhere: no average over the other classes
    if (std::isnan(probs[i])) return std::numeric_limits<double>::quiet_NaN();
  }
  double sum = 0;
  size_t used = 0;
  for (uint32_t c = 0; c < classes; ++c) {
    const double auc = BinaryAuc(probs + c, classes, labels, static_cast<float>(c), rows);
    if (std::isnan(auc)) continue;
    sum += auc;
    ++used;
  }
  return used == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(used);
}

}  // namespace enclave::trainer
