// The plain C++17 boundary between chunk_open.cc and the CUDA translation unit (nvcc
// here builds C++17; project types stay out of .cu files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/chunk_math.h"

namespace enclave::kernels::gpu {

struct ChunkGeometry {
  uint64_t first_index, count, file_chunk_count, payload_length;
  uint32_t chunk_size;
  uint8_t aad[32];
};

enum class OpenResult { kOk, kAuthFailed, kCudaError };

bool DeviceAvailable();
// On kCudaError, `error` receives a one-line description.
OpenResult OpenChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                      char* error, size_t error_size);

}  // namespace enclave::kernels::gpu
