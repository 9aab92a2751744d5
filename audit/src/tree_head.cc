#include "enclave/audit/tree_head.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "enclave/audit/checkpoint.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

constexpr char kSecretMagic[8] = {'E', 'A', 'U', 'D', 'S', 'K', '0', '1'};
constexpr size_t kSecretFileSize = 8 + 32 + 32;

Status WriteAllFd(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

Result<std::array<uint8_t, 32>> Hex32(const nlohmann::json& j, const char* field, const std::string& where) {
  if (!j.contains(field) || !j[field].is_string()) {
    return InvalidInput(where + ": field '" + field + "' missing or not a string");
  }
  const std::string& text = j[field].get_ref<const std::string&>();
  auto bytes = HexDecode(text);
  if (!bytes.ok() || bytes->size() != 32 || HexEncode(*bytes) != text) {
    return InvalidInput(where + ": field '" + field + "' must be 64 lower-case hex digits");
  }
  std::array<uint8_t, 32> out{};
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return out;
}

Result<SignatureBytes> Hex64(const nlohmann::json& j, const char* field, const std::string& where) {
  if (!j.contains(field) || !j[field].is_string()) {
    return InvalidInput(where + ": tree head field '" + field + "' missing or not a string");
  }
  const std::string& text = j[field].get_ref<const std::string&>();
  auto bytes = HexDecode(text);
  if (!bytes.ok() || bytes->size() != 64 || HexEncode(*bytes) != text) {
    return InvalidInput(where + ": tree head field '" + field + "' must be 128 lower-case hex digits");
  }
  SignatureBytes out{};
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return out;
}

// The string member `key` of `j`, or "" when j is not an object, or the member is absent or
// not a string. Never throws (json::value throws on a member of another type).
std::string StringMember(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::string();
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

LogPublicKey LogPublicKey::FromKey(const PublicKeyBytes& key) {
  LogPublicKey k;
  k.key = key;
  k.log_id = crypto::Sha256(key);
  return k;
}

nlohmann::json LogPublicKey::ToJson() const {
  return {{"format", "enclave-audit-log-public-key"},
          {"version", 1},
          {"algorithm", "ed25519"},
          {"public_key", HexEncode(key)},
          {"log_id", HexEncode(log_id)}};
}

Result<LogPublicKey> LogPublicKey::FromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || StringMember(j, "format") != "enclave-audit-log-public-key") {
    return InvalidInput(where + ": not an enclave audit log public key (format field)");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != 1)
    return Unsupported(where + ": unsupported key file version");
  if (!j.contains("algorithm") || !j["algorithm"].is_string()) {
    return InvalidInput(where + ": field 'algorithm' missing or not a string");
  }
  if (StringMember(j, "algorithm") != "ed25519") return Unsupported(where + ": algorithm must be ed25519");
  ASSIGN_OR_RETURN(PublicKeyBytes pk, Hex32(j, "public_key", where));
  ASSIGN_OR_RETURN(Hash id, Hex32(j, "log_id", where));
  LogPublicKey k = FromKey(pk);
  if (k.log_id != id) return InvalidInput(where + ": log_id is not SHA-256 of public_key");
  return k;
}

Result<LogPublicKey> LogPublicKey::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, 64 * 1024));
  // A file that is not JSON may hold the key as a note verifier key (one line).
  if (!bytes.empty() && bytes[0] != '{') {
    std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (text.back() == '\n') text.remove_suffix(1);
    return ParseNoteVerifierKey(text, path);
  }
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) return InvalidInput(path + ": not JSON");
  return FromJson(j, path);
}

Status LogPublicKey::Save(const std::string& path, bool overwrite) const {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, overwrite));
  std::string text = ToJson().dump(2) + "\n";
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

Result<LogSigningKey> LogSigningKey::FromSeed(const crypto::SecretBytes& seed) {
  if (seed.size() != crypto_sign_SEEDBYTES) return Internal("Ed25519 seed must be 32 bytes");
  LogSigningKey k;
  ASSIGN_OR_RETURN(k.secret_, crypto::SecretBytes::Create(crypto_sign_SECRETKEYBYTES));
  PublicKeyBytes pk{};
  if (crypto_sign_seed_keypair(pk.data(), k.secret_.ExposeSecretMutable().data(), seed.ExposeSecret().data()) != 0) {
    return Internal("crypto_sign_seed_keypair failed");
  }
  k.public_ = LogPublicKey::FromKey(pk);
  return k;
}

Result<LogSigningKey> LogSigningKey::Generate() {
  ASSIGN_OR_RETURN(crypto::SecretBytes seed, crypto::SecretBytes::Random(crypto_sign_SEEDBYTES));
  return FromSeed(seed);
}

