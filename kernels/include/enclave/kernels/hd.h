// ENCLAVE_HD marks functions compiled for both the host and the GPU: the per-element
// math is written once and the CPU backend and the CUDA kernels share it.
#pragma once

#if defined(__CUDACC__)
#define ENCLAVE_HD __host__ __device__ __forceinline__
#else
#define ENCLAVE_HD inline
#endif
