#include "enclave/crypto/keystore.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <nlohmann/json.hpp>

#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"

namespace enclave::crypto {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "enclave-keystore";
constexpr int kVersion = 1;
constexpr size_t kMaxKeystoreBytes = 64u << 20;
// Caps on what a keystore file may ask of Argon2id, so a hostile file cannot exhaust memory.
constexpr uint64_t kMaxOpslimit = 64;
constexpr uint64_t kMaxMemlimitBytes = 4ull << 30;
constexpr size_t kWrapNonceBytes = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;  // 24
constexpr size_t kWrapTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;       // 16
constexpr size_t kSaltBytes = crypto_pwhash_SALTBYTES;                            // 16

std::vector<uint8_t> KekAad(const Id128& id, const KdfParams& kdf, ByteSpan salt) {
  ByteWriter w;
  w.Bytes("enclave keystore v1 kek");
  w.Bytes(id);
  w.U64(kdf.opslimit);
  w.U64(kdf.memlimit_bytes);
  w.Bytes(salt);
  return std::move(w.bytes());
}

std::vector<uint8_t> DekAad(const Id128& keystore_id, const DataKeyEntry& e) {
  ByteWriter w;
  w.Bytes("enclave keystore v1 dek");
  w.Bytes(keystore_id);
  w.Bytes(e.key_id);
  w.U16(static_cast<uint16_t>(e.suite));
  w.U16(static_cast<uint16_t>(e.dataset_id.size()));
  w.Bytes(e.dataset_id);
  return std::move(w.bytes());
}

std::vector<uint8_t> ExportKeyAad(const Id128& keystore_id, const ExportKeyEntry& e) {
  ByteWriter w;
  w.Bytes("enclave keystore v1 export key");
  w.Bytes(keystore_id);
  w.Bytes(e.key_id);
  w.Bytes(e.public_key);
  w.U16(static_cast<uint16_t>(e.name.size()));
  w.Bytes(e.name);
  return std::move(w.bytes());
}

// XChaCha20-Poly1305 (libsodium) key wrapping with a random 192-bit nonce.
void Wrap(const SecretBytes& kek, const SecretBytes& key, ByteSpan aad, std::vector<uint8_t>* nonce,
          std::vector<uint8_t>* wrapped) {
  nonce->resize(kWrapNonceBytes);
  randombytes_buf(nonce->data(), nonce->size());
  wrapped->resize(key.size() + kWrapTagBytes);
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(wrapped->data(), &len, key.ExposeSecret().data(), key.size(),
                                             aad.data(), aad.size(), nullptr, nonce->data(),
                                             kek.ExposeSecret().data());
}

Result<SecretBytes> Unwrap(const SecretBytes& kek, ByteSpan nonce, ByteSpan wrapped, ByteSpan aad) {
  if (nonce.size() != kWrapNonceBytes || wrapped.size() != 32 + kWrapTagBytes) {
    return InvalidInput("wrapped key has the wrong size");
  }
  ASSIGN_OR_RETURN(SecretBytes key, SecretBytes::Create(32));
  unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(key.ExposeSecretMutable().data(), &len, nullptr,
                                                 wrapped.data(), wrapped.size(), aad.data(), aad.size(),
                                                 nonce.data(), kek.ExposeSecret().data()) != 0) {
    return AuthFailed("key unwrapping failed");
  }
  return key;
}

Result<SecretBytes> PassphraseKey(const SecretBytes& passphrase, ByteSpan salt, const KdfParams& kdf) {
  ASSIGN_OR_RETURN(SecretBytes key, SecretBytes::Create(32));
  auto p = passphrase.ExposeSecret();
  // An empty SecretBytes has no buffer; libsodium wants a valid pointer even for length 0.
  const char* text = p.empty() ? "" : reinterpret_cast<const char*>(p.data());
  if (crypto_pwhash(key.ExposeSecretMutable().data(), key.size(), text, p.size(), salt.data(), kdf.opslimit,
                    static_cast<size_t>(kdf.memlimit_bytes), crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return Internal("crypto_pwhash(argon2id) failed: out of memory?");
  }
  return key;
}

std::string NowRfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Field accessors that name the field in their error.
Result<std::string> GetString(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return InvalidInput(std::string("missing string field '") + field + "'");
  return it->get<std::string>();
}
Result<uint64_t> GetU64(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_unsigned()) {
    return InvalidInput(std::string("missing unsigned field '") + field + "'");
  }
  return it->get<uint64_t>();
}
Result<std::vector<uint8_t>> GetHex(const json& j, const char* field, size_t expected) {
  ASSIGN_OR_RETURN(std::string s, GetString(j, field));
  auto b = HexDecode(s);
  if (!b.ok() || b->size() != expected) {
    return InvalidInput(std::string("field '") + field + "' must be " + std::to_string(expected) + " bytes of hex");
  }
  return std::move(b).value();
}
Result<const json*> GetObject(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_object()) return InvalidInput(std::string("missing object '") + field + "'");
  return &*it;
}

