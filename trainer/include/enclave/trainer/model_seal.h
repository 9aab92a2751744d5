// The trained model sealed to the tenant's export key where it lives: the model file
// (model_file.h) is assembled in backend memory from the backend's own buffers, its closing
// SHA-256 is computed there, and its chunks are sealed there. On the GPU backend nothing
// of the model but ciphertext and digests leaves the device (kernels/device_seal.h); on
// the CPU backend the same bytes are sealed from locked memory with OpenSSL.
#pragma once

#include <cstdint>
#include <string>

#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/model_export.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/model.h"
#include "enclave/trainer/preprocess.h"

namespace enclave::trainer {

// A trained model's numbers, as views into backend memory.
struct ResidentModel {
  ModelShape shape;
  Buffer mean, inv_std;  // shape.inputs each
  Buffer params;         // shape.parameter_count(), ModelShape layout
  // What turns a raw record into the model's inputs (host values: fills, not data); null:
  // the identity (a schema with nothing to preprocess).
  const Preprocessing* preprocessing = nullptr;
  // Regression: predictions are output * label_scale + label_mean.
  float label_mean = 0, label_scale = 1;
  float threshold = 0.5f;  // binary: the decision threshold the model file carries (model_file.h)
};

struct SealedModel {
  crypto::ModelExportInfo info;          // the sealed file: header, metadata, file digest
  uint64_t plaintext_bytes = 0;          // the model file's length
  crypto::Digest256 plaintext_sha256{};  // SHA-256 of the whole model file
};

// Seals `model` (with the dataset schema it was trained on) to `to` into `path`: atomic,
// the file appears only when complete. The same file bytes, up to the random key and
// salt, as EncodeModelFile + crypto::SealModelToFile of the downloaded numbers.
Result<SealedModel> SealResidentModel(Backend& backend, const ResidentModel& model, const dataset::DatasetSchema& schema,
                                      const crypto::ExportPublicKey& to, const crypto::ModelSealOptions& options,
                                      const std::string& path, bool overwrite);

// SHA-256 of the bytes of the first `count` floats of `numbers` (little-endian), computed
// where they live: the report's parameters_sha256.
Result<crypto::Digest256> DigestResident(Backend& backend, Buffer numbers, size_t count);

}  // namespace enclave::trainer
