// Exported models on real files: export keys in the keystore, the public key file, sealing
// to it (bytes and streams), opening with the keystore, and every way the file, the
// recipient block, the public key file or the keystore can be wrong.
#include "enclave/crypto/model_export.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "crypto_test_util.h"
#include "enclave/common/files.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT
using nlohmann::json;
namespace fs = std::filesystem;

const KdfParams kFastKdf{2, 19ull << 20};

SecretBytes Passphrase() { return Secret(AsBytes("correct horse battery staple")); }

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::string s = ReadText(path);
  return {s.begin(), s.end()};
}

class ModelExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ks_path_ = dir_.File("tenant.keystore");
    ASSERT_OK(Keystore::Init(ks_path_, Passphrase(), kFastKdf));
    auto ks = Keystore::Unlock(ks_path_, Passphrase());
    ASSERT_OK(ks);
    ks_ = std::make_unique<Keystore>(std::move(ks).value());
    ASSERT_OK(ks_->CreateExportKey("tenant-export"));
    auto pub = ExportPublicKeyOf(*ks_, "");
    ASSERT_OK(pub);
    pub_ = *pub;
  }

  ModelSealOptions Options(uint32_t chunk = 64, Suite suite = Suite::kAes256Gcm) {
    ModelSealOptions o;
    o.suite = suite;
    o.chunk_size = chunk;
    o.model_id = "job-17.model";
    o.info.format_id = "test-format/v1";
    o.info.job_digest = Sha256(AsBytes("job spec"));
    o.info.created_unix = 1790000000;
    return o;
  }

  // Seals `model`, returns the file path.
  std::string Seal(const std::vector<uint8_t>& model, const ModelSealOptions& o, const std::string& name = "m.sealed") {
    const std::string path = dir_.File(name);
    auto r = SealModelToFile(pub_, model, o, path, /*overwrite=*/true);
    EXPECT_OK(r);
    return path;
  }

  TempDir dir_;
  std::string ks_path_;
  std::unique_ptr<Keystore> ks_;
  ExportPublicKey pub_;
};

TEST_F(ModelExportTest, RoundTripBytesAllSizesBothSuites) {
  for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    for (size_t n : {0, 1, 63, 64, 65, 640, 1000}) {
      SCOPED_TRACE(std::string(SuiteName(suite)) + " " + std::to_string(n) + " bytes");
      const auto model = PatternBytes(n, static_cast<uint32_t>(n) + 1);
      const std::string path = Seal(model, Options(64, suite));
      ASSERT_OK_AND_ASSIGN(ModelExportInfo seen, InspectModelExport(path));
      EXPECT_EQ(seen.header.params.content_type, ContentType::kExportedModel);
      EXPECT_EQ(seen.header.params.suite, suite);
      EXPECT_EQ(seen.header.params.keystore_id, ks_->id());
      EXPECT_EQ(seen.header.params.key_id, pub_.key_id);
      EXPECT_EQ(seen.header.params.object_id, "job-17.model");
      EXPECT_EQ(seen.header.params.payload_length, n);
      EXPECT_EQ(seen.metadata.info.format_id, "test-format/v1");
      EXPECT_EQ(seen.metadata.info.job_digest, Sha256(AsBytes("job spec")));
      EXPECT_EQ(seen.metadata.info.created_unix, 1790000000u);
      EXPECT_EQ(seen.metadata.recipient.recipient_public_key, pub_.public_key);
      EXPECT_EQ(seen.file_digest, Sha256(ReadAll(path)));

      const std::string out = dir_.File("m.bin");
      ASSERT_OK_AND_ASSIGN(ModelExportInfo opened, OpenModelToFile(path, *ks_, out, /*overwrite=*/true));
      EXPECT_EQ(ReadAll(out), model);
      EXPECT_EQ(opened.file_digest, seen.file_digest);
      ModelExportInfo mem_info;
      ASSERT_OK_AND_ASSIGN(SecretBytes mem, OpenModelToMemory(path, *ks_, 1 << 20, &mem_info));
      ASSERT_EQ(mem.size(), n);
      EXPECT_TRUE(std::equal(model.begin(), model.end(), mem.ExposeSecret().begin()));
      EXPECT_OK(VerifyModelExport(path, *ks_));
      EXPECT_CODE(OpenModelToMemory(path, *ks_, n == 0 ? 0 : n - 1), n == 0 ? Code::kOk : Code::kInvalidInput);
    }
  }
}

