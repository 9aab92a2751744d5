#include "enclave/crypto/secret_bytes.h"

#include <pthread.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace enclave::crypto {
namespace {

// sodium_malloc tries to mlock its pages but carries on unlocked when it cannot (over
// RLIMIT_MEMLOCK, no CAP_IPC_LOCK): its comment calls that "not a hard error". For us it
// is one: a secret that can be swapped out may reach the provider's disks. Locking an
// already locked range again succeeds and costs nothing, so this asks the kernel whether
// libsodium's lock took. The system call is made directly: AddressSanitizer replaces
// mlock() with a no-op that reports success (for libsodium's call too), so under the
// sanitizers this is the lock that takes effect. Unmapping in sodium_free unlocks it.
// `size` bytes at `p` hold a secret of `secret_size` bytes (the size an error names).
Status CheckLocked(void* p, size_t size, size_t secret_size) {
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
  return FailedPrecondition("cannot lock " + std::to_string(secret_size) + " bytes of secret memory into RAM (mlock: " +
                            std::strerror(err) + "; " + locked + " locked already, RLIMIT_MEMLOCK soft limit " + soft +
                            "): raise the limit (ulimit -l, systemd LimitMEMLOCK=, docker --ulimit memlock=) "
                            "or grant CAP_IPC_LOCK");
}

// Each secret sits at the end of its sodium_malloc region, against the guard page that
// follows it, behind a canary of ours: 16 random bytes, the same for the process, checked
// when the secret is released (a write before its start aborts the process, as
// sodium_free does on its own canary).
constexpr size_t kCanaryBytes = 16;
const uint8_t* Canary() {
  static const auto* canary = [] {
    auto* c = new uint8_t[kCanaryBytes];
    randombytes_buf(c, kCanaryBytes);
    return c;
  }();
  return canary;
}

// Released small secrets' regions, kept for a later secret of the same size: sodium_malloc
// and sodium_free map, guard, lock, unlock and unmap pages every time (mmap, mprotect,
// mlock, munmap, and the TLB shootdowns they cause across threads), a tenth of the CPU of
// a key release. A kept region is wiped first and keeps its guard pages and its lock.
// Bounded: at most kMaxIdle regions of one page each stay locked while idle. A reused
// region is locked again all the same (cheap when it is): a child made by fork() inherits
// the regions but not their locks.
class RegionPool {
 public:
  static constexpr size_t kMaxPooledSize = 1024, kMaxIdle = 128;
  static RegionPool& Get() {
    static RegionPool* pool = [] {
      auto* p = new RegionPool;  // never destroyed: secrets may outlive statics
      // Held across fork(), so that the child's copy of the mutex is not left locked.
      pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); }, [] { Get().mu_.unlock(); });
      return p;
    }();
    return *pool;
  }
  // An idle region for `size` bytes (its user pointer), or nullptr.
  void* Take(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(size);
    if (it == idle_.end() || it->second.empty()) return nullptr;
    void* region = it->second.back();
    it->second.pop_back();
    --count_;
    return region;
  }
  // Keeps a wiped region; false when it is not kept (the caller frees it).
  bool Give(void* region, size_t size) {
    if (size > kMaxPooledSize) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ >= kMaxIdle) return false;
    idle_[size].push_back(region);
    ++count_;
    return true;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> idle_;
  size_t count_ = 0;
};

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
  if (size > SIZE_MAX - kCanaryBytes) return InvalidInput("secret of " + std::to_string(size) + " bytes");
  void* region = RegionPool::Get().Take(size);  // wiped, canary in place
  const bool reused = region != nullptr;
  if (!reused) {
    region = sodium_malloc(kCanaryBytes + size);
    if (region == nullptr) return Internal("sodium_malloc(" + std::to_string(size) + ") failed");
  }
  if (Status locked = CheckLocked(region, kCanaryBytes + size, size); !locked.ok()) {
    sodium_free(region);
    return locked;
  }
  if (!reused) {
    std::memcpy(region, Canary(), kCanaryBytes);
    sodium_memzero(static_cast<uint8_t*>(region) + kCanaryBytes, size);
  }
  s.data_ = static_cast<uint8_t*>(region) + kCanaryBytes;
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
  if (data_ != nullptr) {
    uint8_t* region = data_ - kCanaryBytes;
    if (sodium_memcmp(region, Canary(), kCanaryBytes) != 0) {
      std::fputs("SecretBytes: the canary before a secret was overwritten (a write out of bounds); aborting\n",
                 stderr);
      std::abort();
    }
    sodium_memzero(data_, size_);
    if (!RegionPool::Get().Give(region, size_)) sodium_free(region);  // sodium_free: zeroizes, munlocks, unmaps
  }
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
