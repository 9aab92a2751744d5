// The log key pair and signed tree heads (docs/formats/audit-log.md, "Signed tree heads").
//
// A signed tree head (STH) commits to the first `tree_size` entries of one log:
//   signature = Ed25519(log secret key, signature input)
//   signature input = "enclave-audit-log/v1/tree-head" || 0x00     (31 bytes: label, NUL)
//                     || log_id                                    (32 bytes)
//                     || u64le tree_size || u64le timestamp_ms     (16 bytes)
//                     || root                                      (32 bytes)
//   log_id = SHA-256(Ed25519 public key)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/audit/merkle.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::audit {

inline constexpr std::string_view kTreeHeadLabel = "enclave-audit-log/v1/tree-head";
inline constexpr size_t kTreeHeadPayloadSize = 8 + 8 + 32 + 64;

using PublicKeyBytes = std::array<uint8_t, 32>;
using SignatureBytes = std::array<uint8_t, 64>;

struct LogPublicKey {
  PublicKeyBytes key{};
  Hash log_id{};  // SHA-256(key)

  static LogPublicKey FromKey(const PublicKeyBytes& key);
  // JSON: {"format":"enclave-audit-log-public-key","version":1,"algorithm":"ed25519",
  //        "public_key":HEX,"log_id":HEX}; log_id must match the key.
  static Result<LogPublicKey> Load(const std::string& path);
  static Result<LogPublicKey> FromJson(const nlohmann::json& j, const std::string& where);
  nlohmann::json ToJson() const;
  Status Save(const std::string& path, bool overwrite) const;
};

// The log's Ed25519 signing key, in guarded memory. File: "EAUDSK01" || seed[32] ||
// public key[32], mode 0600; a file readable by group or others is refused.
class LogSigningKey {
 public:
  static Result<LogSigningKey> Generate();
  static Result<LogSigningKey> Load(const std::string& path);
  Status Save(const std::string& path) const;  // never overwrites

  const LogPublicKey& public_key() const { return public_; }
  Result<SignatureBytes> Sign(ByteSpan message) const;

 private:
  static Result<LogSigningKey> FromSeed(const crypto::SecretBytes& seed);
  crypto::SecretBytes secret_;  // libsodium's 64-byte form: seed || public key
  LogPublicKey public_;
};

struct TreeHead {
  uint64_t tree_size = 0;
  uint64_t timestamp_ms = 0;  // Unix time in milliseconds when the head was signed
  Hash root{};
};

struct SignedTreeHead {
  TreeHead head;
  SignatureBytes signature{};

  nlohmann::json ToJson() const;
  static Result<SignedTreeHead> FromJson(const nlohmann::json& j, const std::string& where);
};

std::vector<uint8_t> TreeHeadSignatureInput(const Hash& log_id, const TreeHead& head);
Result<SignedTreeHead> SignTreeHead(const LogSigningKey& key, const TreeHead& head);
// AuthFailed (naming size and timestamp) when the signature does not verify.
Status VerifyTreeHead(const LogPublicKey& key, const SignedTreeHead& sth);

// The tree-head record payload: u64le tree_size || u64le timestamp_ms || root || signature.
std::vector<uint8_t> EncodeTreeHead(const SignedTreeHead& sth);
Result<SignedTreeHead> ParseTreeHead(ByteSpan payload);

// "2024-05-01T12:00:00.123Z" for a Unix time in milliseconds.
std::string FormatTimestampMs(uint64_t ms);
uint64_t NowMs();

}  // namespace enclave::audit
