// What an attacker who controls the storage can do to a sealed file, and that every such
// file is rejected (parse, unlock or chunk open; never accepted), with the specific code:
// every single-bit flip of the whole file, truncation and extension, chunk swap,
// duplication and splicing between files, header edits, a wrong key, and a ciphertext
// crafted to authenticate under two AES-GCM keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "crypto_test_util.h"
#include "enclave/crypto/sealed_file.h"
#include "gcm_math.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT

constexpr uint32_t kChunk = 64;

SealParams Params(Suite suite, uint64_t length, uint32_t chunk = kChunk) {
  SealParams p;
  p.suite = suite;
  for (int i = 0; i < 16; ++i) {
    p.keystore_id[i] = static_cast<uint8_t>(i * 7 + 1);
    p.key_id[i] = static_cast<uint8_t>(0xf0 - i);
  }
  p.object_id = "bank.cards:2024-q1";
  p.chunk_size = chunk;
  p.payload_length = length;
  p.metadata = Bytes("schema=v3;rows=1234");
  return p;
}

Result<std::vector<uint8_t>> Seal(const SealParams& p, const SecretBytes& dek, ByteSpan payload) {
  MemorySink sink;
  ASSIGN_OR_RETURN(auto writer, SealedFileWriter::Create(p, dek, &sink));
  RETURN_IF_ERROR(writer->Append(payload));
  RETURN_IF_ERROR(writer->Finish());
  return std::move(sink.data);
}

enum class Stage { kParse, kUnlock, kOpen, kAccepted };
const char* StageName(Stage s) {
  switch (s) {
    case Stage::kParse: return "parse";
    case Stage::kUnlock: return "unlock";
    case Stage::kOpen: return "chunk";
    case Stage::kAccepted: return "ACCEPTED";
  }
  return "?";
}

struct Outcome {
  Stage stage = Stage::kAccepted;
  Code code = Code::kOk;
  uint64_t chunk = 0;  // for kOpen
  std::string message;
};

std::string Describe(const Outcome& o) {
  std::string s = StageName(o.stage);
  if (o.stage == Stage::kOpen) s += " " + std::to_string(o.chunk);
  return s + ": " + std::string(CodeName(o.code)) + " (" + o.message + ")";
}

// In memory, at the SealedFileKey level: parse, unlock, open every chunk.
Outcome FullReadInMemory(ByteSpan file, const SecretBytes& dek) {
  auto h = ParseSealedHeader(file);
  if (!h.ok()) return {Stage::kParse, h.status().code(), 0, h.status().message()};
  auto key = SealedFileKey::Unlock(*h, dek);
  if (!key.ok()) return {Stage::kUnlock, key.status().code(), 0, key.status().message()};
  for (uint64_t i = 0; i < h->chunk_count; ++i) {
    const size_t n = h->ChunkPlaintextSize(i);
    std::vector<uint8_t> out(n, 0xA5);
    const uint64_t off = h->ChunkOffset(i);
    // A missing chunk: what a reader sees as a short read.
    if (off + n + kAeadTagBytes > file.size()) return {Stage::kOpen, Code::kAuthFailed, i, "chunk beyond end of data"};
    Status s = key->OpenChunk(i, file.subspan(off, n + kAeadTagBytes), out);
    if (!s.ok()) {
      if (!AllZero(out)) return {Stage::kAccepted, Code::kOk, i, "chunk failed but its output was not wiped"};
      return {Stage::kOpen, s.code(), i, s.message()};
    }
  }
  return {};
}

// On disk, through SealedFileReader: Open (parse + size check), Unlock, ReadChunk each.
Outcome FullReadFile(const std::string& path, const SecretBytes& dek) {
  auto r = SealedFileReader::Open(path);
  if (!r.ok()) return {Stage::kParse, r.status().code(), 0, r.status().message()};
  Status s = (*r)->Unlock(dek);
  if (!s.ok()) return {Stage::kUnlock, s.code(), 0, s.message()};
  const SealedHeader& h = (*r)->header();
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    std::vector<uint8_t> out(h.ChunkPlaintextSize(i), 0xA5);
    s = (*r)->ReadChunk(i, out);
    if (!s.ok()) {
      if (!AllZero(out)) return {Stage::kAccepted, Code::kOk, i, "chunk failed but its output was not wiped"};
      return {Stage::kOpen, s.code(), i, s.message()};
    }
  }
  return {};
}

