#include "enclave/audit/note.h"

#include <sodium.h>

#include <cstring>

#include "enclave/common/bytes.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

constexpr std::string_view kSigPrefix = "\xe2\x80\x94 ";  // U+2014 EM DASH, then a space

// RFC 3629: no overlong form, no surrogate, nothing above U+10FFFF.
bool ValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) <= n) return false;
    for (size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
      return false;
    }
    p += n + 1;
  }
  return true;
}

}  // namespace

std::string Base64Encode(std::span<const uint8_t> bytes) {
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

Result<uint64_t> ParseCanonicalDecimal(std::string_view s) {
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

// The white space of Unicode beyond ASCII (Go's unicode.IsSpace, which Go's note package
// applies to key names): U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000.
static bool IsUnicodeSpace(uint32_t cp) {
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool ValidNoteKeyName(std::string_view name) {
  if (name.empty() || !ValidUtf8(name)) return false;
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      if (c <= 0x20 || c == 0x7f || c == '+') return false;
      ++i;
      continue;
    }
    const size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;  // a valid sequence (checked above)
    uint32_t cp = c & (0x7fu >> n);
    for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(name[i + k]) & 0x3fu);
    if (IsUnicodeSpace(cp)) return false;
    i += n;
  }
  return true;
}

KeyId NoteKeyId(std::string_view name, uint8_t type, std::span<const uint8_t> key) {
  std::vector<uint8_t> in(name.begin(), name.end());
  in.push_back('\n');
  in.push_back(type);
  in.insert(in.end(), key.begin(), key.end());
  const Hash h = crypto::Sha256(in);
  return {h[0], h[1], h[2], h[3]};
}

Result<SignedNote> ParseNote(std::string_view note, const std::string& where) {
  if (note.size() > kMaxNoteBytes) return InvalidInput(where + ": signed note longer than 16 KiB");
  if (!ValidUtf8(note)) return InvalidInput(where + ": the signed note is not valid UTF-8");
  for (unsigned char c : note) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return InvalidInput(where + ": control character in the note text");
  }
  // The text ends at the last blank line; what follows are signature lines.
  const size_t split = note.rfind("\n\n");
  if (split == std::string_view::npos) return InvalidInput(where + ": not a signed note (no blank line before signatures)");
  const std::string_view sigs = note.substr(split + 2);
  if (sigs.empty() || sigs.back() != '\n') return InvalidInput(where + ": signed note does not end in a signature line");
  SignedNote out;
  out.text = std::string(note.substr(0, split + 1));
  for (size_t pos = 0; pos < sigs.size();) {
    const size_t eol = sigs.find('\n', pos);
    const std::string_view line = sigs.substr(pos, eol - pos);
    pos = eol + 1;
    const std::string line_no = "signature line " + std::to_string(out.signatures.size() + 1);
    if (out.signatures.size() == kMaxNoteSignatures) return InvalidInput(where + ": more than 100 signature lines");
    if (line.substr(0, kSigPrefix.size()) != kSigPrefix) {
      return InvalidInput(where + ": " + line_no + " does not start with an em dash and a space");
    }
    const std::string_view rest = line.substr(kSigPrefix.size());
    const size_t sp = rest.find(' ');
    if (sp == std::string_view::npos) return InvalidInput(where + ": " + line_no + " has no signature after the name");
    const std::string_view name = rest.substr(0, sp);
    if (!ValidNoteKeyName(name)) return InvalidInput(where + ": " + line_no + ": bad key name");
    auto blob = Base64DecodeStrict(rest.substr(sp + 1));
    if (!blob.ok() || blob->size() < 5) return InvalidInput(where + ": " + line_no + ": signature is not base64 of >= 5 bytes");
    NoteSignature sig;
    sig.name = std::string(name);
    std::copy(blob->begin(), blob->begin() + 4, sig.key_id.begin());
    sig.signature.assign(blob->begin() + 4, blob->end());
    out.signatures.push_back(std::move(sig));
  }
  return out;
}

