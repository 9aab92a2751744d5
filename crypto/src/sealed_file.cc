#include "enclave/crypto/sealed_file.h"

#include <algorithm>
#include <cstring>

namespace enclave::crypto {
namespace {

constexpr std::string_view kInfoPayloadKey = "enclave sealed-file v1 payload key";
constexpr std::string_view kInfoHeaderKey = "enclave sealed-file v1 header key";
constexpr std::string_view kInfoCommitment = "enclave sealed-file v1 key commitment";

struct Subkeys {
  SecretBytes payload_key, header_key;
  std::array<uint8_t, 32> commitment{};
};

Result<Subkeys> DeriveSubkeys(const SecretBytes& dek, std::span<const uint8_t> salt) {
  if (dek.size() != kAeadKeyBytes) return InvalidInput("data key must be 32 bytes");
  Subkeys k;
  ASSIGN_OR_RETURN(k.payload_key, HkdfSha256(dek, salt, kInfoPayloadKey, 32));
  ASSIGN_OR_RETURN(k.header_key, HkdfSha256(dek, salt, kInfoHeaderKey, 32));
  ASSIGN_OR_RETURN(SecretBytes commitment, HkdfSha256(dek, salt, kInfoCommitment, 32));
  std::memcpy(k.commitment.data(), commitment.ExposeSecret().data(), 32);
  return k;
}

// Header bytes up to and including the commitment (the HMAC input).
std::vector<uint8_t> EncodeHeaderBody(const SealedHeader& h) {
  const SealParams& p = h.params;
  ByteWriter w;
  w.Bytes(ByteSpan(reinterpret_cast<const uint8_t*>(kSealedMagic), sizeof kSealedMagic));
  w.U16(h.version);
  w.U16(static_cast<uint16_t>(p.suite));
  w.U16(static_cast<uint16_t>(p.content_type));
  w.U16(0);  // reserved
  w.U32(h.header_length);
  w.Bytes(p.keystore_id);
  w.Bytes(p.key_id);
  w.Bytes(h.salt);
  w.U32(p.chunk_size);
  w.U64(p.payload_length);
  w.U64(h.chunk_count);
  w.U16(static_cast<uint16_t>(p.object_id.size()));
  w.Bytes(p.object_id);
  w.U32(static_cast<uint32_t>(p.metadata.size()));
  w.Bytes(p.metadata);
  w.Bytes(h.commitment);
  return std::move(w.bytes());
}

uint32_t HeaderLengthFor(const SealParams& p) {
  return static_cast<uint32_t>(kSealedFixedPrefix + 16 + 16 + 32 + 4 + 8 + 8 + 2 + p.object_id.size() + 4 +
                               p.metadata.size() + 32 + 32);
}

Status CheckParams(const SealParams& p) {
  RETURN_IF_ERROR(ValidateObjectId(p.object_id));
  if (p.chunk_size == 0 || p.chunk_size > kMaxChunkBytes) {
    return InvalidInput("chunk size " + std::to_string(p.chunk_size) + " outside 1.." +
                        std::to_string(kMaxChunkBytes));
  }
  if (p.metadata.size() > kMaxMetadataBytes) return InvalidInput("metadata larger than 16 MiB");
  if (p.content_type != ContentType::kTabularDataset && p.content_type != ContentType::kExportedModel) {
    return Unsupported("unknown content type " + std::to_string(static_cast<unsigned>(p.content_type)));
  }
  return OkStatus();
}

}  // namespace

uint64_t ChunkCountFor(uint64_t payload_length, uint32_t chunk_size) {
  // An empty payload still has one (empty, final) chunk, so even it is authenticated.
  if (payload_length == 0) return 1;
  return payload_length / chunk_size + (payload_length % chunk_size != 0 ? 1 : 0);
}

Status ValidateObjectId(std::string_view id) {
  if (id.empty() || id.size() > kMaxObjectIdBytes) {
    return InvalidInput("dataset id must be 1.." + std::to_string(kMaxObjectIdBytes) + " bytes");
  }
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-' || c == ':';
    if (!ok) return InvalidInput("dataset id may hold only letters, digits and . _ - :");
  }
  return OkStatus();
}

