// Round trips of the sealed-file envelope through both suites, its byte layout pinned
// against an independent derivation (HKDF subkeys, header HMAC, chunk nonces, AAD), and
// misuse of the writer and reader.
#include "enclave/crypto/sealed_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "crypto_test_util.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT

SealParams Params(Suite suite, uint32_t chunk, uint64_t length) {
  SealParams p;
  p.suite = suite;
  p.content_type = ContentType::kTabularDataset;
  for (int i = 0; i < 16; ++i) {
    p.keystore_id[i] = static_cast<uint8_t>(0x10 + i);
    p.key_id[i] = static_cast<uint8_t>(0xa0 + i);
  }
  p.object_id = "hospital.ward-7:admissions_2024";
  p.chunk_size = chunk;
  p.payload_length = length;
  p.metadata = Bytes("{\"columns\":[\"age\",\"los\"]}");
  return p;
}

// Seals `payload` into memory, appending in pieces of `piece` bytes (0: all at once).
Result<std::vector<uint8_t>> SealToMemory(const SealParams& p, const SecretBytes& dek, ByteSpan payload,
                                          size_t piece = 0) {
  MemorySink sink;
  ASSIGN_OR_RETURN(auto writer, SealedFileWriter::Create(p, dek, &sink));
  if (piece == 0) piece = std::max<size_t>(payload.size(), 1);
  for (size_t off = 0; off < payload.size(); off += piece) {
    RETURN_IF_ERROR(writer->Append(payload.subspan(off, std::min(piece, payload.size() - off))));
  }
  RETURN_IF_ERROR(writer->Finish());
  return std::move(sink.data);
}

// Parse + unlock + open every chunk; returns the plaintext.
Result<std::vector<uint8_t>> OpenFromMemory(ByteSpan file, const SecretBytes& dek) {
  ASSIGN_OR_RETURN(SealedHeader h, ParseSealedHeader(file));
  if (h.FileSize() != file.size()) return AuthFailed("size mismatch");
  ASSIGN_OR_RETURN(SealedFileKey key, SealedFileKey::Unlock(h, dek));
  std::vector<uint8_t> out(h.params.payload_length);
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t n = h.ChunkPlaintextSize(i);
    RETURN_IF_ERROR(key.OpenChunk(i, file.subspan(h.ChunkOffset(i), n + kAeadTagBytes),
                                  std::span<uint8_t>(out.data() + i * h.params.chunk_size, n)));
  }
  return out;
}

class SealedRoundTrip : public ::testing::TestWithParam<std::tuple<Suite, uint32_t>> {};

TEST_P(SealedRoundTrip, AllSizesAndAppendPatterns) {
  const auto [suite, chunk] = GetParam();
  SecretBytes dek = RandomSecret(32);
  const uint64_t sizes[] = {0, 1, chunk - 1u, chunk, chunk + 1u, 5ull * chunk + 7, 6ull * chunk};
  for (uint64_t size : sizes) {
    for (size_t piece : {size_t{0}, size_t{1}, size_t{chunk} / 3 + 1, size_t{chunk}}) {
      if (piece == 1 && size > 600) continue;  // byte-by-byte only on small payloads
      SCOPED_TRACE("suite " + std::string(SuiteName(suite)) + " chunk " + std::to_string(chunk) + " size " +
                   std::to_string(size) + " piece " + std::to_string(piece));
      const std::vector<uint8_t> payload = PatternBytes(size, static_cast<uint32_t>(size + piece));
      const SealParams p = Params(suite, chunk, size);
      ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> file, SealToMemory(p, dek, payload, piece));

      ASSERT_OK_AND_ASSIGN(SealedHeader h, ParseSealedHeader(file));
      const uint64_t chunks = size == 0 ? 1 : (size + chunk - 1) / chunk;
      EXPECT_EQ(h.chunk_count, chunks);
      EXPECT_EQ(ChunkCountFor(size, chunk), chunks);
      EXPECT_EQ(h.FileSize(), file.size());
      EXPECT_EQ(file.size(), h.header_length + size + chunks * kAeadTagBytes);
      EXPECT_EQ(h.params.suite, suite);
      EXPECT_EQ(h.params.object_id, p.object_id);
      EXPECT_EQ(h.params.metadata, p.metadata);
      EXPECT_EQ(h.params.keystore_id, p.keystore_id);
      EXPECT_EQ(h.params.key_id, p.key_id);
      EXPECT_EQ(h.params.chunk_size, chunk);
      EXPECT_EQ(h.params.payload_length, size);
      uint64_t total = 0;
      for (uint64_t i = 0; i < h.chunk_count; ++i) {
        EXPECT_EQ(h.ChunkOffset(i), h.header_length + i * (chunk + kAeadTagBytes));
        total += h.ChunkPlaintextSize(i);
      }
      EXPECT_EQ(total, size);
      ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> back, OpenFromMemory(file, dek));
      EXPECT_EQ(back, payload);
    }
  }
}