struct LockFile {
  int fd = -1;
  ~LockFile() {
    if (fd >= 0) ::close(fd);  // closing releases the flock
  }
};

Status AcquireLock(const std::string& keystore_path, LockFile* lock) {
  std::string path = keystore_path + ".lock";
  lock->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock->fd < 0) return ErrnoStatus("opening lock file " + path, errno);
  if (::flock(lock->fd, LOCK_EX) != 0) return ErrnoStatus("locking " + path, errno);
  return OkStatus();
}

Status WriteJson(const std::string& path, const json& doc, bool overwrite) {
  std::string text = doc.dump(2) + "\n";
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, overwrite));
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

Result<json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxKeystoreBytes));
  json doc = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidInput(path + ": not a JSON keystore");
  auto format = GetString(doc, "format");
  if (!format.ok() || *format != kFormat) return InvalidInput(path + ": not an enclave keystore");
  auto version = GetU64(doc, "version");
  if (!version.ok()) return InvalidInput(path + ": keystore has no version");
  if (*version != kVersion) {
    return Unsupported(path + ": keystore version " + std::to_string(*version) + " is not supported");
  }
  return doc;
}

Status ParseExportEntry(const json& e, ExportKeyEntry* entry, std::vector<uint8_t>* nonce,
                        std::vector<uint8_t>* wrapped) {
  if (!e.is_object()) return InvalidInput("not an object");
  ASSIGN_OR_RETURN(entry->name, GetString(e, "name"));
  RETURN_IF_ERROR(ValidateObjectId(entry->name).Annotate("export key name"));
  ASSIGN_OR_RETURN(std::string alg, GetString(e, "algorithm"));
  if (alg != "x25519") return Unsupported("unknown export key algorithm '" + alg + "'");
  ASSIGN_OR_RETURN(std::vector<uint8_t> key_id, GetHex(e, "key_id", 16));
  std::copy(key_id.begin(), key_id.end(), entry->key_id.begin());
  ASSIGN_OR_RETURN(std::vector<uint8_t> pub, GetHex(e, "public_key", kX25519Bytes));
  std::copy(pub.begin(), pub.end(), entry->public_key.begin());
  ASSIGN_OR_RETURN(entry->created, GetString(e, "created"));
  ASSIGN_OR_RETURN(*nonce, GetHex(e, "nonce", kWrapNonceBytes));
  ASSIGN_OR_RETURN(*wrapped, GetHex(e, "wrapped", 32 + kWrapTagBytes));
  return OkStatus();
}

}  // namespace

Status Keystore::Init(const std::string& path, const SecretBytes& passphrase, const KdfParams& kdf) {
  RETURN_IF_ERROR(InitCrypto());
  Id128 id;
  RandomBytes(id);
  return InitWithId(path, passphrase, kdf, id);
}

Status Keystore::InitWithId(const std::string& path, const SecretBytes& passphrase, const KdfParams& kdf,
                            const Id128& id) {
  RETURN_IF_ERROR(InitCrypto());
  if (passphrase.size() < kMinPassphraseBytes) {
    return InvalidInput("passphrase must be at least " + std::to_string(kMinPassphraseBytes) + " bytes");
  }
  if (kdf.opslimit < kMinOpslimit || kdf.memlimit_bytes < kMinMemlimitBytes || kdf.opslimit > kMaxOpslimit ||
      kdf.memlimit_bytes > kMaxMemlimitBytes) {
    return InvalidInput("Argon2id parameters outside 2..64 passes and 19 MiB..4 GiB");
  }
  std::vector<uint8_t> salt(kSaltBytes);
  RandomBytes(salt);
  ASSIGN_OR_RETURN(SecretBytes pass_key, PassphraseKey(passphrase, salt, kdf));
  ASSIGN_OR_RETURN(SecretBytes kek, SecretBytes::Random(32));
  std::vector<uint8_t> nonce, wrapped;
  Wrap(pass_key, kek, KekAad(id, kdf, salt), &nonce, &wrapped);
  json doc = {
      {"format", kFormat},
      {"version", kVersion},
      {"keystore_id", HexEncode(id)},
      {"kdf",
       {{"algorithm", "argon2id13"},
        {"opslimit", kdf.opslimit},
        {"memlimit_bytes", kdf.memlimit_bytes},
        {"salt", HexEncode(salt)}}},
      {"kek", {{"algorithm", "xchacha20-poly1305"}, {"nonce", HexEncode(nonce)}, {"wrapped", HexEncode(wrapped)}}},
      {"data_keys", json::array()},
  };
  return WriteJson(path, doc, /*overwrite=*/false);
}

