// Writes and checks the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).
//
//   enclave_fuzz_seeds write DIR   writes fresh seeds into DIR/<target>/ (salts and nonces
//                                  are random, so every run gives new bytes)
//   enclave_fuzz_seeds check DIR   checks that every DIR/<target>/valid-* seed is accepted
//                                  all the way (ctest: fuzz_seeds_valid), so a format
//                                  change that would leave the fuzzers stuck at the first
//                                  check is noticed
//
// Sealed files are sealed under the fixed fuzz DEK and keystores wrapped under the fixed
// fuzz passphrase (fuzz_util.h). Keystore::Init refuses the tiny Argon2id cost the seeds
// need (1 pass, 8 KiB: the least Unlock accepts, so fuzzing stays fast), so this file
// builds keystore JSON itself from docs of the format: the associated data of the KEK and
// DEK wraps are re-derived here, independently of keystore.cc, and `check` proves that
// Keystore::Unlock agrees.
#include <sodium.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/csv.h"
#include "enclave/dataset/schema.h"
#include "fuzz_util.h"

namespace {

namespace fs = std::filesystem;
using namespace enclave;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "enclave_fuzz_seeds: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Fail(what + ": " + s.ToString());
}

void WriteFile(const fs::path& path, ByteSpan bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) Fail("cannot write " + path.string());
  std::printf("wrote %s (%zu bytes)\n", path.c_str(), bytes.size());
}

// --- sealed files ----------------------------------------------------------------------

// A column as schema v1 knows it (no missing values, no categories).
dataset::Column V1Column(std::string name, dataset::ColumnKind kind) {
  dataset::Column c;
  c.name = std::move(name);
  c.kind = kind;
  return c;
}

dataset::DatasetSchema SmallSchema() {
  dataset::DatasetSchema s;
  s.columns = {V1Column("income", dataset::ColumnKind::kNumeric),
               V1Column("owner", dataset::ColumnKind::kYesNo),
               V1Column("card", dataset::ColumnKind::kLabel)};
  s.classes = {"no", "yes"};
  return s;
}

dataset::DatasetSchema MultiClassSchema() {
  dataset::DatasetSchema s;
  s.columns = {V1Column("a", dataset::ColumnKind::kNumeric),
               V1Column("species", dataset::ColumnKind::kLabel),
               V1Column("b", dataset::ColumnKind::kNumeric),
               V1Column("flag", dataset::ColumnKind::kYesNo),
               V1Column("c \"quoted\", name", dataset::ColumnKind::kNumeric)};
  s.classes = {"setosa", "versicolor", "virginica", "other"};
  return s;
}

// Schema v2: missing values, a categorical column, classification.
dataset::DatasetSchema V2Schema() {
  dataset::DatasetSchema s;
  s.columns = {{"age", dataset::ColumnKind::kNumeric, true, {}},
               {"colour", dataset::ColumnKind::kCategorical, false, {"Green", "blue", "red"}},
               {"smoker", dataset::ColumnKind::kYesNo, true, {}},
               {"y", dataset::ColumnKind::kLabel, false, {}}};
  s.classes = {"a", "b"};
  return s;
}

// Schema v2: a regression label, a categorical column that allows missing values.
dataset::DatasetSchema RegressionSchema() {
  dataset::DatasetSchema s;
  s.task = dataset::Task::kRegression;
  s.columns = {{"price", dataset::ColumnKind::kLabel, false, {}},
               {"zip", dataset::ColumnKind::kCategorical, true, {"10", "100", "9"}},
               {"area", dataset::ColumnKind::kNumeric, false, {}}};
  return s;
}

// Valid records of V2Schema / RegressionSchema (features in column order, then the label).
std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> V2Records() {
  const float m = dataset::MissingValue();
  return FloatBytes({37.5f, 2, 1, 0, m, 1, m, 1, -999, 0, 0, 0, 41, 2, 1, 1, m, 0, 0, 0});
}

std::vector<uint8_t> RegressionRecords() {
  const float m = dataset::MissingValue();
  return FloatBytes({0, 52.5f, 1250000, 2, 71, 990000.5f, m, 40, -3, 1, 12.25f, 0.125f});
}