std::string RoundTripName(const ::testing::TestParamInfo<std::tuple<Suite, uint32_t>>& p) {
  return std::string(std::get<0>(p.param) == Suite::kAes256Gcm ? "Aes256Gcm" : "ChaCha20Poly1305") + "_chunk" +
         std::to_string(std::get<1>(p.param));
}

INSTANTIATE_TEST_SUITE_P(BothSuites, SealedRoundTrip,
                         ::testing::Combine(::testing::Values(Suite::kAes256Gcm, Suite::kChaCha20Poly1305),
                                            ::testing::Values(64u, 1000u, 4096u)),
                         RoundTripName);

// The envelope byte by byte, derived here independently of sealed_file.cc: a change to the
// format (key derivation labels, field order, nonce layout, AAD) fails this test.
TEST(SealedFormat, LayoutAndKeyDerivationPinned) {
  for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    SCOPED_TRACE(std::string(SuiteName(suite)));
    SecretBytes dek = RandomSecret(32);
    const uint32_t chunk = 64;
    const std::vector<uint8_t> payload = PatternBytes(2 * chunk + 5, 9);
    const SealParams p = Params(suite, chunk, payload.size());
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> file, SealToMemory(p, dek, payload));

    // Fixed prefix, little-endian.
    ASSERT_EQ(std::memcmp(file.data(), "ENCLSEAL", 8), 0);
    auto le = [&](size_t off, int n) {
      uint64_t v = 0;
      for (int i = 0; i < n; ++i) v |= uint64_t{file[off + i]} << (8 * i);
      return v;
    };
    EXPECT_EQ(le(8, 2), 1u);                               // version
    EXPECT_EQ(le(10, 2), static_cast<uint16_t>(suite));    // suite
    EXPECT_EQ(le(12, 2), 1u);                              // content type
    EXPECT_EQ(le(14, 2), 0u);                              // reserved
    const size_t header_len = le(16, 4);
    EXPECT_EQ(header_len, 20 + 16 + 16 + 32 + 4 + 8 + 8 + 2 + p.object_id.size() + 4 + p.metadata.size() + 32 + 32);
    EXPECT_TRUE(std::equal(p.keystore_id.begin(), p.keystore_id.end(), file.begin() + 20));
    EXPECT_TRUE(std::equal(p.key_id.begin(), p.key_id.end(), file.begin() + 36));
    const ByteSpan salt(file.data() + 52, 32);
    EXPECT_FALSE(AllZero(salt));
    EXPECT_EQ(le(84, 4), chunk);
    EXPECT_EQ(le(88, 8), payload.size());
    EXPECT_EQ(le(96, 8), 3u);
    EXPECT_EQ(le(104, 2), p.object_id.size());
    EXPECT_EQ(std::string(file.begin() + 106, file.begin() + 106 + static_cast<long>(p.object_id.size())), p.object_id);
    const size_t meta_at = 106 + p.object_id.size();
    EXPECT_EQ(le(meta_at, 4), p.metadata.size());
    EXPECT_TRUE(std::equal(p.metadata.begin(), p.metadata.end(), file.begin() + static_cast<long>(meta_at + 4)));
    const size_t commit_at = meta_at + 4 + p.metadata.size();
    ASSERT_EQ(commit_at + 64, header_len);

    // Commitment and header tag: HKDF-SHA256(dek, salt, label) subkeys.
    ASSERT_OK_AND_ASSIGN(SecretBytes commitment, HkdfSha256(dek, salt, "enclave sealed-file v1 key commitment", 32));
    EXPECT_TRUE(std::equal(commitment.ExposeSecret().begin(), commitment.ExposeSecret().end(),
                           file.begin() + static_cast<long>(commit_at)));
    ASSERT_OK_AND_ASSIGN(SecretBytes header_key, HkdfSha256(dek, salt, "enclave sealed-file v1 header key", 32));
    Digest256 tag = HmacSha256(header_key, ByteSpan(file.data(), commit_at + 32));
    EXPECT_TRUE(std::equal(tag.begin(), tag.end(), file.begin() + static_cast<long>(commit_at + 32)));

    // Chunks: AEAD under the payload subkey, nonce = u64 BE index || 00 00 00 || last,
    // AAD = SHA-256 of the whole header.
    ASSERT_OK_AND_ASSIGN(SecretBytes payload_key, HkdfSha256(dek, salt, "enclave sealed-file v1 payload key", 32));
    ASSERT_OK_AND_ASSIGN(auto aead, Aead::Create(suite, payload_key));
    const Digest256 aad = Sha256(ByteSpan(file.data(), header_len));
    ASSERT_OK_AND_ASSIGN(SealedHeader h, ParseSealedHeader(file));
    EXPECT_EQ(h.header_digest, aad);
    size_t off = header_len;
    for (uint64_t i = 0; i < 3; ++i) {
      std::array<uint8_t, 12> nonce{};
      nonce[7] = static_cast<uint8_t>(i);
      nonce[11] = i == 2 ? 1 : 0;
      EXPECT_EQ(ChunkNonce(i, i == 2), nonce);
      const size_t n = i < 2 ? chunk : 5;
      std::vector<uint8_t> plain(n);
      ASSERT_OK(aead->Open(nonce, aad, ByteSpan(file.data() + off, n + kAeadTagBytes), plain));
      EXPECT_TRUE(std::equal(plain.begin(), plain.end(), payload.begin() + static_cast<long>(i * chunk)));
      off += n + kAeadTagBytes;
    }
    EXPECT_EQ(off, file.size());
  }
}

