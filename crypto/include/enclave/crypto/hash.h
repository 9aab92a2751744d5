// SHA-256, HMAC-SHA256 and HKDF-SHA256 (RFC 5869) through OpenSSL.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto {

using Digest256 = std::array<uint8_t, 32>;

Digest256 Sha256(std::span<const uint8_t> data);

// Streaming SHA-256.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;
  void Update(std::span<const uint8_t> data);
  Digest256 Final();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

Digest256 HmacSha256(const SecretBytes& key, std::span<const uint8_t> data);

// HKDF-Extract then HKDF-Expand, `length` bytes of output.
Result<SecretBytes> HkdfSha256(const SecretBytes& ikm, std::span<const uint8_t> salt,
                               std::string_view info, size_t length);

}  // namespace enclave::crypto
