// The training loop, written once against Backend: standardization from the training
// rows only, seeded shuffles, mini-batches, the optimizer and its schedule, and per-epoch
// metrics on the validation rows. Deterministic: the same job, seed, data and backend give
// bit-identical parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/collective.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/locked.h"
#include "enclave/trainer/model.h"
#include "enclave/trainer/model_seal.h"
#include "enclave/trainer/preprocess.h"

namespace enclave::trainer {

struct EpochMetrics {
  uint32_t epoch = 0;       // 1-based
  double lr = 0;            // learning rate of the epoch's last step
  // Losses are weighted means with [training] weights (sum of weight x row loss / sum of
  // the weights); the other metrics count every row once.
  double train_loss = 0;    // mean over the epoch's batches' rows, as they were trained
  double val_loss = 0;      // NaN without validation rows (or when their weights sum to 0)
  double val_accuracy = 0;  // NaN without validation rows
  double val_auc = 0;       // NaN without validation rows or with one class in them; regression: NaN
  // Regression, in the target's units (else NaN): root mean squared error, mean absolute
  // error, and R^2 = 1 - SSE / SST (NaN when the validation targets are all equal).
  double val_rmse = 0, val_mae = 0, val_r2 = 0;
  double seconds = 0;
};

// Rows per forward pass when evaluating or predicting (the same batching everywhere, so
// predictions of an exported model equal the trainer's own evaluation bit for bit).
inline constexpr size_t kEvalBatch = 1024;

// Everything the loop needs to continue exactly where it stopped (a checkpoint's payload,
// trainer/include/enclave/trainer/checkpoint.h). Taken after an optimizer step.
struct TrainState {
  ModelShape shape;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  uint64_t train_rows = 0, val_rows = 0;
  uint64_t steps_per_epoch = 0;
  uint64_t step = 0;             // optimizer steps done in the whole run
  uint32_t epoch = 1;            // the epoch in progress, 1-based
  uint64_t batch = 0;            // steps done in that epoch (== steps_per_epoch: its evaluation is next)
  double loss_sum = 0;           // summed row losses of that epoch's batches so far
  uint64_t shuffle_rng[4] = {};  // the shuffle stream, after that epoch's shuffle
  LockedArray<uint32_t> order;   // that epoch's order of the training rows
  LockedArray<float> mean, inv_std;
  LockedArray<float> params;
  LockedArray<float> moment1, moment2;  // sgd: velocity, empty; adamw: m, v
  std::vector<EpochMetrics> epochs;     // the finished epochs
};

// A checkpoint's state where training keeps it: the host part in `host` (its mean,
// inv_std, params, moment1 and moment2 empty) and those arrays in `backend`'s memory
// (moment2 empty for SGD). Valid during the on_checkpoint call only.
struct ResidentTrainState {
  TrainState host;
  Backend* backend = nullptr;
  Buffer mean, inv_std, params, moment1, moment2;
};

struct TrainCallbacks {
  std::function<void(const EpochMetrics&)> on_epoch;
  // (steps done in this epoch, steps per epoch).
  std::function<void(uint64_t, uint64_t)> on_step;
  // Called with the full state every `checkpoint_every` optimizer steps (0: never); an
  // error stops training with it. The state stays in backend memory (WriteCheckpoint
  // with a backend seals it there).
  uint64_t checkpoint_every = 0;
  std::function<Status(const ResidentTrainState&)> on_checkpoint;
  // Asked at every step (with its 1-based number); true stops training after that step,
  // with a final on_checkpoint (TrainResult::stopped). For interruption and its tests. In a
  // distributed run the ranks vote with the step's gradients: one rank's stop stops all
  // after the same step.
  std::function<bool(uint64_t)> should_stop;
  // The trained model stays in backend memory (TrainResult::resident) and the host arrays
  // params/mean/inv_std stay empty: `enclave-train run` seals it there (model_seal.h), so
  // on the GPU backend it never leaves the device in the clear (nor, with WriteCheckpoint,
  // does a checkpoint's state).
  bool model_stays_on_backend = false;
};

struct TrainResult {
  ModelFamily family = ModelFamily::kMlp;
  TreeModel trees;                  // kXgboost: the booster (then params, mean, inv_std stay empty)
  TreeSpec trees_spec;              // kXgboost: the parameters it was trained with
  ModelShape shape;                 // kXgboost: inputs and classes only
  Preprocessing preprocessing;      // fitted on the training rows; shape.inputs = its width
  std::vector<EpochMetrics> epochs;
  LockedArray<float> params;        // ModelShape layout
  LockedArray<float> mean, inv_std; // the standardization, from the training rows
  // Regression: the network predicts (target - label_mean) / label_scale, from the training
  // rows' targets (mean; population standard deviation, 1 when they are all equal).
  float label_mean = 0, label_scale = 1;
  // [training] class_weight: the weight of each class (class index order) from these
  // training rows; empty without class weights.
  std::vector<double> class_weights;
  // Binary: the decision threshold the exported model carries ([evaluation]; set by the
  // caller once it is chosen on the validation rows); 0.5 by default.
  float threshold = 0.5f;
  // The final model's predictions of the validation rows, in split.val order: rows x 1
  // (binary P(class 1); regression values, in the target's units) or rows x classes.
  LockedArray<float> val_predictions;
  uint64_t steps = 0;
  size_t train_rows = 0, val_rows = 0;
  // Early stopping (the network's early_stopping_patience, the trees'
  // early_stopping_rounds): the 1-based epoch (round) whose model was kept, when it is not
  // the last of `epochs`; else 0.
  uint32_t best_epoch = 0;
  // The metrics of the model that was kept: the best epoch's, or the last.
  const EpochMetrics& Final() const { return best_epoch > 0 ? epochs[best_epoch - 1] : epochs.back(); }
  bool stopped = false;  // should_stop said so: params etc. are those of the stop, epochs unfinished
  bool stopped_by_peer = false;  // distributed: another rank's vote, not this rank's should_stop
  uint32_t resumed_epoch = 0;  // with `resume`: the epoch it continued in
  uint64_t resumed_step = 0;
  // With model_stays_on_backend: mean, inv_std and params in backend memory, in the model
  // file's order (valid while the backend lives); else empty.
  OwnedBuffer resident;
  ResidentModel Resident() const {
    const size_t F = shape.inputs;
    return ResidentModel{shape, resident.get().Slice(0, F), resident.get().Slice(F, F),
                         resident.get().Slice(2 * F, shape.parameter_count()), &preprocessing, label_mean,
                         label_scale, threshold};
  }
};

// Trains on data rows `split.train`, evaluating on `split.val` (may be empty) after each
// epoch. With `resume`, continues from that state (which must belong to this job, data and
// split: shape, rows and standardization are checked) and ends bit-identical to a run that
// was never interrupted.
//
// With a `collective` of world size N > 1 (data-parallel): every rank holds the same data
// and split and shuffles with the same seed; rank r computes the gradient of its share
// (ShardBegin) of each global batch, scaled by 1 / the global batch's rows; the gradients
// are summed over the ranks and every rank takes the same optimizer step. The result equals
// single-process training up to the order of the gradient sums (docs/training.md).
Result<TrainResult> Train(Backend& backend, const JobSpec& job, const LoadedData& data, const Split& split,
                          const TrainCallbacks& callbacks = {}, const TrainState* resume = nullptr,
                          Collective* collective = nullptr);

struct CvResult {
  std::vector<TrainResult> folds;
  double mean_accuracy = 0, mean_auc = 0;  // final-epoch metrics, mean over folds (regression: NaN)
  double mean_rmse = 0, mean_r2 = 0;       // regression: the same; classification: NaN
  // Out-of-fold predictions, by data row (rows x width): each row predicted by the model of
  // the fold that held it out. What pooled metrics are computed on.
  size_t width = 1;
  LockedArray<float> out_of_fold;
};

// Stratified k-fold cross-validation: one full training run per fold (same job and seed),
// each evaluated on its held-out fold. on_fold is called with (fold, folds) before each.
// A fold stopped by callbacks.should_stop ends it with kInterrupted.
Result<CvResult> CrossValidate(Backend& backend, const JobSpec& job, const LoadedData& data, uint32_t folds,
                               const TrainCallbacks& callbacks = {},
                               const std::function<void(uint32_t, uint32_t)>& on_fold = {});

}  // namespace enclave::trainer
