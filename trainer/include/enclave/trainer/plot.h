// The training-curve plot: a small self-contained SVG (no library, no script) with two
// panels over the epochs: loss (training and validation) and validation accuracy and ROC
// AUC. Each series is one <polyline> with id "series-<name>"; a metric the job did not ask
// for, or that is undefined (no validation rows), is left out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

// `metrics`: the job's kMetric* bits. `title` is escaped.
std::string TrainingCurveSvg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const std::string& title);

}  // namespace enclave::trainer