// Chunks sealed outside the writer (as the GPU does) with its payload key: `pieces` chunks
// per AppendSealed call.
Status SealChunksOutside(ModelExportWriter& w, const std::vector<uint8_t>& model, uint64_t pieces) {
  const SealedHeader& h = w.header();
  ASSIGN_OR_RETURN(auto aead, Aead::Create(h.params.suite, w.payload_key()));
  std::vector<uint8_t> batch;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const uint64_t n = h.ChunkPlaintextSize(i);
    std::vector<uint8_t> sealed(n + kAeadTagBytes);
    RETURN_IF_ERROR(aead->Seal(ChunkNonce(i, i + 1 == h.chunk_count), h.header_digest,
                               ByteSpan(model.data() + i * h.params.chunk_size, n), sealed));
    batch.insert(batch.end(), sealed.begin(), sealed.end());
    if ((i + 1) % pieces == 0 || i + 1 == h.chunk_count) {
      RETURN_IF_ERROR(w.AppendSealed(batch));
      batch.clear();
    }
  }
  return OkStatus();
}

TEST_F(ModelExportTest, ChunksSealedOutsideTheWriterOpenLikeAnyModel) {
  for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    for (size_t n : {0, 1, 64, 1000}) {
      SCOPED_TRACE(std::string(SuiteName(suite)) + " " + std::to_string(n) + " bytes");
      const auto model = PatternBytes(n, static_cast<uint32_t>(n) + 3);
      const std::string path = dir_.File("outside.sealed");
      ASSERT_OK_AND_ASSIGN(ModelExportInfo info,
                           SealModelWithChunkSealer(pub_, n, Options(64, suite), path, /*overwrite=*/true,
                                                    [&](ModelExportWriter& w) { return SealChunksOutside(w, model, 3); }));
      EXPECT_EQ(info.file_digest, Sha256(ReadAll(path)));
      ASSERT_OK_AND_ASSIGN(SecretBytes mem, OpenModelToMemory(path, *ks_, 1 << 20));
      ASSERT_EQ(mem.size(), n);
      EXPECT_TRUE(std::equal(model.begin(), model.end(), mem.ExposeSecret().begin()));
    }
  }
}

TEST_F(ModelExportTest, ChunksSealedOutsideMustBeWholeAndComplete) {
  const auto model = PatternBytes(1000, 5);  // 16 chunks of 64 bytes
  const std::string path = dir_.File("partial.sealed");
  auto seal = [&](const ChunkSealFn& fn) {
    return SealModelWithChunkSealer(pub_, model.size(), Options(64), path, /*overwrite=*/true, fn).status();
  };
  // A piece that ends inside a chunk.
  EXPECT_CODE(seal([](ModelExportWriter& w) { return w.AppendSealed(std::vector<uint8_t>(81)); }),
              Code::kInvalidInput);
  // Fewer chunks than the header announced: Finish refuses.
  EXPECT_CODE(seal([](ModelExportWriter& w) { return w.AppendSealed(std::vector<uint8_t>(80)); }),
              Code::kInvalidInput);
  // More than the file holds.
  EXPECT_CODE(seal([](ModelExportWriter& w) { return w.AppendSealed(std::vector<uint8_t>(17 * 80)); }),
              Code::kInvalidInput);
  // Plaintext and sealed chunks mixed.
  EXPECT_CODE(seal([&](ModelExportWriter& w) {
                RETURN_IF_ERROR(w.Append(ByteSpan(model.data(), 10)));
                return w.AppendSealed(std::vector<uint8_t>(80));
              }),
              Code::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(path)) << "a refused model must leave no file";
}

