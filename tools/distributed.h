// enclave-train's data-parallel flags, parsed into the session library's options.
#pragma once

#include "cli.h"
#include "enclave/session/distributed.h"

namespace enclave {

// --world-size, --rank, --rendezvous, --peer-timeout; checked against each other (whether
// a run without --rendezvous can use the broker's is checked once the mode is known).
Result<session::DistributedOptions> DistributedFromArgs(const cli::Args& args);

}  // namespace enclave