TEST(SealedFormat, ChunkNonceLayout) {
  EXPECT_EQ(HexEncode(ChunkNonce(0, false)), "000000000000000000000000");
  EXPECT_EQ(HexEncode(ChunkNonce(0, true)), "000000000000000000000001");
  EXPECT_EQ(HexEncode(ChunkNonce(0x0102030405060708ull, false)), "010203040506070800000000");
  EXPECT_EQ(HexEncode(ChunkNonce(~0ull, true)), "ffffffffffffffff00000001");
}

// The same DEK and payload sealed twice gives unrelated files: the random salt gives every
// file its own payload key, so the deterministic chunk nonces never repeat under one key.
TEST(SealedFormat, FreshSaltPerFile) {
  for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    SecretBytes dek = RandomSecret(32);
    const auto payload = PatternBytes(300, 1);
    ASSERT_OK_AND_ASSIGN(auto a, SealToMemory(Params(suite, 64, payload.size()), dek, payload));
    ASSERT_OK_AND_ASSIGN(auto b, SealToMemory(Params(suite, 64, payload.size()), dek, payload));
    ASSERT_EQ(a.size(), b.size());
    ASSERT_OK_AND_ASSIGN(SealedHeader ha, ParseSealedHeader(a));
    ASSERT_OK_AND_ASSIGN(SealedHeader hb, ParseSealedHeader(b));
    EXPECT_NE(ha.salt, hb.salt);
    EXPECT_NE(ha.commitment, hb.commitment);
    // No 16-byte window of ciphertext in common.
    int shared = 0;
    for (size_t i = ha.header_length; i + 16 <= a.size(); i += 16) {
      shared += std::equal(a.begin() + static_cast<long>(i), a.begin() + static_cast<long>(i + 16),
                           b.begin() + static_cast<long>(i));
    }
    EXPECT_EQ(shared, 0);
  }
}