// Schemas a reader must refuse (invalid-schema-*.bin seeds): each breaks one v2 rule.
std::vector<std::pair<std::string, std::vector<uint8_t>>> InvalidSchemaSeeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  auto add = [&](const std::string& name, const dataset::DatasetSchema& s) {
    out.emplace_back("invalid-schema-v2-" + name + ".bin", dataset::EncodeSchema(s));
  };
  dataset::DatasetSchema s = V2Schema();
  s.columns[1].categories = {"red", "blue"};
  add("categories-unsorted", s);
  s.columns[1].categories = {"red", "red"};
  add("categories-duplicate", s);
  s.columns[1].categories = {"", "red"};
  add("category-empty", s);
  s = V2Schema();
  s.columns[3].missing_allowed = true;
  add("label-missing-allowed", s);
  std::vector<uint8_t> reg = dataset::EncodeSchema(RegressionSchema());
  for (int b : std::initializer_list<int>{2, 0, 0, 0, 1, 0, 'a', 1, 0, 'b'}) reg.push_back(static_cast<uint8_t>(b));  // a class list: trailing bytes
  out.emplace_back("invalid-schema-v2-regression-with-classes.bin", reg);
  std::vector<uint8_t> v3 = dataset::EncodeSchema(V2Schema());
  v3[4] = 3;  // schema_version 3
  out.emplace_back("invalid-schema-v2-version-3.bin", v3);
  std::vector<uint8_t> flags = dataset::EncodeSchema(V2Schema());
  flags[12] = 0x81;  // age's flags: an unknown bit
  out.emplace_back("invalid-schema-v2-unknown-flag.bin", flags);
  // v2 bytes for a schema that needs nothing of v2 (its one encoding is v1).
  ByteWriter w;
  w.Bytes("ESCH");
  w.U16(2);
  w.U8(0);  // classification
  w.U32(2);
  for (auto [kind, name] : {std::pair<uint8_t, const char*>{0, "x"}, {2, "y"}}) {
    w.U8(kind);
    w.U8(0);  // no flags
    w.U16(1);
    w.Bytes(name);
  }
  w.U32(2);
  for (const char* c : {"a", "b"}) {
    w.U16(1);
    w.Bytes(c);
  }
  out.emplace_back("invalid-schema-v2-needs-nothing-of-v2.bin", std::move(w.bytes()));
  return out;
}

// `rows` records of a schema with `width` columns: features then the class index.
std::vector<uint8_t> Records(size_t rows, size_t width, uint32_t classes) {
  std::vector<float> v;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c + 1 < width; ++c) v.push_back(c == 1 ? static_cast<float>(r % 2) : 0.25f * float(r + c));
    v.push_back(static_cast<float>(r % classes));
  }
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> Seal(crypto::Suite suite, uint32_t chunk_size, const std::vector<uint8_t>& payload,
                          std::vector<uint8_t> metadata, const std::string& id) {
  crypto::SealParams p;
  p.suite = suite;
  p.object_id = id;
  p.chunk_size = chunk_size;
  p.payload_length = payload.size();
  p.metadata = std::move(metadata);
  for (size_t i = 0; i < 16; ++i) {
    p.keystore_id[i] = static_cast<uint8_t>(0xA0 + i);
    p.key_id[i] = static_cast<uint8_t>(0xB0 + i);
  }
  crypto::MemorySink sink;
  auto w = crypto::SealedFileWriter::Create(p, enclave::fuzz::FixedDek(), &sink);
  Check(w.status(), "sealing " + id);
  // Uneven appends, so the writer's buffering is what a real sealer sees.
  for (size_t off = 0; off < payload.size();) {
    size_t n = std::min<size_t>(payload.size() - off, 7 + off % 13);
    Check((*w)->Append(ByteSpan(payload.data() + off, n)), "append");
    off += n;
  }
  Check((*w)->Finish(), "finish");
  return std::move(sink.data);
}

struct SealedSeed {
  std::string name;
  std::vector<uint8_t> bytes;
  bool header_seed;  // its header also seeds sealed_header
};

