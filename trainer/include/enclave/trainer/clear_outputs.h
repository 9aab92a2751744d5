// What a job's outputs show in clear, by the names of the data-use policy's
// outputs.clear_metrics (docs/formats/data-use-policy.md, docs/training.md "What leaves in
// clear"). One function decides it, for the claims the broker judges and for what
// enclave-train writes and prints, so that the two cannot disagree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "enclave/trainer/job.h"

namespace enclave::trainer {

struct ClearOutputs {
  // Per-epoch values, the final ones, the plot, the console and the all-rows figure.
  bool loss = false, accuracy = false, roc_auc = false;  // classification (loss: both)
  bool rmse = false, mae = false, r2 = false;             // regression
  bool board_metrics = false;  // run's validation_metrics, cv's out_of_fold_metrics
  bool curves = false;         // run: evaluation-curves.svg (a binary model's ROC, PR, calibration)
  bool importance = false;     // run: permutation importance and the trees' gain
  bool coefficients = false;   // run: a linear model's coefficients and odds ratios

  // The names that are true, in the documented order: loss, accuracy, roc_auc, rmse, mae,
  // r2, board_metrics, curves, importance, coefficients.
  std::vector<std::string> Names() const;
  // The per-epoch ones as the job's kMetric* bits (for the training-curve plot).
  uint32_t MetricBits() const;
};

// `kind`: "train" (run) or "cv". `regression`: the label is a target (the datasets' task).
ClearOutputs ClearOutputsOf(const JobSpec& job, std::string_view kind, bool regression);

// Every name above, in that order: the broker's vocabulary (it keeps its own copy).
const std::vector<std::string>& ClearOutputNames();

}  // namespace enclave::trainer
