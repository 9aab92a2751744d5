// One result type at every module boundary: Status for "did it work", Result<T> for
// "a value or why not". Foreign error codes (OpenSSL, libsodium, errno, TSS2_RC, ...)
// are converted at the one wrapper around the foreign call, keeping the callee's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace enclave {

// Canonical codes. Append-only: exit codes and JSON output are derived from them.
enum class Code : uint8_t {
  kOk = 0,
  kInvalidInput,        // malformed input: CSV, arguments, file that is not ours
  kAuthFailed,          // authentication failed: tampered, truncated, wrong key
  kPermissionDenied,    // wrong passphrase, policy says no
  kNotFound,            // file, key or entry absent
  kAlreadyExists,       // refusing to overwrite
  kFailedPrecondition,  // state does not allow the operation
  kUnsupported,         // unknown version, suite or feature
  kUnavailable,         // a service or device is not reachable (retry may help)
  kIo,                  // the operating system failed a read, write or sync
  kInternal,            // a bug or an impossible library failure
  kInterrupted,         // stopped by a signal (SIGINT, SIGTERM) at a safe point
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code: message", one line.
  std::string ToString() const;
  // Prefixes context ("reading F: ") to the message, keeping the code.
  Status Annotate(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidInput(std::string m) { return {Code::kInvalidInput, std::move(m)}; }
inline Status AuthFailed(std::string m) { return {Code::kAuthFailed, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIo, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Interrupted(std::string m) { return {Code::kInterrupted, std::move(m)}; }
// errno-based I/O failure: "what: strerror(errno)".
Status ErrnoStatus(std::string_view what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace enclave

#define ENCLAVE_CONCAT_INNER(a, b) a##b
#define ENCLAVE_CONCAT(a, b) ENCLAVE_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define RETURN_IF_ERROR_IMPL(tmp, expr) \
  do {                                  \
    ::enclave::Status tmp = (expr);     \
    if (!tmp.ok()) return tmp;          \
  } while (0)
#define RETURN_IF_ERROR(expr) RETURN_IF_ERROR_IMPL(ENCLAVE_CONCAT(enclave_status_, __LINE__), expr)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

// ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if MakeX failed.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ENCLAVE_CONCAT(enclave_result_, __LINE__), lhs, expr)
