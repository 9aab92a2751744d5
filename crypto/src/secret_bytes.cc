#include "enclave/crypto/secret_bytes.h"

#include <sodium.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

namespace enclave::crypto {
namespace {

// sodium_malloc tries to mlock its pages but carries on unlocked when it cannot (over
// RLIMIT_MEMLOCK, no CAP_IPC_LOCK): its comment calls that "not a hard error". For us it
// is one: a secret that can be swapped out may reach the provider's disks. Locking an
// already locked range again succeeds and costs nothing, so this asks the kernel whether
// libsodium's lock took. The system call is made directly: AddressSanitizer replaces
// mlock() with a no-op that reports success (for libsodium's call too), so under the
// sanitizers this is the lock that takes effect. Unmapping in sodium_free unlocks it.
Status CheckLocked(void* p, size_t size) {
  if (syscall(SYS_mlock, p, size) == 0) return OkStatus();
  const int err = errno;
  struct rlimit limit {};
  std::string soft = "unknown";
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    soft = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_cur) + " bytes";
  }
  std::string locked = "unknown";  // what this process has locked already (each secret: whole pages)
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmLck:", 6) == 0) {
        locked = std::to_string(std::strtoull(line + 6, nullptr, 10) * 1024) + " bytes";
      }
    }
    std::fclose(f);
  }
  return FailedPrecondition("cannot lock " + std::to_string(size) + " bytes of secret memory into RAM (mlock: " +
                            std::strerror(err) + "; " + locked + " locked already, RLIMIT_MEMLOCK soft limit " + soft +
                            "): raise the limit (ulimit -l, systemd LimitMEMLOCK=, docker --ulimit memlock=) "
                            "or grant CAP_IPC_LOCK");
}

}  // namespace

Status InitCrypto() {
  static int rc = sodium_init();  // thread-safe static init; returns 1 if already done
  if (rc < 0) return Internal("sodium_init failed");
  return OkStatus();
}

Result<SecretBytes> SecretBytes::Create(size_t size) {
  RETURN_IF_ERROR(InitCrypto());
  SecretBytes s;
  if (size == 0) return s;
  void* p = sodium_malloc(size);
  if (p == nullptr) return Internal("sodium_malloc(" + std::to_string(size) + ") failed");
  if (Status locked = CheckLocked(p, size); !locked.ok()) {
    sodium_free(p);
    return locked;
  }
  sodium_memzero(p, size);
  s.data_ = static_cast<uint8_t*>(p);
  s.size_ = size;
  return s;
}

Result<SecretBytes> SecretBytes::Random(size_t size) {
  ASSIGN_OR_RETURN(SecretBytes s, Create(size));
  if (size > 0) randombytes_buf(s.data_, size);
  return s;
}

Result<SecretBytes> SecretBytes::CopyFrom(std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(SecretBytes s, Create(bytes.size()));
  if (!bytes.empty()) std::memcpy(s.data_, bytes.data(), bytes.size());
  return s;
}

Result<SecretBytes> SecretBytes::Clone() const { return CopyFrom(ExposeSecret()); }

SecretBytes::SecretBytes(SecretBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SecretBytes::~SecretBytes() { Release(); }

void SecretBytes::Release() {
  if (data_ != nullptr) sodium_free(data_);  // zeroizes and munlocks
  data_ = nullptr;
  size_ = 0;
}

bool ConstantTimeEquals(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;  // lengths are public
  if (a.empty()) return true;
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

void RandomBytes(std::span<uint8_t> out) {
  (void)InitCrypto();
  randombytes_buf(out.data(), out.size());
}

}  // namespace enclave::crypto
