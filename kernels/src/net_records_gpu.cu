// GPU side of net_records_gpu.h, one record per call, the steps of
// SealNetRecordInSegments / OpenNetRecordInSegments (net_records.h) as kernels:
//   seal: XorUnits (one thread per 64-byte unit) -> TagSegments (one per 512 bytes of
//         ciphertext) -> TagFinish (one block: combines them, writes the tag);
//   open: TagSegments -> TagFinish (*ok = tag matches) -> XorUnits, which writes
//         nothing unless *ok is 1.
// Keys travel as kernel parameters (__grid_constant__), never in global memory.
#include <cuda_runtime.h>

#include "enclave/kernels/net_records_gpu.h"
#include "gpu_common.cuh"

namespace enclave::kernels::gpu {
namespace {

// `ok` null: always (sealing); else only when *ok == 1 (opening).
__global__ void XorUnits(const __grid_constant__ NetRecordDeviceKey k, const __grid_constant__ AesTable te_param,
                         uint64_t seq, const uint8_t* in, uint8_t* out, uint64_t len, const uint32_t* ok) {
  __shared__ uint32_t te[256];
  LoadAesTable(te_param, te);
  if (ok != nullptr && *ok != 1) return;
  const uint64_t unit = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (unit * kUnitBytes >= len) return;
  NetRecordXorUnit(k.key, te, seq, in, out, len, unit);
}

__global__ void TagSegments(const __grid_constant__ NetRecordDeviceKey k, const uint8_t* ct, uint64_t len,
                            uint64_t segs, TagPartial* parts) {
  __shared__ GhashTable table;  // H
  LoadTable(k.table, &table);
  const uint64_t seg = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (seg >= segs) return;
  GcmTagSegment(table, ct, len, seg, &parts[seg]);
}

// One block of kNetTagThreads threads: each combines its share of the segments (a serial
// combine of a 256 KiB record's 512 segments would take one thread most of the record's
// time), thread 0 adds the shares and finishes. `ok` null: write the tag after the
// ciphertext at `record`; else compare with it and set *ok.
__global__ void TagFinish(const __grid_constant__ NetRecordDeviceKey k, const __grid_constant__ AesTable te_param,
                          const __grid_constant__ NetRecordHeader header, uint64_t seq, uint64_t len,
                          const TagPartial* parts, uint8_t* record, uint32_t* ok) {
  __shared__ uint32_t te[256];
  __shared__ GhashTable table32;  // H^32
  __shared__ Gf128 shares[kNetTagThreads];
  LoadAesTable(te_param, te);
  LoadTable(k.table32, &table32);
  shares[threadIdx.x] = NetRecordSegmentShare(k, table32, len, parts, threadIdx.x);
  __syncthreads();
  if (threadIdx.x != 0) return;
  Gf128 sum{0, 0};
  for (unsigned t = 0; t < kNetTagThreads; ++t) {
    sum.hi ^= shares[t].hi;
    sum.lo ^= shares[t].lo;
  }
  uint8_t tag[16];
  NetRecordTagFromSum(k, te, header.bytes, seq, len, sum, tag);
  if (ok == nullptr) {
    for (int i = 0; i < 16; ++i) record[len + i] = tag[i];
  } else {
    *ok = TagsEqual(tag, record + len) ? 1u : 0u;
  }
}

bool EnqueueTag(const NetRecordDeviceKey& key, const NetRecordHeader& header, uint64_t seq, uint8_t* record,
                uint64_t len, void* scratch, uint32_t* ok, cudaStream_t stream, char* error, size_t error_size) {
  const uint64_t segs = TagSegmentCount(len);
  auto* parts = static_cast<TagPartial*>(scratch);
  TagSegments<<<Blocks(segs, 128), 128, 0, stream>>>(key, record, len, segs, parts);
  if (!Check(cudaGetLastError(), "TagSegments launch", error, error_size)) return false;
  TagFinish<<<1, kNetTagThreads, 0, stream>>>(key, kAesTable, header, seq, len, parts, record, ok);
  return Check(cudaGetLastError(), "TagFinish launch", error, error_size);
}

}  // namespace

uint64_t NetRecordScratchBytes(uint64_t max_len) { return TagSegmentCount(max_len) * sizeof(TagPartial); }

bool EnqueueSealNetRecord(const NetRecordDeviceKey& key, const NetRecordHeader& header, uint64_t seq,
                          const uint8_t* plain, uint64_t len, uint8_t* out, void* scratch, CUstream_st* stream,
                          char* error, size_t error_size) {
  const uint64_t units = (len + kUnitBytes - 1) / kUnitBytes;
  if (units > 0) {
    XorUnits<<<Blocks(units, 256), 256, 0, stream>>>(key, kAesTable, seq, plain, out, len, nullptr);
    if (!Check(cudaGetLastError(), "XorUnits launch (seal)", error, error_size)) return false;
  }
  return EnqueueTag(key, header, seq, out, len, scratch, nullptr, stream, error, error_size);
}

bool EnqueueOpenNetRecord(const NetRecordDeviceKey& key, const NetRecordHeader& header, uint64_t seq,
                          const uint8_t* record, uint64_t len, uint8_t* out, void* scratch, uint32_t* device_ok,
                          CUstream_st* stream, char* error, size_t error_size) {
  // TagFinish only reads the record when checking (ok != null).
  if (!EnqueueTag(key, header, seq, const_cast<uint8_t*>(record), len, scratch, device_ok, stream, error,
                  error_size)) {
    return false;
  }
  const uint64_t units = (len + kUnitBytes - 1) / kUnitBytes;
  if (units == 0) return true;
  XorUnits<<<Blocks(units, 256), 256, 0, stream>>>(key, kAesTable, seq, record, out, len, device_ok);
  return Check(cudaGetLastError(), "XorUnits launch (open)", error, error_size);
}

}  // namespace enclave::kernels::gpu
