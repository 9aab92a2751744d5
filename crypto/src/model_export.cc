#include "enclave/crypto/model_export.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "enclave/common/files.h"

namespace enclave::crypto {
namespace {

using nlohmann::json;

constexpr std::string_view kPubFormat = "enclave-export-public-key";
constexpr std::string_view kFingerprintLabel = "enclave export key v1";
constexpr std::string_view kWrapKeyInfo = "enclave model-export v1 wrap key";
constexpr std::string_view kWrapAadLabel = "enclave model-export v1 dek";

// The wrap key is used for exactly one message (a fresh ephemeral key per file), so a
// constant nonce is safe.
constexpr std::array<uint8_t, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> kWrapNonce{};

Result<std::string> JsonString(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return InvalidInput(std::string("missing string field '") + field + "'");
  return it->get<std::string>();
}

Result<std::vector<uint8_t>> JsonHex(const json& j, const char* field, size_t expected) {
  ASSIGN_OR_RETURN(std::string s, JsonString(j, field));
  auto b = HexDecode(s);
  if (!b.ok() || b->size() != expected) {
    return InvalidInput(std::string("field '") + field + "' must be " + std::to_string(expected) + " bytes of hex");
  }
  return std::move(b).value();
}

template <size_t N>
void CopyTo(const std::vector<uint8_t>& from, std::array<uint8_t, N>* to) {
  std::copy(from.begin(), from.end(), to->begin());
}

// X25519 through libsodium; an all-zero result (a low-order public key) is refused.
Result<SecretBytes> X25519(const SecretBytes& private_key, const X25519PublicKey& public_key) {
  ASSIGN_OR_RETURN(SecretBytes shared, SecretBytes::Create(crypto_scalarmult_BYTES));
  if (crypto_scalarmult(shared.ExposeSecretMutable().data(), private_key.ExposeSecret().data(),
                        public_key.data()) != 0) {
    return AuthFailed("X25519 gave the all-zero shared secret (a low-order public key)");
  }
  return shared;
}

Result<SecretBytes> WrapKey(const SecretBytes& shared, const X25519PublicKey& ephemeral,
                            const X25519PublicKey& recipient) {
  std::array<uint8_t, 64> salt{};
  std::memcpy(salt.data(), ephemeral.data(), 32);
  std::memcpy(salt.data() + 32, recipient.data(), 32);
  return HkdfSha256(shared, salt, kWrapKeyInfo, 32);
}

std::vector<uint8_t> WrapAad(const SealedHeader& h) {
  ByteWriter w;
  w.Bytes(kWrapAadLabel);
  w.Bytes(h.params.keystore_id);
  w.Bytes(h.params.key_id);
  return std::move(w.bytes());
}

uint64_t NowUnix() { return static_cast<uint64_t>(std::time(nullptr)); }

// Writes to an atomic output file and hashes what it writes.
class HashingFileSink final : public ByteSink {
 public:
  explicit HashingFileSink(AtomicOutputFile* file) : file_(file) {}
  Status Write(ByteSpan bytes) override {
    hasher_.Update(bytes);
    return file_->Write(bytes.data(), bytes.size());
  }
  Digest256 Final() { return hasher_.Final(); }