// The members that fix the KEK, as one string to compare (nlohmann sorts object keys).
static std::string KekFields(const json& doc) {
  const auto kdf = doc.find("kdf"), kek = doc.find("kek");
  return (kdf == doc.end() ? "" : kdf->dump()) + "\n" + (kek == doc.end() ? "" : kek->dump());
}

Status Keystore::CheckStillThisKeystore(const json& doc) const {
  auto on_disk_id = GetHex(doc, "keystore_id", 16);
  if (!on_disk_id.ok() || !std::equal(on_disk_id->begin(), on_disk_id->end(), id_.begin()) ||
      KekFields(doc) != kek_fields_) {
    return FailedPrecondition(path_ + ": keystore was replaced by another one while in use");
  }
  return OkStatus();
}

Result<Keystore> Keystore::Unlock(const std::string& path, const SecretBytes& passphrase) {
  RETURN_IF_ERROR(InitCrypto());
  ASSIGN_OR_RETURN(json doc, ReadJson(path));
  auto parse = [&](Keystore* ks) -> Status {
    ASSIGN_OR_RETURN(std::vector<uint8_t> id, GetHex(doc, "keystore_id", 16));
    std::copy(id.begin(), id.end(), ks->id_.begin());
    ASSIGN_OR_RETURN(const json* kdf_json, GetObject(doc, "kdf"));
    ASSIGN_OR_RETURN(std::string alg, GetString(*kdf_json, "algorithm"));
    if (alg != "argon2id13") return Unsupported("unknown KDF '" + alg + "'");
    KdfParams kdf;
    ASSIGN_OR_RETURN(kdf.opslimit, GetU64(*kdf_json, "opslimit"));
    ASSIGN_OR_RETURN(kdf.memlimit_bytes, GetU64(*kdf_json, "memlimit_bytes"));
    if (kdf.opslimit < 1 || kdf.opslimit > kMaxOpslimit || kdf.memlimit_bytes < 8192 ||
        kdf.memlimit_bytes > kMaxMemlimitBytes) {
      return InvalidInput("KDF parameters out of range");
    }
    ASSIGN_OR_RETURN(std::vector<uint8_t> salt, GetHex(*kdf_json, "salt", kSaltBytes));
    ASSIGN_OR_RETURN(const json* kek_json, GetObject(doc, "kek"));
    ASSIGN_OR_RETURN(std::string kek_alg, GetString(*kek_json, "algorithm"));
    if (kek_alg != "xchacha20-poly1305") return Unsupported("unknown key wrapping '" + kek_alg + "'");
    ASSIGN_OR_RETURN(std::vector<uint8_t> nonce, GetHex(*kek_json, "nonce", kWrapNonceBytes));
    ASSIGN_OR_RETURN(std::vector<uint8_t> wrapped, GetHex(*kek_json, "wrapped", 32 + kWrapTagBytes));
    ks->kek_fields_ = KekFields(doc);
    auto entries = doc.find("data_keys");
    if (entries == doc.end() || !entries->is_array()) return InvalidInput("missing array 'data_keys'");
    for (size_t i = 0; i < entries->size(); ++i) {
      const json& e = (*entries)[i];
      WrappedEntry w;
      auto field = [&](const Status& s) { return s.Annotate("data_keys[" + std::to_string(i) + "]"); };
      auto ds = GetString(e, "dataset_id");
      if (!ds.ok()) return field(ds.status());
      w.entry.dataset_id = *ds;
      if (Status s = ValidateObjectId(w.entry.dataset_id); !s.ok()) return field(s);
      auto key_id = GetHex(e, "key_id", 16);
      if (!key_id.ok()) return field(key_id.status());
      std::copy(key_id->begin(), key_id->end(), w.entry.key_id.begin());
      auto suite_name = GetString(e, "suite");
      if (!suite_name.ok()) return field(suite_name.status());
      auto suite = ParseSuite(*suite_name);
      if (!suite.ok()) return field(suite.status());
      w.entry.suite = *suite;
      auto created = GetString(e, "created");
      if (!created.ok()) return field(created.status());
      w.entry.created = *created;
      auto n = GetHex(e, "nonce", kWrapNonceBytes);
      if (!n.ok()) return field(n.status());
      auto wr = GetHex(e, "wrapped", 32 + kWrapTagBytes);
      if (!wr.ok()) return field(wr.status());
      w.nonce = std::move(n).value();
      w.wrapped = std::move(wr).value();
      ks->entries_.push_back(w.entry);
      ks->wrapped_.push_back(std::move(w));
    }
    // Optional: keystores written before export keys existed have no such member.
    auto exports = doc.find("export_keys");
    if (exports != doc.end()) {
      if (!exports->is_array()) return InvalidInput("'export_keys' must be an array");
      for (size_t i = 0; i < exports->size(); ++i) {
        auto field = [&](const Status& s) { return s.Annotate("export_keys[" + std::to_string(i) + "]"); };
        WrappedExportKey w;
        if (Status s = ParseExportEntry((*exports)[i], &w.entry, &w.nonce, &w.wrapped); !s.ok()) return field(s);
        for (const ExportKeyEntry& other : ks->export_entries_) {
          if (other.name == w.entry.name || other.key_id == w.entry.key_id) {
            return field(InvalidInput("export key name '" + w.entry.name + "' or key id used twice"));
          }
        }
        ks->export_entries_.push_back(w.entry);
        ks->wrapped_export_.push_back(std::move(w));
      }
    }
    ASSIGN_OR_RETURN(SecretBytes pass_key, PassphraseKey(passphrase, salt, kdf));
    auto kek = Unwrap(pass_key, nonce, wrapped, KekAad(ks->id_, kdf, salt));
    if (!kek.ok()) return PermissionDenied("wrong passphrase (or the keystore's KDF or KEK fields were altered)");
    ks->kek_ = std::move(kek).value();
    return OkStatus();
  };
  Keystore ks;
  ks.path_ = path;
  if (Status s = parse(&ks); !s.ok()) return s.Annotate(path);
  return ks;
}

