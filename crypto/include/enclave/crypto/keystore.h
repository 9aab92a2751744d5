// The tenant keystore (docs/formats/keystore.md): one JSON file holding the tenant
// key-encryption key (KEK), wrapped under a key derived from a passphrase with Argon2id,
// every data key (DEK), wrapped by the KEK with its dataset id and key id as associated
// data, and the tenant's export key pairs (X25519: trained models are sealed to the public
// half, docs/formats/model-export.md), private halves wrapped by the KEK like the DEKs.
// Updates are atomic (write, fsync, rename) under a lock file.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto {

struct KdfParams {
  uint64_t opslimit = 3;
  uint64_t memlimit_bytes = 128ull << 20;
};
// Floors below which init refuses (OWASP's Argon2id minimum: 2 passes, 19 MiB).
inline constexpr uint64_t kMinOpslimit = 2;
inline constexpr uint64_t kMinMemlimitBytes = 19ull << 20;
inline constexpr size_t kMinPassphraseBytes = 12;

struct DataKeyEntry {
  std::string dataset_id;
  Id128 key_id{};
  Suite suite = Suite::kAes256Gcm;
  std::string created;  // RFC 3339 UTC
};

inline constexpr size_t kX25519Bytes = 32;
using X25519PublicKey = std::array<uint8_t, kX25519Bytes>;

// An export key pair's public part. `name` is the tenant's label for it (unique in the
// keystore, same charset as dataset ids); `key_id` is random and is what model files name.
struct ExportKeyEntry {
  std::string name;
  Id128 key_id{};
  X25519PublicKey public_key{};
  std::string created;  // RFC 3339 UTC
};

// A data key made but not yet stored (see Keystore::NewDataKey).
struct PendingDataKey {
  DataKeyEntry entry;
  SecretBytes dek;
};

class Keystore {
 public:
  // Creates a new keystore file with a fresh KEK. Fails if the file exists.
  static Status Init(const std::string& path, const SecretBytes& passphrase, const KdfParams& kdf);
  // The same with a given keystore id: a partial copy of the tenant keystore (the data keys
  // a broker released to an attested host) keeps the tenant keystore's id, which sealed
  // headers name, under its own passphrase and KEK.
  static Status InitWithId(const std::string& path, const SecretBytes& passphrase, const KdfParams& kdf,
                           const Id128& id);
  // A keystore that lives in this process only, with no file: the data keys a broker
  // released to this attested process, under the tenant keystore's id (which sealed
  // headers name). Its KEK is random; nothing is ever written; export keys are refused.
  static Result<Keystore> InMemory(const Id128& id);
  bool in_memory() const { return path_.empty(); }

  // Reads the file and unwraps the KEK; a wrong passphrase is kPermissionDenied.
  static Result<Keystore> Unlock(const std::string& path, const SecretBytes& passphrase);

  const Id128& id() const { return id_; }
  const std::vector<DataKeyEntry>& entries() const { return entries_; }

  // Makes a fresh DEK and key id for `dataset_id`, in memory only.
  Result<PendingDataKey> NewDataKey(const std::string& dataset_id, Suite suite) const;
  // Stores a pending key wrapped by the KEK, durably, under the keystore lock.
  Status AddDataKey(const PendingDataKey& key);
  // NewDataKey + AddDataKey.
  Result<SecretBytes> CreateDataKey(const std::string& dataset_id, Suite suite, Id128* key_id);
  // Unwraps the DEK of (dataset_id, key_id): what a sealed header names.
  Result<SecretBytes> GetDataKey(const std::string& dataset_id, const Id128& key_id) const;

  // A 32-byte key for the keystore holder's own state (the broker wraps job keys in its
  // database with it): HKDF-SHA256(KEK, salt = keystore id, info = "enclave keystore
  // derived key v1" || 0x00 || label). The KEK itself never leaves.
  Result<SecretBytes> DeriveKey(std::string_view label) const;

  const std::vector<ExportKeyEntry>& export_keys() const { return export_entries_; }
  // Makes a fresh X25519 export key pair named `name` and stores it, durably, under the
  // keystore lock; kAlreadyExists if the name is taken.
  Result<ExportKeyEntry> CreateExportKey(const std::string& name);
  // The export key named `name`, or with an empty name the newest one.
  Result<ExportKeyEntry> FindExportKey(const std::string& name) const;
  // Unwraps the private half of export key `key_id` and checks that it is the private
  // half of the stored public key (kAuthFailed otherwise).
  Result<SecretBytes> GetExportPrivateKey(const Id128& key_id) const;

 private:
  struct WrappedEntry {
    DataKeyEntry entry;
    std::vector<uint8_t> nonce, wrapped;
  };
  Keystore() = default;
  // Whether `doc` (the file re-read under its lock) is still the keystore unlocked: the
  // same id and the same KDF and wrapped KEK (a copy with this id under another KEK is not).
  Status CheckStillThisKeystore(const nlohmann::json& doc) const;
  std::string path_;
  Id128 id_{};
  std::string kek_fields_;  // the unlocked file's "kdf" and "kek" members, serialized
  SecretBytes kek_;
  std::vector<DataKeyEntry> entries_;
  std::vector<WrappedEntry> wrapped_;
  struct WrappedExportKey {
    ExportKeyEntry entry;
    std::vector<uint8_t> nonce, wrapped;
  };
  std::vector<ExportKeyEntry> export_entries_;
  std::vector<WrappedExportKey> wrapped_export_;
};

}  // namespace enclave::crypto