 private:
  AtomicOutputFile* file_;
  Sha256Hasher hasher_;
};

Status CheckIsModel(const std::string& path, const SealedHeader& h) {
  if (h.params.content_type != ContentType::kExportedModel) {
    return InvalidInput(path + ": not an exported model (content type " +
                        std::to_string(static_cast<unsigned>(h.params.content_type)) + ")");
  }
  return OkStatus();
}

}  // namespace

// ----------------------------------------------------------------- public key file

Digest256 ExportKeyFingerprint(const ExportPublicKey& key) {
  ByteWriter w;
  w.Bytes(kFingerprintLabel);
  w.Bytes(key.keystore_id);
  w.Bytes(key.key_id);
  w.Bytes(key.public_key);
  return Sha256(w.bytes());
}

std::string EncodeExportPublicKey(const ExportPublicKey& key) {
  json doc = {{"format", kPubFormat},
              {"version", 1},
              {"algorithm", "x25519"},
              {"keystore_id", HexEncode(key.keystore_id)},
              {"key_id", HexEncode(key.key_id)},
              {"name", key.name},
              {"public_key", HexEncode(key.public_key)},
              {"fingerprint", HexEncode(ExportKeyFingerprint(key))}};
  return doc.dump(2) + "\n";
}

Result<ExportPublicKey> ParseExportPublicKey(ByteSpan text) {
  if (text.size() > kMaxPublicKeyFileBytes) return InvalidInput("public key file larger than 64 KiB");
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidInput("not a JSON public key file");
  auto format = JsonString(doc, "format");
  if (!format.ok() || *format != kPubFormat) return InvalidInput("not an enclave export public key file");
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_unsigned()) return InvalidInput("missing unsigned field 'version'");
  if (version->get<uint64_t>() != 1) {
    return Unsupported("public key file version " + std::to_string(version->get<uint64_t>()) + " is not supported");
  }
  ASSIGN_OR_RETURN(std::string alg, JsonString(doc, "algorithm"));
  if (alg != "x25519") return Unsupported("unknown public key algorithm '" + alg + "'");
  ExportPublicKey key;
  ASSIGN_OR_RETURN(std::vector<uint8_t> b, JsonHex(doc, "keystore_id", 16));
  CopyTo(b, &key.keystore_id);
  ASSIGN_OR_RETURN(b, JsonHex(doc, "key_id", 16));
  CopyTo(b, &key.key_id);
  ASSIGN_OR_RETURN(key.name, JsonString(doc, "name"));
  RETURN_IF_ERROR(ValidateObjectId(key.name).Annotate("field 'name'"));
  ASSIGN_OR_RETURN(b, JsonHex(doc, "public_key", kX25519Bytes));
  CopyTo(b, &key.public_key);
  ASSIGN_OR_RETURN(b, JsonHex(doc, "fingerprint", 32));
  if (!ConstantTimeEquals(b, ExportKeyFingerprint(key))) {
    return InvalidInput("fingerprint does not match the key (damaged or edited public key file)");
  }
  return key;
}

Result<ExportPublicKey> ReadExportPublicKey(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxPublicKeyFileBytes));
  auto key = ParseExportPublicKey(bytes);
  if (!key.ok()) return key.status().Annotate(path);
  return key;
}

Result<ExportPublicKey> ExportPublicKeyOf(const Keystore& keystore, const std::string& name) {
  ASSIGN_OR_RETURN(ExportKeyEntry entry, keystore.FindExportKey(name));
  // Proves the public half in the (unauthenticated-as-a-whole) file is this keystore's.
  RETURN_IF_ERROR(keystore.GetExportPrivateKey(entry.key_id).status());
  ExportPublicKey key;
  key.keystore_id = keystore.id();
  key.key_id = entry.key_id;
  key.name = entry.name;
  key.public_key = entry.public_key;
  return key;
}

// ----------------------------------------------------------------- metadata

Status ValidateFormatId(std::string_view id) {
  if (id.empty() || id.size() > kMaxFormatIdBytes) {
    return InvalidInput("model format id must be 1.." + std::to_string(kMaxFormatIdBytes) + " bytes");
  }
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-' || c == ':' || c == '/' || c == '+';
    if (!ok) return InvalidInput("model format id may hold only letters, digits and . _ - : / +");
  }
  return OkStatus();
}

std::vector<uint8_t> EncodeModelMetadata(const ModelMetadata& m) {
  ByteWriter w;
  w.U16(kModelMetadataVersion);
  w.U16(m.recipient.kind);
  w.Bytes(m.recipient.recipient_public_key);
  w.Bytes(m.recipient.ephemeral_public_key);
  w.Bytes(m.recipient.wrapped_dek);
  w.Bytes(m.info.job_digest);
  w.U64(m.info.created_unix);
  w.U16(static_cast<uint16_t>(m.info.format_id.size()));
  w.Bytes(m.info.format_id);
  return std::move(w.bytes());
}

