// Exported models (docs/formats/model-export.md): a trained model leaves the host sealed
// to the tenant's export public key. The file is an ENCLSEAL v1 sealed file of content
// type 2 whose payload key (DEK) is wrapped to the recipient with an ephemeral X25519
// key; the recipient block and the model's public facts (format id, job digest, creation
// time) are the header metadata, so the header tag and key commitment authenticate them.
// The payload is opaque bytes: the trainer owns the model's plaintext format.
//
// Sealing needs only the public key file (the host never holds a tenant secret); opening
// needs the tenant keystore. The sender is not authenticated by this envelope: anyone with
// the public key can make such a file. Provenance comes from the signed training report,
// which names the file's SHA-256.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto {

// --- The export public key file (what `enclave-data keystore export-key show` writes) ---

struct ExportPublicKey {
  Id128 keystore_id{};
  Id128 key_id{};
  std::string name;
  X25519PublicKey public_key{};
};

inline constexpr size_t kMaxPublicKeyFileBytes = 64u << 10;

// SHA-256("enclave export key v1" || keystore_id || key_id || public_key): what a tenant
// compares out of band before trusting a public key file.
Digest256 ExportKeyFingerprint(const ExportPublicKey& key);
// The JSON document, with a final newline.
std::string EncodeExportPublicKey(const ExportPublicKey& key);
// Checks every field and that `fingerprint` matches the others (a damaged or hand-edited
// file is refused; a forged one with a recomputed fingerprint is caught only by comparing
// the fingerprint with the tenant's).
Result<ExportPublicKey> ParseExportPublicKey(ByteSpan text);
Result<ExportPublicKey> ReadExportPublicKey(const std::string& path);
// The public key of the keystore's export key `name` (empty: the newest), after checking
// that the keystore's private half matches it.
Result<ExportPublicKey> ExportPublicKeyOf(const Keystore& keystore, const std::string& name);

// --- The metadata of content type 2 ---

inline constexpr uint16_t kModelMetadataVersion = 1;
// Recipient kinds (u16, append-only). 1: X25519, HKDF-SHA256, ChaCha20-Poly1305 DEK wrap.
inline constexpr uint16_t kRecipientX25519 = 1;
inline constexpr size_t kWrappedDekBytes = 32 + 16;
inline constexpr size_t kMaxFormatIdBytes = 128;
inline constexpr uint32_t kDefaultModelChunkBytes = 1u << 20;

struct ModelInfo {
  std::string format_id;   // the plaintext format, named by its producer: [A-Za-z0-9._:/+-], 1..128
  Digest256 job_digest{};  // SHA-256 of the job specification; all zero: no job
  uint64_t created_unix = 0;  // seconds since 1970 UTC
};

struct ModelRecipient {
  uint16_t kind = kRecipientX25519;
  X25519PublicKey recipient_public_key{};
  X25519PublicKey ephemeral_public_key{};
  std::array<uint8_t, kWrappedDekBytes> wrapped_dek{};
};

struct ModelMetadata {
  ModelRecipient recipient;
  ModelInfo info;
};

Status ValidateFormatId(std::string_view id);
std::vector<uint8_t> EncodeModelMetadata(const ModelMetadata& meta);
// Structure only: version and kind known, lengths exact, format id valid.
Result<ModelMetadata> ParseModelMetadata(ByteSpan bytes);

// The file's DEK from its recipient block and the recipient's private key; kAuthFailed if
// the block was not made for this key and header (the caller then checks the commitment
// and header tag with it: SealedFileKey::Unlock).
Result<SecretBytes> UnwrapModelDek(const SealedHeader& header, const ModelMetadata& meta,
                                   const SecretBytes& recipient_private_key);

// --- Sealing (the trainer's side) ---

struct ModelSealOptions {
  Suite suite = Suite::kAes256Gcm;
  std::string model_id = "model";  // the header's object id
  uint32_t chunk_size = kDefaultModelChunkBytes;
  ModelInfo info;  // created_unix 0: now
};