uint64_t SealedHeader::ChunkPlaintextSize(uint64_t index) const {
  if (index + 1 < chunk_count) return params.chunk_size;
  return params.payload_length - (chunk_count - 1) * static_cast<uint64_t>(params.chunk_size);
}

uint64_t SealedHeader::ChunkOffset(uint64_t index) const {
  return header_length + index * (static_cast<uint64_t>(params.chunk_size) + kAeadTagBytes);
}

uint64_t SealedHeader::FileSize() const {
  return header_length + params.payload_length + chunk_count * kAeadTagBytes;
}

std::array<uint8_t, kAeadNonceBytes> ChunkNonce(uint64_t index, bool last) {
  std::array<uint8_t, kAeadNonceBytes> n{};
  for (int i = 0; i < 8; ++i) n[i] = static_cast<uint8_t>(index >> (56 - 8 * i));
  n[11] = last ? 1 : 0;
  return n;
}

Result<uint32_t> PeekHeaderLength(ByteSpan prefix) {
  ByteReader r(prefix);
  ByteSpan magic;
  uint16_t version = 0, ignored = 0;
  uint32_t header_length = 0;
  RETURN_IF_ERROR(r.Bytes("magic", 8, &magic));
  if (std::memcmp(magic.data(), kSealedMagic, 8) != 0) {
    return InvalidInput("not a sealed file (bad magic at offset 0)");
  }
  RETURN_IF_ERROR(r.U16("version", &version));
  if (version != kSealedVersion) {
    return Unsupported("sealed-file format version " + std::to_string(version) +
                       " is not supported (this build reads version 1)");
  }
  for (const char* field : {"suite", "content_type", "reserved"}) RETURN_IF_ERROR(r.U16(field, &ignored));
  RETURN_IF_ERROR(r.U32("header_length", &header_length));
  if (header_length > kMaxHeaderBytes) {
    return InvalidInput("header length " + std::to_string(header_length) + " exceeds the limit");
  }
  return header_length;
}

Result<SealedHeader> ParseSealedHeader(ByteSpan bytes) {
  RETURN_IF_ERROR(PeekHeaderLength(bytes).status());
  ByteReader r(bytes);
  SealedHeader h;
  SealParams& p = h.params;
  ByteSpan magic;
  RETURN_IF_ERROR(r.Bytes("magic", 8, &magic));
  RETURN_IF_ERROR(r.U16("version", &h.version));
  uint16_t suite = 0, content = 0, reserved = 0;
  RETURN_IF_ERROR(r.U16("suite", &suite));
  ASSIGN_OR_RETURN(p.suite, SuiteFromWire(suite));
  RETURN_IF_ERROR(r.U16("content_type", &content));
  p.content_type = static_cast<ContentType>(content);
  RETURN_IF_ERROR(r.U16("reserved", &reserved));
  if (reserved != 0) return InvalidInput("reserved header field at offset 14 is not zero");
  RETURN_IF_ERROR(r.U32("header_length", &h.header_length));
  if (bytes.size() < h.header_length) {
    return InvalidInput("file ends inside the header (" + std::to_string(bytes.size()) + " of " +
                        std::to_string(h.header_length) + " bytes)");
  }
  ByteSpan b;
  RETURN_IF_ERROR(r.Bytes("keystore_id", 16, &b));
  std::copy(b.begin(), b.end(), p.keystore_id.begin());
  RETURN_IF_ERROR(r.Bytes("key_id", 16, &b));
  std::copy(b.begin(), b.end(), p.key_id.begin());
  RETURN_IF_ERROR(r.Bytes("salt", 32, &b));
  std::copy(b.begin(), b.end(), h.salt.begin());
  RETURN_IF_ERROR(r.U32("chunk_size", &p.chunk_size));
  RETURN_IF_ERROR(r.U64("payload_length", &p.payload_length));
  RETURN_IF_ERROR(r.U64("chunk_count", &h.chunk_count));
  uint16_t id_len = 0;
  RETURN_IF_ERROR(r.U16("object_id_length", &id_len));
  RETURN_IF_ERROR(r.String("object_id", id_len, &p.object_id));
  uint32_t meta_len = 0;
  RETURN_IF_ERROR(r.U32("metadata_length", &meta_len));
  if (meta_len > kMaxMetadataBytes) return InvalidInput("metadata length exceeds 16 MiB");
  RETURN_IF_ERROR(r.Bytes("metadata", meta_len, &b));
  p.metadata.assign(b.begin(), b.end());
  RETURN_IF_ERROR(r.Bytes("commitment", 32, &b));
  std::copy(b.begin(), b.end(), h.commitment.begin());
  RETURN_IF_ERROR(r.Bytes("header_tag", 32, &b));
  std::copy(b.begin(), b.end(), h.tag.begin());

  RETURN_IF_ERROR(CheckParams(p));
  if (r.offset() != h.header_length) {
    return InvalidInput("header length field says " + std::to_string(h.header_length) +
                        " bytes but its fields end at " + std::to_string(r.offset()));
  }
  if (h.chunk_count != ChunkCountFor(p.payload_length, p.chunk_size)) {
    return InvalidInput("chunk count " + std::to_string(h.chunk_count) + " does not match payload length " +
                        std::to_string(p.payload_length) + " in chunks of " + std::to_string(p.chunk_size));
  }
  // Keeps FileSize() and offsets far from 64-bit overflow.
  if (p.payload_length > (uint64_t{1} << 56)) return InvalidInput("payload length beyond 2^56 bytes");
  h.header_digest = Sha256(bytes.first(h.header_length));
  return h;
}

