// GPU path of chunk_open.h and gpu_stream.h. Per batch, three kernels on one stream:
//   TagSegments: one thread per 512-byte segment of a chunk's ciphertext computes its
//                part of the chunk's MAC (gpu_tag_split.h);
//   TagFinish:   one thread per chunk combines the parts and checks the tag; a bad
//                chunk's index goes to a failure slot (atomicMin);
//   Decrypt:     one thread per 64-byte unit, only if the failure slot is still empty.
// Sealing runs the same steps the other way round: Encrypt (Decrypt's keystream XOR),
// TagSegments over the ciphertext it wrote, and TagSeal, which writes each chunk's tag.
// Keys travel as kernel arguments (constant parameter memory), never in global memory;
// __grid_constant__ lets the per-chunk code take their addresses without each thread
// copying the structs into local memory. The AES table and the GHASH tables are copied
// into shared memory per thread block (their lookups are data-dependent).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "chunk_open_gpu.h"
#include "gpu_common.cuh"

namespace enclave::kernels::gpu {
namespace {

__device__ uint64_t PlaintextSizeOf(const ChunkGeometry& g, uint64_t index) {
  if (index + 1 < g.file_chunk_count) return g.chunk_size;
  return g.payload_length - (g.file_chunk_count - 1) * static_cast<uint64_t>(g.chunk_size);
}

__device__ const uint8_t* ChunkIn(const ChunkGeometry& g, const uint8_t* in, uint64_t c) {
  return in + c * (static_cast<uint64_t>(g.chunk_size) + 16);
}

// The same place in a buffer being sealed.
__device__ uint8_t* SealedChunkAt(const ChunkGeometry& g, uint8_t* out, uint64_t c) {
  return out + c * (static_cast<uint64_t>(g.chunk_size) + 16);
}

__global__ void TagSegments(const __grid_constant__ DeviceKeys dk, const __grid_constant__ ChunkGeometry g,
                            uint64_t segs_per_chunk, const uint8_t* in, TagPartial* parts) {
  __shared__ GhashTable table;  // H
  LoadTable(dk.table, &table);
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t c = t / segs_per_chunk, seg = t % segs_per_chunk;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  ChunkTagSegment(dk.keys, table, index, index + 1 == g.file_chunk_count, ChunkIn(g, in, c),
                  PlaintextSizeOf(g, index), seg, &parts[t]);
}

__global__ void TagFinish(const __grid_constant__ DeviceKeys dk, const __grid_constant__ AesTable te_param,
                          const __grid_constant__ ChunkGeometry g, uint64_t segs_per_chunk,
                          const uint8_t* in, const TagPartial* parts, unsigned long long* bad) {
  __shared__ uint32_t te[256];
  __shared__ GhashTable table32;  // H^32
  LoadAesTable(te_param, te);
  LoadTable(dk.table32, &table32);
  const uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  if (!ChunkTagFinishValid(dk.keys, te, dk.powers, table32, g.aad, index, index + 1 == g.file_chunk_count,
                           ChunkIn(g, in, c), PlaintextSizeOf(g, index), parts + c * segs_per_chunk,
                           segs_per_chunk)) {
    atomicMin(bad, static_cast<unsigned long long>(index));
  }
}

__global__ void Decrypt(const __grid_constant__ ChunkKeys keys, const __grid_constant__ AesTable te_param,
                        const __grid_constant__ ChunkGeometry g, uint64_t units_per_chunk,
                        const uint8_t* in, uint8_t* out, const unsigned long long* bad) {
  __shared__ uint32_t te[256];
  LoadAesTable(te_param, te);
  if (*bad != kNoBadChunk) return;  // some chunk failed: release nothing
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t c = t / units_per_chunk, unit = t % units_per_chunk;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint64_t len = PlaintextSizeOf(g, index);
  if (unit * kUnitBytes >= len) return;
  ChunkDecryptUnit(keys, te, index, index + 1 == g.file_chunk_count, ChunkIn(g, in, c),
                   out + c * static_cast<uint64_t>(g.chunk_size), len, unit);
}

// Sealing: the keystream XOR of Decrypt from plaintext chunks (chunk_size apart) into
// sealed chunks (chunk_size + 16 apart).
__global__ void Encrypt(const __grid_constant__ ChunkKeys keys, const __grid_constant__ AesTable te_param,
                        const __grid_constant__ ChunkGeometry g, uint64_t units_per_chunk, const uint8_t* in,
                        uint8_t* out) {
  __shared__ uint32_t te[256];
  LoadAesTable(te_param, te);
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t c = t / units_per_chunk, unit = t % units_per_chunk;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint64_t len = PlaintextSizeOf(g, index);
  if (unit * kUnitBytes >= len) return;
  ChunkDecryptUnit(keys, te, index, index + 1 == g.file_chunk_count, in + c * static_cast<uint64_t>(g.chunk_size),
                   SealedChunkAt(g, out, c), len, unit);
}

// Sealing: one thread per chunk combines the segments of its ciphertext into the tag and
// writes it after the ciphertext.
__global__ void TagSeal(const __grid_constant__ DeviceKeys dk, const __grid_constant__ AesTable te_param,
                        const __grid_constant__ ChunkGeometry g, uint64_t segs_per_chunk, uint8_t* out,
                        const TagPartial* parts) {
  __shared__ uint32_t te[256];
  __shared__ GhashTable table32;  // H^32
  LoadAesTable(te_param, te);
  LoadTable(dk.table32, &table32);
  const uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (c >= g.count) return;
  const uint64_t index = g.first_index + c;
  const uint64_t len = PlaintextSizeOf(g, index);
  ChunkTagFinish(dk.keys, te, dk.powers, table32, g.aad, index, index + 1 == g.file_chunk_count, len,
                 parts + c * segs_per_chunk, segs_per_chunk, SealedChunkAt(g, out, c) + len);
}

// One thread: the inputs (models) are small, and SHA-256 is serial.
__global__ void Sha256Kernel(const __grid_constant__ Sha256Constants c, const uint8_t* data, uint64_t len,
                             uint8_t* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  Sha256State s;
  Sha256Init(&s);
  Sha256Update(&s, c, data, static_cast<size_t>(len));
  Sha256Final(&s, c, out);
}

// The tag scratch comes from the stream-ordered allocator; by default its pool returns
// memory to the driver at every synchronization, which would put a cudaMalloc back into
// every batch. Keep it cached (per device, once).
void RetainPoolMemory() {
  int device = 0;
  cudaMemPool_t pool;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  uint64_t threshold = ~0ull;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
}

}  // namespace

bool DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void MakeDeviceKeys(const ChunkKeys& keys, DeviceKeys* out) {
  out->keys = keys;
  if (keys.aes) {
    GhashPowersOf(keys.aes_h, &out->powers);
    GhashTableOf(keys.aes_h, &out->table);
    GhashTableOf(out->powers.p[5], &out->table32);  // H^(2^5)
  } else {
    std::memset(&out->powers, 0, sizeof out->powers);
    std::memset(&out->table, 0, sizeof out->table);
    std::memset(&out->table32, 0, sizeof out->table32);
  }
}

bool EnqueueOpenChunks(const DeviceKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                       unsigned long long* device_bad, CUstream_st* stream, char* error, size_t error_size,
                       CUevent_st* const* marks) {
  auto mark = [&](int i) {
    return marks == nullptr || Check(cudaEventRecord(marks[i], stream), "cudaEventRecord", error, error_size);
  };
  if (g.count == 0) return true;
  static const bool retained = (RetainPoolMemory(), true);
  (void)retained;
  const uint64_t segs = TagSegmentCount(g.chunk_size);
  TagPartial* parts = nullptr;
  if (!Check(cudaMallocAsync(reinterpret_cast<void**>(&parts), segs * g.count * sizeof(TagPartial), stream),
             "cudaMallocAsync(tag parts)", error, error_size)) {
    return false;
  }
  bool ok = mark(0);
  if (ok) {
    TagSegments<<<Blocks(segs * g.count, 128), 128, 0, stream>>>(keys, g, segs, device_in, parts);
    ok = Check(cudaGetLastError(), "TagSegments launch", error, error_size) && mark(1);
  }
  if (ok) {
    TagFinish<<<Blocks(g.count, 128), 128, 0, stream>>>(keys, kAesTable, g, segs, device_in, parts, device_bad);
    ok = Check(cudaGetLastError(), "TagFinish launch", error, error_size) && mark(2);
  }
  // Freed before Decrypt, which does not need it: another stream's next allocation may
  // then reuse it without waiting for this batch's decryption.
  const bool freed = Check(cudaFreeAsync(parts, stream), "cudaFreeAsync(tag parts)", error, error_size);
  if (ok && freed) {
    const uint64_t units = (g.chunk_size + kUnitBytes - 1) / kUnitBytes;
    Decrypt<<<Blocks(units * g.count, 256), 256, 0, stream>>>(keys.keys, kAesTable, g, units, device_in, device_out,
                                                             device_bad);
    ok = Check(cudaGetLastError(), "Decrypt launch", error, error_size) && mark(3);
  }
  return ok && freed;
}

OpenResult OpenChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                      char* error, size_t error_size) {
  if (g.count == 0) return OpenResult::kOk;
  DeviceKeys dk;
  MakeDeviceKeys(keys, &dk);
  unsigned long long* bad = nullptr;
  unsigned long long host_bad = 0;
  OpenResult result = OpenResult::kCudaError;
  if (Check(cudaMalloc(&bad, sizeof *bad), "cudaMalloc", error, error_size) &&
      Check(cudaMemset(bad, 0xff, sizeof *bad), "cudaMemset", error, error_size) &&
      EnqueueOpenChunks(dk, g, device_in, device_out, bad, nullptr, error, error_size) &&
      Check(cudaMemcpy(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost), "cudaMemcpy(failure slot)", error,
            error_size)) {
    result = host_bad == kNoBadChunk ? OpenResult::kOk : OpenResult::kAuthFailed;
  }
  if (bad != nullptr) cudaFree(bad);
  volatile uint8_t* p = reinterpret_cast<volatile uint8_t*>(&dk);
  for (size_t i = 0; i < sizeof dk; ++i) p[i] = 0;
  return result;
}

