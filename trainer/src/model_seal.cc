#include "enclave/trainer/model_seal.h"

#include <algorithm>
#include <bit>
#include <string_view>
#include <vector>

#include "enclave/kernels/device_seal.h"
#include "enclave/trainer/model_file.h"

namespace enclave::trainer {
namespace {

// The file stores float32 little-endian; the backends copy floats as stored.
static_assert(std::endian::native == std::endian::little, "the model file is assembled from floats as stored");

bool OnGpu(const Backend& backend) { return std::string_view(backend.kind()) == "gpu"; }

// SHA-256 of n bytes of backend memory at p (a device pointer on the GPU backend).
Result<crypto::Digest256> DigestBytes(Backend& backend, const uint8_t* p, size_t n) {
  if (!OnGpu(backend)) return crypto::Sha256({p, n});
  RETURN_IF_ERROR(backend.Synchronize());  // the kernels run on another stream
  ASSIGN_OR_RETURN(const auto d, kernels::Sha256OnGpu(p, n));
  crypto::Digest256 out;
  std::copy(d.begin(), d.end(), out.begin());
  return out;
}

}  // namespace

Result<crypto::Digest256> DigestResident(Backend& backend, Buffer numbers, size_t count) {
  if (count > numbers.size) return Internal("DigestResident: more floats than the buffer holds");
  return DigestBytes(backend, reinterpret_cast<const uint8_t*>(numbers.data), count * sizeof(float));
}

Result<SealedModel> SealResidentModel(Backend& backend, const ResidentModel& model, const dataset::DatasetSchema& schema,
                                      const crypto::ExportPublicKey& to, const crypto::ModelSealOptions& options,
                                      const std::string& path, bool overwrite) {
  const size_t F = model.shape.inputs, P = model.shape.parameter_count();
  if (model.mean.size < F || model.inv_std.size < F || model.params.size < P) {
    return Internal("SealResidentModel: buffers smaller than the shape");
  }
  ASSIGN_OR_RETURN(const std::vector<uint8_t> head,
                   EncodeModelHead(model.shape, schema, model.preprocessing, model.label_mean, model.label_scale,
                                   ModelFamily::kMlp, model.threshold));
  const size_t body = head.size() + sizeof(float) * (2 * F + P), total = body + kModelDigestBytes;
  // The file's bytes in backend memory (zeroized when freed, like every backend buffer).
  ASSIGN_OR_RETURN(OwnedBuffer image, AllocOwned(backend, (total + sizeof(float) - 1) / sizeof(float)));
  RETURN_IF_ERROR(backend.UploadBytes(image, 0, head.data(), head.size()));
  RETURN_IF_ERROR(backend.CopyToBytes(image, head.size(), model.mean, F));
  RETURN_IF_ERROR(backend.CopyToBytes(image, head.size() + sizeof(float) * F, model.inv_std, F));
  RETURN_IF_ERROR(backend.CopyToBytes(image, head.size() + sizeof(float) * 2 * F, model.params, P));
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(image.get().data);
  ASSIGN_OR_RETURN(const crypto::Digest256 closing, DigestBytes(backend, bytes, body));
  RETURN_IF_ERROR(backend.UploadBytes(image, body, closing.data(), closing.size()));
  SealedModel out;
  out.plaintext_bytes = total;
  ASSIGN_OR_RETURN(out.plaintext_sha256, DigestBytes(backend, bytes, total));
  if (OnGpu(backend)) {
    ASSIGN_OR_RETURN(out.info, kernels::SealDeviceModelToFile(to, bytes, total, options, path, overwrite));
  } else {
    ASSIGN_OR_RETURN(out.info, crypto::SealModelToFile(to, {bytes, total}, options, path, overwrite));
  }
  return out;
}

}  // namespace enclave::trainer