TEST(SealedFile, ReaderOnDiskRoundTripAndDigest) {
  TempDir dir;
  for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    SecretBytes dek = RandomSecret(32);
    const auto payload = PatternBytes(10 * 64 + 3, 4);
    const std::string path = dir.File(std::string(SuiteName(suite)) + ".sealed");
    {
      ASSERT_OK_AND_ASSIGN(AtomicOutputFile out, AtomicOutputFile::Create(path, false));
      FileSink sink(&out);
      ASSERT_OK_AND_ASSIGN(auto writer, SealedFileWriter::Create(Params(suite, 64, payload.size()), dek, &sink));
      ASSERT_OK(writer->Append(payload));
      ASSERT_OK(writer->Finish());
      ASSERT_OK(out.Commit());
    }
    ASSERT_OK_AND_ASSIGN(auto reader, SealedFileReader::Open(path));
    const SealedHeader& h = reader->header();
    EXPECT_EQ(h.chunk_count, 11u);
    std::vector<uint8_t> one(64);
    EXPECT_CODE(reader->ReadChunk(0, one), Code::kFailedPrecondition);  // not unlocked yet
    ASSERT_OK(reader->Unlock(dek));
    std::vector<uint8_t> back(payload.size());
    // Random access, backwards.
    for (uint64_t i = h.chunk_count; i-- > 0;) {
      ASSERT_OK(reader->ReadChunk(i, std::span<uint8_t>(back.data() + i * 64, h.ChunkPlaintextSize(i))));
    }
    EXPECT_EQ(back, payload);
    EXPECT_CODE(reader->ReadChunk(h.chunk_count, one), Code::kInvalidInput);
    std::vector<uint8_t> wrong(63);
    EXPECT_CODE(reader->ReadChunk(0, wrong), Code::kInvalidInput);

    ASSERT_OK_AND_ASSIGN(Digest256 digest, SealedFileDigest(path));
    const std::string text = ReadText(path);
    EXPECT_EQ(digest, Sha256(AsBytes(text)));
    // Both digests from one read: the file's, and the header's that the reader computed.
    ASSERT_OK_AND_ASSIGN(SealedFileDigests both, DigestSealedFile(path));
    EXPECT_EQ(both.file, digest);
    EXPECT_EQ(both.header, reader->header().header_digest);
    EXPECT_EQ(both.header, Sha256(AsBytes(text).first(reader->header().header_length)));
  }
}

// DigestSealedFile over a file of several read buffers (1 MiB each), and on a file too
// short to hold its header.
TEST(SealedFile, DigestsOfALargeFileAndOfATruncatedOne) {
  TempDir dir;
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes((3 << 20) + 5, 9);
  const std::string path = dir.File("large.sealed");
  {
    ASSERT_OK_AND_ASSIGN(AtomicOutputFile out, AtomicOutputFile::Create(path, false));
    FileSink sink(&out);
    ASSERT_OK_AND_ASSIGN(auto writer,
                         SealedFileWriter::Create(Params(Suite::kAes256Gcm, 65536, payload.size()), dek, &sink));
    ASSERT_OK(writer->Append(payload));
    ASSERT_OK(writer->Finish());
    ASSERT_OK(out.Commit());
  }
  ASSERT_OK_AND_ASSIGN(auto reader, SealedFileReader::Open(path));
  ASSERT_OK_AND_ASSIGN(SealedFileDigests both, DigestSealedFile(path));
  ASSERT_OK_AND_ASSIGN(Digest256 file, SealedFileDigest(path));
  EXPECT_EQ(both.file, file);
  EXPECT_EQ(both.header, reader->header().header_digest);
  const std::string text = ReadText(path);
  const std::string cut = dir.File("cut.sealed");
  WriteText(cut, text.substr(0, reader->header().header_length - 1));
  EXPECT_CODE(DigestSealedFile(cut).status(), Code::kInvalidInput);
}