Result<ModelMetadata> ParseModelMetadata(ByteSpan bytes) {
  ByteReader r(bytes);
  ModelMetadata m;
  uint16_t version = 0, id_len = 0;
  RETURN_IF_ERROR(r.U16("model metadata version", &version));
  if (version != kModelMetadataVersion) {
    return Unsupported("model metadata version " + std::to_string(version) + " is not supported");
  }
  RETURN_IF_ERROR(r.U16("recipient kind", &m.recipient.kind));
  if (m.recipient.kind != kRecipientX25519) {
    return Unsupported("unknown recipient kind " + std::to_string(m.recipient.kind));
  }
  ByteSpan b;
  RETURN_IF_ERROR(r.Bytes("recipient public key", 32, &b));
  std::copy(b.begin(), b.end(), m.recipient.recipient_public_key.begin());
  RETURN_IF_ERROR(r.Bytes("ephemeral public key", 32, &b));
  std::copy(b.begin(), b.end(), m.recipient.ephemeral_public_key.begin());
  RETURN_IF_ERROR(r.Bytes("wrapped DEK", kWrappedDekBytes, &b));
  std::copy(b.begin(), b.end(), m.recipient.wrapped_dek.begin());
  RETURN_IF_ERROR(r.Bytes("job digest", 32, &b));
  std::copy(b.begin(), b.end(), m.info.job_digest.begin());
  RETURN_IF_ERROR(r.U64("created", &m.info.created_unix));
  RETURN_IF_ERROR(r.U16("format id length", &id_len));
  RETURN_IF_ERROR(r.String("format id", id_len, &m.info.format_id));
  RETURN_IF_ERROR(ValidateFormatId(m.info.format_id));
  if (r.remaining() != 0) {
    return InvalidInput("model metadata has " + std::to_string(r.remaining()) + " bytes after the format id");
  }
  return m;
}

Result<SecretBytes> UnwrapModelDek(const SealedHeader& header, const ModelMetadata& meta,
                                   const SecretBytes& recipient_private_key) {
  RETURN_IF_ERROR(InitCrypto());
  if (recipient_private_key.size() != kX25519Bytes) return InvalidInput("X25519 private key must be 32 bytes");
  X25519PublicKey own{};
  if (crypto_scalarmult_base(own.data(), recipient_private_key.ExposeSecret().data()) != 0) {
    return Internal("crypto_scalarmult_base failed");
  }
  if (!ConstantTimeEquals(own, meta.recipient.recipient_public_key)) {
    return AuthFailed("the recipient public key in the file is not this export key's (altered recipient block)");
  }
  auto shared = X25519(recipient_private_key, meta.recipient.ephemeral_public_key);
  if (!shared.ok()) return AuthFailed("recipient block: ephemeral public key is a low-order point");
  ASSIGN_OR_RETURN(SecretBytes wrap_key,
                   WrapKey(*shared, meta.recipient.ephemeral_public_key, meta.recipient.recipient_public_key));
  const std::vector<uint8_t> aad = WrapAad(header);
  ASSIGN_OR_RETURN(SecretBytes dek, SecretBytes::Create(kAeadKeyBytes));
  unsigned long long len = 0;
  if (crypto_aead_chacha20poly1305_ietf_decrypt(dek.ExposeSecretMutable().data(), &len, nullptr,
                                                meta.recipient.wrapped_dek.data(), meta.recipient.wrapped_dek.size(),
                                                aad.data(), aad.size(), kWrapNonce.data(),
                                                wrap_key.ExposeSecret().data()) != 0 ||
      len != kAeadKeyBytes) {
    return AuthFailed("recipient block failed to unwrap (altered, or made for another key or file)");
  }
  return dek;
}

// ----------------------------------------------------------------- sealing

Result<std::unique_ptr<ModelExportWriter>> ModelExportWriter::Create(const ExportPublicKey& to,
                                                                     uint64_t payload_length,
                                                                     const ModelSealOptions& options,
                                                                     ByteSink* sink) {
  RETURN_IF_ERROR(InitCrypto());
  RETURN_IF_ERROR(ValidateFormatId(options.info.format_id));
  RETURN_IF_ERROR(ValidateObjectId(options.model_id).Annotate("model id"));
  std::unique_ptr<ModelExportWriter> w(new ModelExportWriter());
  ModelMetadata& m = w->meta_;
  m.info = options.info;
  if (m.info.created_unix == 0) m.info.created_unix = NowUnix();
  m.recipient.kind = kRecipientX25519;
  m.recipient.recipient_public_key = to.public_key;

  ASSIGN_OR_RETURN(SecretBytes ephemeral, SecretBytes::Random(kX25519Bytes));
  if (crypto_scalarmult_base(m.recipient.ephemeral_public_key.data(), ephemeral.ExposeSecret().data()) != 0) {
    return Internal("crypto_scalarmult_base failed");
  }
  auto shared = X25519(ephemeral, to.public_key);
  if (!shared.ok()) return InvalidInput("export public key is a low-order point: not a usable X25519 key");
  ASSIGN_OR_RETURN(SecretBytes wrap_key, WrapKey(*shared, m.recipient.ephemeral_public_key, to.public_key));
  ASSIGN_OR_RETURN(SecretBytes dek, SecretBytes::Random(kAeadKeyBytes));

  SealParams p;
  p.suite = options.suite;
  p.content_type = ContentType::kExportedModel;
  p.keystore_id = to.keystore_id;
  p.key_id = to.key_id;
  p.object_id = options.model_id;
  p.chunk_size = options.chunk_size;
  p.payload_length = payload_length;

  SealedHeader for_aad;  // the wrap's AAD names only the key ids
  for_aad.params.keystore_id = p.keystore_id;
  for_aad.params.key_id = p.key_id;
  const std::vector<uint8_t> aad = WrapAad(for_aad);
  unsigned long long len = 0;
  crypto_aead_chacha20poly1305_ietf_encrypt(m.recipient.wrapped_dek.data(), &len, dek.ExposeSecret().data(),
                                            dek.size(), aad.data(), aad.size(), nullptr, kWrapNonce.data(),
                                            wrap_key.ExposeSecret().data());
  if (len != kWrappedDekBytes) return Internal("DEK wrap length mismatch");
  p.metadata = EncodeModelMetadata(m);
  ASSIGN_OR_RETURN(w->writer_, SealedFileWriter::Create(p, dek, sink));
  return w;
}

