// Authenticated encryption with associated data: the two suites of this project,
// through OpenSSL EVP (the fastest implementation on these machines).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto {

// Wire values (u16). Append-only.
enum class Suite : uint16_t {
  kAes256Gcm = 1,         // NIST SP 800-38D, FIPS-approved
  kChaCha20Poly1305 = 2,  // RFC 8439
};

inline constexpr size_t kAeadKeyBytes = 32;
inline constexpr size_t kAeadNonceBytes = 12;
inline constexpr size_t kAeadTagBytes = 16;

std::string_view SuiteName(Suite suite);  // "aes-256-gcm", "chacha20-poly1305"
Result<Suite> ParseSuite(std::string_view name);
Result<Suite> SuiteFromWire(uint16_t value);

// One key, many messages. Not thread-safe: use one Aead per thread.
class Aead {
 public:
  static Result<std::unique_ptr<Aead>> Create(Suite suite, const SecretBytes& key);
  virtual ~Aead() = default;

  // out receives ciphertext || tag and must hold plaintext.size() + kAeadTagBytes bytes.
  virtual Status Seal(std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                      std::span<const uint8_t> plaintext, std::span<uint8_t> out) = 0;
  // in is ciphertext || tag; out must hold in.size() - kAeadTagBytes bytes. On failure
  // out is wiped: no unauthenticated plaintext is ever left behind.
  virtual Status Open(std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                      std::span<const uint8_t> in, std::span<uint8_t> out) = 0;
  virtual Suite suite() const = 0;
};

}  // namespace enclave::crypto