TEST(SealedFile, WriterMisuse) {
  SecretBytes dek = RandomSecret(32);
  MemorySink sink;
  SealParams p = Params(Suite::kAes256Gcm, 64, 100);
  {
    ASSERT_OK_AND_ASSIGN(auto w, SealedFileWriter::Create(p, dek, &sink));
    const auto data = PatternBytes(101, 1);
    EXPECT_CODE(w->Append(data), Code::kInvalidInput);  // more than announced
    ASSERT_OK(w->Append(ByteSpan(data).first(99)));
    EXPECT_CODE(w->Finish(), Code::kInvalidInput);  // one byte short
    EXPECT_CODE(w->Append(ByteSpan(data).first(2)), Code::kInvalidInput);
    ASSERT_OK(w->Append(ByteSpan(data).first(1)));
    ASSERT_OK(w->Finish());
    EXPECT_CODE(w->Finish(), Code::kFailedPrecondition);
    EXPECT_CODE(w->Append(ByteSpan(data).first(0)), Code::kFailedPrecondition);
  }
  SealParams bad = p;
  bad.chunk_size = 0;
  EXPECT_CODE(SealedFileWriter::Create(bad, dek, &sink), Code::kInvalidInput);
  bad = p;
  bad.chunk_size = kMaxChunkBytes + 1;
  EXPECT_CODE(SealedFileWriter::Create(bad, dek, &sink), Code::kInvalidInput);
  for (const char* id : {"", "has space", "slash/no", "nul\x01"}) {
    bad = p;
    bad.object_id = id;
    EXPECT_CODE(SealedFileWriter::Create(bad, dek, &sink), Code::kInvalidInput) << id;
  }
  bad = p;
  bad.object_id = std::string(kMaxObjectIdBytes + 1, 'a');
  EXPECT_CODE(SealedFileWriter::Create(bad, dek, &sink), Code::kInvalidInput);
  bad.object_id = std::string(kMaxObjectIdBytes, 'a');
  EXPECT_OK(SealedFileWriter::Create(bad, dek, &sink));
  bad = p;
  bad.content_type = static_cast<ContentType>(7);
  EXPECT_CODE(SealedFileWriter::Create(bad, dek, &sink), Code::kUnsupported);
  SecretBytes short_key = RandomSecret(16);
  EXPECT_CODE(SealedFileWriter::Create(p, short_key, &sink), Code::kInvalidInput);
}

TEST(SealedFile, OpenChunkChecksSizesAndWipesOnFailure) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(150, 3);
  ASSERT_OK_AND_ASSIGN(auto file, SealToMemory(Params(Suite::kChaCha20Poly1305, 64, 150), dek, payload));
  ASSERT_OK_AND_ASSIGN(SealedHeader h, ParseSealedHeader(file));
  ASSERT_OK_AND_ASSIGN(SealedFileKey key, SealedFileKey::Unlock(h, dek));
  std::vector<uint8_t> out(64);
  const ByteSpan c0(file.data() + h.ChunkOffset(0), 64 + kAeadTagBytes);
  ASSERT_OK(key.OpenChunk(0, c0, out));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), payload.begin()));
  EXPECT_CODE(key.OpenChunk(3, c0, out), Code::kInvalidInput);                 // index out of range
  EXPECT_CODE(key.OpenChunk(0, c0.first(70), out), Code::kInvalidInput);       // short input
  std::vector<uint8_t> small(63);
  EXPECT_CODE(key.OpenChunk(0, c0, small), Code::kInvalidInput);               // wrong output size
  std::vector<uint8_t> bad(c0.begin(), c0.end());
  bad[10] ^= 0x20;
  std::fill(out.begin(), out.end(), 0xA5);
  EXPECT_CODE(key.OpenChunk(0, bad, out), Code::kAuthFailed);
  EXPECT_TRUE(AllZero(out)) << "unauthenticated plaintext left in the output";
}

