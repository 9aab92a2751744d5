#include "enclave/trainer/clear_outputs.h"

namespace enclave::trainer {

const std::vector<std::string>& ClearOutputNames() {
  static const std::vector<std::string> k = {"loss", "accuracy", "roc_auc", "rmse", "mae",
                                             "r2", "board_metrics", "curves", "importance", "coefficients"};
  return k;
}

std::vector<std::string> ClearOutputs::Names() const {
  const bool on[] = {loss, accuracy, roc_auc, rmse, mae, r2, board_metrics, curves, importance, coefficients};
  std::vector<std::string> out;
  for (size_t i = 0; i < ClearOutputNames().size(); ++i) {
    if (on[i]) out.push_back(ClearOutputNames()[i]);
  }
  return out;
}

uint32_t ClearOutputs::MetricBits() const {
  return (loss ? kMetricLoss : 0u) | (accuracy ? kMetricAccuracy : 0u) | (roc_auc ? kMetricRocAuc : 0u) |
         (rmse ? kMetricRmse : 0u) | (mae ? kMetricMae : 0u) | (r2 ? kMetricR2 : 0u);
}

ClearOutputs ClearOutputsOf(const JobSpec& job, std::string_view kind, bool regression) {
  ClearOutputs c;
  const bool run = kind == "train";
  // cv validates every fold on its held-out rows; run only with a validation split.
  const bool validation = !run || job.validation_fraction > 0;
  c.loss = (job.metrics & kMetricLoss) != 0;
  if (regression) {
    c.rmse = (job.metrics & kMetricRmse) != 0;
    c.mae = (job.metrics & kMetricMae) != 0;
    c.r2 = (job.metrics & kMetricR2) != 0;
  } else {
    c.accuracy = (job.metrics & kMetricAccuracy) != 0;
    c.roc_auc = (job.metrics & kMetricRocAuc) != 0;
  }
  const EvaluationSpec& e = job.evaluation;
  c.board_metrics = e.board_metrics && validation;
  c.curves = run && e.curves && !regression && validation;
  c.importance = run && e.importance &&
                 ((e.permutation_repeats > 0 && validation) || job.family == ModelFamily::kXgboost);
  c.coefficients = run && e.coefficients;
  return c;
}

}  // namespace enclave::trainer