Status ModelExportWriter::Append(ByteSpan plaintext) { return writer_->Append(plaintext); }
Status ModelExportWriter::Finish() { return writer_->Finish(); }

Result<ModelExportInfo> SealModelToFile(const ExportPublicKey& to, ByteSpan model, const ModelSealOptions& options,
                                        const std::string& out_path, bool overwrite) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  HashingFileSink sink(&out);
  ASSIGN_OR_RETURN(auto writer, ModelExportWriter::Create(to, model.size(), options, &sink));
  RETURN_IF_ERROR(writer->Append(model));
  RETURN_IF_ERROR(writer->Finish());
  RETURN_IF_ERROR(out.Commit());
  return ModelExportInfo{writer->header(), writer->metadata(), sink.Final()};
}

Result<ModelExportInfo> SealModelWithChunkSealer(const ExportPublicKey& to, uint64_t payload_length,
                                                 const ModelSealOptions& options, const std::string& out_path,
                                                 bool overwrite, const ChunkSealFn& seal_chunks) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  HashingFileSink sink(&out);
  ASSIGN_OR_RETURN(auto writer, ModelExportWriter::Create(to, payload_length, options, &sink));
  RETURN_IF_ERROR(seal_chunks(*writer));
  RETURN_IF_ERROR(writer->Finish());
  RETURN_IF_ERROR(out.Commit());
  return ModelExportInfo{writer->header(), writer->metadata(), sink.Final()};
}

Result<ModelExportInfo> SealModelFileToFile(const ExportPublicKey& to, const std::string& in_path,
                                            const ModelSealOptions& options, const std::string& out_path,
                                            bool overwrite, const ModelProgressFn& progress) {
  ASSIGN_OR_RETURN(FileReader in, FileReader::Open(in_path));
  const uint64_t total = in.size();
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  HashingFileSink sink(&out);
  ASSIGN_OR_RETURN(auto writer, ModelExportWriter::Create(to, total, options, &sink));
  // Locked staging: on the CPU path the model's plaintext passes through here.
  ASSIGN_OR_RETURN(SecretBytes buf, SecretBytes::Create(1u << 20));
  uint64_t done = 0;
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(in.Read(buf.ExposeSecretMutable().data(), buf.size(), &got));
    if (got == 0) break;
    if (got > total - done) return FailedPrecondition(in_path + ": grew while being sealed");
    RETURN_IF_ERROR(writer->Append(buf.ExposeSecret().first(got)));
    done += got;
    if (progress) progress(done, total);
  }
  if (done != total) return FailedPrecondition(in_path + ": shrank while being sealed");
  RETURN_IF_ERROR(writer->Finish());
  RETURN_IF_ERROR(out.Commit());
  return ModelExportInfo{writer->header(), writer->metadata(), sink.Final()};
}

// ----------------------------------------------------------------- opening

Result<ModelExportInfo> InspectModelExport(const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, SealedFileReader::Open(path));
  ModelExportInfo info;
  info.header = reader->header();
  RETURN_IF_ERROR(CheckIsModel(path, info.header));
  auto meta = ParseModelMetadata(info.header.params.metadata);
  if (!meta.ok()) return meta.status().Annotate(path);
  info.metadata = std::move(meta).value();
  ASSIGN_OR_RETURN(info.file_digest, SealedFileDigest(path));
  return info;
}

