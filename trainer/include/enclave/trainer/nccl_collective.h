// Data-parallel training on the GPU backend: a Collective over NCCL (loaded at run time
// from libnccl.so.2), with every byte between hosts going through the encrypted network
// plugin (libnccl-net-enclave.so): NCCL_NET and NCCL_NET_PLUGIN are forced to it and
// in-network reduction (CollNet) and multi-node NVLink are turned off; a value that says
// otherwise is refused, so NCCL cannot fall back to its plaintext socket transport. The caller hands the job key to the plugin first
// (enclave_net_set_job_key). Built only with CUDA; elsewhere NcclBuilt() is false and
// the functions but ForceNcclNetwork (the environment only: it configures another
// library's NCCL too, torch's) return kUnsupported.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

#include "enclave/common/status.h"
#include "enclave/trainer/collective.h"

namespace enclave::trainer {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<uint8_t, kNcclUniqueIdBytes>;

bool NcclBuilt();

// Sets the environment so that NCCL moves data between hosts only through the plugin named
// `net` (NCCL_NET, NCCL_NET_PLUGIN; NCCL_COLLNET_ENABLE=0, NCCL_MNNVL_ENABLE=0), refusing
// (kFailedPrecondition, nothing changed) a variable already set otherwise. Call it before
// any other NCCL call of the process (NewNcclUniqueId included); JoinNccl calls it again.
Status ForceNcclNetwork(const char* net);

// Rank 0's bootstrap id (its address and a random magic: routing data, not a secret),
// which every rank passes to JoinNccl.
Result<NcclUniqueId> NewNcclUniqueId();

struct NcclJoinOptions {
  int world_size = 1;
  int rank = 0;
  NcclUniqueId unique_id{};
  // Every all-reduce: a peer silent this long fails the run (the communicator is aborted).
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // Joining: the other ranks must join within this (0: `timeout`).
  std::chrono::milliseconds join_timeout{0};
  // The NCCL network every inter-host byte must use; "" leaves NCCL's choice (tests only).
  const char* net = "enclave";
};

// Creates the communicator on the current CUDA device. The all-reduces copy the host
// buffer to the device, sum with ncclAllReduce and copy back.
Result<std::unique_ptr<Collective>> JoinNccl(const NcclJoinOptions& options);

}  // namespace enclave::trainer