// Regression: SealedFileKey once kept a raw pointer to the caller's header, so OpenChunk
// followed whatever that object held later (and a temporary header left it dangling).
// Fixed in 7dc36cb: the key owns a copy of the header it authenticated.
TEST(SealedFileKey, KeepsTheHeaderItAuthenticated) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(150, 21);
  ASSERT_OK_AND_ASSIGN(auto file_a, SealToMemory(Params(Suite::kAes256Gcm, 64, 150), dek, payload));
  ASSERT_OK_AND_ASSIGN(auto file_b, SealToMemory(Params(Suite::kAes256Gcm, 64, 150), dek, payload));
  ASSERT_OK_AND_ASSIGN(SealedHeader h, ParseSealedHeader(file_a));
  const SealedHeader authenticated = h;
  ASSERT_OK_AND_ASSIGN(SealedFileKey key, SealedFileKey::Unlock(h, dek));
  // The caller reuses its header variable for the next file (unauthenticated so far).
  ASSERT_OK_AND_ASSIGN(h, ParseSealedHeader(file_b));
  EXPECT_EQ(key.header().header_digest, authenticated.header_digest)
      << "SealedFileKey::header() changed after Unlock: it aliases the caller's object";
  std::vector<uint8_t> out(64);
  EXPECT_OK(key.OpenChunk(0, ByteSpan(file_a).subspan(authenticated.ChunkOffset(0), 64 + kAeadTagBytes), out))
      << "a chunk of the unlocked file no longer opens once the caller's header variable changes";
  h = SealedHeader{};  // chunk_count 0
  EXPECT_OK(key.OpenChunk(1, ByteSpan(file_a).subspan(authenticated.ChunkOffset(1), 64 + kAeadTagBytes), out));
}

TEST(SealedHeaderParse, RejectsShortAndForeignInput) {
  EXPECT_CODE(ParseSealedHeader({}), Code::kInvalidInput);
  EXPECT_CODE(PeekHeaderLength(AsBytes("ENCLSEA")), Code::kInvalidInput);
  EXPECT_CODE(ParseSealedHeader(AsBytes("PK\x03\x04 this is a zip file, not ours")), Code::kInvalidInput);
  SecretBytes dek = RandomSecret(32);
  ASSERT_OK_AND_ASSIGN(auto file, SealToMemory(Params(Suite::kAes256Gcm, 64, 10), dek, PatternBytes(10, 1)));
  ASSERT_OK_AND_ASSIGN(uint32_t len, PeekHeaderLength(ByteSpan(file).first(kSealedFixedPrefix)));
  ASSERT_OK_AND_ASSIGN(SealedHeader h, ParseSealedHeader(file));
  EXPECT_EQ(len, h.header_length);
  for (size_t cut = 0; cut < h.header_length; ++cut) {
    EXPECT_CODE(ParseSealedHeader(ByteSpan(file).first(cut)), Code::kInvalidInput) << "cut at " << cut;
  }
  EXPECT_OK(ParseSealedHeader(ByteSpan(file).first(h.header_length)));
  // A header length beyond the limit is refused before anything is allocated for it.
  std::vector<uint8_t> huge(file.begin(), file.begin() + kSealedFixedPrefix);
  const uint32_t big = kMaxHeaderBytes + 1;
  std::memcpy(huge.data() + 16, &big, 4);  // little-endian host
  EXPECT_CODE(PeekHeaderLength(huge), Code::kInvalidInput);
}

}  // namespace
}  // namespace enclave::crypto
