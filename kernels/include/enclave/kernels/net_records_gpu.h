// The transport's records (net_records.h) sealed and opened on the GPU, for the NCCL
// plugin's device-buffer path (net/src/gpu_records.cc). A plain C++17 boundary: the
// plugin's C++20 code calls these; the kernels live in net_records_gpu.cu. Each call only
// enqueues work on `stream`; the caller synchronizes. On a failed CUDA call they return
// false with one line in `error`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/net_records.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace enclave::kernels::gpu {

// Device scratch one record of up to `max_len` bytes needs (the GHASH segments' sums).
uint64_t NetRecordScratchBytes(uint64_t max_len);

struct NetRecordHeader {
  uint8_t bytes[kNetRecordHeaderBytes];
};

// `plain` (device, `len` bytes) -> `out` (device, len + 16: ciphertext then tag).
bool EnqueueSealNetRecord(const NetRecordDeviceKey& key, const NetRecordHeader& header, uint64_t seq,
                          const uint8_t* plain, uint64_t len, uint8_t* out, void* scratch, CUstream_st* stream,
                          char* error, size_t error_size);

// `record` (device, len + 16) is checked first: *device_ok (device) becomes 1 and `out`
// (device, `len` bytes) receives the plaintext when the tag matches; otherwise *device_ok
// becomes 0 and `out` is not written.
bool EnqueueOpenNetRecord(const NetRecordDeviceKey& key, const NetRecordHeader& header, uint64_t seq,
                          const uint8_t* record, uint64_t len, uint8_t* out, void* scratch, uint32_t* device_ok,
                          CUstream_st* stream, char* error, size_t error_size);

}  // namespace enclave::kernels::gpu
