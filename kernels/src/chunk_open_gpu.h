// The plain C++17 boundary between the host code (chunk_open.cc, gpu_stream.cc) and the
// CUDA translation unit (nvcc here builds C++17; project types stay out of .cu files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/chunk_math.h"
#include "enclave/kernels/gpu_tag_split.h"
#include "enclave/kernels/sha256.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers
struct CUevent_st;   // cudaEvent_t

namespace enclave::kernels::gpu {

struct ChunkGeometry {
  uint64_t first_index, count, file_chunk_count, payload_length;
  uint32_t chunk_size;
  uint8_t aad[32];
};

enum class OpenResult { kOk, kAuthFailed, kCudaError };

// No chunk has failed: the initial value of a failure slot.
inline constexpr unsigned long long kNoBadChunk = ~0ull;

bool DeviceAvailable();

// Per-file GPU key material: the chunk keys and, for AES-GCM, the powers of H and the
// 4-bit multiplication tables of H (segments) and H^32 (combining segments).
struct DeviceKeys {
  ChunkKeys keys;
  GhashPowers powers;
  GhashTable table, table32;
};
void MakeDeviceKeys(const ChunkKeys& keys, DeviceKeys* out);

// Synchronous: verify every tag, then decrypt only if all are authentic; on
// kAuthFailed `device_out` is untouched. On kCudaError, `error` receives one line.
OpenResult OpenChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                      char* error, size_t error_size);

// Asynchronous, on `stream`: verifies the batch's tags (the lowest failing chunk index
// goes to *device_bad by atomicMin), then decrypts only if *device_bad is still
// kNoBadChunk, so after one failure no later batch on any stream decrypts either.
// Scratch comes from the stream-ordered allocator. Returns false with `error` set when a
// CUDA call fails.
// `marks` (benchmarks only; null otherwise): four events recorded on `stream` before
// TagSegments, before TagFinish, before Decrypt and after it.
bool EnqueueOpenChunks(const DeviceKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                       unsigned long long* device_bad, CUstream_st* stream, char* error, size_t error_size,
                       CUevent_st* const* marks = nullptr);

// Synchronous sealing, the inverse of OpenChunks: `device_in` holds the plaintext chunks
// back to back (chunk_size apart), `device_out` receives each chunk's ciphertext and tag
// (chunk_size + 16 apart). Returns false with `error` set when a CUDA call fails.
bool SealChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                char* error, size_t error_size);

// SHA-256 of `len` device bytes by one GPU thread, into `out` (host). Synchronous.
bool Sha256(const uint8_t* device_data, uint64_t len, uint8_t out[32], char* error, size_t error_size);

}  // namespace enclave::kernels::gpu
