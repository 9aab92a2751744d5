// `enclave-train tune`: a grid or random search over configurations of one job, each
// cross-validated on the same folds (docs/training.md, "Tune"; docs/formats/job.md,
// [tune]). This header has the search's pieces a test can reach without data: the
// configurations (each the job's own TOML with the candidates substituted, parsed by
// ParseJob's rules), the metric of a fold, and the choice of the best.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

// The random draws' stream of the PRNG (rng.h): Rng(tune.seed, kStreamTune).
inline constexpr uint64_t kStreamTune = 7;

struct TuneConfiguration {
  uint32_t index = 0;          // 1-based, in search order
  std::vector<uint32_t> picks; // per parameter (TuneSpec::parameters order), the candidate's index
  JobSpec job;                 // the job with those candidates substituted, parsed as a job
};

struct TunePlan {
  JobSpec base;  // the job as written (base.tune: the search)
  std::vector<TuneConfiguration> configurations;
};

// The search's picks, in order. Grid: every combination, lexicographic in parameter order
// as written, the last parameter varying fastest. Random: `trials` distinct combinations:
// each draw takes, per parameter in order, Rng(seed, kStreamTune).Below(candidates); a
// combination drawn before is discarded and drawn again.
std::vector<std::vector<uint32_t>> TunePicks(const TuneSpec& spec);

// Parses the job (ParseJob) and makes every configuration of its [tune] search, each parsed
// as a job of its own; a configuration the job rules refuse is an error naming it (invalid
// input). A job without [tune] is refused.
Result<TunePlan> ParseTunePlan(std::string_view text, const std::string& source, const std::string& base_dir);
Result<TunePlan> LoadTunePlan(const std::string& path);

// "optimizer.lr = 0.01, model.hidden = [64,32]": a configuration's values, for people.
std::string DescribeConfiguration(const TuneSpec& spec, const std::vector<uint32_t>& picks);

// The metrics a search can compare configurations by.
struct TuneMetric {
  const char* name;       // "roc_auc", as [tune] metric names it
  bool higher_is_better;  // else lower is better
  bool classification;    // applies to a classification label
  bool regression;        // applies to a regression label
  bool binary_only;       // needs two classes
};
const TuneMetric* FindTuneMetric(std::string_view name);  // null: unknown
std::string TuneMetricNames();                             // "accuracy, roc_auc, ..." for messages
// The job's metric for data of `classes` classes (0: regression): [tune] metric, or the
// default (roc_auc for classification, rmse for regression); a metric that does not apply
// to the label is invalid input naming the key and line.
Result<const TuneMetric*> ResolveTuneMetric(const TuneSpec& spec, uint32_t classes);

// Each fold's metric: its final model (TrainResult::Final) on its own held-out rows. The
// accuracy, ROC AUC, log loss (val_loss), RMSE, MAE and R^2 are the fold's EpochMetrics, the
// numbers `cv` reports per fold; average precision and the Brier score come from the
// fold's predictions (metrics_report.h, no bootstrap). NaN where undefined.
Result<std::vector<double>> FoldScores(const TuneMetric& metric, const CvResult& cv, const LoadedData& data,
                                       uint64_t seed);

struct TuneScore {
  double mean = 0, std = 0;  // over the folds (population std); NaN when any fold is NaN
};
TuneScore Summarize(const std::vector<double>& per_fold);

// Configurations in rank order (indices into `means`): the best mean first (the largest,
// or the smallest when lower is better), equal means by index (the earlier configuration
// first), undefined (NaN) means last. The best is the first, when its mean is defined.
std::vector<size_t> RankConfigurations(const std::vector<double>& means, bool higher_is_better);

}  // namespace enclave::trainer