TEST_F(ModelExportTest, StreamsAFileAndEveryFileIsFresh) {
  const auto model = PatternBytes(5 * 4096 + 17, 9);
  const std::string in = dir_.File("model.bin");
  WriteBytes(in, model);
  ModelSealOptions o = Options(4096);
  o.info.created_unix = 0;  // now
  uint64_t last_progress = 0;
  ASSERT_OK_AND_ASSIGN(ModelExportInfo a, SealModelFileToFile(pub_, in, o, dir_.File("a.sealed"), false,
                                                              [&](uint64_t done, uint64_t) { last_progress = done; }));
  EXPECT_EQ(last_progress, model.size());
  EXPECT_EQ(a.header.chunk_count, 6u);
  EXPECT_GT(a.metadata.info.created_unix, 1700000000u);
  ASSERT_OK_AND_ASSIGN(ModelExportInfo b, SealModelFileToFile(pub_, in, o, dir_.File("b.sealed"), false));
  // A fresh ephemeral key, DEK and salt per file: nothing repeats.
  EXPECT_NE(a.metadata.recipient.ephemeral_public_key, b.metadata.recipient.ephemeral_public_key);
  EXPECT_NE(a.metadata.recipient.wrapped_dek, b.metadata.recipient.wrapped_dek);
  EXPECT_NE(a.header.salt, b.header.salt);
  EXPECT_NE(a.file_digest, b.file_digest);
  EXPECT_CODE(SealModelFileToFile(pub_, in, o, dir_.File("a.sealed"), false), Code::kAlreadyExists);
  ASSERT_OK(OpenModelToFile(dir_.File("a.sealed"), *ks_, dir_.File("a.bin"), false));
  ASSERT_OK(OpenModelToFile(dir_.File("b.sealed"), *ks_, dir_.File("b.bin"), false));
  EXPECT_EQ(ReadAll(dir_.File("a.bin")), model);
  EXPECT_EQ(ReadAll(dir_.File("b.bin")), model);
  EXPECT_CODE(OpenModelToFile(dir_.File("a.sealed"), *ks_, dir_.File("a.bin"), false), Code::kAlreadyExists);
}

TEST_F(ModelExportTest, SealRefusesBadOptions) {
  const std::vector<uint8_t> model(10, 1);
  ModelSealOptions o = Options();
  o.info.format_id = "";
  EXPECT_CODE(SealModelToFile(pub_, model, o, dir_.File("x"), false), Code::kInvalidInput);
  o.info.format_id = "has space";
  EXPECT_CODE(SealModelToFile(pub_, model, o, dir_.File("x"), false), Code::kInvalidInput);
  o.info.format_id = std::string(kMaxFormatIdBytes + 1, 'f');
  EXPECT_CODE(SealModelToFile(pub_, model, o, dir_.File("x"), false), Code::kInvalidInput);
  o = Options();
  o.model_id = "a/b";
  EXPECT_CODE(SealModelToFile(pub_, model, o, dir_.File("x"), false), Code::kInvalidInput);
  o = Options(0);
  EXPECT_CODE(SealModelToFile(pub_, model, o, dir_.File("x"), false), Code::kInvalidInput);
  EXPECT_FALSE(fs::exists(dir_.File("x")));
}

