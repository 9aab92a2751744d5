// Data-parallel training on the GPU backend: a Collective over NCCL (loaded at run time
// from libnccl.so.2), with every byte between hosts going through the encrypted network
// plugin (libnccl-net-enclave.so): NCCL_NET and NCCL_NET_PLUGIN are forced to it, and a
// value that names another network is refused, so NCCL cannot fall back to its plaintext
// socket transport. The caller hands the job key to the plugin first
// (enclave_net_set_job_key). Built only with CUDA; elsewhere NcclBuilt() is false and
// the functions return kUnsupported.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

#include "enclave/common/status.h"
#include "enclave/train/collective.h"

namespace enclave::train {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<uint8_t, kNcclUniqueIdBytes>;

bool NcclBuilt();

// Rank 0's bootstrap id (its address and a random magic: routing data, not a secret),
// which every rank passes to JoinNccl.
Result<NcclUniqueId> NewNcclUniqueId();

struct NcclJoinOptions {
  int world_size = 1;
  int rank = 0;
  NcclUniqueId unique_id{};
  // Joining, and every all-reduce: a peer silent this long fails the run (the
  // communicator is aborted).
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // The NCCL network every inter-host byte must use; "" leaves NCCL's choice (tests only).
  const char* net = "enclave";
};

// Creates the communicator on the current CUDA device. The all-reduces copy the host
// buffer to the device, sum with ncclAllReduce and copy back.
Result<std::unique_ptr<Collective>> JoinNccl(const NcclJoinOptions& options);

}  // namespace enclave::train
