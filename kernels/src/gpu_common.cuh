// Helpers shared by the CUDA translation units (chunk_open_gpu.cu, net_records_gpu.cu):
// loading the data-dependent lookup tables into shared memory, and CUDA errors as one line.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "enclave/kernels/aes256_gcm.h"
#include "enclave/kernels/gpu_tag_split.h"

namespace enclave::kernels::gpu {

// Every thread of the block helps load the AES table before any thread may return.
__device__ __forceinline__ void LoadAesTable(const AesTable& global, uint32_t* shared) {
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) shared[i] = global.t0[i];
  __syncthreads();
}

// The block's threads copy a GHASH table into shared memory (its lookups are
// data-dependent: from constant parameter memory they would serialize) before any returns.
__device__ __forceinline__ void LoadTable(const GhashTable& global, GhashTable* shared) {
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&global);
  uint64_t* dst = reinterpret_cast<uint64_t*>(shared);
  for (unsigned i = threadIdx.x; i < sizeof(GhashTable) / 8; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

inline bool Check(cudaError_t e, const char* call, char* error, size_t size) {
  if (e == cudaSuccess) return true;
  std::snprintf(error, size, "%s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
  return false;
}

inline unsigned Blocks(uint64_t threads, unsigned per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace enclave::kernels::gpu
