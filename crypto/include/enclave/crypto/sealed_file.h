// The sealed-file envelope (docs/formats/sealed-dataset.md): a header in the clear but
// authenticated, then chunks of AEAD ciphertext in the STREAM construction. Chunks open
// independently (random access, thousands at once on a GPU) while the file as a whole is
// authenticated: the chunk index and a last-chunk flag are in each nonce, the header
// digest is every chunk's associated data, the header carries a key commitment and an
// HMAC, and the header fixes the chunk count and file size.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto {

inline constexpr char kSealedMagic[8] = {'E', 'N', 'C', 'L', 'S', 'E', 'A', 'L'};
inline constexpr uint16_t kSealedVersion = 1;
inline constexpr size_t kSealedFixedPrefix = 20;  // magic..header length: enough to size the header
inline constexpr uint32_t kMaxHeaderBytes = 17u << 20;
inline constexpr uint32_t kMaxMetadataBytes = 16u << 20;
inline constexpr uint32_t kMaxChunkBytes = 1u << 30;
inline constexpr size_t kMaxObjectIdBytes = 128;

// What the payload is. Wire values (u16); append-only.
enum class ContentType : uint16_t {
  kTabularDataset = 1,  // docs/formats/sealed-dataset.md
  kExportedModel = 2,   // docs/formats/model-export.md: opaque model bytes sealed to a public key
};

using Id128 = std::array<uint8_t, 16>;

// The fields a sealer chooses. Salt, commitment and tag are computed.
struct SealParams {
  Suite suite = Suite::kAes256Gcm;
  ContentType content_type = ContentType::kTabularDataset;
  Id128 keystore_id{};
  Id128 key_id{};
  std::string object_id;          // dataset id: [A-Za-z0-9._:-], 1..128 bytes
  uint32_t chunk_size = 0;        // plaintext bytes per chunk (every chunk but the last)
  uint64_t payload_length = 0;    // total plaintext bytes
  std::vector<uint8_t> metadata;  // content-specific, authenticated, not encrypted
};

struct SealedHeader {
  SealParams params;
  uint16_t version = kSealedVersion;
  std::array<uint8_t, 32> salt{};
  uint64_t chunk_count = 0;
  std::array<uint8_t, 32> commitment{};
  std::array<uint8_t, 32> tag{};
  uint32_t header_length = 0;
  Digest256 header_digest{};  // SHA-256 of the header bytes: every chunk's AAD

  uint64_t ChunkPlaintextSize(uint64_t index) const;
  uint64_t ChunkOffset(uint64_t index) const;  // in the file
  uint64_t FileSize() const;
};

uint64_t ChunkCountFor(uint64_t payload_length, uint32_t chunk_size);
Status ValidateObjectId(std::string_view id);

// From the first kSealedFixedPrefix bytes: checks magic and version, returns the
// header length (bounded by kMaxHeaderBytes).
Result<uint32_t> PeekHeaderLength(ByteSpan prefix);

// Parses and checks the structure of a header (no key needed). `bytes` may extend past
// the header; header_length says where it ends. Never trusts a length before checking it.
Result<SealedHeader> ParseSealedHeader(ByteSpan bytes);

// The 12-byte chunk nonce: u64 big-endian index, three zero bytes, last-chunk flag.
std::array<uint8_t, kAeadNonceBytes> ChunkNonce(uint64_t index, bool last);

// Holds the per-file subkeys derived from a DEK; verifies the header and opens chunks.
class SealedFileKey {
 public:
  // Checks the key commitment (wrong key), then the header tag (edited header).
  static Result<SealedFileKey> Unlock(const SealedHeader& header, const SecretBytes& dek);
  // in: ciphertext || tag of chunk `index`; out: its plaintext size.
  Status OpenChunk(uint64_t index, ByteSpan in, std::span<uint8_t> out);
  const SealedHeader& header() const { return header_; }