Status LogSigningKey::Save(const std::string& path) const {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("creating signing key " + path, errno);
  auto sk = secret_.ExposeSecret();
  Status s = WriteAllFd(fd, reinterpret_cast<const uint8_t*>(kSecretMagic), sizeof kSecretMagic, path);
  if (s.ok()) s = WriteAllFd(fd, sk.data(), crypto_sign_SEEDBYTES, path);  // the seed half
  if (s.ok()) s = WriteAllFd(fd, public_.key.data(), public_.key.size(), path);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus("fsync " + path, errno);
  ::close(fd);
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

Result<LogSigningKey> LogSigningKey::Load(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening signing key " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return PermissionDenied(path + ": signing key is readable by group or others (mode " +
                            std::to_string(st.st_mode & 0777) + " decimal); chmod 600 it");
  }
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kSecretFileSize)) {
    ::close(fd);
    return InvalidInput(path + ": not an audit log signing key (expected " + std::to_string(kSecretFileSize) +
                        " bytes)");
  }
  auto buf = crypto::SecretBytes::Create(kSecretFileSize);
  if (!buf.ok()) {
    ::close(fd);
    return buf.status();
  }
  auto b = buf->ExposeSecretMutable();
  size_t got = 0;
  while (got < b.size()) {
    ssize_t n = ::read(fd, b.data() + got, b.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return n == 0 ? InvalidInput(path + ": short read") : ErrnoStatus("reading " + path, err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (std::memcmp(b.data(), kSecretMagic, sizeof kSecretMagic) != 0) {
    return InvalidInput(path + ": not an audit log signing key (bad magic)");
  }
  ASSIGN_OR_RETURN(crypto::SecretBytes seed, crypto::SecretBytes::CopyFrom(b.subspan(8, 32)));
  ASSIGN_OR_RETURN(LogSigningKey k, FromSeed(seed));
  if (!std::equal(k.public_.key.begin(), k.public_.key.end(), b.begin() + 40)) {
    return InvalidInput(path + ": stored public key does not match the seed (corrupt key file)");
  }
  return k;
}

Result<SignatureBytes> LogSigningKey::Sign(ByteSpan message) const {
  if (secret_.size() != crypto_sign_SECRETKEYBYTES) return FailedPrecondition("signing with an empty log key");
  SignatureBytes sig{};
  if (crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), secret_.ExposeSecret().data()) != 0) {
    return Internal("crypto_sign_detached failed");
  }
  return sig;
}

std::vector<uint8_t> TreeHeadSignatureInput(const Hash& log_id, const TreeHead& head) {
  ByteWriter w;
  w.Bytes(kTreeHeadLabel);
  w.U8(0);
  w.Bytes(log_id);
  w.U64(head.tree_size);
  w.U64(head.timestamp_ms);
  w.Bytes(head.root);
  return std::move(w.bytes());
}

std::vector<uint8_t> ChainedTreeHeadSignatureInput(const Hash& log_id, uint64_t head_index, const Hash& previous,
                                                   const TreeHead& head) {
  ByteWriter w;
  w.Bytes(kChainedTreeHeadLabel);
  w.U8(0);
  w.Bytes(log_id);
  w.U64(head_index);
  w.Bytes(previous);
  w.U64(head.tree_size);
  w.U64(head.timestamp_ms);
  w.Bytes(head.root);
  return std::move(w.bytes());
}

Result<SignedTreeHead> SignTreeHead(const LogSigningKey& key, const TreeHead& head) {
  SignedTreeHead sth;
  sth.head = head;
  ASSIGN_OR_RETURN(sth.signature, key.Sign(TreeHeadSignatureInput(key.public_key().log_id, head)));
  return sth;
}

Result<SignedTreeHead> SignChainedTreeHead(const LogSigningKey& key, const TreeHead& head, uint64_t head_index,
                                           const Hash& previous) {
  SignedTreeHead sth;
  sth.head = head;
  sth.chained = true;
  sth.head_index = head_index;
  sth.previous = previous;
  const Hash& id = key.public_key().log_id;
  ASSIGN_OR_RETURN(sth.signature, key.Sign(ChainedTreeHeadSignatureInput(id, head_index, previous, head)));
  ASSIGN_OR_RETURN(sth.checkpoint_signature, key.Sign(AsBytes(CheckpointBody(id, head.tree_size, head.root))));
  return sth;
}

Status VerifyTreeHead(const LogPublicKey& key, const SignedTreeHead& sth) {
  if (Status s = crypto::InitCrypto(); !s.ok()) return s;
  auto fail = [&](const char* which) {
    return AuthFailed("tree head of size " + std::to_string(sth.head.tree_size) + " signed " +
                      FormatTimestampMs(sth.head.timestamp_ms) + ": " + which +
                      " does not verify under log key " + HexEncode(key.log_id).substr(0, 16));
  };
  const std::vector<uint8_t> msg = sth.chained
                                       ? ChainedTreeHeadSignatureInput(key.log_id, sth.head_index, sth.previous, sth.head)
                                       : TreeHeadSignatureInput(key.log_id, sth.head);
  if (crypto_sign_verify_detached(sth.signature.data(), msg.data(), msg.size(), key.key.data()) != 0) {
    return fail("Ed25519 signature");
  }
  if (sth.chained) {
    const std::string body = CheckpointBody(key.log_id, sth.head.tree_size, sth.head.root);
    if (crypto_sign_verify_detached(sth.checkpoint_signature.data(), reinterpret_cast<const uint8_t*>(body.data()),
                                    body.size(), key.key.data()) != 0) {
      return fail("Ed25519 checkpoint (signed note) signature");
    }
  }
  return OkStatus();
}

