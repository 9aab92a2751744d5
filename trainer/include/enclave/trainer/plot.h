// The training-curve plot: a small self-contained SVG (no library, no script) with two
// panels over the epochs: loss (training and validation) and validation accuracy and ROC
// AUC. Each series is one <polyline> with id "series-<name>"; a metric the job did not ask
// for, or that is undefined (no validation rows), is left out.
//
// With a PlotInfo, a header under the title says what was trained on and how it ended
// (each line a <text> with an id, for scripts): "info-datasets" (dataset ids, files and
// rows), "info-rows" (training and validation rows), "info-final" (the last epoch's
// metrics, 4 significant digits), and "info-mode" ("development mode: no key broker, no
// attestation" when the job ran without a broker). Without validation rows the quality
// panel says "no validation split" instead of staying empty. A regression job's second
// panel is the validation RMSE (series "val_rmse").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

struct PlotDataset {
  std::string id, file;  // the job's dataset id; the file it was read from
  uint64_t rows = 0;
};

struct PlotInfo {
  std::string title;  // escaped
  std::vector<PlotDataset> datasets;
  uint64_t train_rows = 0, val_rows = 0;
  double validation_fraction = 0;
  bool development_mode = false;  // no key broker, no attestation (local keystore or clear CSV)
  bool regression = false;        // the second panel is the validation RMSE, not accuracy and AUC
  uint32_t kept_epoch = 0;        // early stopping: the epoch whose model was kept (0: the last)
};

// `metrics`: the job's kMetric* bits. `title` is escaped. No header (PlotInfo) lines.
std::string TrainingCurveSvg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const std::string& title);
// The plot of a run, with its header (above).
std::string TrainingCurveSvg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const PlotInfo& info);

// A metric for people: 4 significant digits ("0.9649", "0.05230", "1.000"); "n/a" when
// undefined. Console lines and the plot use it; JSON keeps full precision.
std::string HumanMetric(double v);

// Text for an SVG: the XML specials escaped, control characters dropped, bytes that are not
// UTF-8 as U+FFFD (the document stays well-formed).
std::string EscapeXml(const std::string& s);

}  // namespace enclave::trainer
