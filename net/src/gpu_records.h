// Record layers for GPU buffers (issue 21 §1): a device buffer's records are sealed and
// opened on the GPU with the transport's record format (docs/formats/net-transport.md),
// so only ciphertext crosses PCIe and the host, and a GPU rank interoperates with a CPU
// rank. Sending: seal on the socket's own CUDA stream into device scratch, copy the
// ciphertext to pinned staging, wait, send. Receiving: receive into pinned staging, copy
// to the device, check the tag on the GPU, and only then decrypt into NCCL's buffer; the
// record is reported received only after the stream finished and the tag matched.
// The kernels are kernels/src/net_records_gpu.cu; their steps run on the CPU in CI
// (kernels/net_records.h's *InSegments functions, tests/kernels and tests/net).
#pragma once

#include <string>

#include "transport.h"

namespace enclave::net {

// The GPU record layers, or null with *why saying what is missing (a build without CUDA,
// no CUDA device). Each socket's GPU resources (a stream, device scratch, pinned staging)
// are made on its worker's thread at its first GPU record, on the buffer's device.
const RecordProtection* GpuRecordProtection(std::string* why);

}  // namespace enclave::net