Result<std::unique_ptr<ModelExportReader>> ModelExportReader::Open(const std::string& path,
                                                                   const Keystore& keystore) {
  std::unique_ptr<ModelExportReader> r(new ModelExportReader());
  ASSIGN_OR_RETURN(r->reader_, SealedFileReader::Open(path));
  const SealedHeader& h = r->reader_->header();
  RETURN_IF_ERROR(CheckIsModel(path, h));
  auto meta = ParseModelMetadata(h.params.metadata);
  if (!meta.ok()) return meta.status().Annotate(path);
  r->meta_ = std::move(meta).value();
  if (h.params.keystore_id != keystore.id()) {
    return NotFound(path + ": sealed to an export key of keystore " + HexEncode(h.params.keystore_id) +
                    ", not of this keystore (" + HexEncode(keystore.id()) + ")");
  }
  auto private_key = keystore.GetExportPrivateKey(h.params.key_id);
  if (!private_key.ok()) return private_key.status().Annotate(path);
  auto dek = UnwrapModelDek(h, r->meta_, *private_key);
  if (!dek.ok()) return dek.status().Annotate(path);
  RETURN_IF_ERROR(r->reader_->Unlock(*dek));  // key commitment, then header tag
  return r;
}

Result<ModelExportInfo> OpenModelToFile(const std::string& path, const Keystore& keystore,
                                        const std::string& out_path, bool overwrite,
                                        const ModelProgressFn& progress) {
  ASSIGN_OR_RETURN(auto reader, ModelExportReader::Open(path, keystore));
  const SealedHeader& h = reader->header();
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  ASSIGN_OR_RETURN(SecretBytes buf, SecretBytes::Create(h.params.chunk_size));
  uint64_t done = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t n = static_cast<size_t>(h.ChunkPlaintextSize(i));
    auto chunk = buf.ExposeSecretMutable().first(n);
    RETURN_IF_ERROR(reader->ReadChunk(i, chunk));
    RETURN_IF_ERROR(out.Write(chunk.data(), n));
    done += n;
    if (progress) progress(done, h.params.payload_length);
  }
  // Only now, every chunk authenticated (the last one by its flag), does the output appear.
  RETURN_IF_ERROR(out.Commit());
  ASSIGN_OR_RETURN(Digest256 digest, SealedFileDigest(path));
  return ModelExportInfo{h, reader->metadata(), digest};
}

Result<SecretBytes> OpenModelToMemory(const std::string& path, const Keystore& keystore, uint64_t max_bytes,
                                      ModelExportInfo* info) {
  ASSIGN_OR_RETURN(auto reader, ModelExportReader::Open(path, keystore));
  const SealedHeader& h = reader->header();
  if (h.params.payload_length > max_bytes) {
    return InvalidInput(path + ": model of " + std::to_string(h.params.payload_length) + " bytes exceeds the limit of " +
                        std::to_string(max_bytes));
  }
  ASSIGN_OR_RETURN(SecretBytes model, SecretBytes::Create(static_cast<size_t>(h.params.payload_length)));
  uint64_t offset = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t n = static_cast<size_t>(h.ChunkPlaintextSize(i));
    // An empty payload has no buffer; its one (empty) chunk is still authenticated.
    std::span<uint8_t> out = n == 0 ? std::span<uint8_t>() : model.ExposeSecretMutable().subspan(offset, n);
    RETURN_IF_ERROR(reader->ReadChunk(i, out));
    offset += n;
  }
  if (info != nullptr) {
    ASSIGN_OR_RETURN(Digest256 digest, SealedFileDigest(path));
    *info = ModelExportInfo{h, reader->metadata(), digest};
  }
  return model;
}

Result<ModelExportInfo> VerifyModelExport(const std::string& path, const Keystore& keystore,
                                          const ModelProgressFn& progress) {
  ASSIGN_OR_RETURN(auto reader, ModelExportReader::Open(path, keystore));
  const SealedHeader& h = reader->header();
  ASSIGN_OR_RETURN(SecretBytes buf, SecretBytes::Create(h.params.chunk_size));
  uint64_t done = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t n = static_cast<size_t>(h.ChunkPlaintextSize(i));
    RETURN_IF_ERROR(reader->ReadChunk(i, buf.ExposeSecretMutable().first(n)));
    done += n;
    if (progress) progress(done, h.params.payload_length);
  }
  ASSIGN_OR_RETURN(Digest256 digest, SealedFileDigest(path));
  return ModelExportInfo{h, reader->metadata(), digest};
}

}  // namespace enclave::crypto