 private:
  // A copy: the header it authenticated cannot change under it.
  SealedFileKey(SealedHeader h, std::unique_ptr<Aead> aead) : header_(std::move(h)), aead_(std::move(aead)) {}
  SealedHeader header_;
  std::unique_ptr<Aead> aead_;
};

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(ByteSpan bytes) = 0;
};

class FileSink final : public ByteSink {
 public:
  explicit FileSink(AtomicOutputFile* file) : file_(file) {}
  Status Write(ByteSpan bytes) override { return file_->Write(bytes.data(), bytes.size()); }

 private:
  AtomicOutputFile* file_;
};

class MemorySink final : public ByteSink {
 public:
  Status Write(ByteSpan bytes) override {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return OkStatus();
  }
  std::vector<uint8_t> data;
};

// Streams a payload of known length into a sealed file. Memory: two chunks.
class SealedFileWriter {
 public:
  static Result<std::unique_ptr<SealedFileWriter>> Create(const SealParams& params,
                                                          const SecretBytes& dek, ByteSink* sink);
  Status Append(ByteSpan plaintext);
  // Fails unless exactly payload_length bytes were appended (or, after AppendSealed, the
  // whole file's sealed chunks).
  Status Finish();
  const SealedHeader& header() const { return header_; }

  // For a payload sealed elsewhere, so that its plaintext never reaches this process's
  // memory (kernels::SealChunksOnGpu seals a model in GPU memory): the file's payload key,
  // and chunks already sealed under it (each chunk's ciphertext and tag, in order, in
  // pieces of whole chunks) to write after the header. Not to be mixed with Append.
  const SecretBytes& payload_key() const { return payload_key_; }
  Status AppendSealed(ByteSpan sealed_chunks);

 private:
  SealedFileWriter() = default;
  Status SealBuffered(bool last);
  SealedHeader header_;
  SecretBytes payload_key_;
  uint64_t sealed_bytes_ = 0;  // written by AppendSealed
  std::unique_ptr<Aead> aead_;
  ByteSink* sink_ = nullptr;
  SecretBytes buffer_;  // plaintext staging: locked memory
  size_t buffered_ = 0;
  std::vector<uint8_t> out_;
  uint64_t appended_ = 0;
  uint64_t next_chunk_ = 0;
  bool finished_ = false;
};

// The nonce of chunk `index` (docs/formats/sealed-dataset.md): the index as a u64
// big-endian, three zero bytes, then 1 for the file's last chunk, else 0. Also the
// chunked checkpoints' (docs/training.md#checkpoints).
std::array<uint8_t, kAeadNonceBytes> ChunkNonce(uint64_t index, bool last);

// Random-access reader of a sealed file on disk.
class SealedFileReader {
 public:
  // Reads and parses the header; checks the file size against it.
  static Result<std::unique_ptr<SealedFileReader>> Open(const std::string& path);
  const SealedHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  // Authenticates the key against the header; required before ReadChunk.
  Status Unlock(const SecretBytes& dek);
  // Decrypts and authenticates chunk `index` into `out`, which must be exactly
  // header().ChunkPlaintextSize(index) bytes (a slice of the caller's locked buffer).
  Status ReadChunk(uint64_t index, std::span<uint8_t> out);

 private:
  explicit SealedFileReader(FileReader file) : file_(std::move(file)) {}
  FileReader file_;
  SealedHeader header_;
  std::vector<uint8_t> header_bytes_;
  std::unique_ptr<SealedFileKey> key_;
  std::vector<uint8_t> ciphertext_;
};

// SHA-256 over the whole sealed file: the dataset digest that job reports and audit
// entries name. Needs no key.
Result<Digest256> SealedFileDigest(const std::string& path);

// The file's SHA-256 and its header digest (SHA-256 of the header_length header bytes, the
// associated data of every chunk), from one read of the file. A reader that then reads
// the file again and finds this header digest has read the bytes hashed here: every chunk
// authenticates against it, and another file of the same data has another header (salt).
struct SealedFileDigests {
  Digest256 file{}, header{};
};
Result<SealedFileDigests> DigestSealedFile(const std::string& path);

}  // namespace enclave::crypto
