// The log key pair and signed tree heads (docs/formats/audit-log.md, section 4).
//
// A signed tree head (STH) commits to the first `tree_size` entries of one log. Two kinds:
//
// chained (record type 3, every head the writer signs now): two Ed25519 signatures,
//   signature            over "enclave-audit-log/v2/tree-head" || 0x00 || log_id
//                             || u64le head_index || previous[32]
//                             || u64le tree_size || u64le timestamp_ms || root
//   checkpoint_signature over the C2SP tlog-checkpoint body of (tree_size, root)
//                             (checkpoint.h), so every head is also a signed note.
//   head_index counts the tree-head records before this one and `previous` is SHA-256 of
//   the payload of the one just before (32 zero bytes for head 0): deleting, duplicating or
//   reordering any head breaks the chain.
//
// legacy (record type 2, logs written before the chain): one signature, over
//   "enclave-audit-log/v1/tree-head" || 0x00 || log_id || u64le tree_size
//   || u64le timestamp_ms || root.
//
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
inline constexpr std::string_view kChainedTreeHeadLabel = "enclave-audit-log/v2/tree-head";
inline constexpr size_t kTreeHeadPayloadSize = 8 + 8 + 32 + 64;                       // legacy
inline constexpr size_t kChainedTreeHeadPayloadSize = 8 + 8 + 8 + 32 + 32 + 64 + 64;  // 216

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
  // Chained heads only (see above); a legacy head has chained == false.
  bool chained = false;
  uint64_t head_index = 0;
  Hash previous{};
  SignatureBytes checkpoint_signature{};

  // Legacy: {"tree_size","timestamp_ms","time","root","signature"}; a chained head adds
  // "head_index", "previous" and "checkpoint_signature" (hex). FromJson reads either.
  nlohmann::json ToJson() const;
  static Result<SignedTreeHead> FromJson(const nlohmann::json& j, const std::string& where);
};

std::vector<uint8_t> TreeHeadSignatureInput(const Hash& log_id, const TreeHead& head);
std::vector<uint8_t> ChainedTreeHeadSignatureInput(const Hash& log_id, uint64_t head_index, const Hash& previous,
                                                   const TreeHead& head);
// A legacy head (for tests that build the logs of older writers; the writer signs chained heads).
Result<SignedTreeHead> SignTreeHead(const LogSigningKey& key, const TreeHead& head);
// A chained head, with both signatures.
Result<SignedTreeHead> SignChainedTreeHead(const LogSigningKey& key, const TreeHead& head, uint64_t head_index,
                                           const Hash& previous);
// Every signature the head carries; AuthFailed (naming size and timestamp) when one does not verify.
Status VerifyTreeHead(const LogPublicKey& key, const SignedTreeHead& sth);

// The tree-head record payload. Legacy (112 bytes, record type 2):
//   u64le tree_size || u64le timestamp_ms || root || signature
// Chained (216 bytes, record type 3):
//   u64le tree_size || u64le timestamp_ms || u64le head_index || previous || root
//   || signature || checkpoint_signature
std::vector<uint8_t> EncodeTreeHead(const SignedTreeHead& sth);
// Either kind, told apart by the length.
Result<SignedTreeHead> ParseTreeHead(ByteSpan payload);
// What the next chained head names as `previous`: SHA-256 of this head's record payload.
Hash TreeHeadRecordHash(const SignedTreeHead& sth);

// "2024-05-01T12:00:00.123Z" for a Unix time in milliseconds.
std::string FormatTimestampMs(uint64_t ms);
uint64_t NowMs();

}  // namespace enclave::audit