Result<SealedFileKey> SealedFileKey::Unlock(const SealedHeader& header, const SecretBytes& dek) {
  ASSIGN_OR_RETURN(Subkeys k, DeriveSubkeys(dek, header.salt));
  if (!ConstantTimeEquals(k.commitment, header.commitment)) {
    return AuthFailed("key commitment mismatch: the key is not this file's key "
                      "(wrong keystore entry, or the header was altered)");
  }
  Digest256 tag = HmacSha256(k.header_key, EncodeHeaderBody(header));
  if (!ConstantTimeEquals(tag, header.tag)) return AuthFailed("header authentication failed: header was altered");
  ASSIGN_OR_RETURN(std::unique_ptr<Aead> aead, Aead::Create(header.params.suite, k.payload_key));
  return SealedFileKey(header, std::move(aead));
}

Status SealedFileKey::OpenChunk(uint64_t index, ByteSpan in, std::span<uint8_t> out) {
  const SealedHeader& h = header_;
  if (index >= h.chunk_count) return InvalidInput("chunk index " + std::to_string(index) + " out of range");
  if (in.size() != h.ChunkPlaintextSize(index) + kAeadTagBytes || out.size() + kAeadTagBytes != in.size()) {
    return InvalidInput("chunk " + std::to_string(index) + " has the wrong size");
  }
  auto nonce = ChunkNonce(index, index + 1 == h.chunk_count);
  Status s = aead_->Open(nonce, h.header_digest, in, out);
  if (!s.ok()) return AuthFailed("chunk " + std::to_string(index) + " failed authentication");
  return OkStatus();
}

Result<std::unique_ptr<SealedFileWriter>> SealedFileWriter::Create(const SealParams& params,
                                                                   const SecretBytes& dek, ByteSink* sink) {
  RETURN_IF_ERROR(CheckParams(params));
  std::unique_ptr<SealedFileWriter> w(new SealedFileWriter());
  SealedHeader& h = w->header_;
  h.params = params;
  h.chunk_count = ChunkCountFor(params.payload_length, params.chunk_size);
  h.header_length = HeaderLengthFor(params);
  RandomBytes(h.salt);
  ASSIGN_OR_RETURN(Subkeys k, DeriveSubkeys(dek, h.salt));
  h.commitment = k.commitment;
  std::vector<uint8_t> bytes = EncodeHeaderBody(h);
  h.tag = HmacSha256(k.header_key, bytes);
  bytes.insert(bytes.end(), h.tag.begin(), h.tag.end());
  if (bytes.size() != h.header_length) return Internal("sealed header length mismatch");
  h.header_digest = Sha256(bytes);
  ASSIGN_OR_RETURN(w->aead_, Aead::Create(params.suite, k.payload_key));
  w->payload_key_ = std::move(k.payload_key);
  ASSIGN_OR_RETURN(w->buffer_, SecretBytes::Create(params.chunk_size));
  w->out_.resize(params.chunk_size + kAeadTagBytes);
  w->sink_ = sink;
  RETURN_IF_ERROR(sink->Write(bytes));
  return w;
}

