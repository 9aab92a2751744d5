// The one container for key material. Move-only; lives in libsodium guarded memory
// (ends at a guard page, a canary before it, mlock'ed, zeroized on free; a small secret's
// region, wiped, may be reused for the next secret of its size); no printing, no implicit
// conversion.
// Raw bytes are reachable only through ExposeSecret()/ExposeSecretMutable(), so every
// place that touches key bytes can be found with `grep -rn ExposeSecret`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "enclave/common/status.h"

namespace enclave::crypto {

// Initializes libsodium once; safe to call from many threads.
Status InitCrypto();

class SecretBytes {
 public:
  SecretBytes() = default;
  // A zero-filled secret of `size` bytes.
  static Result<SecretBytes> Create(size_t size);
  static Result<SecretBytes> Random(size_t size);
  // Copies `bytes` in; the caller wipes its own copy.
  static Result<SecretBytes> CopyFrom(std::span<const uint8_t> bytes);

  SecretBytes(SecretBytes&& other) noexcept;
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  ~SecretBytes();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Result<SecretBytes> Clone() const;

  std::span<const uint8_t> ExposeSecret() const { return {data_, size_}; }
  std::span<uint8_t> ExposeSecretMutable() { return {data_, size_}; }

 private:
  void Release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Constant-time comparison for tags, MACs and commitments.
bool ConstantTimeEquals(std::span<const uint8_t> a, std::span<const uint8_t> b);

void RandomBytes(std::span<uint8_t> out);

}  // namespace enclave::crypto