// The regions of a sealed file and what rejecting a change there looks like.
struct Region {
  std::string name;
  size_t begin, end;  // [begin, end)
  std::set<std::pair<Stage, Code>> allowed;
  uint64_t chunk = 0;  // for chunk regions: the chunk that must fail
};

// through_reader: SealedFileReader::Open also checks the file size against the header
// (kAuthFailed, "truncated" / "extra bytes") before any key is used.
std::vector<Region> RegionsOf(const SealedHeader& h, bool through_reader) {
  using P = std::pair<Stage, Code>;
  const P parse_invalid{Stage::kParse, Code::kInvalidInput};
  const P parse_unsupported{Stage::kParse, Code::kUnsupported};
  const P parse_auth{Stage::kParse, Code::kAuthFailed};
  std::set<P> size_fields = {parse_invalid};
  if (through_reader) size_fields.insert(parse_auth);
  const P unlock_auth{Stage::kUnlock, Code::kAuthFailed};
  const size_t id = h.params.object_id.size(), meta = h.params.metadata.size();
  std::vector<Region> r;
  size_t at = 0;
  auto add = [&](std::string name, size_t len, std::set<P> allowed) {
    r.push_back({std::move(name), at, at + len, std::move(allowed)});
    at += len;
  };
  add("magic", 8, {parse_invalid});
  add("version", 2, {parse_unsupported});
  add("suite", 2, {parse_unsupported});
  add("content_type", 2, {parse_unsupported});
  add("reserved", 2, {parse_invalid});
  add("header_length", 4, size_fields);
  add("keystore_id", 16, {unlock_auth});
  add("key_id", 16, {unlock_auth});
  add("salt", 32, {unlock_auth});
  // A changed size field that still fits the chunk count passes parsing: the reader's size
  // check or the header tag catch it.
  add("chunk_size", 4, {parse_invalid, unlock_auth});
  std::set<P> payload_length = size_fields;
  payload_length.insert(unlock_auth);
  add("payload_length", 8, payload_length);
  add("chunk_count", 8, {parse_invalid});
  add("object_id_length", 2, {parse_invalid});
  add("object_id", id, {parse_invalid, unlock_auth});
  add("metadata_length", 4, {parse_invalid});
  add("metadata", meta, {unlock_auth});
  add("commitment", 32, {unlock_auth});
  add("header_tag", 32, {unlock_auth});
  EXPECT_EQ(at, h.header_length) << "the test's layout disagrees with the header length";
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t n = h.ChunkPlaintextSize(i);
    add("chunk " + std::to_string(i) + " ciphertext", n, {{Stage::kOpen, Code::kAuthFailed}});
    r.back().chunk = i;
    add("chunk " + std::to_string(i) + " tag", kAeadTagBytes, {{Stage::kOpen, Code::kAuthFailed}});
    r.back().chunk = i;
  }
  EXPECT_EQ(at, h.FileSize());
  return r;
}

std::string MessageNeedle(const Region& region) {
  if (region.name == "salt" || region.name == "commitment") return "commitment";
  if (region.name == "header_tag" || region.name == "keystore_id" || region.name == "key_id" ||
      region.name == "metadata")
    return "header authentication";
  return "";
}

class SealedTamper : public ::testing::TestWithParam<Suite> {};