TEST_F(ModelExportTest, PublicKeyFile) {
  const std::string text = EncodeExportPublicKey(pub_);
  ASSERT_OK_AND_ASSIGN(ExportPublicKey back, ParseExportPublicKey(AsBytes(text)));
  EXPECT_EQ(back.keystore_id, pub_.keystore_id);
  EXPECT_EQ(back.key_id, pub_.key_id);
  EXPECT_EQ(back.name, "tenant-export");
  EXPECT_EQ(back.public_key, pub_.public_key);
  const json doc = json::parse(text);
  EXPECT_EQ(doc["fingerprint"], HexEncode(ExportKeyFingerprint(pub_)));
  EXPECT_EQ(doc["format"], "enclave-export-public-key");

  auto expect = [&](const std::function<void(json&)>& edit, Code code, const char* what) {
    json d = doc;
    edit(d);
    EXPECT_CODE(ParseExportPublicKey(AsBytes(d.dump())), code) << what;
  };
  expect([](json& d) { d["public_key"] = std::string(64, '1'); }, Code::kInvalidInput, "other key, old fingerprint");
  expect([](json& d) { d["key_id"] = std::string(32, '1'); }, Code::kInvalidInput, "other key id");
  expect([](json& d) { d["keystore_id"] = std::string(32, '1'); }, Code::kInvalidInput, "other keystore id");
  expect([](json& d) { d["fingerprint"] = std::string(64, '0'); }, Code::kInvalidInput, "bad fingerprint");
  expect([](json& d) { d["public_key"] = "12"; }, Code::kInvalidInput, "short key");
  expect([](json& d) { d.erase("name"); }, Code::kInvalidInput, "no name");
  expect([](json& d) { d["name"] = "bad name"; }, Code::kInvalidInput, "bad name");
  expect([](json& d) { d["version"] = 2; }, Code::kUnsupported, "version 2");
  expect([](json& d) { d["version"] = "1"; }, Code::kInvalidInput, "version as string");
  expect([](json& d) { d["algorithm"] = "p256"; }, Code::kUnsupported, "other algorithm");
  expect([](json& d) { d["format"] = "enclave-keystore"; }, Code::kInvalidInput, "other format");
  EXPECT_CODE(ParseExportPublicKey(AsBytes("not json")), Code::kInvalidInput);
  EXPECT_CODE(ParseExportPublicKey(AsBytes("[]")), Code::kInvalidInput);
  EXPECT_CODE(ReadExportPublicKey(dir_.File("absent.pub")), Code::kNotFound);
  // The name is a label, not part of the fingerprint: renaming keeps the file valid.
  json renamed = doc;
  renamed["name"] = "renamed";
  EXPECT_OK(ParseExportPublicKey(AsBytes(renamed.dump())));
}

TEST_F(ModelExportTest, LowOrderPublicKeyIsRefused) {
  ExportPublicKey bad = pub_;
  bad.public_key.fill(0);  // the identity point: every shared secret would be zero
  const std::string text = EncodeExportPublicKey(bad);
  ASSERT_OK_AND_ASSIGN(ExportPublicKey parsed, ParseExportPublicKey(AsBytes(text)));
  EXPECT_CODE(SealModelToFile(parsed, std::vector<uint8_t>(8, 1), Options(), dir_.File("low.sealed"), false),
              Code::kInvalidInput);
  EXPECT_FALSE(fs::exists(dir_.File("low.sealed")));
}

