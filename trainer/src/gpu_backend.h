// The GPU backend of backend.h: buffers in device memory (zeroized before they are
// freed), GEMM by cuBLAS in FP32 without tensor-core shortcuts, every other operation a
// CUDA kernel over kernels/nn_math.h. One CUDA stream; every reduction is done by one
// thread in a fixed order, so the same calls give bit-identical results. Plain C++17.
#pragma once

#include <memory>

#include "enclave/common/status.h"
#include "enclave/trainer/backend.h"

namespace enclave::trainer {

// Fails with kUnavailable when no GPU is visible or CUDA / cuBLAS cannot start.
Result<std::unique_ptr<Backend>> MakeGpuBackend();

}  // namespace enclave::trainer
