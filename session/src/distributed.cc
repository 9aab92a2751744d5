#include "enclave/session/distributed.h"

#include <algorithm>
#include <cstring>

#include "enclave/crypto/hash.h"
#include "enclave/net/plugin.h"
#include "enclave/trainer/nccl_collective.h"

namespace enclave::session {

Result<crypto::SecretBytes> DevelopmentJobKey(const crypto::Keystore& keystore, const trainer::JobSpec& job) {
  return keystore.DeriveKey("enclave-train job communication key v1:" + job.broker.job_id);
}

Result<std::unique_ptr<RingCollective>> RingCollective::Join(const trainer::JobSpec& job,
                                                             const crypto::SecretBytes& job_key,
                                                             const DistributedOptions& options,
                                                             net::HandleExchange* exchange) {
  std::unique_ptr<net::HandleExchange> directory;
  if (exchange == nullptr) {
    ASSIGN_OR_RETURN(directory, net::DirectoryExchange(options.rendezvous_dir, job.broker.job_id));
    exchange = directory.get();
  }
  // Connections of another job, or of this job with another world size, do not match.
  std::string tag = "enclave-train ring v1";
  tag.push_back('\0');
  tag.append(reinterpret_cast<const char*>(job.digest.data()), job.digest.size());
  tag.append(std::to_string(options.world_size));
  const crypto::Digest256 d = crypto::Sha256(ByteSpan(reinterpret_cast<const uint8_t*>(tag.data()), tag.size()));
  net::RingOptions ro;
  ro.world_size = static_cast<int>(options.world_size);
  ro.rank = static_cast<int>(options.rank);
  std::memcpy(&ro.comm_id, d.data(), sizeof(ro.comm_id));
  ro.timeout = options.peer_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<net::Ring> ring, net::Ring::Connect(job_key, ro, *exchange));
  return std::unique_ptr<RingCollective>(new RingCollective(std::move(ring)));
}

Result<std::unique_ptr<trainer::Collective>> JoinNcclJob(const trainer::JobSpec& job, const crypto::SecretBytes& job_key,
                                                        const DistributedOptions& options,
                                                        net::HandleExchange* exchange) {
  if (!trainer::NcclBuilt()) return Unsupported("distributed GPU training needs a CUDA build (NCCL)");
  std::unique_ptr<net::HandleExchange> directory;
  if (exchange == nullptr) {
    ASSIGN_OR_RETURN(directory, net::DirectoryExchange(options.rendezvous_dir, job.broker.job_id + "-nccl"));
    exchange = directory.get();
  }
  // Before NCCL runs at all (ncclGetUniqueId initialises it).
  RETURN_IF_ERROR(trainer::ForceNcclNetwork("enclave"));
  // NCCL opens the plugin by name, which finds this very library (already loaded), so the
  // key set here is the one its connections prove.
  const auto key = job_key.ExposeSecret();
  if (enclave_net_set_job_key(key.data(), key.size()) != 0) return InvalidInput("job key: 32 to 64 bytes");
  const int rank = static_cast<int>(options.rank);
  const auto deadline = std::chrono::steady_clock::now() + options.peer_timeout;
  trainer::NcclJoinOptions o;
  o.world_size = static_cast<int>(options.world_size);
  o.rank = rank;
  o.timeout = options.peer_timeout;
  if (rank == 0) {
    exchange->Withdraw(0);  // a bootstrap id a crashed run left behind
    ASSIGN_OR_RETURN(o.unique_id, trainer::NewNcclUniqueId());
    RETURN_IF_ERROR(exchange->Publish(0, o.unique_id));
    auto joined = trainer::JoinNccl(o);
    exchange->Withdraw(0);  // every rank has joined (or the join failed)
    return joined;
  }
  // A stale id (its rank 0 is gone) fails the join; rank 0's fresh one replaces it.
  ASSIGN_OR_RETURN(o.unique_id, exchange->Fetch(0, deadline));
  while (true) {
    // Each try gets what is left of the one deadline.
    o.join_timeout = std::max(std::chrono::milliseconds(1000), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                    deadline - std::chrono::steady_clock::now()));
    auto joined = trainer::JoinNccl(o);
    if (joined.ok() || std::chrono::steady_clock::now() > deadline) return joined;
    auto again = exchange->Fetch(0, deadline);
    if (!again.ok() || *again == o.unique_id) return joined;
    o.unique_id = *again;
  }
}

}  // namespace enclave::session