TEST_F(ModelExportTest, WrongKeystoreOrKey) {
  const auto model = PatternBytes(300, 4);
  const std::string path = Seal(model, Options());
  const std::string out = dir_.File("out.bin");
  // Another tenant's keystore, even with an export key of the same name.
  const std::string other_path = dir_.File("other.keystore");
  ASSERT_OK(Keystore::Init(other_path, Passphrase(), kFastKdf));
  ASSERT_OK_AND_ASSIGN(Keystore other, Keystore::Unlock(other_path, Passphrase()));
  ASSERT_OK(other.CreateExportKey("tenant-export"));
  EXPECT_CODE(OpenModelToFile(path, other, out, false), Code::kNotFound);
  EXPECT_FALSE(fs::exists(out));
  // A second export key in the same keystore is not the one the file was sealed to.
  ASSERT_OK_AND_ASSIGN(ExportKeyEntry second, ks_->CreateExportKey("second"));
  ASSERT_OK_AND_ASSIGN(ExportPublicKey second_pub, ExportPublicKeyOf(*ks_, "second"));
  EXPECT_EQ(second_pub.key_id, second.key_id);
  EXPECT_NE(second_pub.public_key, pub_.public_key);
  ASSERT_OK(OpenModelToFile(path, *ks_, out, false));
  EXPECT_EQ(ReadAll(out), model);
  // A file whose header names the second key but whose recipient block is for the first.
  std::vector<uint8_t> bytes = ReadAll(path);
  std::copy(second.key_id.begin(), second.key_id.end(), bytes.begin() + 36);
  WriteBytes(dir_.File("relabeled.sealed"), bytes);
  EXPECT_CODE(OpenModelToFile(dir_.File("relabeled.sealed"), *ks_, dir_.File("r.bin"), false), Code::kAuthFailed);
  EXPECT_FALSE(fs::exists(dir_.File("r.bin")));
  // The keystore without the key the file names.
  json doc = json::parse(ReadText(ks_path_));
  doc["export_keys"].erase(0);
  WriteText(ks_path_, doc.dump(2));
  ASSERT_OK_AND_ASSIGN(Keystore without, Keystore::Unlock(ks_path_, Passphrase()));
  EXPECT_CODE(OpenModelToFile(path, without, dir_.File("w.bin"), false), Code::kNotFound);
}

TEST_F(ModelExportTest, ADatasetIsNotAModelAndBack) {
  const std::string path = Seal(PatternBytes(100, 1), Options());
  SealParams p;
  p.keystore_id = ks_->id();
  p.object_id = "ds";
  p.chunk_size = 16;
  p.payload_length = 16;
  Id128 key_id{};
  ASSERT_OK_AND_ASSIGN(SecretBytes dek, ks_->CreateDataKey("ds", Suite::kAes256Gcm, &key_id));
  p.key_id = key_id;
  {
    ASSERT_OK_AND_ASSIGN(AtomicOutputFile f, AtomicOutputFile::Create(dir_.File("ds.sealed"), false));
    FileSink sink(&f);
    ASSERT_OK_AND_ASSIGN(auto w, SealedFileWriter::Create(p, dek, &sink));
    ASSERT_OK(w->Append(std::vector<uint8_t>(16, 7)));
    ASSERT_OK(w->Finish());
    ASSERT_OK(f.Commit());
  }
  EXPECT_CODE(InspectModelExport(dir_.File("ds.sealed")), Code::kInvalidInput);
  EXPECT_CODE(OpenModelToFile(dir_.File("ds.sealed"), *ks_, dir_.File("x"), false), Code::kInvalidInput);
  EXPECT_OK(InspectModelExport(path));
}

