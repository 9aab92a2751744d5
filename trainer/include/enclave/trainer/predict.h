// Using a trained model: `enclave-train predict` and the trainer's own report. Predictions
// are computed exactly as the trainer evaluates (standardize, forward in batches of
// kEvalBatch on the same backend), so an exported model, opened by the tenant, gives the
// same probabilities bit for bit on the same machine and library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "enclave/dataset/schema.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/locked.h"
#include "enclave/trainer/model_file.h"
#include "enclave/trainer/model_seal.h"

namespace enclave::trainer {

struct FeatureTable {
  size_t rows = 0;
  LockedArray<float> x;       // rows x raw features, as read (not preprocessed or standardized)
  bool has_labels = false;    // the CSV had the schema's label column
  LockedArray<float> labels;  // class indices, when has_labels
};

// Reads a CSV with a header row: every feature column of `schema`, found by name (any
// order; other columns are ignored), encoded as `enclave-data seal` does (yes/no columns 0
// or 1, numbers to float32, a category to its dictionary index). A category the
// dictionary lacks becomes index k (the dictionary's size: the model's unseen-category
// input). A missing cell (empty, NA, NaN, null) becomes dataset::kMissingBits when `prep`
// imputes (a model whose preprocessing is not the identity), else it is refused. The label
// column is optional; when present every value must be one of the schema's classes.
// Errors name file, line and column.
Result<FeatureTable> ReadFeatureCsv(const std::string& path, const dataset::DatasetSchema& schema,
                                    const Preprocessing* prep = nullptr);

// Probabilities for `rows` rows of raw features (rows x the schema's features, host
// memory; preprocessed by the model's plan): binary rows x 1 (P(class 1)), else rows x
// classes; regression: rows x 1 predicted values, in the target's units.
Result<LockedArray<float>> PredictProbabilities(Backend& backend, const ModelFile& model, const float* x,
                                                size_t rows);

// The same for a model in backend memory and `rows` rows of raw features `x` in backend
// memory (the loaded data: left as it is, preprocessed and standardized a batch at a time
// in scratch; preprocessing on the CPU backend only).
Result<LockedArray<float>> PredictResident(Backend& backend, const ResidentModel& model, Buffer x, size_t rows);

// Predictions of every loaded row (not streamed) by a finished training run, of either
// family (probabilities; regression: values in the target's units).
struct TrainResult;
struct LoadedData;
Result<LockedArray<float>> PredictLoaded(Backend& backend, const TrainResult& r, const LoadedData& data);
// A network's numbers in backend memory: the resident ones (model_stays_on_backend), or
// the host arrays uploaded into `scratch`.
Result<ResidentModel> NetworkOf(Backend& backend, const TrainResult& r, OwnedBuffer* scratch);
// The same for `rows` rows of raw features in host memory (CPU backend only).
Result<LockedArray<float>> PredictRawRows(Backend& backend, const TrainResult& r, const float* x, size_t rows);

// The predicted class of row r (binary: p >= threshold, the model's; multiclass: argmax,
// first on ties), as Accuracy (metrics.h) counts it.
uint32_t PredictedClass(const float* probs, size_t r, uint32_t classes, float threshold = 0.5f);

}  // namespace enclave::trainer
