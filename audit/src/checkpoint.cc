#include "enclave/audit/checkpoint.h"

#include <sodium.h>

#include <cstring>

namespace enclave::audit {

std::string CheckpointOrigin(const Hash& log_id) { return std::string(kCheckpointOriginPrefix) + HexEncode(log_id); }

std::string CheckpointBody(const Hash& log_id, uint64_t tree_size, const Hash& root) {
  return CheckpointOrigin(log_id) + "\n" + std::to_string(tree_size) + "\n" + Base64Encode(root) + "\n";
}

std::array<uint8_t, 4> NoteKeyHash(std::string_view name, const PublicKeyBytes& key) {
  return NoteKeyId(name, kNoteAlgEd25519, key);
}

std::string NoteVerifierKey(const LogPublicKey& key) {
  return FormatVerifierKey(
      VerifierKey{CheckpointOrigin(key.log_id), kNoteAlgEd25519, std::vector<uint8_t>(key.key.begin(), key.key.end()), {}});
}

Result<LogPublicKey> ParseNoteVerifierKey(std::string_view vkey, const std::string& where) {
  ASSIGN_OR_RETURN(VerifierKey v, ParseVerifierKey(vkey, kNoteAlgEd25519, 32, where));
  PublicKeyBytes pk{};
  std::copy(v.key.begin(), v.key.end(), pk.begin());
  LogPublicKey key = LogPublicKey::FromKey(pk);
  if (v.name != CheckpointOrigin(key.log_id)) {
    return InvalidInput(where + ": verifier key name '" + v.name + "' is not this key's log origin " +
                        CheckpointOrigin(key.log_id));
  }
  return key;
}

Result<std::string> FormatCheckpointNote(const LogPublicKey& key, const SignedTreeHead& sth) {
  if (!sth.chained) {
    return FailedPrecondition("the tree head of size " + std::to_string(sth.head.tree_size) +
                              " was written before checkpoints (a legacy head): it has no checkpoint signature");
  }
  const std::string origin = CheckpointOrigin(key.log_id);
  NoteSignature sig{origin, NoteKeyHash(origin, key.key),
                    std::vector<uint8_t>(sth.checkpoint_signature.begin(), sth.checkpoint_signature.end())};
  return CheckpointBody(key.log_id, sth.head.tree_size, sth.head.root) + "\n" + FormatSignatureLine(sig);
}

Result<Checkpoint> VerifyCheckpointNote(std::string_view note_text, const LogPublicKey& key, const std::string& where) {
  ASSIGN_OR_RETURN(SignedNote note, ParseNote(note_text, where));
  const std::string origin = CheckpointOrigin(key.log_id);
  const auto our_hash = NoteKeyHash(origin, key.key);
  bool verified = false;
  for (size_t i = 0; i < note.signatures.size(); ++i) {
    const NoteSignature& s = note.signatures[i];
    if (s.name != origin || s.key_id != our_hash) continue;  // another signer (a witness)
    if (s.signature.size() != 64 ||
        crypto_sign_verify_detached(s.signature.data(), reinterpret_cast<const uint8_t*>(note.text.data()),
                                    note.text.size(), key.key.data()) != 0) {
      return AuthFailed(where + ": signature line " + std::to_string(i + 1) +
                        ": the log key's note signature does not verify");
    }
    verified = true;
  }
  if (!verified) return AuthFailed(where + ": the note has no signature by the log key " + origin);
  // The body: exactly origin, size, root.
  ASSIGN_OR_RETURN(CheckpointText text, ParseCheckpointText(note.text, where));
  if (!text.extensions.empty()) return InvalidInput(where + ": checkpoint has extension lines (this log writes none)");
  if (text.origin != origin) return InvalidInput(where + ": checkpoint origin is not " + origin);
  return Checkpoint{text.tree_size, text.root};
}

}  // namespace enclave::audit