// Every bit of the file, flipped one at a time, in memory (SealedFileKey level): each
// flipped file must be rejected at the stage and with the code its region calls for.
TEST_P(SealedTamper, EveryBitFlipIsRejectedInMemory) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(3 * kChunk + 17, 5);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  ASSERT_EQ(h.chunk_count, 4u);
  ASSERT_EQ(FullReadInMemory(file, dek).stage, Stage::kAccepted) << "control: the untouched file must open";
  const std::vector<Region> regions = RegionsOf(h, /*through_reader=*/false);
  std::map<std::string, std::map<std::string, int>> seen;  // region -> outcome kind -> count
  int flips = 0;
  for (const Region& region : regions) {
    for (size_t off = region.begin; off < region.end; ++off) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> bad = file;
        bad[off] ^= static_cast<uint8_t>(1u << bit);
        Outcome o = FullReadInMemory(bad, dek);
        ++flips;
        const bool ok = region.allowed.count({o.stage, o.code}) > 0 && o.stage != Stage::kAccepted &&
                        (o.stage != Stage::kOpen || o.chunk == region.chunk);
        ASSERT_TRUE(ok) << "bit " << bit << " of byte " << off << " (" << region.name << "): " << Describe(o);
        const std::string needle = MessageNeedle(region);
        if (!needle.empty()) {
          EXPECT_NE(o.message.find(needle), std::string::npos)
              << region.name << " byte " << off << ": " << Describe(o);
        }
        seen[region.name][std::string(StageName(o.stage)) + "/" + std::string(CodeName(o.code))]++;
      }
    }
  }
  EXPECT_EQ(flips, static_cast<int>(file.size()) * 8);
  for (const Region& region : regions) {
    EXPECT_TRUE(seen.count(region.name)) << "region " << region.name << " was never hit";
  }
  for (const auto& [name, kinds] : seen) {
    std::string line;
    for (const auto& [kind, n] : kinds) line += " " + kind + "=" + std::to_string(n);
    RecordProperty(name, line);
  }
}

// The same on disk through SealedFileReader (one bit per byte, cycling through the bit
// positions), including the reader's file-size check.
TEST_P(SealedTamper, EveryByteFlipIsRejectedByTheReader) {
  TempDir dir;
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(3 * kChunk + 17, 6);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  const std::string path = dir.File("f.sealed");
  WriteBytes(path, file);
  ASSERT_EQ(FullReadFile(path, dek).stage, Stage::kAccepted) << "control: the untouched file must open";
  for (const Region& region : RegionsOf(h, /*through_reader=*/true)) {
    for (size_t off = region.begin; off < region.end; ++off) {
      std::vector<uint8_t> bad = file;
      bad[off] ^= static_cast<uint8_t>(1u << (off % 8));
      WriteBytes(path, bad);
      Outcome o = FullReadFile(path, dek);
      const bool ok = region.allowed.count({o.stage, o.code}) > 0 &&
                      (o.stage != Stage::kOpen || o.chunk == region.chunk);
      ASSERT_TRUE(ok) << "byte " << off << " (" << region.name << "): " << Describe(o);
    }
  }
}

// Truncation at and between chunk boundaries, and extension: the reader refuses the file
// before any key is used: kAuthFailed "truncated" / "extra bytes" (kInvalidInput only when
// not even the 20-byte fixed prefix is there).
TEST_P(SealedTamper, TruncationAndExtension) {
  TempDir dir;
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(4 * kChunk + 9, 7);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  ASSERT_EQ(h.chunk_count, 5u);
  std::set<size_t> cuts = {0, 1, kSealedFixedPrefix - 1, kSealedFixedPrefix, h.header_length - 1};
  for (uint64_t i = 0; i <= h.chunk_count; ++i) {
    const size_t boundary = i < h.chunk_count ? h.ChunkOffset(i) : file.size();
    for (long d : {-17L, -16L, -1L, 0L, 1L, 16L, 40L}) {
      const long c = static_cast<long>(boundary) + d;
      if (c >= 0 && static_cast<size_t>(c) < file.size()) cuts.insert(static_cast<size_t>(c));
    }
  }
  const std::string path = dir.File("t.sealed");
  for (size_t cut : cuts) {
    WriteBytes(path, ByteSpan(file).first(cut));
    auto r = SealedFileReader::Open(path);
    ASSERT_FALSE(r.ok()) << "a file cut to " << cut << " of " << file.size() << " bytes was accepted";
    if (cut < kSealedFixedPrefix) {
      EXPECT_EQ(r.status().code(), Code::kInvalidInput) << cut << ": " << r.status().ToString();
    } else {
      EXPECT_EQ(r.status().code(), Code::kAuthFailed) << cut << ": " << r.status().ToString();
      EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
    }
    // In memory, a cut file fails too (a missing chunk at the latest).
    EXPECT_NE(FullReadInMemory(ByteSpan(file).first(cut), dek).stage, Stage::kAccepted) << cut;
  }
  for (size_t extra : {1, 16, 80}) {
    std::vector<uint8_t> longer = file;
    longer.resize(file.size() + extra, 0);
    WriteBytes(path, longer);
    auto r = SealedFileReader::Open(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kAuthFailed);
    EXPECT_NE(r.status().message().find("extra bytes"), std::string::npos) << r.status().ToString();
  }
}

