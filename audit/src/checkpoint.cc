#include "enclave/audit/checkpoint.h"

#include <sodium.h>

#include <cstring>

#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

constexpr std::string_view kSigPrefix = "\xe2\x80\x94 ";  // U+2014 EM DASH, then a space
constexpr uint8_t kAlgEd25519 = 0x01;

// A note key name: not empty, no whitespace or '+' (C2SP signed-note).
bool ValidKeyName(std::string_view name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    if (c <= 0x20 || c == 0x7f || c == '+') return false;
  }
  return true;
}

Result<uint64_t> CanonicalDecimal(std::string_view s) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return InvalidInput("not a canonical decimal");
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return InvalidInput("not a canonical decimal");
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return InvalidInput("decimal out of range");
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

std::string Base64Encode(ByteSpan bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes.data(), bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

Result<std::vector<uint8_t>> Base64DecodeStrict(std::string_view text) {
  std::vector<uint8_t> out(text.size() / 4 * 3 + 3);
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &len, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return InvalidInput("not standard padded base64");
  }
  out.resize(len);
  if (Base64Encode(out) != text) return InvalidInput("not canonical base64");
  return out;
}

std::string CheckpointOrigin(const Hash& log_id) { return std::string(kCheckpointOriginPrefix) + HexEncode(log_id); }

std::string CheckpointBody(const Hash& log_id, uint64_t tree_size, const Hash& root) {
  return CheckpointOrigin(log_id) + "\n" + std::to_string(tree_size) + "\n" + Base64Encode(root) + "\n";
}

std::array<uint8_t, 4> NoteKeyHash(std::string_view name, const PublicKeyBytes& key) {
  std::vector<uint8_t> in(name.begin(), name.end());
  in.push_back('\n');
  in.push_back(kAlgEd25519);
  in.insert(in.end(), key.begin(), key.end());
  const Hash h = crypto::Sha256(in);
  return {h[0], h[1], h[2], h[3]};
}

std::string NoteVerifierKey(const LogPublicKey& key) {
  const std::string name = CheckpointOrigin(key.log_id);
  std::vector<uint8_t> alg_key{kAlgEd25519};
  alg_key.insert(alg_key.end(), key.key.begin(), key.key.end());
  return name + "+" + HexEncode(NoteKeyHash(name, key.key)) + "+" + Base64Encode(alg_key);
}

