// The training job specification: a TOML file (docs/formats/job.md), parsed strictly:
// every key is known, every value has its type and range, or parsing fails naming the
// key and its line.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/dataset/schema.h"
#include "enclave/kernels/nn_math.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/trees.h"

namespace enclave::trainer {

enum class DatasetFormat { kSealed, kCsv };

struct DatasetSpec {
  std::string id;
  std::string path;  // relative paths are resolved against the job file's directory
  DatasetFormat format = DatasetFormat::kSealed;
  // kCsv only (the sealed format carries its schema): the label column and its classes,
  // with the same rules as `enclave-data seal --label/--positive/--classes`.
  std::string label;
  std::optional<std::string> positive;
  std::vector<std::string> classes;
  dataset::Task task = dataset::Task::kClassification;  // as `enclave-data seal --task`
};

// [model] family: a neural network trained by the trainer's own loop (hidden layers, the
// optimizer, the schedule), or gradient-boosted trees through XGBoost ([trees], trees.h).
enum class ModelFamily { kMlp, kXgboost };

struct ModelSpec {
  std::vector<uint32_t> hidden;  // empty: logistic regression
  Activation activation = kernels::kActRelu;
};

enum class OptimizerKind { kSgd, kAdamW };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  float lr = 0.001f;
  float momentum = 0.9f;  // sgd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adamw
  float weight_decay = 0.0f;  // decoupled
  float l2 = 0.0f;            // coupled (added to the gradient)
};

struct ScheduleSpec {
  int kind = kernels::kLrConstant;
  uint32_t warmup_epochs = 0;
  uint32_t step_epochs = 1;  // step: decay every this many epochs
  float gamma = 0.1f;        // step: decay factor
  float min_lr = 0.0f;       // cosine: floor
};

struct CheckpointSpec {
  uint64_t every_steps = 0;  // 0: no checkpoints
  uint32_t keep = 2;         // the newest this many are kept
};

// [streaming]: the training rows are re-read and decrypted every epoch, a window of blocks
// at a time, instead of being loaded once (docs/formats/job.md, docs/training.md).
struct StreamingSpec {
  bool enabled = false;
  uint32_t block_rows = 8192;    // training rows per block (the unit of shuffling and reading)
  uint32_t window_blocks = 16;   // blocks whose rows are shuffled together and held at once
};

// The key broker the job's keys come from (docs/formats/job.md, [broker]).
struct BrokerSpec {
  std::string url;        // https://HOST:PORT; empty: no broker (development mode)
  std::string ca;         // PEM the broker's certificate chain must end in (resolved path)
  std::string policy;     // the data-use policy id to be judged by
  std::string requester;  // who runs the job (checked against the policy)
  std::string job_id;     // same for every rank; default "job-" + the first 16 hex digits of the digest
  // A C2SP tlog-policy file (resolved path): the release must come with a checkpoint its
  // witness quorum cosigned and proofs of the release's audit entries; empty: not required.
  std::string witness_policy;
};

// [evaluation]: the final model's metrics on the validation rows (run) or the pooled
// out-of-fold predictions (cv), with bootstrap intervals (metrics_report.h).
enum class ThresholdRule { kFixed, kYouden, kTargetSensitivity };
struct EvaluationSpec {
  ThresholdRule rule = ThresholdRule::kFixed;
  double threshold = 0.5;           // kFixed: binary, predicted positive when p >= threshold
  double target_sensitivity = 0.9;  // kTargetSensitivity: the largest threshold reaching it
  uint32_t bootstrap_resamples = 1000;
  uint32_t calibration_bins = 10;
  uint32_t permutation_repeats = 5;  // permutation importance on the validation rows; 0: none
  bool coefficients = false;         // a linear model's coefficients in the clear report (they are the model)
  // Which results are computed and shown in clear at all (trainer/clear_outputs.h): a job
  // turns off what its data-use policy does not allow to leave.
  bool board_metrics = true;  // run's validation_metrics, cv's out_of_fold_metrics
  bool curves = true;         // run: evaluation-curves.svg
  bool importance = true;     // run: permutation importance and the trees' gain
};

// [training] class_weight and sample_weight_column: each training row's loss and gradient
// count (class weight x sample weight) times (docs/training.md, "Weights").
enum class ClassWeightRule { kNone, kBalanced, kGiven };
struct WeightSpec {
  ClassWeightRule rule = ClassWeightRule::kNone;
  // kGiven: a weight for every class, by class name, as the job lists them.
  std::vector<std::pair<std::string, double>> given;
  std::string column;  // the numeric column that holds each row's weight (not a feature); empty: none
  bool any() const { return rule != ClassWeightRule::kNone || !column.empty(); }
};
inline constexpr double kMaxClassWeight = 1e6;