// Dropping the last chunk: with the header left alone the file is short (above); with the
// header's counts edited to N-1 chunks its tag fails; and a chunk that was not sealed as
// the last one never opens as the last one.
TEST_P(SealedTamper, DroppedLastChunkCannotPassAsComplete) {
  SecretBytes dek = RandomSecret(32);
  const uint64_t n = 4;
  const auto payload = PatternBytes(n * kChunk, 8);  // whole chunks: every chunk has the same size
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  ASSERT_EQ(h.chunk_count, n);
  const size_t c = kChunk + kAeadTagBytes;
  auto chunk_bytes = [&](uint64_t i) { return ByteSpan(file).subspan(h.ChunkOffset(i), c); };

  // SealedFileKey level: chunk N-2 presented in the place of the last chunk.
  ASSERT_OK_AND_ASSIGN(SealedFileKey key, SealedFileKey::Unlock(h, dek));
  std::vector<uint8_t> out(kChunk, 0xA5);
  ASSERT_OK(key.OpenChunk(n - 2, chunk_bytes(n - 2), out));  // control
  EXPECT_CODE(key.OpenChunk(n - 1, chunk_bytes(n - 2), out), Code::kAuthFailed);
  EXPECT_TRUE(AllZero(out));

  // AEAD level, under the file's real payload key and AAD: only the nonce's last flag
  // differs, and it alone makes chunk N-2 fail as "last".
  ASSERT_OK_AND_ASSIGN(SecretBytes pk, HkdfSha256(dek, h.salt, "enclave sealed-file v1 payload key", 32));
  ASSERT_OK_AND_ASSIGN(auto aead, Aead::Create(GetParam(), pk));
  EXPECT_OK(aead->Open(ChunkNonce(n - 2, false), h.header_digest, chunk_bytes(n - 2), out));
  EXPECT_CODE(aead->Open(ChunkNonce(n - 2, true), h.header_digest, chunk_bytes(n - 2), out), Code::kAuthFailed);

  // File level: drop the last chunk and rewrite payload_length and chunk_count (offsets 88
  // and 96, little-endian) to describe N-1 chunks. It parses and has the right size, and
  // the header tag rejects it.
  std::vector<uint8_t> cut(file.begin(), file.end() - static_cast<long>(c));
  const uint64_t new_len = (n - 1) * kChunk, new_count = n - 1;
  std::memcpy(cut.data() + 88, &new_len, 8);
  std::memcpy(cut.data() + 96, &new_count, 8);
  ASSERT_OK_AND_ASSIGN(SealedHeader forged, ParseSealedHeader(cut));
  EXPECT_EQ(forged.FileSize(), cut.size());
  Outcome o = FullReadInMemory(cut, dek);
  EXPECT_EQ(o.stage, Stage::kUnlock) << Describe(o);
  EXPECT_EQ(o.code, Code::kAuthFailed) << Describe(o);
}