std::string FormatSignatureLine(const NoteSignature& sig) {
  std::vector<uint8_t> blob(sig.key_id.begin(), sig.key_id.end());
  blob.insert(blob.end(), sig.signature.begin(), sig.signature.end());
  return std::string(kSigPrefix) + sig.name + " " + Base64Encode(blob) + "\n";
}

Result<VerifierKey> ParseVerifierKey(std::string_view vkey, uint8_t type, size_t key_bytes, const std::string& where) {
  const size_t p1 = vkey.find('+');
  const size_t p2 = p1 == std::string_view::npos ? p1 : vkey.find('+', p1 + 1);
  if (p2 == std::string_view::npos) return InvalidInput(where + ": not a note verifier key (name+hash+key)");
  const std::string_view name = vkey.substr(0, p1), hash_hex = vkey.substr(p1 + 1, p2 - p1 - 1),
                         key_b64 = vkey.substr(p2 + 1);
  if (!ValidNoteKeyName(name)) return InvalidInput(where + ": verifier key name is empty or has a space or '+'");
  auto hash = HexDecode(hash_hex);
  if (hash_hex.size() != 8 || !hash.ok() || HexEncode(*hash) != hash_hex) {
    return InvalidInput(where + ": verifier key hash must be 8 lower-case hex digits");
  }
  auto raw = Base64DecodeStrict(key_b64);
  if (!raw.ok()) return InvalidInput(where + ": verifier key: " + raw.status().message());
  if (raw->empty() || (*raw)[0] != type) {
    return Unsupported(where + ": verifier key type is not " + std::to_string(type) +
                       (type == kNoteAlgEd25519 ? " (Ed25519)" : type == kNoteAlgCosignatureV1 ? " (cosignature/v1)" : ""));
  }
  if (raw->size() != 1 + key_bytes) {
    return InvalidInput(where + ": verifier key is not " + std::to_string(key_bytes) + " bytes");
  }
  VerifierKey k;
  k.name = std::string(name);
  k.type = type;
  k.key.assign(raw->begin() + 1, raw->end());
  k.key_id = NoteKeyId(name, type, k.key);
  if (std::memcmp(hash->data(), k.key_id.data(), 4) != 0) {
    return InvalidInput(where + ": verifier key hash does not match its name and key");
  }
  return k;
}

std::string FormatVerifierKey(const VerifierKey& key) {
  std::vector<uint8_t> type_key{key.type};
  type_key.insert(type_key.end(), key.key.begin(), key.key.end());
  return key.name + "+" + HexEncode(NoteKeyId(key.name, key.type, key.key)) + "+" + Base64Encode(type_key);
}

Result<CheckpointText> ParseCheckpointText(std::string_view text, const std::string& where) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return InvalidInput(where + ": checkpoint text does not end in a newline");
    lines.push_back(text.substr(0, eol));
    text.remove_prefix(eol + 1);
  }
  if (lines.size() < 3) return InvalidInput(where + ": checkpoint body has fewer than 3 lines");
  CheckpointText cp;
  if (lines[0].empty()) return InvalidInput(where + ": checkpoint origin line is empty");
  cp.origin = std::string(lines[0]);
  auto size = ParseCanonicalDecimal(lines[1]);
  if (!size.ok()) return InvalidInput(where + ": checkpoint line 2 (tree size): " + size.status().message());
  cp.tree_size = *size;
  auto root = Base64DecodeStrict(lines[2]);
  if (!root.ok() || root->size() != 32) return InvalidInput(where + ": checkpoint line 3 is not base64 of a 32-byte root");
  std::copy(root->begin(), root->end(), cp.root.begin());
  for (size_t i = 3; i < lines.size(); ++i) {
    if (lines[i].empty()) return InvalidInput(where + ": checkpoint extension line " + std::to_string(i + 1) + " is empty");
    cp.extensions.emplace_back(lines[i]);
  }
  return cp;
}

}  // namespace enclave::audit