// Every bit 0 and bit 7 of the header, every chunk byte, truncation and extension: the
// open fails with a documented code and leaves no output.
TEST_F(ModelExportTest, TamperingFailsClosed) {
  const auto model = PatternBytes(100, 5);
  const std::string path = Seal(model, Options(32));
  const std::vector<uint8_t> good = ReadAll(path);
  ASSERT_OK_AND_ASSIGN(ModelExportInfo info, InspectModelExport(path));
  const size_t header = info.header.header_length;
  const std::string bad = dir_.File("bad.sealed");
  const std::string out = dir_.File("bad.bin");
  const std::set<Code> allowed = {Code::kInvalidInput, Code::kAuthFailed, Code::kUnsupported, Code::kNotFound};
  std::map<Code, int> seen;
  auto expect_rejected = [&](const std::vector<uint8_t>& bytes, const std::string& what, bool must_be_auth) {
    WriteBytes(bad, bytes);
    auto r = OpenModelToFile(bad, *ks_, out, false);
    ASSERT_FALSE(r.ok()) << what << " was accepted";
    EXPECT_TRUE(allowed.count(r.status().code())) << what << ": " << r.status().ToString();
    if (must_be_auth) {
      EXPECT_EQ(r.status().code(), Code::kAuthFailed) << what << ": " << r.status().ToString();
    }
    EXPECT_FALSE(fs::exists(out)) << what << " left output";
    ++seen[r.status().code()];
  };
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<uint8_t> t = good;
      t[i] ^= bit;
      expect_rejected(t, "bit " + std::to_string(bit) + " of byte " + std::to_string(i), i >= header);
    }
  }
  expect_rejected({good.begin(), good.end() - 1}, "truncated by one byte", true);
  expect_rejected({good.begin(), good.begin() + static_cast<long>(header)}, "truncated to the header", true);
  expect_rejected({good.begin(), good.begin() + 100}, "truncated inside the header", true);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_rejected(longer, "one byte appended", true);
  // Every class of header failure occurred (not all rejections are one path).
  EXPECT_GT(seen[Code::kAuthFailed], 0);
  EXPECT_GT(seen[Code::kInvalidInput], 0);
  EXPECT_GT(seen[Code::kUnsupported], 0);
  EXPECT_GT(seen[Code::kNotFound], 0);
}

// The metadata offset of the recipient block within the header (after object id and
// metadata length): see docs/formats/model-export.md.
size_t MetadataOffset(const SealedHeader& h) { return 110 + h.params.object_id.size(); }