Result<PendingDataKey> Keystore::NewDataKey(const std::string& dataset_id, Suite suite) const {
  RETURN_IF_ERROR(ValidateObjectId(dataset_id));
  PendingDataKey key;
  key.entry.dataset_id = dataset_id;
  key.entry.suite = suite;
  key.entry.created = NowRfc3339();
  RandomBytes(key.entry.key_id);
  ASSIGN_OR_RETURN(key.dek, SecretBytes::Random(32));
  return key;
}

Result<Keystore> Keystore::InMemory(const Id128& id) {
  RETURN_IF_ERROR(InitCrypto());
  Keystore ks;
  ks.id_ = id;
  ASSIGN_OR_RETURN(ks.kek_, SecretBytes::Random(32));
  return ks;
}

Status Keystore::AddDataKey(const PendingDataKey& key) {
  RETURN_IF_ERROR(ValidateObjectId(key.entry.dataset_id));
  if (key.dek.size() != 32) return InvalidInput("data key must be 32 bytes");
  if (in_memory()) {
    WrappedEntry w;
    w.entry = key.entry;
    Wrap(kek_, key.dek, DekAad(id_, w.entry), &w.nonce, &w.wrapped);
    entries_.push_back(w.entry);
    wrapped_.push_back(std::move(w));
    return OkStatus();
  }
  LockFile lock;
  RETURN_IF_ERROR(AcquireLock(path_, &lock));
  // Re-read under the lock: another process may have added keys since we unlocked.
  ASSIGN_OR_RETURN(json doc, ReadJson(path_));
  RETURN_IF_ERROR(CheckStillThisKeystore(doc));
  WrappedEntry w;
  w.entry = key.entry;
  Wrap(kek_, key.dek, DekAad(id_, w.entry), &w.nonce, &w.wrapped);
  doc["data_keys"].push_back({{"dataset_id", w.entry.dataset_id},
                              {"key_id", HexEncode(w.entry.key_id)},
                              {"suite", SuiteName(w.entry.suite)},
                              {"created", w.entry.created},
                              {"nonce", HexEncode(w.nonce)},
                              {"wrapped", HexEncode(w.wrapped)}});
  RETURN_IF_ERROR(WriteJson(path_, doc, /*overwrite=*/true));
  entries_.push_back(w.entry);
  wrapped_.push_back(std::move(w));
  return OkStatus();
}

Result<SecretBytes> Keystore::CreateDataKey(const std::string& dataset_id, Suite suite, Id128* key_id) {
  ASSIGN_OR_RETURN(PendingDataKey key, NewDataKey(dataset_id, suite));
  RETURN_IF_ERROR(AddDataKey(key));
  *key_id = key.entry.key_id;
  return std::move(key.dek);
}

