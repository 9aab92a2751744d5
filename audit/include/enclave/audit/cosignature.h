// Witness cosignatures, C2SP tlog-cosignature "cosignature/v1" (Ed25519, timestamped), and
// the witness's key (docs/formats/witness.md).
//
//   signed message  = "cosignature/v1\n" "time " decimal(T) "\n" || the checkpoint's note text
//   signature line  = "— " name " " base64(key id[4] || u64be T || Ed25519(message)[64]) "\n"
//   key id          = SHA-256(name || 0x0A || 0x04 || public key)[:4]
//   verifier key    = name "+" hex(key id) "+" base64(0x04 || public key)
//   key file        = "EAWITSK1" || seed[32] || public key[32] || name (1..255 bytes), mode 0600
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "enclave/audit/note.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::audit {

inline constexpr size_t kMaxWitnessNameBytes = 255;
inline constexpr uint64_t kMaxCosignatureTime = (uint64_t{1} << 63) - 1;

struct WitnessPublicKey {
  std::string name;
  PublicKeyBytes key{};
  KeyId key_id{};

  static WitnessPublicKey FromKey(std::string name, const PublicKeyBytes& key);
  // A cosignature/v1 verifier key (type 0x04).
  static Result<WitnessPublicKey> Parse(std::string_view vkey, const std::string& where);
  std::string VerifierKey() const;
};

std::string CosignatureMessage(uint64_t timestamp, std::string_view checkpoint_text);

class WitnessSigningKey {
 public:
  static Result<WitnessSigningKey> Generate(const std::string& name);
  static Result<WitnessSigningKey> Load(const std::string& path);
  Status Save(const std::string& path) const;  // never overwrites; mode 0600

  const WitnessPublicKey& public_key() const { return public_; }
  // The signature line over `checkpoint_text` (a note's text, final newline included).
  Result<std::string> Cosign(std::string_view checkpoint_text, uint64_t timestamp) const;

 private:
  static Result<WitnessSigningKey> FromSeed(std::span<const uint8_t> seed, const std::string& name);
  crypto::SecretBytes secret_;  // libsodium's 64-byte form: seed || public key
  WitnessPublicKey public_;
};

struct VerifiedCosignature {
  uint64_t timestamp = 0;
  std::string line;  // the signature line, as found
};
// Looks for `witness`'s line (its name and key id) among the note's signatures. NotFound when
// there is none; AuthFailed when one is there and does not verify (or is not 72 bytes, or its
// time exceeds 2^63 - 1). Lines of other keys are ignored.
Result<VerifiedCosignature> FindCosignature(const SignedNote& note, const WitnessPublicKey& witness);

}  // namespace enclave::audit
