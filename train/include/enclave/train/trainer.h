// The training loop, written once against Backend: standardization from the training
// rows only, seeded shuffles, mini-batches, the optimizer and its schedule, and per-epoch
// metrics on the validation rows. Deterministic: the same job, seed, data and backend give
// bit-identical parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "enclave/train/backend.h"
#include "enclave/train/data.h"
#include "enclave/train/job.h"
#include "enclave/train/locked.h"
#include "enclave/train/model.h"

namespace enclave::train {

struct EpochMetrics {
  uint32_t epoch = 0;       // 1-based
  double lr = 0;            // learning rate of the epoch's last step
  double train_loss = 0;    // mean over the epoch's batches' rows, as they were trained
  double val_loss = 0;      // NaN without validation rows
  double val_accuracy = 0;  // NaN without validation rows
  double val_auc = 0;       // NaN without validation rows or with one class in them
  double seconds = 0;
};

struct TrainCallbacks {
  std::function<void(const EpochMetrics&)> on_epoch;
  // (steps done in this epoch, steps per epoch).
  std::function<void(uint64_t, uint64_t)> on_step;
};

struct TrainResult {
  ModelShape shape;
  std::vector<EpochMetrics> epochs;
  LockedArray<float> params;        // ModelShape layout
  LockedArray<float> mean, inv_std; // the standardization, from the training rows
  uint64_t steps = 0;
  size_t train_rows = 0, val_rows = 0;
};

// Trains on data rows `split.train`, evaluating on `split.val` (may be empty) after each epoch.
Result<TrainResult> Train(Backend& backend, const JobSpec& job, const LoadedData& data, const Split& split,
                          const TrainCallbacks& callbacks = {});

struct CvResult {
  std::vector<TrainResult> folds;
  double mean_accuracy = 0, mean_auc = 0;  // final-epoch metrics, mean over folds
};

// Stratified k-fold cross-validation: one full training run per fold (same job and seed),
// each evaluated on its held-out fold. on_fold is called with (fold, folds) before each.
Result<CvResult> CrossValidate(Backend& backend, const JobSpec& job, const LoadedData& data, uint32_t folds,
                               const TrainCallbacks& callbacks = {},
                               const std::function<void(uint32_t, uint32_t)>& on_fold = {});

}  // namespace enclave::train