TEST_F(ModelExportTest, SwappedRecipientBlockFails) {
  const auto model = PatternBytes(200, 6);
  const std::string a = Seal(model, Options(), "a.sealed");
  const std::string b = Seal(model, Options(), "b.sealed");
  std::vector<uint8_t> fa = ReadAll(a), fb = ReadAll(b);
  ASSERT_OK_AND_ASSIGN(ModelExportInfo ia, InspectModelExport(a));
  const size_t meta = MetadataOffset(ia.header);
  // Recipient block = kind .. wrapped DEK: ephemeral key and wrap together, then each alone.
  for (auto [from, len, what] : {std::tuple<size_t, size_t, const char*>{2, 2 + 32 + 32 + 48, "whole block"},
                                 {36, 32, "ephemeral key"},
                                 {68, 48, "wrapped DEK"}}) {
    std::vector<uint8_t> t = fa;
    std::copy(fb.begin() + static_cast<long>(meta + from), fb.begin() + static_cast<long>(meta + from + len),
              t.begin() + static_cast<long>(meta + from));
    ASSERT_NE(t, fa) << what;
    WriteBytes(dir_.File("swapped.sealed"), t);
    auto r = OpenModelToFile(dir_.File("swapped.sealed"), *ks_, dir_.File("s.bin"), false);
    EXPECT_CODE(r, Code::kAuthFailed) << what;
    EXPECT_FALSE(fs::exists(dir_.File("s.bin")));
  }
  // The recipient block of b unwraps (under this key) to b's DEK; with a's header, the key
  // commitment catches it: prove that path is reached.
  std::vector<uint8_t> t = fa;
  std::copy(fb.begin() + static_cast<long>(meta + 36), fb.begin() + static_cast<long>(meta + 116),
            t.begin() + static_cast<long>(meta + 36));
  WriteBytes(dir_.File("swapped.sealed"), t);
  auto r = OpenModelToFile(dir_.File("swapped.sealed"), *ks_, dir_.File("s.bin"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("key commitment"), std::string::npos) << r.status().message();
}

TEST_F(ModelExportTest, UnwrapNeedsTheRightPrivateKey) {
  const std::string path = Seal(PatternBytes(50, 2), Options());
  ASSERT_OK_AND_ASSIGN(ModelExportInfo info, InspectModelExport(path));
  ASSERT_OK_AND_ASSIGN(SecretBytes priv, ks_->GetExportPrivateKey(pub_.key_id));
  ASSERT_OK_AND_ASSIGN(SecretBytes dek, UnwrapModelDek(info.header, info.metadata, priv));
  EXPECT_OK(SealedFileKey::Unlock(info.header, dek));
  SecretBytes stranger = RandomSecret(32);
  EXPECT_CODE(UnwrapModelDek(info.header, info.metadata, stranger), Code::kAuthFailed);
  // The wrap's AAD names the keystore and key ids: another pair of ids does not unwrap.
  SealedHeader other = info.header;
  other.params.keystore_id[0] ^= 1;
  EXPECT_CODE(UnwrapModelDek(other, info.metadata, priv), Code::kAuthFailed);
  ModelMetadata zero = info.metadata;
  zero.recipient.ephemeral_public_key.fill(0);
  EXPECT_CODE(UnwrapModelDek(info.header, zero, priv), Code::kAuthFailed);
}

TEST(ModelMetadata, EncodeParseAndStructure) {
  ModelMetadata m;
  m.info.format_id = "enclave-mlp/v1+f32";
  m.info.created_unix = 0x0102030405060708ull;
  m.info.job_digest.fill(0xab);
  m.recipient.recipient_public_key.fill(1);
  m.recipient.ephemeral_public_key.fill(2);
  m.recipient.wrapped_dek.fill(3);
  const std::vector<uint8_t> enc = EncodeModelMetadata(m);
  ASSERT_EQ(enc.size(), 158 + m.info.format_id.size());
  EXPECT_EQ(enc[0], 1);  // version, u16le
  EXPECT_EQ(enc[2], 1);  // kind
  EXPECT_EQ(enc[4], 1);
  EXPECT_EQ(enc[36], 2);
  EXPECT_EQ(enc[68], 3);
  EXPECT_EQ(enc[116], 0xab);
  EXPECT_EQ(enc[148], 0x08);  // created, little-endian
  EXPECT_EQ(enc[156], m.info.format_id.size());
  ASSERT_OK_AND_ASSIGN(ModelMetadata back, ParseModelMetadata(enc));
  EXPECT_EQ(back.info.format_id, m.info.format_id);
  EXPECT_EQ(back.info.created_unix, m.info.created_unix);
  EXPECT_EQ(back.recipient.wrapped_dek, m.recipient.wrapped_dek);
  for (size_t n = 0; n < enc.size(); ++n) {
    EXPECT_CODE(ParseModelMetadata(ByteSpan(enc.data(), n)), Code::kInvalidInput) << "prefix of " << n;
  }
  std::vector<uint8_t> t = enc;
  t.push_back(0);
  EXPECT_CODE(ParseModelMetadata(t), Code::kInvalidInput);
  t = enc;
  t[0] = 2;
  EXPECT_CODE(ParseModelMetadata(t), Code::kUnsupported);
  t = enc;
  t[2] = 2;
  EXPECT_CODE(ParseModelMetadata(t), Code::kUnsupported);
  t = enc;
  t.back() = ' ';
  EXPECT_CODE(ParseModelMetadata(t), Code::kInvalidInput);
}

// The fuzz target's seeds (tests/fuzz/corpus/model_export, made by
// tests/interop/make_fuzz_seeds.py) must get past every check, or the fuzzer starts blind.
TEST(ModelExportFuzzSeeds, ValidSeedsPassEveryCheck) {
  const fs::path dir = fs::path(ENCLAVE_TEST_DATA) / ".." / "fuzz" / "corpus" / "model_export";
  std::vector<uint8_t> fixed(32);
  for (size_t i = 0; i < fixed.size(); ++i) fixed[i] = static_cast<uint8_t>(0x40 + i);
  SecretBytes recipient = Secret(fixed);
  int models = 0, keys = 0, invalid = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::vector<uint8_t> bytes = ReadAll(e.path().string());
    SCOPED_TRACE(name);
    if (name.rfind("valid-model", 0) == 0) {
      ASSERT_OK_AND_ASSIGN(auto reader, SealedFileReader::Open(e.path().string()));
      ASSERT_OK_AND_ASSIGN(ModelMetadata meta, ParseModelMetadata(reader->header().params.metadata));
      ASSERT_OK_AND_ASSIGN(SecretBytes dek, UnwrapModelDek(reader->header(), meta, recipient));
      ASSERT_OK(reader->Unlock(dek));
      for (uint64_t i = 0; i < reader->header().chunk_count; ++i) {
        std::vector<uint8_t> out(reader->header().ChunkPlaintextSize(i));
        EXPECT_OK(reader->ReadChunk(i, out));
      }
      ++models;
    } else if (name.rfind("valid-public-key", 0) == 0) {
      ASSERT_OK_AND_ASSIGN(ExportPublicKey key, ParseExportPublicKey(bytes));
      X25519PublicKey expected{};
      ASSERT_EQ(crypto_scalarmult_base(expected.data(), fixed.data()), 0);
      EXPECT_EQ(key.public_key, expected);
      ++keys;
    } else if (name.rfind("invalid-public-key", 0) == 0) {
      EXPECT_FALSE(ParseExportPublicKey(bytes).ok());
      ++invalid;
    } else if (name.rfind("metadata-valid", 0) == 0) {
      EXPECT_OK(ParseModelMetadata(bytes));
    }
  }
  EXPECT_GE(models, 3);
  EXPECT_EQ(keys, 1);
  EXPECT_GE(invalid, 2);
}

