// SHA-256 of bytes in GPU memory, computed on the GPU (sha256.h), so that only the digest
// comes back to the host.
#pragma once

#include <array>
#include <cstdint>

#include "enclave/common/status.h"

namespace enclave::kernels {

// One GPU thread hashes `len` bytes at the device pointer `device_data` (waits for the
// device). kUnsupported in a build without CUDA; kUnavailable when a CUDA call fails.
Result<std::array<uint8_t, 32>> Sha256OnGpu(const uint8_t* device_data, uint64_t len);

}  // namespace enclave::kernels