std::vector<SealedSeed> SealedSeeds() {
  using crypto::Suite;
  const auto small = dataset::EncodeSchema(SmallSchema());
  const auto multi = dataset::EncodeSchema(MultiClassSchema());
  std::vector<uint8_t> random_payload(100);
  for (size_t i = 0; i < random_payload.size(); ++i) random_payload[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<uint8_t> ramp(300);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<uint8_t>(i);
  return {
      // 10 records of 12 bytes in chunks of 4 records: 48 + 48 + 24.
      {"valid-aes-dataset.sealed", Seal(Suite::kAes256Gcm, 48, Records(10, 3, 2), small, "fuzz.small-aes"), true},
      // 8 records: two full chunks, the last one full too.
      {"valid-chacha-dataset.sealed", Seal(Suite::kChaCha20Poly1305, 48, Records(8, 3, 2), small, "fuzz:small-chacha"),
       true},
      // 5 columns, 4 classes; 6 records of 20 bytes, chunks of 2 records.
      {"valid-aes-multiclass.sealed", Seal(Suite::kAes256Gcm, 40, Records(6, 5, 4), multi, "fuzz_multi"), true},
      // An empty payload still has one (empty, final) chunk.
      {"valid-aes-empty.sealed", Seal(Suite::kAes256Gcm, 64, {}, {}, "fuzz-empty"), true},
      {"valid-chacha-onechunk.sealed", Seal(Suite::kChaCha20Poly1305, 4096, random_payload, {}, "one"), false},
      // 19 chunks of 16 bytes, the last 12.
      {"valid-aes-many.sealed", Seal(Suite::kAes256Gcm, 16, ramp, {}, "many"), false},
      // Schema v2: 5 records of 16 bytes (missing values, categories), chunks of 2 records.
      {"valid-aes-v2.sealed", Seal(Suite::kAes256Gcm, 32, V2Records(), dataset::EncodeSchema(V2Schema()), "fuzz.v2"),
       true},
      // Schema v2, regression: 4 records of 12 bytes in one chunk.
      {"valid-chacha-v2-regression.sealed",
       Seal(Suite::kChaCha20Poly1305, 48, RegressionRecords(), dataset::EncodeSchema(RegressionSchema()), "fuzz.reg"),
       true},
  };
}

// --- keystores ------------------------------------------------------------------------

// The associated data of the keystore's wraps (docs: keystore format, v1).
std::vector<uint8_t> KekAad(ByteSpan id, uint64_t ops, uint64_t mem, ByteSpan salt) {
  ByteWriter w;
  w.Bytes("enclave keystore v1 kek");
  w.Bytes(id);
  w.U64(ops);
  w.U64(mem);
  w.Bytes(salt);
  return std::move(w.bytes());
}

std::vector<uint8_t> DekAad(ByteSpan keystore_id, ByteSpan key_id, crypto::Suite suite, const std::string& dataset) {
  ByteWriter w;
  w.Bytes("enclave keystore v1 dek");
  w.Bytes(keystore_id);
  w.Bytes(key_id);
  w.U16(static_cast<uint16_t>(suite));
  w.U16(static_cast<uint16_t>(dataset.size()));
  w.Bytes(dataset);
  return std::move(w.bytes());
}

void XWrap(ByteSpan kek, ByteSpan key, ByteSpan aad, std::vector<uint8_t>* nonce, std::vector<uint8_t>* wrapped) {
  nonce->resize(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  randombytes_buf(nonce->data(), nonce->size());
  wrapped->resize(key.size() + crypto_aead_xchacha20poly1305_ietf_ABYTES);
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(wrapped->data(), &len, key.data(), key.size(), aad.data(), aad.size(),
                                             nullptr, nonce->data(), kek.data());
}

struct KeySpec {
  std::string dataset;
  crypto::Suite suite;
};

std::string MakeKeystore(const std::vector<KeySpec>& keys) {
  constexpr uint64_t kOps = 1, kMem = 8192;
  std::vector<uint8_t> id(16), salt(crypto_pwhash_SALTBYTES), kek(32), pass_key(32);
  randombytes_buf(id.data(), id.size());
  randombytes_buf(salt.data(), salt.size());
  randombytes_buf(kek.data(), kek.size());
  auto pass = enclave::fuzz::kFixedPassphrase;
  if (crypto_pwhash(pass_key.data(), pass_key.size(), pass.data(), pass.size(), salt.data(), kOps, kMem,
                    crypto_pwhash_ALG_ARGON2ID13) != 0) {
    Fail("crypto_pwhash failed");
  }
  std::vector<uint8_t> nonce, wrapped;
  XWrap(pass_key, kek, KekAad(id, kOps, kMem, salt), &nonce, &wrapped);
  nlohmann::json doc = {
      {"format", "enclave-keystore"},
      {"version", 1},
      {"keystore_id", HexEncode(id)},
      {"kdf", {{"algorithm", "argon2id13"}, {"opslimit", kOps}, {"memlimit_bytes", kMem}, {"salt", HexEncode(salt)}}},
      {"kek", {{"algorithm", "xchacha20-poly1305"}, {"nonce", HexEncode(nonce)}, {"wrapped", HexEncode(wrapped)}}},
      {"data_keys", nlohmann::json::array()},
  };
  for (const KeySpec& k : keys) {
    std::vector<uint8_t> key_id(16), dek(32);
    randombytes_buf(key_id.data(), key_id.size());
    randombytes_buf(dek.data(), dek.size());
    XWrap(kek, dek, DekAad(id, key_id, k.suite, k.dataset), &nonce, &wrapped);
    doc["data_keys"].push_back({{"dataset_id", k.dataset},
                                {"key_id", HexEncode(key_id)},
                                {"suite", crypto::SuiteName(k.suite)},
                                {"created", "2024-01-01T00:00:00Z"},
                                {"nonce", HexEncode(nonce)},
                                {"wrapped", HexEncode(wrapped)}});
  }
  return doc.dump(2) + "\n";
}

// --- CSV ------------------------------------------------------------------------------

const std::vector<std::pair<std::string, std::string>>& CsvSeeds() {
  static const std::vector<std::pair<std::string, std::string>> seeds = {
      {"valid-simple.csv", "a,b,label\n1,2,yes\n3.5,-4e-3,no\n"},
      {"valid-quoted.csv",
       "name,\"note, with comma\",y\r\n\"multi\nline\",\"say \"\"hi\"\"\",1\r\n\"\",,0\r\n"},
      {"valid-bom-blank-lines.csv", "\xEF\xBB\xBF" "x,owner,card\n\n0.5,yes,no\n\r\n1.5,no,yes\n\n"},
      {"valid-no-final-newline.csv", "a,b\n1,\"2\""},
      // The first rows of data/samples/credit_card_applications.csv (see its README).
      {"valid-credit-head.csv",
       "card,reports,age,income,share,expenditure,owner,selfemp,dependents,months,majorcards,active\n"
       "yes,0,37.66667,4.52,0.03326991,124.9833,yes,no,3,54,1,12\n"
       "yes,0,33.25,2.42,0.005216942,9.854167,no,no,3,34,1,13\n"
       "no,0,33.66667,4.5,0.004155556,15,yes,no,4,58,1,5\n"},
      {"invalid-unterminated.csv", "a,b\n\"open,1\n"},
      {"invalid-bare-cr.csv", "a,b\r1,2\n"},
      {"invalid-stray-quote.csv", "a,b\nx\"y,2\n"},
      {"invalid-after-quote.csv", "a,b\n\"x\"y,2\n"},
      {"invalid-bom.csv", "\xEF\xBB" "a,b\n"},
  };
  return seeds;
}

// --- write ----------------------------------------------------------------------------

void Write(const fs::path& dir) {
  for (const SealedSeed& s : SealedSeeds()) {
    WriteFile(dir / "sealed_file" / s.name, s.bytes);
    if (!s.header_seed) continue;
    auto h = crypto::ParseSealedHeader(s.bytes);
    Check(h.status(), s.name);
    std::string stem = fs::path(s.name).stem().string();
    WriteFile(dir / "sealed_header" / (stem + ".header"), ByteSpan(s.bytes).first(h->header_length));
  }
  WriteFile(dir / "sealed_header" / "schema-small.bin", dataset::EncodeSchema(SmallSchema()));
  WriteFile(dir / "sealed_header" / "schema-multiclass.bin", dataset::EncodeSchema(MultiClassSchema()));
  WriteFile(dir / "sealed_header" / "schema-v2-classification.bin", dataset::EncodeSchema(V2Schema()));
  WriteFile(dir / "sealed_header" / "schema-v2-regression.bin", dataset::EncodeSchema(RegressionSchema()));
  for (const auto& [name, bytes] : InvalidSchemaSeeds()) WriteFile(dir / "sealed_header" / name, bytes);
  for (const auto& [name, text] : CsvSeeds()) WriteFile(dir / "csv" / name, AsBytes(text));
  WriteFile(dir / "keystore" / "valid-no-keys.json", AsBytes(MakeKeystore({})));
  WriteFile(dir / "keystore" / "valid-two-keys.json",
            AsBytes(MakeKeystore({{"fuzz.small-aes", crypto::Suite::kAes256Gcm},
                                  {"fuzz:small-chacha", crypto::Suite::kChaCha20Poly1305}})));
}

// --- check ----------------------------------------------------------------------------

std::vector<fs::path> ValidSeeds(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) Fail(dir.string() + ": no such directory");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string().rfind("valid-", 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) Fail(dir.string() + ": no valid-* seeds");
  return out;
}

// The v2 seeds hold valid records, so the record check passes them (and fuzzing starts
// from records that get through it).
void CheckV2Records(crypto::SealedFileReader& r, const std::string& what) {
  const auto& h = r.header();
  auto schema = dataset::DecodeSchema(h.params.metadata);
  Check(schema.status(), what + ": schema");
  if (!schema->NeedsV2()) Fail(what + ": not a v2 schema");
  const size_t width = schema->columns.size();
  uint64_t row = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    std::vector<uint8_t> bytes(h.ChunkPlaintextSize(i));
    Check(r.ReadChunk(i, bytes), what);
    std::vector<float> rec(bytes.size() / 4);
    std::memcpy(rec.data(), bytes.data(), bytes.size());
    for (size_t at = 0; at + width <= rec.size(); at += width) {
      Check(dataset::CheckRecord(*schema, &rec[at], row++), what + ": record");
    }
  }
}

