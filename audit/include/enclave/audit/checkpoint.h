// The log's tree heads as C2SP tlog-checkpoints in C2SP signed notes, and its public key as a
// note verifier key (docs/formats/audit-log.md, section 4.1), so that tools of the
// transparency ecosystem (Go's golang.org/x/mod/sumdb/note, witnesses) can check them.
//
//   checkpoint body = origin "\n" decimal tree size "\n" base64(root) "\n"
//   origin          = "enclave-audit-log/" || 64 lower-case hex digits of the log id
//   signed note     = body "\n" "— " origin " " base64(key hash[4] || Ed25519(body)[64]) "\n"
//   key hash        = first 4 bytes of SHA-256(origin || 0x0A || 0x01 || public key)
//   verifier key    = origin "+" 8 hex digits of the key hash "+" base64(0x01 || public key)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "enclave/audit/merkle.h"
#include "enclave/audit/note.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr std::string_view kCheckpointOriginPrefix = "enclave-audit-log/";

std::string CheckpointOrigin(const Hash& log_id);
std::string CheckpointBody(const Hash& log_id, uint64_t tree_size, const Hash& root);
std::array<uint8_t, 4> NoteKeyHash(std::string_view name, const PublicKeyBytes& key);
std::string NoteVerifierKey(const LogPublicKey& key);
// The name must be this key's origin: one verifier key names one log.
Result<LogPublicKey> ParseNoteVerifierKey(std::string_view vkey, const std::string& where);

// The signed note of a chained head (FailedPrecondition for a legacy head, which has no
// checkpoint signature).
Result<std::string> FormatCheckpointNote(const LogPublicKey& key, const SignedTreeHead& sth);

struct Checkpoint {
  uint64_t tree_size = 0;
  Hash root{};
};
// Opens a signed note from anyone: at most kMaxNoteBytes, text and signature lines as
// C2SP signed-note says (ParseNote), a valid signature by `key` required (lines of other keys are
// skipped, as the spec allows; a line with this key's name and hash that does not verify
// fails), then the body strictly: this log's origin, a canonical decimal size, canonical
// base64 of 32 bytes, no extension line. InvalidInput for malformed text, AuthFailed for a
// missing or bad signature, both naming `where`.
Result<Checkpoint> VerifyCheckpointNote(std::string_view note, const LogPublicKey& key, const std::string& where);

}  // namespace enclave::audit