// [training] metrics: per-epoch values shown in clear. Accuracy and ROC AUC apply to
// classification, RMSE, MAE and R^2 to regression; the loss to both.
enum Metric : uint32_t {
  kMetricLoss = 1,
  kMetricAccuracy = 2,
  kMetricRocAuc = 4,
  kMetricRmse = 8,
  kMetricMae = 16,
  kMetricR2 = 32,
};
inline constexpr uint32_t kAllMetrics = kMetricLoss | kMetricAccuracy | kMetricRocAuc | kMetricRmse | kMetricMae | kMetricR2;

// [tune]: a search over configurations of the job, each cross-validated (`enclave-train
// tune`, trainer/tune.h; docs/formats/job.md, [tune]). `run` and `cv` check it and ignore it.
enum class TuneMethod { kGrid, kRandom };
struct TuneParameter {
  std::string key;  // the job key it sets, "table.key" ("optimizer.lr")
  std::string at;   // where its candidate list was given, "job.toml:31"
  // Each candidate value as compact JSON text (a TOML integer stays an integer, an inline
  // table an object), in the order written.
  std::vector<std::string> candidates;
};
inline constexpr uint32_t kMaxTuneConfigurations = 1000;
inline constexpr uint32_t kMaxTuneParameters = 32;
inline constexpr uint32_t kMaxTuneCandidates = 1000;  // over all parameters (each is checked in a parse of the job)
struct TuneSpec {
  bool enabled = false;  // the job has a [tune] table
  std::string at;        // where: "job.toml:20"
  TuneMethod method = TuneMethod::kGrid;
  uint32_t trials = 0;   // kRandom: how many configurations are drawn
  uint32_t folds = 5;
  std::string metric;    // empty: "roc_auc" for a classification label, "rmse" for regression
  uint64_t seed = 0;     // kRandom: the draws' seed (default: the job's seed)
  std::vector<TuneParameter> parameters;  // in the order written (source position)
  uint64_t grid_size = 0;                 // product of the candidate counts (saturating at 2^64 - 1)
};

struct JobSpec {
  std::string name;
  uint64_t seed = 0;
  Device device = Device::kAuto;
  std::string output_dir;
  BrokerSpec broker;       // [broker]: where the keys come from (enclave-attest attest)
  std::string export_key;  // the tenant's export public key file; empty: not given (resolved path)
  CheckpointSpec checkpoint;
  StreamingSpec streaming;
  std::vector<DatasetSpec> datasets;
  PreprocessSpec preprocess;  // [preprocess]: missing values and categorical columns
  EvaluationSpec evaluation;  // [evaluation]
  ModelFamily family = ModelFamily::kMlp;  // [model] family
  ModelSpec model;                         // kMlp only
  TreeSpec trees;                          // kXgboost only: [trees]
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  uint32_t epochs = 100;
  uint32_t batch_size = 32;
  double validation_fraction = 0.2;
  // Stop when the validation loss has not improved (strictly decreased) for this many
  // epochs, and keep the best epoch's parameters; 0: train every epoch.
  uint32_t early_stopping_patience = 0;
  WeightSpec weights;  // [training] class_weight, sample_weight_column
  TuneSpec tune;       // [tune]
  uint32_t metrics = kAllMetrics;
  crypto::Digest256 digest{};  // SHA-256 of the job file's bytes
  // Where each path-valued key was given, "job.toml:12", by key ("datasets[0].path",
  // "output_dir", "export_key", "broker.ca", "broker.witness_policy"; also
  // "evaluation.threshold", "evaluation.target_sensitivity"): errors name the key and its
  // line (JobPathAt).
  std::map<std::string, std::string> key_at;
};

inline constexpr size_t kMaxJobBytes = 1u << 20;

// `source` names the text in messages ("job.toml"); `base_dir` resolves relative paths.
Result<JobSpec> ParseJob(std::string_view text, const std::string& source, const std::string& base_dir);
// Reads (at most kMaxJobBytes) and parses a job file.
Result<JobSpec> LoadJob(const std::string& path);

// "job.toml:12: datasets[0].path": where a path-valued key of the job was given (the key
// alone when it has no recorded line: a job not parsed from a file).
std::string JobPathAt(const JobSpec& job, const std::string& key);
// The file a path-valued input names must exist and be a regular file: "WHERE: PATH: no
// such file" (not found), "...: permission denied", "...: is a directory, not a file"
// (invalid input). `where` names the key and its line (JobPathAt) or the flag.
Status CheckInputFile(const std::string& where, const std::string& path);
// CheckInputFile for every dataset of the job, before any key is asked for.
Status CheckJobPaths(const JobSpec& job);

const char* DeviceName(Device d);
const char* ActivationName(Activation a);
const char* ScheduleName(int kind);
const char* ModelFamilyName(ModelFamily f);

}  // namespace enclave::trainer