Result<LogPublicKey> ParseNoteVerifierKey(std::string_view vkey, const std::string& where) {
  const size_t p1 = vkey.find('+');
  const size_t p2 = p1 == std::string_view::npos ? p1 : vkey.find('+', p1 + 1);
  if (p2 == std::string_view::npos) return InvalidInput(where + ": not a note verifier key (name+hash+key)");
  const std::string_view name = vkey.substr(0, p1), hash_hex = vkey.substr(p1 + 1, p2 - p1 - 1),
                         key_b64 = vkey.substr(p2 + 1);
  if (!ValidKeyName(name)) return InvalidInput(where + ": verifier key name is empty or has a space or '+'");
  auto hash = HexDecode(hash_hex);
  if (hash_hex.size() != 8 || !hash.ok() || HexEncode(*hash) != hash_hex) {
    return InvalidInput(where + ": verifier key hash must be 8 lower-case hex digits");
  }
  auto raw = Base64DecodeStrict(key_b64);
  if (!raw.ok()) return InvalidInput(where + ": verifier key: " + raw.status().message());
  if (raw->empty() || (*raw)[0] != kAlgEd25519) return Unsupported(where + ": verifier key algorithm is not Ed25519 (1)");
  if (raw->size() != 33) return InvalidInput(where + ": Ed25519 verifier key is not 32 bytes");
  PublicKeyBytes pk{};
  std::copy(raw->begin() + 1, raw->end(), pk.begin());
  LogPublicKey key = LogPublicKey::FromKey(pk);
  if (std::memcmp(hash->data(), NoteKeyHash(name, pk).data(), 4) != 0) {
    return InvalidInput(where + ": verifier key hash does not match its name and key");
  }
  if (name != CheckpointOrigin(key.log_id)) {
    return InvalidInput(where + ": verifier key name '" + std::string(name) + "' is not this key's log origin " +
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
  std::vector<uint8_t> sig;
  const auto kh = NoteKeyHash(origin, key.key);
  sig.insert(sig.end(), kh.begin(), kh.end());
  sig.insert(sig.end(), sth.checkpoint_signature.begin(), sth.checkpoint_signature.end());
  return CheckpointBody(key.log_id, sth.head.tree_size, sth.head.root) + "\n" + std::string(kSigPrefix) + origin +
         " " + Base64Encode(sig) + "\n";
}

Result<Checkpoint> VerifyCheckpointNote(std::string_view note, const LogPublicKey& key, const std::string& where) {
  if (note.size() > kMaxNoteBytes) return InvalidInput(where + ": signed note longer than 16 KiB");
  // The text ends at the last blank line; what follows are signature lines.
  const size_t split = note.rfind("\n\n");
  if (split == std::string_view::npos) return InvalidInput(where + ": not a signed note (no blank line before signatures)");
  const std::string_view text = note.substr(0, split + 1), sigs = note.substr(split + 2);
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return InvalidInput(where + ": control character in the note text");
  }
  if (sigs.empty() || sigs.back() != '\n') return InvalidInput(where + ": signed note does not end in a signature line");
  const std::string origin = CheckpointOrigin(key.log_id);
  const auto our_hash = NoteKeyHash(origin, key.key);
  bool verified = false;
  size_t count = 0;
  for (size_t pos = 0; pos < sigs.size();) {
    const size_t eol = sigs.find('\n', pos);
    const std::string_view line = sigs.substr(pos, eol - pos);
    pos = eol + 1;
    const std::string line_no = "signature line " + std::to_string(++count);
    if (count > kMaxNoteSignatures) return InvalidInput(where + ": more than 100 signature lines");
    if (line.substr(0, kSigPrefix.size()) != kSigPrefix) {
      return InvalidInput(where + ": " + line_no + " does not start with an em dash and a space");
    }
    const std::string_view rest = line.substr(kSigPrefix.size());
    const size_t sp = rest.find(' ');
    if (sp == std::string_view::npos) return InvalidInput(where + ": " + line_no + " has no signature after the name");
    const std::string_view name = rest.substr(0, sp);
    if (!ValidKeyName(name)) return InvalidInput(where + ": " + line_no + ": bad key name");
    auto blob = Base64DecodeStrict(rest.substr(sp + 1));
    if (!blob.ok() || blob->size() < 5) return InvalidInput(where + ": " + line_no + ": signature is not base64 of >= 5 bytes");
    if (name != origin || std::memcmp(blob->data(), our_hash.data(), 4) != 0) continue;  // another signer
    if (blob->size() != 68 ||
        crypto_sign_verify_detached(blob->data() + 4, reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                                    key.key.data()) != 0) {
      return AuthFailed(where + ": " + line_no + ": the log key's note signature does not verify");
    }
    verified = true;
  }
  if (!verified) return AuthFailed(where + ": the note has no signature by the log key " + origin);
  // The body: exactly origin, size, root.
  std::string_view lines[3];
  std::string_view t = text;
  for (int i = 0; i < 3; ++i) {
    const size_t eol = t.find('\n');
    if (eol == std::string_view::npos) return InvalidInput(where + ": checkpoint body has fewer than 3 lines");
    lines[i] = t.substr(0, eol);
    t.remove_prefix(eol + 1);
  }
  if (!t.empty()) return InvalidInput(where + ": checkpoint has extension lines (this log writes none)");
  if (lines[0] != origin) return InvalidInput(where + ": checkpoint origin is not " + origin);
  Checkpoint cp;
  auto size = CanonicalDecimal(lines[1]);
  if (!size.ok()) return InvalidInput(where + ": checkpoint line 2 (tree size): " + size.status().message());
  cp.tree_size = *size;
  auto root = Base64DecodeStrict(lines[2]);
  if (!root.ok() || root->size() != 32) return InvalidInput(where + ": checkpoint line 3 is not base64 of a 32-byte root");
  std::copy(root->begin(), root->end(), cp.root.begin());
  return cp;
}

}  // namespace enclave::audit
