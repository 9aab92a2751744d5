// C2SP signed notes, verifier keys and checkpoint texts, for any signer and any log (not
// only this project's): the log's checkpoints (checkpoint.h), witness cosignatures
// (cosignature.h) and the witness protocol (witness.h) share these readers.
//
//   note           = text "\n" signature-line+         (text ends in "\n"; split at the last blank line)
//   signature line = "— " key-name " " base64(key id[4] || signature) "\n"
//   key id         = SHA-256(key-name || 0x0A || type || public key)[:4]
//   verifier key   = key-name "+" 8 hex digits of the key id "+" base64(type || public key)
//   checkpoint     = origin "\n" decimal size "\n" base64(root[32]) "\n" extension-line*
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/merkle.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr size_t kMaxNoteBytes = 16 * 1024;  // a checkpoint with many cosignatures fits
inline constexpr size_t kMaxNoteSignatures = 100;
inline constexpr uint8_t kNoteAlgEd25519 = 0x01;      // C2SP signed-note: Ed25519 over the text
inline constexpr uint8_t kNoteAlgCosignatureV1 = 0x04;  // C2SP tlog-cosignature: timestamped Ed25519

using KeyId = std::array<uint8_t, 4>;

// C2SP signed-note key names: non-empty UTF-8, no space (also none of Unicode's), no
// control character, no '+'.
bool ValidNoteKeyName(std::string_view name);
KeyId NoteKeyId(std::string_view name, uint8_t type, std::span<const uint8_t> key);

struct NoteSignature {
  std::string name;
  KeyId key_id{};
  std::vector<uint8_t> signature;  // the bytes after the key id
};

struct SignedNote {
  std::string text;  // including its final "\n"
  std::vector<NoteSignature> signatures;
};

// Strict: at most kMaxNoteBytes, valid UTF-8 with no control character but "\n", a text
// ending in "\n", then 1..kMaxNoteSignatures signature lines, each with a valid key name
// and canonical base64 of at least 5 bytes. InvalidInput naming `where`.
Result<SignedNote> ParseNote(std::string_view note, const std::string& where);
std::string FormatSignatureLine(const NoteSignature& sig);

struct VerifierKey {
  std::string name;
  uint8_t type = 0;
  std::vector<uint8_t> key;  // the public key bytes after the type byte
  KeyId key_id{};
};
// Strict: a valid name, 8 lower-case hex digits, canonical base64; then the type must be
// `type` (else Unsupported), the key `key_bytes` long, and the key id that of name, type and
// key (else InvalidInput).
Result<VerifierKey> ParseVerifierKey(std::string_view vkey, uint8_t type, size_t key_bytes, const std::string& where);
std::string FormatVerifierKey(const VerifierKey& key);

struct CheckpointText {
  std::string origin;
  uint64_t tree_size = 0;
  Hash root{};
  std::vector<std::string> extensions;  // non-empty lines after the root
};
// C2SP tlog-checkpoint: a non-empty origin, a canonical decimal size, canonical base64 of
// 32 bytes, then zero or more non-empty extension lines.
Result<CheckpointText> ParseCheckpointText(std::string_view text, const std::string& where);

// A decimal with no leading zero (except "0") that fits in 64 bits.
Result<uint64_t> ParseCanonicalDecimal(std::string_view s);

// Standard base64 (RFC 4648 section 4, padded); decoding refuses anything that does not
// re-encode to the same text.
std::string Base64Encode(std::span<const uint8_t> bytes);
Result<std::vector<uint8_t>> Base64DecodeStrict(std::string_view text);

}  // namespace enclave::audit