// The test vector of docs/formats/model-export.md ("Test vector"), computed there by the
// independent Python implementation (tests/interop, CTest interop_model recomputes it):
// the C++ code must derive the same public keys and fingerprint and unwrap the same DEK.
TEST(ModelExportVector, DocumentedWrapUnwrapsToTheDek) {
  SecretBytes recipient = Secret(Hex("606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"));
  X25519PublicKey pub{};
  ASSERT_EQ(crypto_scalarmult_base(pub.data(), recipient.ExposeSecret().data()), 0);
  EXPECT_EQ(HexEncode(pub), "675dd574ed7789310b3d2e7681f3790b466c773b1521fecf36577958371ea52f");
  ExportPublicKey key;
  auto ks_id = Hex("92bd7d2c8ae033b048bd45f253d590b5");
  auto key_id = Hex("b0b1b2b3b4b5b6b7b8b9babbbcbdbebf");
  std::copy(ks_id.begin(), ks_id.end(), key.keystore_id.begin());
  std::copy(key_id.begin(), key_id.end(), key.key_id.begin());
  key.public_key = pub;
  EXPECT_EQ(HexEncode(ExportKeyFingerprint(key)), "49c3f71cebed1e237726a1f00c360e8b9ada1a1430a86635ebc7836ccc27575d");

  SealedHeader h;
  h.params.keystore_id = key.keystore_id;
  h.params.key_id = key.key_id;
  ModelMetadata m;
  m.recipient.recipient_public_key = pub;
  auto eph = Hex("79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a");
  auto wrapped = Hex("cd0468d3f6116a095c08686bc9313d8273515f87b02ff60d281ac8ec3ad251855f07024147d463bd82062c6bbf754aa6");
  ASSERT_EQ(wrapped.size(), kWrappedDekBytes);
  std::copy(eph.begin(), eph.end(), m.recipient.ephemeral_public_key.begin());
  std::copy(wrapped.begin(), wrapped.end(), m.recipient.wrapped_dek.begin());
  ASSERT_OK_AND_ASSIGN(SecretBytes dek, UnwrapModelDek(h, m, recipient));
  EXPECT_EQ(HexEncode(dek.ExposeSecret()), "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  h.params.key_id[15] ^= 1;  // the AAD binds the key id
  EXPECT_CODE(UnwrapModelDek(h, m, recipient), Code::kAuthFailed);
}

}  // namespace
}  // namespace enclave::crypto