Status SealedFileWriter::SealBuffered(bool last) {
  auto nonce = ChunkNonce(next_chunk_, last);
  auto plain = buffer_.ExposeSecret().first(buffered_);
  std::span<uint8_t> out(out_.data(), buffered_ + kAeadTagBytes);
  RETURN_IF_ERROR(aead_->Seal(nonce, header_.header_digest, plain, out));
  RETURN_IF_ERROR(sink_->Write(out));
  ++next_chunk_;
  buffered_ = 0;
  return OkStatus();
}

Status SealedFileWriter::AppendSealed(ByteSpan sealed_chunks) {
  if (finished_) return FailedPrecondition("append after finish");
  if (appended_ != 0) return FailedPrecondition("sealed chunks appended to a writer fed plaintext");
  const uint64_t want = header_.FileSize() - header_.header_length;
  const uint64_t at = sealed_bytes_ + sealed_chunks.size();
  // Whole chunks only: the piece must end where a chunk ends.
  const uint64_t stride = uint64_t{header_.params.chunk_size} + kAeadTagBytes;
  if (at > want || (at != want && at % stride != 0)) {
    return InvalidInput("sealed chunks end at byte " + std::to_string(at) + " of " + std::to_string(want) +
                        ", not at a chunk boundary");
  }
  RETURN_IF_ERROR(sink_->Write(sealed_chunks));
  sealed_bytes_ = at;
  return OkStatus();
}

Status SealedFileWriter::Append(ByteSpan plaintext) {
  if (finished_) return FailedPrecondition("append after finish");
  if (sealed_bytes_ != 0) return FailedPrecondition("plaintext appended to a writer fed sealed chunks");
  if (plaintext.size() > header_.params.payload_length - appended_) {
    return InvalidInput("more payload than the header announced (" +
                        std::to_string(header_.params.payload_length) + " bytes)");
  }
  const size_t chunk = header_.params.chunk_size;
  auto dst = buffer_.ExposeSecretMutable();
  while (!plaintext.empty()) {
    size_t take = std::min(plaintext.size(), chunk - buffered_);
    std::memcpy(dst.data() + buffered_, plaintext.data(), take);
    buffered_ += take;
    appended_ += take;
    plaintext = plaintext.subspan(take);
    // A full chunk is sealed now unless it is the last one (sealed in Finish).
    if (buffered_ == chunk && appended_ < header_.params.payload_length) RETURN_IF_ERROR(SealBuffered(false));
  }
  return OkStatus();
}

Status SealedFileWriter::Finish() {
  if (finished_) return FailedPrecondition("finished twice");
  if (sealed_bytes_ != 0) {
    const uint64_t want = header_.FileSize() - header_.header_length;
    if (sealed_bytes_ != want) {
      return InvalidInput("sealed chunks ended after " + std::to_string(sealed_bytes_) + " of " +
                          std::to_string(want) + " bytes");
    }
    finished_ = true;
    return OkStatus();
  }
  if (appended_ != header_.params.payload_length) {
    return InvalidInput("payload ended after " + std::to_string(appended_) + " of " +
                        std::to_string(header_.params.payload_length) + " announced bytes");
  }
  RETURN_IF_ERROR(SealBuffered(true));
  finished_ = true;
  if (next_chunk_ != header_.chunk_count) return Internal("sealed chunk count mismatch");
  return OkStatus();
}

