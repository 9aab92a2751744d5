// The plaintext model file (docs/formats/model.md): what `enclave-train run` seals to the
// tenant's export key and `enclave-data open-model` gives back, and what `predict` reads.
// Self-contained: shape, the dataset schema (feature columns, label, class names), the
// standardization and the parameters, closed by a SHA-256 of everything before it.
#pragma once

#include <cstdint>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/locked.h"
#include "enclave/trainer/model.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/trees.h"

namespace enclave::trainer {

// The format id in the export envelope's clear metadata (model-export.md `format_id`).
// Version 1: a network on schema v1 data with nothing to preprocess (every model trained
// before preprocessing existed, and still every such model: their bytes are unchanged).
// Version 2 adds the fitted preprocessing (categorical columns, missing values),
// regression, and a second model family: gradient-boosted trees (XGBoost's booster).
// Version 3 is version 2 plus a binary model's decision threshold, when it is not 0.5.
inline constexpr char kModelFormatId[] = "enclave-train-mlp/1";
inline constexpr char kModelFormatIdV2[] = "enclave-train-model/2";
inline constexpr char kModelFormatIdV3[] = "enclave-train-model/3";
inline constexpr char kModelMagic[8] = {'E', 'N', 'C', 'L', 'M', 'O', 'D', 'L'};
inline constexpr uint16_t kModelVersion = 1;
inline constexpr uint16_t kModelVersion2 = 2;
inline constexpr uint16_t kModelVersion3 = 3;
inline constexpr float kDefaultThreshold = 0.5f;
inline constexpr uint32_t kMaxModelFeatures = 1u << 20;
inline constexpr size_t kMaxModelParameters = size_t{1} << 28;
inline constexpr size_t kMaxBoosterBytes = size_t{1} << 30;

struct ModelFile {
  ModelFamily family = ModelFamily::kMlp;  // kXgboost: `trees`, and no mean, inv_std, params
  TreeModel trees;
  ModelShape shape;                    // shape.inputs: the preprocessed row's width
  dataset::DatasetSchema schema;       // column names and kinds in CSV order, label, classes
  Preprocessing preprocessing;         // fitted on the training rows (identity in version 1)
  float label_mean = 0, label_scale = 1;  // regression (shape.classes 0): prediction = output * scale + mean
  // Binary: predicted class 1 when P(class 1) >= threshold (in [0, 1]; version 3 when not 0.5).
  float threshold = kDefaultThreshold;
  LockedArray<float> mean, inv_std;    // the standardization: shape.inputs each
  LockedArray<float> params;           // ModelShape layout
};

// The file's bytes, in locked memory (the weights derive from the data): the head, then
// mean, inv_std and params as little-endian float32, then the SHA-256 of all before.
Result<crypto::SecretBytes> EncodeModelFile(const ModelFile& model);

// The version a model is written in (the lowest that holds it): 3 for a binary model whose
// threshold is not 0.5, else 1 for a network classifier with nothing to preprocess, else 2.
uint16_t ModelVersionFor(const Preprocessing& p, const ModelShape& s, ModelFamily family = ModelFamily::kMlp,
                         float threshold = kDefaultThreshold);
const char* ModelFormatIdFor(const Preprocessing& p, const ModelShape& s, ModelFamily family = ModelFamily::kMlp,
                             float threshold = kDefaultThreshold);

// The head alone (magic .. schema, and in version 2 the fitted preprocessing): derived from
// the training rows' statistics only through the fills, like the standardization that
// follows it. `prep` null: the identity of the schema (version 1).
Result<std::vector<uint8_t>> EncodeModelHead(const ModelShape& shape, const dataset::DatasetSchema& schema,
                                             const Preprocessing* prep = nullptr, float label_mean = 0,
                                             float label_scale = 1, ModelFamily family = ModelFamily::kMlp,
                                             float threshold = kDefaultThreshold);

// The digest that closes the file.
inline constexpr size_t kModelDigestBytes = 32;

// Strict: every field checked against its documented range, the shape against the
// schema, every number finite, the digest, the exact end. kInvalidInput (kUnsupported for
// another version) with the field and offset.
Result<ModelFile> ParseModelFile(ByteSpan bytes);

// Copies (into locked memory) the pieces of a finished training run.
Result<ModelFile> MakeModelFile(const ModelShape& shape, const dataset::DatasetSchema& schema,
                                const LockedArray<float>& mean, const LockedArray<float>& inv_std,
                                const LockedArray<float>& params, const Preprocessing* prep = nullptr);

}  // namespace enclave::trainer
