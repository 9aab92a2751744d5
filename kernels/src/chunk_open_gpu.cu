// GPU path of chunk_open.h: one thread per chunk checks the tags, then, only if all are
// authentic, one thread per 64-byte unit decrypts. Keys travel as kernel arguments
// (constant parameter memory), never in global memory; the AES S-box is copied into
// shared memory per thread block.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "chunk_open_gpu.h"

namespace enclave::kernels::gpu {
namespace {

struct Sbox {
  uint8_t bytes[256];
};

__device__ uint64_t PlaintextSizeOf(const ChunkGeometry& g, uint64_t index) {
  if (index + 1 < g.file_chunk_count) return g.chunk_size;
  return g.payload_length - (g.file_chunk_count - 1) * static_cast<uint64_t>(g.chunk_size);
}

// Every thread of the block helps load the S-box before any thread may return.
__device__ void LoadSbox(const Sbox& global, uint8_t* shared) {
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) shared[i] = global.bytes[i];
  __syncthreads();
}

__global__ void VerifyTags(ChunkKeys keys, Sbox sbox_param, ChunkGeometry g, const uint8_t* in, int* bad) {
  __shared__ uint8_t sbox[256];
  LoadSbox(sbox_param, sbox);
  const uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint8_t* ct = in + c * (static_cast<uint64_t>(g.chunk_size) + 16);
  if (!ChunkTagValid(keys, sbox, g.aad, index, index + 1 == g.file_chunk_count, ct, PlaintextSizeOf(g, index))) {
    atomicOr(bad, 1);
  }
}

__global__ void Decrypt(ChunkKeys keys, Sbox sbox_param, ChunkGeometry g, uint64_t units_per_chunk,
                        const uint8_t* in, uint8_t* out) {
  __shared__ uint8_t sbox[256];
  LoadSbox(sbox_param, sbox);
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t c = t / units_per_chunk, unit = t % units_per_chunk;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint64_t len = PlaintextSizeOf(g, index);
  if (unit * kUnitBytes >= len) return;
  ChunkDecryptUnit(keys, sbox, index, index + 1 == g.file_chunk_count,
                   in + c * (static_cast<uint64_t>(g.chunk_size) + 16), out + c * static_cast<uint64_t>(g.chunk_size),
                   len, unit);
}

bool Check(cudaError_t e, const char* call, char* error, size_t size) {
  if (e == cudaSuccess) return true;
  std::snprintf(error, size, "%s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
  return false;
}

}  // namespace

bool DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

OpenResult OpenChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                      char* error, size_t error_size) {
  if (g.count == 0) return OpenResult::kOk;
  Sbox sbox;
  std::memcpy(sbox.bytes, kAesSbox, 256);
  int* bad = nullptr;
  int host_bad = 1;
  OpenResult result = OpenResult::kCudaError;
  if (Check(cudaMalloc(&bad, sizeof(int)), "cudaMalloc", error, error_size) &&
      Check(cudaMemset(bad, 0, sizeof(int)), "cudaMemset", error, error_size)) {
    const unsigned threads = 128;
    VerifyTags<<<static_cast<unsigned>((g.count + threads - 1) / threads), threads>>>(keys, sbox, g, device_in, bad);
    if (Check(cudaGetLastError(), "VerifyTags launch", error, error_size) &&
        Check(cudaMemcpy(&host_bad, bad, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy(tags)", error,
              error_size)) {
      if (host_bad != 0) {
        result = OpenResult::kAuthFailed;  // nothing is decrypted
      } else {
        const uint64_t units_per_chunk = (g.chunk_size + kUnitBytes - 1) / kUnitBytes;
        const uint64_t total = units_per_chunk * g.count;
        const unsigned dthreads = 256;
        Decrypt<<<static_cast<unsigned>((total + dthreads - 1) / dthreads), dthreads>>>(keys, sbox, g, units_per_chunk,
                                                                                       device_in, device_out);
        if (Check(cudaGetLastError(), "Decrypt launch", error, error_size) &&
            Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error, error_size)) {
          result = OpenResult::kOk;
        }
      }
    }
  }
  if (bad != nullptr) cudaFree(bad);
  return result;
}

}  // namespace enclave::kernels::gpu
