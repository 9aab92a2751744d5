#pragma once

#include "enclave/common/status.h"

namespace enclave {

// For binaries that hold keys: no core dumps (RLIMIT_CORE 0) and not dumpable, which
// also refuses ptrace attachment by non-root processes of the same user.
Status HardenProcess();

}  // namespace enclave