TEST_P(SealedTamper, ChunkSwapDuplicationAndReorder) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(4 * kChunk + 20, 9);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  const size_t c = kChunk + kAeadTagBytes;
  auto at = [&](std::vector<uint8_t>& f, uint64_t i) { return f.begin() + static_cast<long>(h.ChunkOffset(i)); };
  {  // swap chunks 1 and 2: chunk 1 fails
    std::vector<uint8_t> f = file;
    std::swap_ranges(at(f, 1), at(f, 1) + static_cast<long>(c), at(f, 2));
    Outcome o = FullReadInMemory(f, dek);
    EXPECT_EQ(o.stage, Stage::kOpen);
    EXPECT_EQ(o.code, Code::kAuthFailed);
    EXPECT_EQ(o.chunk, 1u);
  }
  {  // swap chunks 0 and 3
    std::vector<uint8_t> f = file;
    std::swap_ranges(at(f, 0), at(f, 0) + static_cast<long>(c), at(f, 3));
    Outcome o = FullReadInMemory(f, dek);
    EXPECT_EQ(o.stage, Stage::kOpen);
    EXPECT_EQ(o.code, Code::kAuthFailed);
    EXPECT_EQ(o.chunk, 0u);
  }
  {  // chunk 0 copied over chunk 2
    std::vector<uint8_t> f = file;
    std::copy(at(f, 0), at(f, 0) + static_cast<long>(c), at(f, 2));
    Outcome o = FullReadInMemory(f, dek);
    EXPECT_EQ(o.stage, Stage::kOpen);
    EXPECT_EQ(o.code, Code::kAuthFailed);
    EXPECT_EQ(o.chunk, 2u);
  }
  {  // each full chunk, opened at every other index, fails
    ASSERT_OK_AND_ASSIGN(SealedFileKey key, SealedFileKey::Unlock(h, dek));
    std::vector<uint8_t> out(kChunk);
    for (uint64_t i = 0; i < 4; ++i) {
      for (uint64_t j = 0; j < 4; ++j) {
        Status s = key.OpenChunk(j, ByteSpan(file).subspan(h.ChunkOffset(i), c), out);
        if (i == j) {
          EXPECT_OK(s);
        } else {
          EXPECT_EQ(s.code(), Code::kAuthFailed) << "chunk " << i << " opened as chunk " << j;
        }
      }
    }
  }
  {  // a duplicated chunk inserted: the size no longer matches the header
    TempDir dir;
    std::vector<uint8_t> f = file;
    std::vector<uint8_t> dup(at(f, 1), at(f, 1) + static_cast<long>(c));
    f.insert(at(f, 2), dup.begin(), dup.end());
    WriteBytes(dir.File("d"), f);
    Outcome o = FullReadFile(dir.File("d"), dek);
    EXPECT_EQ(o.stage, Stage::kParse);
    EXPECT_EQ(o.code, Code::kAuthFailed);
  }
}

// Two files under the same DEK with the same parameters: neither one's chunks open under
// the other's header (the salt gives each file its own payload key, and the header digest
// is every chunk's AAD).
TEST_P(SealedTamper, SpliceBetweenFilesOfTheSameKey) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(2 * kChunk + 3, 10);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> a, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> b, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader ha, ParseSealedHeader(a));
  ASSERT_EQ(a.size(), b.size());
  std::vector<uint8_t> spliced(a.begin(), a.begin() + ha.header_length);
  spliced.insert(spliced.end(), b.begin() + ha.header_length, b.end());
  Outcome o = FullReadInMemory(spliced, dek);
  EXPECT_EQ(o.stage, Stage::kOpen) << Describe(o);
  EXPECT_EQ(o.code, Code::kAuthFailed);
  EXPECT_EQ(o.chunk, 0u);
  // One chunk only from the other file.
  std::vector<uint8_t> one = a;
  std::copy(b.begin() + static_cast<long>(ha.ChunkOffset(1)), b.begin() + static_cast<long>(ha.ChunkOffset(2)),
            one.begin() + static_cast<long>(ha.ChunkOffset(1)));
  o = FullReadInMemory(one, dek);
  EXPECT_EQ(o.stage, Stage::kOpen) << Describe(o);
  EXPECT_EQ(o.chunk, 1u);
}

