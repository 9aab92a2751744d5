#include "enclave/common/exit_codes.h"

namespace enclave {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return kExitOk;
    case Code::kInvalidInput: return kExitInvalidInput;
    case Code::kAuthFailed: return kExitAuthFailed;
    case Code::kPermissionDenied: return kExitPermissionDenied;
    case Code::kNotFound: return kExitNotFound;
    case Code::kAlreadyExists: return kExitAlreadyExists;
    case Code::kFailedPrecondition: return kExitFailedPrecondition;
    case Code::kUnsupported: return kExitUnsupported;
    case Code::kUnavailable: return kExitUnavailable;
    case Code::kIo: return kExitIo;
    case Code::kInternal: return kExitInternal;
    case Code::kInterrupted: return kExitInterrupted;
  }
  return kExitInternal;
}

}  // namespace enclave