Result<std::unique_ptr<SealedFileReader>> SealedFileReader::Open(const std::string& path) {
  ASSIGN_OR_RETURN(FileReader file, FileReader::Open(path));
  std::unique_ptr<SealedFileReader> r(new SealedFileReader(std::move(file)));
  const uint64_t size = r->file_.size();
  if (size < kSealedFixedPrefix) return InvalidInput(path + ": too short to be a sealed file");
  std::vector<uint8_t> prefix(kSealedFixedPrefix);
  RETURN_IF_ERROR(r->file_.ReadAt(0, prefix.data(), prefix.size()));
  auto header_length = PeekHeaderLength(prefix);
  if (!header_length.ok()) return header_length.status().Annotate(path);
  if (*header_length > size) {
    return AuthFailed(path + ": file ends inside the header (" + std::to_string(size) + " of " +
                      std::to_string(*header_length) + " bytes): truncated");
  }
  r->header_bytes_.resize(*header_length);
  RETURN_IF_ERROR(r->file_.ReadAt(0, r->header_bytes_.data(), *header_length));
  auto header = ParseSealedHeader(r->header_bytes_);
  if (!header.ok()) return header.status().Annotate(path);
  r->header_ = std::move(header).value();
  const uint64_t expected = r->header_.FileSize();
  if (size != expected) {
    return AuthFailed(path + ": file is " + std::to_string(size) + " bytes, header says " +
                      std::to_string(expected) + (size < expected ? " (truncated)" : " (extra bytes)"));
  }
  return r;
}

Status SealedFileReader::Unlock(const SecretBytes& dek) {
  auto key = SealedFileKey::Unlock(header_, dek);
  if (!key.ok()) return key.status().Annotate(path());
  key_ = std::make_unique<SealedFileKey>(std::move(key).value());
  ciphertext_.resize(header_.params.chunk_size + kAeadTagBytes);
  return OkStatus();
}

Status SealedFileReader::ReadChunk(uint64_t index, std::span<uint8_t> out) {
  if (!key_) return FailedPrecondition("sealed file not unlocked");
  if (index >= header_.chunk_count) return InvalidInput("chunk index out of range");
  const size_t len = header_.ChunkPlaintextSize(index) + kAeadTagBytes;
  RETURN_IF_ERROR(file_.ReadAt(header_.ChunkOffset(index), ciphertext_.data(), len));
  Status s = key_->OpenChunk(index, ByteSpan(ciphertext_.data(), len), out);
  if (!s.ok()) return s.Annotate(path());
  return OkStatus();
}

Result<Digest256> SealedFileDigest(const std::string& path) {
  ASSIGN_OR_RETURN(FileReader file, FileReader::Open(path));
  Sha256Hasher hasher;
  std::vector<uint8_t> buf(1 << 20);
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(file.Read(buf.data(), buf.size(), &got));
    if (got == 0) break;
    hasher.Update(ByteSpan(buf.data(), got));
  }
  return hasher.Final();
}

Result<SealedFileDigests> DigestSealedFile(const std::string& path) {
  ASSIGN_OR_RETURN(FileReader file, FileReader::Open(path));
  Sha256Hasher whole, header;
  std::vector<uint8_t> prefix;  // the file's first bytes, until the header's length is known
  uint64_t header_left = 0;
  bool header_known = false;
  std::vector<uint8_t> buf(1 << 20);
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(file.Read(buf.data(), buf.size(), &got));
    if (got == 0) break;
    ByteSpan bytes(buf.data(), got);
    whole.Update(bytes);
    if (!header_known) {
      prefix.insert(prefix.end(), bytes.begin(), bytes.end());
      if (prefix.size() < kSealedFixedPrefix) continue;
      Result<uint32_t> header_length = PeekHeaderLength(prefix);
      if (!header_length.ok()) return header_length.status().Annotate(path);
      header_known = true;
      header_left = *header_length;
      bytes = ByteSpan(prefix);  // hash the header from the start
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(header_left, bytes.size()));
    header.Update(bytes.first(n));
    header_left -= n;
  }
  if (!header_known || header_left > 0) return InvalidInput(path + ": shorter than its sealed-file header");
  return SealedFileDigests{whole.Final(), header.Final()};
}

}  // namespace enclave::crypto