// Edits a valid header could plausibly receive (still well-formed, so parsing passes):
// each is refused by the header tag, naming it.
TEST_P(SealedTamper, WellFormedHeaderEditsFailTheHeaderTag) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(2 * kChunk + 3, 11);
  const SealParams p = Params(GetParam(), payload.size());
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(p, dek, payload));
  const size_t id_at = 106, meta_at = id_at + p.object_id.size() + 4;
  struct Edit {
    const char* what;
    size_t offset;
    uint8_t value;
  } edits[] = {
      {"object id renamed bank.cards -> bank.carda", id_at + 9, 'a'},
      {"metadata rows=1234 -> rows=9234", meta_at + 15, '9'},
      {"key id", 40, 0x00},
      {"keystore id", 20, 0xff},
      {"chunk size 64 -> 65 (same chunk count)", 84, 65},
  };
  for (const Edit& e : edits) {
    std::vector<uint8_t> f = file;
    ASSERT_NE(f[e.offset], e.value) << e.what;
    f[e.offset] = e.value;
    Outcome o = FullReadInMemory(f, dek);
    EXPECT_EQ(o.stage, Stage::kUnlock) << e.what << ": " << Describe(o);
    EXPECT_EQ(o.code, Code::kAuthFailed) << e.what;
    EXPECT_NE(o.message.find("header authentication failed"), std::string::npos) << e.what << ": " << o.message;
  }
}

TEST_P(SealedTamper, WrongKeyIsACommitmentMismatch) {
  SecretBytes dek = RandomSecret(32);
  const auto payload = PatternBytes(kChunk + 1, 12);
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> file, Seal(Params(GetParam(), payload.size()), dek, payload));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  for (int i = 0; i < 4; ++i) {
    SecretBytes other = RandomSecret(32);
    auto key = SealedFileKey::Unlock(h, other);
    ASSERT_FALSE(key.ok());
    EXPECT_EQ(key.status().code(), Code::kAuthFailed);
    EXPECT_NE(key.status().message().find("commitment mismatch"), std::string::npos) << key.status().ToString();
  }
  // One bit of the key.
  ASSERT_OK_AND_ASSIGN(SecretBytes near, dek.Clone());
  near.ExposeSecretMutable()[31] ^= 0x01;
  EXPECT_CODE(SealedFileKey::Unlock(h, near), Code::kAuthFailed);
  // Keys of the wrong size are malformed input, not a mismatch.
  EXPECT_CODE(SealedFileKey::Unlock(h, SecretBytes()), Code::kInvalidInput);
  EXPECT_CODE(SealedFileKey::Unlock(h, RandomSecret(16)), Code::kInvalidInput);
  EXPECT_CODE(SealedFileKey::Unlock(h, RandomSecret(64)), Code::kInvalidInput);
  // Through the reader too.
  TempDir dir;
  WriteBytes(dir.File("w"), file);
  ASSERT_OK_AND_ASSIGN(auto reader, SealedFileReader::Open(dir.File("w")));
  SecretBytes wrong = RandomSecret(32);
  EXPECT_CODE(reader->Unlock(wrong), Code::kAuthFailed);
  std::vector<uint8_t> out(kChunk);
  EXPECT_CODE(reader->ReadChunk(0, out), Code::kFailedPrecondition);
  EXPECT_OK(reader->Unlock(dek));
  EXPECT_OK(reader->ReadChunk(0, out));
}

std::string SuiteTestName(const ::testing::TestParamInfo<Suite>& p) {
  return p.param == Suite::kAes256Gcm ? "Aes256Gcm" : "ChaCha20Poly1305";
}

INSTANTIATE_TEST_SUITE_P(BothSuites, SealedTamper, ::testing::Values(Suite::kAes256Gcm, Suite::kChaCha20Poly1305),
                         SuiteTestName);

// ---------------------------------------------------------------------------------------
// AES-GCM is not key-committing: one ciphertext can authenticate under two keys.

