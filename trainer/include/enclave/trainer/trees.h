// Gradient-boosted trees through XGBoost's C API (Debian libxgboost 1.7.4; issue 18 §4):
// binary and multiclass classification and regression on float32 rows, missing values as
// the dataset's one missing NaN. Every XGBoost return code becomes a Status naming the call
// and XGBGetLastError(). Deterministic: the same input, spec and seed (and thread count)
// give bit-identical booster bytes.
//
// XGBoost copies the rows into its own (unlocked) allocations and never wipes them, so a
// process in tree mode first locks all of its memory (LockAllMemory); the booster bytes we
// hand out are in locked memory (crypto::SecretBytes) like everything else derived from the
// data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/trainer/locked.h"

namespace enclave::trainer {

enum class TreeTask { kBinary, kMulticlass, kRegression };

// The ranges TrainTrees accepts (and the job's [trees] table, docs/formats/job.md).
inline constexpr uint32_t kMaxTreeRounds = 100000;
inline constexpr uint32_t kMaxTreeDepth = 32;
inline constexpr uint32_t kMaxTreeBins = 65536;
inline constexpr uint32_t kMaxTreeThreads = 1024;
inline constexpr double kMaxTreePenalty = 1e9;  // min_child_weight, lambda, alpha, gamma

// The job's [trees] table. The names are XGBoost's parameter names.
struct TreeSpec {
  uint32_t rounds = 100;  // boosting rounds, 1..kMaxTreeRounds
  uint32_t max_depth = 6;  // 1..kMaxTreeDepth
  double eta = 0.3;                // (0, 1]
  double min_child_weight = 1;     // [0, kMaxTreePenalty]
  double subsample = 1;            // (0, 1]
  double colsample_bytree = 1;     // (0, 1]
  double lambda = 1, alpha = 0, gamma = 0;  // [0, kMaxTreePenalty]
  uint32_t max_bin = 256;   // 2..kMaxTreeBins
  uint32_t threads = 0;     // 0: every core (XGBoost's count); fix it to reproduce a model elsewhere
  // 0: off; else stop when the validation loss has not improved (strictly decreased) for
  // this many rounds and keep the best round. Needs validation rows. 0..kMaxTreeRounds.
  uint32_t early_stopping_rounds = 0;
};

// The spec's ranges; the message names the field.
Status CheckTreeSpec(const TreeSpec& spec);

struct TreeTrainInput {
  // Row-major rows x features; a missing value is exactly the quiet NaN 0x7fc00000
  // (dataset::kMissingBits); any other NaN or an infinity is refused.
  const float* x = nullptr;
  const float* y = nullptr;  // classification: class index as a float; regression: the value (finite)
  size_t rows = 0, features = 0;
  const float* weights = nullptr;  // optional per-row sample weights (finite, >= 0, not all 0)
  // Optional validation rows (val_rows x features, labels as y): the per-round val_loss
  // and early stopping.
  const float* x_val = nullptr;
  const float* y_val = nullptr;
  size_t val_rows = 0;
  const float* weights_val = nullptr;  // optional, as weights: the validation loss is then weighted
};

// After each boosting round: the 1-based round and XGBoost's evaluation metric (logloss,
// mlogloss, rmse; train_loss weighted by the sample weights) on the training and the
// validation rows.
struct TreeRound {
  uint32_t round;
  double train_loss, val_loss;  // NaN val_loss without validation rows
};

struct TreeModel {
  TreeTask task = TreeTask::kBinary;
  uint32_t features = 0;
  uint32_t classes = 2;      // binary 2, multiclass its classes, regression 1
  uint32_t best_rounds = 0;  // rounds kept (all rounds, or the best one with early stopping)
  // XGBoost's own serialized model, format "ubj" (Universal Binary JSON,
  // XGBoosterSaveModelToBuffer): exact float32 values (JSON would print them in decimal),
  // a third smaller, and loadable by any XGBoost >= 1.6 (Python: Booster().load_model(bytearray(b))).
  crypto::SecretBytes booster;
};

// classes: binary 2, multiclass 3..dataset::kMaxClasses, regression 0 or 1.
// Objectives binary:logistic, multi:softprob, reg:squarederror; tree_method hist; XGBoost's
// verbosity 0 (it prints nothing). `seed` is XGBoost's seed (it keeps the low 32 bits).
// `should_stop` is asked after every round (with its 1-based number, after on_round); true
// ends training with kInterrupted (SIGINT/SIGTERM: exit 15), no model.
Result<TreeModel> TrainTrees(const TreeSpec& spec, TreeTask task, uint32_t classes, const TreeTrainInput& in,
                             uint64_t seed, const std::function<void(const TreeRound&)>& on_round = {},
                             const std::function<bool(uint32_t)>& should_stop = {});

// binary: rows x 1 P(class 1); multiclass: rows x classes (row-major); regression: rows x 1
// predicted value. x as TreeTrainInput::x, model.features columns. `threads` as TreeSpec.
Result<LockedArray<float>> PredictTrees(const TreeModel& model, const float* x, size_t rows, uint32_t threads = 0);

// Total gain per feature (model.features entries; 0 for a feature never split on), summed
// over every tree (every class's trees for multiclass).
Result<std::vector<double>> FeatureGain(const TreeModel& model);

// mlockall(MCL_CURRENT | MCL_FUTURE): XGBoost allocates its own memory, so in tree mode the
// whole process is locked. Fails with kFailedPrecondition (exit 8, as a SecretBytes that
// cannot be locked) naming the limit when the kernel refuses. Under AddressSanitizer
// mlockall is a no-op that reports success (its shadow memory could not be locked anyway).
Status LockAllMemory();

const char* TreeTaskName(TreeTask task);

}  // namespace enclave::trainer
