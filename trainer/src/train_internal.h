// Pieces of the training loop (trainer.cc) that the trees' run (trees_run.cc) shares.
#pragma once

#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

// The model's inputs of data rows `rows` into dst (rows x the plan's width): the raw
// features gathered, or (a plan that is not the identity; CPU backend, whose buffers are
// host memory) fitted on these rows when `fit`, then applied.
Status GatherInputs(Backend& backend, const LoadedData& data, const LockedArray<uint32_t>& rows, Preprocessing* prep,
                    bool fit, Buffer dst);

// The per-epoch validation metrics of predictions (probabilities; regression: values in the
// target's units) against labels: accuracy and ROC AUC, or (classes 0) RMSE, MAE and R^2;
// the others NaN.
void SetValidationMetrics(const float* pred, const float* labels, size_t rows, uint32_t classes, EpochMetrics* m);

// Train() for [model] family = "xgboost" (trees.h): the loaded data on the CPU backend,
// preprocessed with missing values kept (the trees route them) and categories one-hot.
Result<TrainResult> TrainTreesJob(Backend& backend, const JobSpec& job, const LoadedData& data, const Split& split,
                                  const TrainCallbacks& callbacks);

}  // namespace enclave::trainer