Result<ExportKeyEntry> Keystore::CreateExportKey(const std::string& name) {
  RETURN_IF_ERROR(ValidateObjectId(name).Annotate("export key name"));
  if (in_memory()) return FailedPrecondition("an in-memory keystore holds no export keys");
  LockFile lock;
  RETURN_IF_ERROR(AcquireLock(path_, &lock));
  ASSIGN_OR_RETURN(json doc, ReadJson(path_));
  RETURN_IF_ERROR(CheckStillThisKeystore(doc));
  auto exports = doc.find("export_keys");
  if (exports == doc.end()) {
    doc["export_keys"] = json::array();
    exports = doc.find("export_keys");
  } else if (!exports->is_array()) {
    return InvalidInput(path_ + ": 'export_keys' must be an array");
  }
  // Checked against the file as it is now, under the lock: another process may have added it.
  for (const json& e : *exports) {
    if (e.is_object() && e.contains("name") && e["name"] == name) {
      return AlreadyExists(path_ + ": an export key named '" + name + "' exists");
    }
  }
  WrappedExportKey w;
  w.entry.name = name;
  w.entry.created = NowRfc3339();
  RandomBytes(w.entry.key_id);
  ASSIGN_OR_RETURN(SecretBytes private_key, SecretBytes::Random(kX25519Bytes));
  if (crypto_scalarmult_base(w.entry.public_key.data(), private_key.ExposeSecret().data()) != 0) {
    return Internal("crypto_scalarmult_base failed");
  }
  Wrap(kek_, private_key, ExportKeyAad(id_, w.entry), &w.nonce, &w.wrapped);
  exports->push_back({{"name", w.entry.name},
                      {"key_id", HexEncode(w.entry.key_id)},
                      {"algorithm", "x25519"},
                      {"public_key", HexEncode(w.entry.public_key)},
                      {"created", w.entry.created},
                      {"nonce", HexEncode(w.nonce)},
                      {"wrapped", HexEncode(w.wrapped)}});
  RETURN_IF_ERROR(WriteJson(path_, doc, /*overwrite=*/true));
  ExportKeyEntry entry = w.entry;
  export_entries_.push_back(w.entry);
  wrapped_export_.push_back(std::move(w));
  return entry;
}

Result<ExportKeyEntry> Keystore::FindExportKey(const std::string& name) const {
  if (export_entries_.empty()) {
    return NotFound(path_ + ": no export key (create one with `enclave-data keystore export-key create`)");
  }
  if (name.empty()) return export_entries_.back();
  for (const ExportKeyEntry& e : export_entries_) {
    if (e.name == name) return e;
  }
  return NotFound(path_ + ": no export key named '" + name + "'");
}

Result<SecretBytes> Keystore::GetExportPrivateKey(const Id128& key_id) const {
  for (const WrappedExportKey& w : wrapped_export_) {
    if (w.entry.key_id != key_id) continue;
    auto key = Unwrap(kek_, w.nonce, w.wrapped, ExportKeyAad(id_, w.entry));
    if (!key.ok()) {
      return AuthFailed(path_ + ": export key '" + w.entry.name + "' failed to unwrap (entry altered)");
    }
    X25519PublicKey derived{};
    if (crypto_scalarmult_base(derived.data(), key->ExposeSecret().data()) != 0 ||
        !ConstantTimeEquals(derived, w.entry.public_key)) {
      return AuthFailed(path_ + ": export key '" + w.entry.name + "': private half does not match its public key");
    }
    return key;
  }
  return NotFound(path_ + ": no export key with key id " + HexEncode(key_id));
}

Result<SecretBytes> Keystore::DeriveKey(std::string_view label) const {
  if (label.empty() || label.size() > 200) return InvalidInput("derived key label must be 1..200 bytes");
  std::string info = "enclave keystore derived key v1";
  info.push_back('\0');
  info.append(label);
  return HkdfSha256(kek_, id_, info, 32);
}

Result<SecretBytes> Keystore::GetDataKey(const std::string& dataset_id, const Id128& key_id) const {
  for (const WrappedEntry& w : wrapped_) {
    if (w.entry.dataset_id != dataset_id || w.entry.key_id != key_id) continue;
    auto dek = Unwrap(kek_, w.nonce, w.wrapped, DekAad(id_, w.entry));
    if (!dek.ok()) return AuthFailed(path_ + ": data key of '" + dataset_id + "' failed to unwrap (entry altered)");
    return dek;
  }
  return NotFound(path_ + ": no data key for dataset '" + dataset_id + "' with key id " + HexEncode(key_id));
}

}  // namespace enclave::crypto