// The test's GCM model agrees with OpenSSL before it is trusted to craft anything.
TEST(GcmModel, AgreesWithOpenSsl) {
  // Field: 1 is the identity, x * x^-1 = 1, multiplication commutes.
  const Gf128 a = GfLoad(PatternBytes(16, 1).data()), b = GfLoad(PatternBytes(16, 2).data());
  EXPECT_EQ(GfMul(a, GfOne()), a);
  EXPECT_EQ(GfMul(a, b), GfMul(b, a));
  EXPECT_EQ(GfMul(a, GfInverse(a)), GfOne());
  EXPECT_EQ(GfPow(a, 5), GfMul(GfMul(GfMul(a, a), GfMul(a, a)), a));
  // McGrew-Viega test case 15/16 hash key: H = AES_K(0) for K = feffe992...308308 (x2).
  const auto k16 = Hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
  EXPECT_EQ(HexEncode(GfStore(GcmHashKey(k16))), "acbef20579b4b8ebce889bac8732dad7");
  // Test case 16's tag, from the model.
  const auto ct16 = Hex(
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0"
      "abcc9f662");
  EXPECT_EQ(HexEncode(GcmTag(k16, Hex("cafebabefacedbaddecaf888"), Hex("feedfacedeadbeeffeedfacedeadbeefabaddad2"), ct16)),
            "76fc6ece0f4e1768cddf8853bb2d551b");
  // And on random messages of many lengths, against crypto::Aead (OpenSSL).
  for (size_t len : {0, 1, 15, 16, 17, 33, 64, 100}) {
    SecretBytes key = RandomSecret(32);
    ASSERT_OK_AND_ASSIGN(auto aead, Aead::Create(Suite::kAes256Gcm, key));
    const auto nonce = PatternBytes(12, static_cast<uint32_t>(len));
    const auto aad = PatternBytes(len / 2 + 3, static_cast<uint32_t>(len + 1));
    const auto msg = PatternBytes(len, static_cast<uint32_t>(len + 2));
    std::vector<uint8_t> sealed(len + 16);
    ASSERT_OK(aead->Seal(nonce, aad, msg, sealed));
    const auto tag = GcmTag(key.ExposeSecret(), nonce, aad, ByteSpan(sealed).first(len));
    EXPECT_TRUE(std::equal(tag.begin(), tag.end(), sealed.begin() + static_cast<long>(len))) << len;
  }
}

TEST(GcmTwoKeys, RawCiphertextOpensUnderBothKeys) {
  SecretBytes k1 = RandomSecret(32), k2 = RandomSecret(32);
  const auto nonce = Hex("00112233445566778899aabb");
  const auto aad = Bytes("shared associated data, 40 bytes long...");
  for (size_t free_block : {0, 1, 2}) {
    std::vector<uint8_t> ct = PatternBytes(48, 77);
    const auto tag = CraftTwoKeyGcm(k1.ExposeSecret(), k2.ExposeSecret(), nonce, aad, &ct, free_block);
    std::vector<uint8_t> msg = ct;
    msg.insert(msg.end(), tag.begin(), tag.end());
    std::vector<uint8_t> p1(48), p2(48);
    ASSERT_OK_AND_ASSIGN(auto a1, Aead::Create(Suite::kAes256Gcm, k1));
    ASSERT_OK_AND_ASSIGN(auto a2, Aead::Create(Suite::kAes256Gcm, k2));
    ASSERT_OK(a1->Open(nonce, aad, msg, p1));
    ASSERT_OK(a2->Open(nonce, aad, msg, p2));
    EXPECT_NE(p1, p2);  // one message, two different plaintexts
    // Raw EVP agrees (no project code in the way).
    for (const SecretBytes* k : {&k1, &k2}) {
      EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
      int len = 0, fin = 0;
      std::vector<uint8_t> p(48);
      const bool ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, k->ExposeSecret().data(), nonce.data()) == 1 &&
                      EVP_DecryptUpdate(ctx, nullptr, &len, aad.data(), static_cast<int>(aad.size())) == 1 &&
                      EVP_DecryptUpdate(ctx, p.data(), &len, ct.data(), 48) == 1 &&
                      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, const_cast<uint8_t*>(tag.data())) == 1 &&
                      EVP_DecryptFinal_ex(ctx, p.data() + len, &fin) == 1;
      EVP_CIPHER_CTX_free(ctx);
      EXPECT_TRUE(ok) << "raw EVP rejected the crafted message";
    }
    // A third key does not accept it.
    SecretBytes k3 = RandomSecret(32);
    ASSERT_OK_AND_ASSIGN(auto a3, Aead::Create(Suite::kAes256Gcm, k3));
    std::vector<uint8_t> p3(48, 0xA5);
    EXPECT_CODE(a3->Open(nonce, aad, msg, p3), Code::kAuthFailed);
    EXPECT_TRUE(AllZero(p3));
  }
}

