// Outputs computed from data in GPU memory without the data leaving it: a SHA-256 digest
// (sha256.h on one GPU thread), and a model sealed to the tenant's export key with its
// chunks encrypted and authenticated on the GPU (chunk_open.h's SealChunksOnGpu); the
// header, the key wrap and the file stay on the host (keys and ciphertext only).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "enclave/common/status.h"
#include "enclave/crypto/model_export.h"
#include "enclave/kernels/chunk_open.h"

namespace enclave::kernels {

// SHA-256 of `len` bytes at the device pointer `device_data` (waits for the device).
// kUnsupported in a build without CUDA; kUnavailable when a CUDA call fails.
Result<std::array<uint8_t, 32>> Sha256OnGpu(const uint8_t* device_data, uint64_t len);

// crypto::SealModelToFile for a model of `length` bytes at the device pointer
// `device_model`: chunks are sealed on the GPU a batch at a time into device scratch,
// and only their ciphertext is copied to the host and written. Same file semantics
// (atomic, appears only when complete); the same error kinds as Sha256OnGpu.
Result<crypto::ModelExportInfo> SealDeviceModelToFile(const crypto::ExportPublicKey& to, const uint8_t* device_model,
                                                      uint64_t length, const crypto::ModelSealOptions& options,
                                                      const std::string& out_path, bool overwrite);

// What SealDeviceModelToFile does on the host, exposed so that CI tests it with the CPU
// sealer: every chunk of `writer`'s file in batches of at most `max_sealed_bytes` of
// sealed output (at least one chunk each), each sealed by `seal_batch` into a host buffer
// of batch.InputBytes() and passed to writer.AppendSealed.
using SealBatchFn = std::function<Status(const ChunkBatch& batch, uint8_t* sealed_out)>;
Status SealModelInBatches(crypto::ModelExportWriter& writer, uint64_t max_sealed_bytes, const SealBatchFn& seal_batch);

// The same for any chunked payload: `file` gives the geometry (suite, file_chunk_count,
// chunk_size, payload_length, header_digest; first_index and count are ignored); each
// batch's sealed chunks go to `sink`, in order.
using SealedSinkFn = std::function<Status(ByteSpan sealed_chunks)>;
Status SealInBatches(const ChunkBatch& file, uint64_t max_sealed_bytes, const SealBatchFn& seal_batch,
                     const SealedSinkFn& sink);

// Every chunk of `file` sealed on the GPU from the payload at the device pointer
// `device_payload` (file.payload_length bytes), a batch at a time into device scratch,
// whose ciphertext is copied to the host and handed to `sink`. The same error kinds as
// Sha256OnGpu.
Status SealDeviceChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& file, const uint8_t* device_payload,
                        const SealedSinkFn& sink);

}  // namespace enclave::kernels
