// GPU path of chunk_open.h: one thread per chunk checks the tags, then, only if all are
// authentic, one thread per 64-byte block decrypts. The key travels as a kernel argument
// (constant parameter memory), never in global memory.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "chunk_open_gpu.h"
#include "enclave/kernels/chunk_math.h"

namespace enclave::kernels::gpu {
namespace {

struct DeviceKey {
  uint8_t bytes[32];
};

__device__ uint64_t PlaintextSizeOf(const ChunkGeometry& g, uint64_t index) {
  if (index + 1 < g.file_chunk_count) return g.chunk_size;
  return g.payload_length - (g.file_chunk_count - 1) * static_cast<uint64_t>(g.chunk_size);
}

__global__ void VerifyTags(DeviceKey key, ChunkGeometry g, const uint8_t* in, int* bad) {
  const uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint8_t* ct = in + c * (static_cast<uint64_t>(g.chunk_size) + 16);
  if (!ChunkTagValid(key.bytes, g.aad, index, index + 1 == g.file_chunk_count, ct, PlaintextSizeOf(g, index))) {
    atomicOr(bad, 1);
  }
}

__global__ void Decrypt(DeviceKey key, ChunkGeometry g, uint64_t blocks_per_chunk, const uint8_t* in, uint8_t* out) {
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t c = t / blocks_per_chunk, b = t % blocks_per_chunk;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint64_t len = PlaintextSizeOf(g, index);
  if (b * 64 >= len) return;
  ChunkDecryptBlock(key.bytes, index, index + 1 == g.file_chunk_count,
                    in + c * (static_cast<uint64_t>(g.chunk_size) + 16), out + c * static_cast<uint64_t>(g.chunk_size),
                    len, b);
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

OpenResult OpenChaCha20Poly1305(const uint8_t key_bytes[32], const ChunkGeometry& g, const uint8_t* device_in,
                                uint8_t* device_out, char* error, size_t error_size) {
  if (g.count == 0) return OpenResult::kOk;
  DeviceKey key;
  std::memcpy(key.bytes, key_bytes, 32);
  int* bad = nullptr;
  int host_bad = 1;
  OpenResult result = OpenResult::kCudaError;
  if (Check(cudaMalloc(&bad, sizeof(int)), "cudaMalloc", error, error_size) &&
      Check(cudaMemset(bad, 0, sizeof(int)), "cudaMemset", error, error_size)) {
    const unsigned threads = 128;
    VerifyTags<<<static_cast<unsigned>((g.count + threads - 1) / threads), threads>>>(key, g, device_in, bad);
    if (Check(cudaGetLastError(), "VerifyTags launch", error, error_size) &&
        Check(cudaMemcpy(&host_bad, bad, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy(tags)", error,
              error_size)) {
      if (host_bad != 0) {
        result = OpenResult::kAuthFailed;  // nothing is decrypted
      } else {
        const uint64_t blocks_per_chunk = (g.chunk_size + 63) / 64;
        const uint64_t total = blocks_per_chunk * g.count;
        const unsigned dthreads = 256;
        Decrypt<<<static_cast<unsigned>((total + dthreads - 1) / dthreads), dthreads>>>(key, g, blocks_per_chunk,
                                                                                       device_in, device_out);
        if (Check(cudaGetLastError(), "Decrypt launch", error, error_size) &&
            Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error, error_size)) {
          result = OpenResult::kOk;
        }
      }
    }
  }
  if (bad != nullptr) cudaFree(bad);
  volatile uint8_t* wipe = key.bytes;  // the host copy of the key
  for (int i = 0; i < 32; ++i) wipe[i] = 0;
  return result;
}

}  // namespace enclave::kernels::gpu
