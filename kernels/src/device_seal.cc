#include "enclave/kernels/device_seal.h"

#include <algorithm>
#include <vector>

#if ENCLAVE_HAVE_CUDA
#include <cuda_runtime.h>

#include "enclave/kernels/cuda_status.h"

#include "chunk_open_gpu.h"
#endif

namespace enclave::kernels {
Status SealInBatches(const ChunkBatch& file, uint64_t max_sealed_bytes, const SealBatchFn& seal_batch,
                     const SealedSinkFn& sink) {
  ChunkBatch batch = file;
  const uint64_t stride = uint64_t{file.chunk_size} + 16;
  const uint64_t per_batch = std::max<uint64_t>(1, max_sealed_bytes / stride);
  std::vector<uint8_t> sealed;  // ciphertext only: nothing secret passes through here
  for (uint64_t first = 0; first < file.file_chunk_count; first += per_batch) {
    batch.first_index = first;
    batch.count = std::min(per_batch, file.file_chunk_count - first);
    sealed.resize(batch.InputBytes());
    RETURN_IF_ERROR(seal_batch(batch, sealed.data()));
    RETURN_IF_ERROR(sink(sealed));
  }
  return OkStatus();
}

Status SealModelInBatches(crypto::ModelExportWriter& writer, uint64_t max_sealed_bytes, const SealBatchFn& seal_batch) {
  return SealInBatches(FileChunks(writer.header()), max_sealed_bytes, seal_batch,
                       [&](ByteSpan sealed) { return writer.AppendSealed(sealed); });
}

#if ENCLAVE_HAVE_CUDA
namespace {

constexpr uint64_t kSealScratchBytes = uint64_t{64} << 20;

}  // namespace

Result<std::array<uint8_t, 32>> Sha256OnGpu(const uint8_t* device_data, uint64_t len) {
  std::array<uint8_t, 32> out{};
  char error[256] = "";
  if (!gpu::Sha256(device_data, len, out.data(), error, sizeof error)) return Unavailable(error);
  return out;
}

Status SealDeviceChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& file, const uint8_t* device_payload,
                        const SealedSinkFn& sink) {
  const uint64_t stride = uint64_t{file.chunk_size} + 16;
  const uint64_t scratch_bytes = std::max(kSealScratchBytes / stride, uint64_t{1}) * stride;
  uint8_t* scratch = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc(sealing scratch)"));
  Status s = SealInBatches(
      file, scratch_bytes,
      [&](const ChunkBatch& batch, uint8_t* sealed_out) {
        const uint8_t* plain = device_payload + batch.first_index * uint64_t{batch.chunk_size};
        RETURN_IF_ERROR(SealChunksOnGpu(payload_key, batch, plain, scratch));
        return CudaStatus(cudaMemcpy(sealed_out, scratch, batch.InputBytes(), cudaMemcpyDeviceToHost),
                          "cudaMemcpy(sealed chunks)");
      },
      sink);
  cudaFree(scratch);  // holds ciphertext only
  return s;
}

Result<crypto::ModelExportInfo> SealDeviceModelToFile(const crypto::ExportPublicKey& to, const uint8_t* device_model,
                                                      uint64_t length, const crypto::ModelSealOptions& options,
                                                      const std::string& out_path, bool overwrite) {
  return crypto::SealModelWithChunkSealer(to, length, options, out_path, overwrite, [&](crypto::ModelExportWriter& w) {
    return SealDeviceChunks(w.payload_key(), FileChunks(w.header()), device_model,
                            [&](ByteSpan sealed) { return w.AppendSealed(sealed); });
  });
}
#else
Status SealDeviceChunks(const crypto::SecretBytes&, const ChunkBatch&, const uint8_t*, const SealedSinkFn&) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}

Result<std::array<uint8_t, 32>> Sha256OnGpu(const uint8_t*, uint64_t) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}

Result<crypto::ModelExportInfo> SealDeviceModelToFile(const crypto::ExportPublicKey&, const uint8_t*, uint64_t,
                                                      const crypto::ModelSealOptions&, const std::string&, bool) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}
#endif

}  // namespace enclave::kernels