// The sealed format is key-committing: a sealed file whose chunk is such a two-key
// ciphertext (valid under the payload keys of DEK1 and of DEK2) opens under DEK1 only;
// DEK2 is refused at Unlock, before any chunk is opened.
TEST(GcmTwoKeys, SealedFileRejectsTheSecondKey) {
  SecretBytes dek1 = RandomSecret(32), dek2 = RandomSecret(32);
  const uint64_t len = 48;  // one chunk of three blocks
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> file,
                       Seal(Params(Suite::kAes256Gcm, len), dek1, PatternBytes(len, 13)));
  ASSERT_OK_AND_ASSIGN(const SealedHeader h, ParseSealedHeader(file));
  ASSERT_EQ(h.chunk_count, 1u);
  // The payload keys exactly as sealed_file.cc derives them.
  ASSERT_OK_AND_ASSIGN(SecretBytes pk1, HkdfSha256(dek1, h.salt, "enclave sealed-file v1 payload key", 32));
  ASSERT_OK_AND_ASSIGN(SecretBytes pk2, HkdfSha256(dek2, h.salt, "enclave sealed-file v1 payload key", 32));
  const auto nonce = ChunkNonce(0, true);
  std::vector<uint8_t> ct = Bytes("this chunk was crafted by an attacker holding both keys!");
  ct.resize(len);
  const auto tag = CraftTwoKeyGcm(pk1.ExposeSecret(), pk2.ExposeSecret(), nonce, h.header_digest, &ct, 2);
  std::vector<uint8_t> chunk = ct;
  chunk.insert(chunk.end(), tag.begin(), tag.end());
  ASSERT_EQ(file.size(), h.header_length + chunk.size());
  std::copy(chunk.begin(), chunk.end(), file.begin() + h.header_length);

  // The crafted chunk is valid under both payload keys ...
  std::vector<uint8_t> out(len);
  ASSERT_OK_AND_ASSIGN(auto a1, Aead::Create(Suite::kAes256Gcm, pk1));
  ASSERT_OK_AND_ASSIGN(auto a2, Aead::Create(Suite::kAes256Gcm, pk2));
  ASSERT_OK(a1->Open(nonce, h.header_digest, chunk, out));
  ASSERT_OK(a2->Open(nonce, h.header_digest, chunk, out));
  // ... and the file opens under DEK1 (it is a well-formed file of DEK1) ...
  ASSERT_OK_AND_ASSIGN(const SealedHeader parsed, ParseSealedHeader(file));
  {
    ASSERT_OK_AND_ASSIGN(SealedFileKey key1, SealedFileKey::Unlock(parsed, dek1));
    ASSERT_OK(key1.OpenChunk(0, chunk, out));
  }
  // ... but never under DEK2: the key commitment stops it at Unlock.
  auto key2 = SealedFileKey::Unlock(parsed, dek2);
  ASSERT_FALSE(key2.ok()) << "the sealed format accepted a second key for one file";
  EXPECT_EQ(key2.status().code(), Code::kAuthFailed);
  EXPECT_NE(key2.status().message().find("commitment mismatch"), std::string::npos) << key2.status().ToString();
  // Same through the reader.
  TempDir dir;
  WriteBytes(dir.File("s"), file);
  Outcome o1 = FullReadFile(dir.File("s"), dek1);
  EXPECT_EQ(o1.stage, Stage::kAccepted) << Describe(o1);
  Outcome o2 = FullReadFile(dir.File("s"), dek2);
  EXPECT_EQ(o2.stage, Stage::kUnlock) << Describe(o2);
  EXPECT_EQ(o2.code, Code::kAuthFailed);
}

}  // namespace
}  // namespace enclave::crypto
