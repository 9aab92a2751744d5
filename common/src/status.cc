#include "enclave/common/status.h"

#include <cstring>

namespace enclave {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidInput: return "invalid input";
    case Code::kAuthFailed: return "authentication failed";
    case Code::kPermissionDenied: return "permission denied";
    case Code::kNotFound: return "not found";
    case Code::kAlreadyExists: return "already exists";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kUnsupported: return "unsupported";
    case Code::kUnavailable: return "unavailable";
    case Code::kIo: return "I/O error";
    case Code::kInternal: return "internal error";
    case Code::kInterrupted: return "interrupted";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status ErrnoStatus(std::string_view what, int err) {
  const Code code = (err == ENOENT) ? Code::kNotFound
                    : (err == EEXIST) ? Code::kAlreadyExists
                    : (err == EACCES || err == EPERM) ? Code::kPermissionDenied
                                                      : Code::kIo;
  return Status(code, std::string(what) + ": " + std::strerror(err));
}

}  // namespace enclave