// Streams a model of known length into an exported-model file. Memory: two chunks.
class ModelExportWriter {
 public:
  static Result<std::unique_ptr<ModelExportWriter>> Create(const ExportPublicKey& to, uint64_t payload_length,
                                                           const ModelSealOptions& options, ByteSink* sink);
  Status Append(ByteSpan plaintext);
  // Fails unless exactly payload_length bytes were appended.
  Status Finish();
  const SealedHeader& header() const { return writer_->header(); }
  // A model sealed elsewhere (its plaintext in GPU memory): SealedFileWriter's
  // payload_key() and AppendSealed().
  const SecretBytes& payload_key() const { return writer_->payload_key(); }
  Status AppendSealed(ByteSpan sealed_chunks) { return writer_->AppendSealed(sealed_chunks); }
  const ModelMetadata& metadata() const { return meta_; }

 private:
  ModelExportWriter() = default;
  std::unique_ptr<SealedFileWriter> writer_;
  ModelMetadata meta_;
};

struct ModelExportInfo {
  SealedHeader header;
  ModelMetadata metadata;
  Digest256 file_digest{};  // SHA-256 of the whole file: the model ciphertext digest
};

using ModelProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Seals `model` to `to` into `out_path` (atomic, mode 0600; appears only when complete).
Result<ModelExportInfo> SealModelToFile(const ExportPublicKey& to, ByteSpan model, const ModelSealOptions& options,
                                        const std::string& out_path, bool overwrite);
// The same, streaming the model from `in_path` in constant memory.
Result<ModelExportInfo> SealModelFileToFile(const ExportPublicKey& to, const std::string& in_path,
                                            const ModelSealOptions& options, const std::string& out_path,
                                            bool overwrite, const ModelProgressFn& progress = {});

// The same, for a model whose plaintext is not in this process's memory (a model in GPU
// memory: kernels::SealDeviceModelToFile): `seal_chunks` gets the writer, whose header
// is written, and must AppendSealed every chunk of `payload_length` bytes under its
// payload_key() and header() (chunk geometry, header digest as the chunks' AAD).
using ChunkSealFn = std::function<Status(ModelExportWriter& writer)>;
Result<ModelExportInfo> SealModelWithChunkSealer(const ExportPublicKey& to, uint64_t payload_length,
                                                 const ModelSealOptions& options, const std::string& out_path,
                                                 bool overwrite, const ChunkSealFn& seal_chunks);

// --- Opening (the tenant's side) ---

// Header, metadata structure and file size, with no key: NOT authenticated.
Result<ModelExportInfo> InspectModelExport(const std::string& path);

// An exported-model file unlocked with the tenant keystore: header authenticated, chunks
// open one by one.
class ModelExportReader {
 public:
  static Result<std::unique_ptr<ModelExportReader>> Open(const std::string& path, const Keystore& keystore);
  const SealedHeader& header() const { return reader_->header(); }
  const ModelMetadata& metadata() const { return meta_; }
  Status ReadChunk(uint64_t index, std::span<uint8_t> out) { return reader_->ReadChunk(index, out); }

 private:
  ModelExportReader() = default;
  std::unique_ptr<SealedFileReader> reader_;
  ModelMetadata meta_;
};

// Decrypts into `out_path`: atomic, appears only after every chunk authenticated.
Result<ModelExportInfo> OpenModelToFile(const std::string& path, const Keystore& keystore,
                                        const std::string& out_path, bool overwrite,
                                        const ModelProgressFn& progress = {});
// Decrypts into locked memory (for `predict`); refuses payloads over `max_bytes`.
Result<SecretBytes> OpenModelToMemory(const std::string& path, const Keystore& keystore, uint64_t max_bytes,
                                      ModelExportInfo* info = nullptr);
// Authenticates every chunk, keeps nothing.
Result<ModelExportInfo> VerifyModelExport(const std::string& path, const Keystore& keystore,
                                          const ModelProgressFn& progress = {});

}  // namespace enclave::crypto
