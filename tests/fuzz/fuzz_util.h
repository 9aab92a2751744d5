// Shared helpers of the fuzz targets: the fixed key material the seed corpora are made
// under, and a memfd that lets path-based readers parse the fuzzer's bytes without
// touching the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

#include "enclave/crypto/secret_bytes.h"

namespace enclave::fuzz {

// The data key every sealed_file seed is sealed under (bytes 0x00..0x1f). A fuzz-only
// constant: it protects nothing.
inline std::array<uint8_t, 32> FixedDekBytes() {
  std::array<uint8_t, 32> k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i);
  return k;
}

// The passphrase every keystore seed is wrapped under.
inline constexpr std::string_view kFixedPassphrase = "fuzz-passphrase-not-a-secret";

inline crypto::SecretBytes FixedDek() {
  auto k = FixedDekBytes();
  auto s = crypto::SecretBytes::CopyFrom(k);
  if (!s.ok()) std::abort();
  return std::move(s).value();
}

inline crypto::SecretBytes FixedPassphrase() {
  auto s = crypto::SecretBytes::CopyFrom(
      {reinterpret_cast<const uint8_t*>(kFixedPassphrase.data()), kFixedPassphrase.size()});
  if (!s.ok()) std::abort();
  return std::move(s).value();
}

// An anonymous in-memory file, refilled for every input; readers open it by its
// /proc/self/fd path, which gives them their own file offset. Targets keep one per
// process (a function-local static), so no descriptor is made per input.
class MemFile {
 public:
  MemFile() {
    fd_ = ::memfd_create("enclave-fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) Die("memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { ::close(fd_); }

  // Replaces the file's contents with data[0, size); returns the path to open.
  const std::string& Fill(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) Die("ftruncate");
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) Die("pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  [[noreturn]] static void Die(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_ = -1;
  std::string path_;
};

}  // namespace enclave::fuzz
