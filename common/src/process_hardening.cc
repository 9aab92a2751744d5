#include "enclave/common/process_hardening.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>

namespace enclave {

Status HardenProcess() {
  struct rlimit no_core = {0, 0};
  if (setrlimit(RLIMIT_CORE, &no_core) != 0) return ErrnoStatus("setrlimit(RLIMIT_CORE)", errno);
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoStatus("prctl(PR_SET_DUMPABLE)", errno);
  return OkStatus();
}

}  // namespace enclave
