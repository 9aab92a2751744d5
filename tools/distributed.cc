#include "distributed.h"

namespace enclave {

Result<session::DistributedOptions> DistributedFromArgs(const cli::Args& args) {
  session::DistributedOptions o;
  ASSIGN_OR_RETURN(uint64_t world, args.GetU64("world-size", 1));
  ASSIGN_OR_RETURN(uint64_t rank, args.GetU64("rank", 0));
  ASSIGN_OR_RETURN(uint64_t timeout, args.GetU64("peer-timeout", 120));
  if (world < 1 || world > 1024) return InvalidInput("--world-size must be 1..1024");
  if (world == 1 && (args.Has("rank") || args.Has("rendezvous"))) {
    return InvalidInput("--rank and --rendezvous need --world-size of 2 or more");
  }
  if (rank >= world) return InvalidInput("--rank must be below --world-size (" + std::to_string(world) + ")");
  if (timeout < 1 || timeout > 86400) return InvalidInput("--peer-timeout must be 1..86400 seconds");
  o.world_size = static_cast<uint32_t>(world);
  o.rank = static_cast<uint32_t>(rank);
  o.peer_timeout = std::chrono::seconds(timeout);
  o.rendezvous_dir = args.Get("rendezvous");
  return o;
}

}  // namespace enclave
