// Data-parallel jobs: the ranks, the job communication key, the encrypted ring (net/ring.h)
// and NCCL through the encrypted plugin as the training loop's Collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "enclave/crypto/keystore.h"
#include "enclave/net/ring.h"
#include "enclave/trainer/collective.h"
#include "enclave/trainer/job.h"

namespace enclave::session {

struct DistributedOptions {
  uint32_t world_size = 1;
  uint32_t rank = 0;
  std::string rendezvous_dir;  // the static rendezvous (net::DirectoryExchange); "": the broker's
  std::chrono::seconds peer_timeout{120};
  bool distributed() const { return world_size > 1; }
};
// Development mode (a local keystore, no broker): every rank holding the tenant keystore
// derives the same communication key for the job id (Keystore::DeriveKey, label
// "enclave-train job communication key v1:" + job id). The attested mode uses the job key
// the broker released instead.
Result<crypto::SecretBytes> DevelopmentJobKey(const crypto::Keystore& keystore, const trainer::JobSpec& job);

// The GPU backend's collective (trainer/nccl_collective.h): hands the job key to the plugin,
// shares rank 0's NCCL bootstrap id through `exchange` (or the rendezvous directory, under
// the job id + "-nccl") and joins the communicator, whose inter-host traffic can only go
// through the encrypted plugin.
Result<std::unique_ptr<trainer::Collective>> JoinNcclJob(const trainer::JobSpec& job, const crypto::SecretBytes& job_key,
                                                        const DistributedOptions& options,
                                                        net::HandleExchange* exchange = nullptr);

class RingCollective final : public trainer::Collective {
 public:
  // Joins the job's ring: comm id from the job digest and world size; handles exchanged
  // through `exchange`, or when it is null in the rendezvous directory under the job id.
  static Result<std::unique_ptr<RingCollective>> Join(const trainer::JobSpec& job, const crypto::SecretBytes& job_key,
                                                      const DistributedOptions& options,
                                                      net::HandleExchange* exchange = nullptr);
  int rank() const override { return ring_->rank(); }
  int world_size() const override { return ring_->world_size(); }
  Status AllReduceSum(float* data, size_t n) override { return ring_->AllReduceSum(data, n); }
  Status AllReduceSum(double* data, size_t n) override { return ring_->AllReduceSum(data, n); }
  uint64_t bytes_sent() const { return ring_->bytes_sent(); }
  const std::string& listen_address() const { return ring_->listen_address(); }

 private:
  explicit RingCollective(std::unique_ptr<net::Ring> ring) : ring_(std::move(ring)) {}
  std::unique_ptr<net::Ring> ring_;
};

}  // namespace enclave::session