void CheckSealedFile(const fs::path& path, const crypto::SecretBytes& dek) {
  auto r = crypto::SealedFileReader::Open(path.string());
  Check(r.status(), "open");
  Check((*r)->Unlock(dek), "unlock");
  const auto& h = (*r)->header();
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    std::vector<uint8_t> out(h.ChunkPlaintextSize(i));
    Check((*r)->ReadChunk(i, out), "chunk " + std::to_string(i));
  }
  if (!h.params.metadata.empty()) Check(dataset::DecodeSchema(h.params.metadata).status(), "schema");
  if (path.filename().string().find("-v2") != std::string::npos) CheckV2Records(**r, path.string());
  std::printf("ok %s: %s, %llu chunks\n", path.c_str(), std::string(crypto::SuiteName(h.params.suite)).c_str(),
              static_cast<unsigned long long>(h.chunk_count));
}

void CheckDir(const fs::path& dir) {
  const crypto::SecretBytes dek = enclave::fuzz::FixedDek();
  for (const fs::path& p : ValidSeeds(dir / "sealed_file")) CheckSealedFile(p, dek);
  for (const auto& e : fs::directory_iterator(dir / "sealed_header")) {
    auto bytes = ReadWholeFile(e.path().string(), 1 << 20);
    Check(bytes.status(), e.path().string());
    const std::string name = e.path().filename().string();
    if (name.rfind("schema-", 0) == 0) {
      Check(dataset::DecodeSchema(*bytes).status(), name);
    } else if (name.rfind("invalid-schema-", 0) == 0) {
      if (dataset::DecodeSchema(*bytes).ok()) Fail(name + ": a schema that must be refused decodes");
    } else if (name.rfind("valid-", 0) == 0) {
      auto h = crypto::ParseSealedHeader(*bytes);
      Check(h.status(), name);
      Check(crypto::SealedFileKey::Unlock(*h, dek).status(), name + ": unlock");
      if (!h->params.metadata.empty()) Check(dataset::DecodeSchema(h->params.metadata).status(), name + ": schema");
    }
    std::printf("ok %s\n", e.path().c_str());
  }
  for (const fs::path& p : ValidSeeds(dir / "csv")) {
    auto r = dataset::CsvReader::Open(p.string());
    Check(r.status(), p.string());
    std::vector<std::string> fields;
    size_t n = 0;
    while (true) {
      auto more = r->Next(&fields);
      Check(more.status(), p.string());
      if (!*more) break;
      ++n;
    }
    std::printf("ok %s: %zu records\n", p.c_str(), n);
  }
  const crypto::SecretBytes pass = enclave::fuzz::FixedPassphrase();
  for (const fs::path& p : ValidSeeds(dir / "keystore")) {
    auto ks = crypto::Keystore::Unlock(p.string(), pass);
    Check(ks.status(), p.string());
    for (const auto& e : ks->entries()) Check(ks->GetDataKey(e.dataset_id, e.key_id).status(), p.string());
    std::printf("ok %s: %zu data keys\n", p.c_str(), ks->entries().size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "write" && std::string(argv[1]) != "check")) {
    std::fprintf(stderr, "usage: %s write|check CORPUS_DIR\n", argv[0]);
    return 2;
  }
  Check(crypto::InitCrypto(), "init");
  if (std::string(argv[1]) == "write") Write(argv[2]);
  else CheckDir(argv[2]);
  return 0;
}
