// The evaluation curves of a binary model on its validation rows (issue 18 §7), as one SVG
// beside the training curve: ROC (false positive rate against sensitivity), precision
// against recall, and the reliability curve (mean predicted probability against the observed
// fraction of positives, per bin of metrics_report.h). Computed inside; the points are
// aggregates of the validation rows, as the report's metrics are.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/trainer/metrics_report.h"

namespace enclave::trainer {

struct CurvePoint {
  double x = 0, y = 0;
};

// One point per distinct predicted probability, from the highest down (every row with a
// probability >= it predicted positive), starting at (0, 0): ROC is (FPR, TPR); the
// precision-recall curve is (recall, precision), starting at (0, 1). Needs both classes.
Result<std::vector<CurvePoint>> RocCurve(const float* probs, const float* labels, size_t rows);
Result<std::vector<CurvePoint>> PrecisionRecallCurve(const float* probs, const float* labels, size_t rows);

// The three panels; `report` gives the AUC, average precision, ECE and the reliability bins.
Result<std::string> EvaluationCurvesSvg(const float* probs, const float* labels, size_t rows,
                                        const ClassificationReport& report, const std::string& title);

}  // namespace enclave::trainer