bool SealChunks(const ChunkKeys& keys, const ChunkGeometry& g, const uint8_t* device_in, uint8_t* device_out,
                char* error, size_t error_size) {
  if (g.count == 0) return true;
  DeviceKeys dk;
  MakeDeviceKeys(keys, &dk);
  const uint64_t segs = TagSegmentCount(g.chunk_size);
  const uint64_t units = (g.chunk_size + kUnitBytes - 1) / kUnitBytes;
  TagPartial* parts = nullptr;
  bool ok = Check(cudaMalloc(reinterpret_cast<void**>(&parts), segs * g.count * sizeof(TagPartial)),
                  "cudaMalloc(tag parts)", error, error_size);
  if (ok) {
    Encrypt<<<Blocks(units * g.count, 256), 256>>>(dk.keys, kAesTable, g, units, device_in, device_out);
    ok = Check(cudaGetLastError(), "Encrypt launch", error, error_size);
  }
  if (ok) {
    TagSegments<<<Blocks(segs * g.count, 128), 128>>>(dk, g, segs, device_out, parts);
    ok = Check(cudaGetLastError(), "TagSegments launch", error, error_size);
  }
  if (ok) {
    TagSeal<<<Blocks(g.count, 128), 128>>>(dk, kAesTable, g, segs, device_out, parts);
    ok = Check(cudaGetLastError(), "TagSeal launch", error, error_size) &&
         Check(cudaDeviceSynchronize(), "sealing kernels", error, error_size);
  }
  if (parts != nullptr) cudaFree(parts);
  volatile uint8_t* p = reinterpret_cast<volatile uint8_t*>(&dk);
  for (size_t i = 0; i < sizeof dk; ++i) p[i] = 0;
  return ok;
}

bool Sha256(const uint8_t* device_data, uint64_t len, uint8_t out[32], char* error, size_t error_size) {
  uint8_t* d_out = nullptr;
  bool ok = Check(cudaMalloc(reinterpret_cast<void**>(&d_out), 32), "cudaMalloc(digest)", error, error_size);
  if (ok) {
    Sha256Kernel<<<1, 1>>>(kSha256, device_data, len, d_out);
    ok = Check(cudaGetLastError(), "Sha256Kernel launch", error, error_size) &&
         Check(cudaMemcpy(out, d_out, 32, cudaMemcpyDeviceToHost), "cudaMemcpy(digest)", error, error_size);
  }
  if (d_out != nullptr) cudaFree(d_out);
  return ok;
}

}  // namespace enclave::kernels::gpu
