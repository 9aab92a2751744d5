// A CUDA runtime error as a Status: kUnavailable naming the call and CUDA's error. Only for
// translation units built with the CUDA runtime (ENCLAVE_HAVE_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "enclave/common/status.h"

namespace enclave::kernels {

inline Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return OkStatus();
  return Unavailable(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace enclave::kernels