std::vector<uint8_t> EncodeTreeHead(const SignedTreeHead& sth) {
  ByteWriter w;
  w.U64(sth.head.tree_size);
  w.U64(sth.head.timestamp_ms);
  if (sth.chained) {
    w.U64(sth.head_index);
    w.Bytes(sth.previous);
  }
  w.Bytes(sth.head.root);
  w.Bytes(sth.signature);
  if (sth.chained) w.Bytes(sth.checkpoint_signature);
  return std::move(w.bytes());
}

Result<SignedTreeHead> ParseTreeHead(ByteSpan payload) {
  if (payload.size() != kTreeHeadPayloadSize && payload.size() != kChainedTreeHeadPayloadSize) {
    return InvalidInput("tree head payload is " + std::to_string(payload.size()) + " bytes, expected " +
                        std::to_string(kTreeHeadPayloadSize) + " (legacy) or " +
                        std::to_string(kChainedTreeHeadPayloadSize) + " (chained)");
  }
  ByteReader r(payload);
  SignedTreeHead sth;
  sth.chained = payload.size() == kChainedTreeHeadPayloadSize;
  ByteSpan root, sig, prev, note_sig;
  RETURN_IF_ERROR(r.U64("tree_size", &sth.head.tree_size));
  RETURN_IF_ERROR(r.U64("timestamp_ms", &sth.head.timestamp_ms));
  if (sth.chained) {
    RETURN_IF_ERROR(r.U64("head_index", &sth.head_index));
    RETURN_IF_ERROR(r.Bytes("previous", 32, &prev));
    std::copy(prev.begin(), prev.end(), sth.previous.begin());
  }
  RETURN_IF_ERROR(r.Bytes("root", 32, &root));
  RETURN_IF_ERROR(r.Bytes("signature", 64, &sig));
  std::copy(root.begin(), root.end(), sth.head.root.begin());
  std::copy(sig.begin(), sig.end(), sth.signature.begin());
  if (sth.chained) {
    RETURN_IF_ERROR(r.Bytes("checkpoint_signature", 64, &note_sig));
    std::copy(note_sig.begin(), note_sig.end(), sth.checkpoint_signature.begin());
  }
  return sth;
}

Hash TreeHeadRecordHash(const SignedTreeHead& sth) { return crypto::Sha256(EncodeTreeHead(sth)); }

nlohmann::json SignedTreeHead::ToJson() const {
  nlohmann::json j = {{"tree_size", head.tree_size},
                      {"timestamp_ms", head.timestamp_ms},
                      {"time", FormatTimestampMs(head.timestamp_ms)},
                      {"root", HexEncode(head.root)},
                      {"signature", HexEncode(signature)}};
  if (chained) {
    j["head_index"] = head_index;
    j["previous"] = HexEncode(previous);
    j["checkpoint_signature"] = HexEncode(checkpoint_signature);
  }
  return j;
}

Result<SignedTreeHead> SignedTreeHead::FromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return InvalidInput(where + ": tree head must be a JSON object");
  SignedTreeHead sth;
  if (!j.contains("tree_size") || !j["tree_size"].is_number_unsigned()) {
    return InvalidInput(where + ": tree head field 'tree_size' missing or not a non-negative integer");
  }
  if (!j.contains("timestamp_ms") || !j["timestamp_ms"].is_number_unsigned()) {
    return InvalidInput(where + ": tree head field 'timestamp_ms' missing or not a non-negative integer");
  }
  sth.head.tree_size = j["tree_size"].get<uint64_t>();
  sth.head.timestamp_ms = j["timestamp_ms"].get<uint64_t>();
  ASSIGN_OR_RETURN(sth.head.root, Hex32(j, "root", where));
  if (!j.contains("signature") || !j["signature"].is_string()) {
    return InvalidInput(where + ": tree head field 'signature' missing");
  }
  ASSIGN_OR_RETURN(sth.signature, Hex64(j, "signature", where));
  // A chained head has all three members, a legacy head none of them.
  const int chain_members = j.contains("head_index") + j.contains("previous") + j.contains("checkpoint_signature");
  if (chain_members != 0 && chain_members != 3) {
    return InvalidInput(where + ": tree head has some of 'head_index', 'previous', 'checkpoint_signature' but not all");
  }
  if (chain_members == 3) {
    sth.chained = true;
    if (!j["head_index"].is_number_unsigned()) {
      return InvalidInput(where + ": tree head field 'head_index' is not a non-negative integer");
    }
    sth.head_index = j["head_index"].get<uint64_t>();
    ASSIGN_OR_RETURN(sth.previous, Hex32(j, "previous", where));
    ASSIGN_OR_RETURN(sth.checkpoint_signature, Hex64(j, "checkpoint_signature", where));
  }
  return sth;
}

std::string FormatTimestampMs(uint64_t ms) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr) return "(invalid time " + std::to_string(ms) + ")";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(ms % 1000));
  return buf;
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace enclave::audit
