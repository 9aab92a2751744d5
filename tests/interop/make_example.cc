// Regenerates the worked-example fixture (tests/data/dataset/interop_example.*) used by
// docs/formats/sealed-dataset.md and keystore.md. NOT built by CMake; kept so the example
// can be remade (e.g. for a new format version). It seals interop_example.csv with a FIXED
// data key (00 01 .. 1f, key id a0 .. af; label "card", positive "yes": specific to this
// CSV) and adds that key, wrapped by the KEK, to a
// keystore made by `enclave-data keystore init`:
//
//   B=build; printf "%s\n" "correct horse battery staple" > pass.txt
//   $B/tools/enclave-data keystore init --keystore ks.json --passphrase-fd 3 \
//       --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass.txt
//   g++ -std=c++20 tests/interop/make_example.cc -I common/include -I crypto/include -I dataset/include \
//       $B/dataset/libenclave_dataset.a $B/crypto/libenclave_crypto.a \
//       $B/common/libenclave_common.a -lsodium -lcrypto -o make_example
//   ./make_example ks.json pass.txt interop_example.csv out.sealed example:credit-mini
//
// then update the tables in the docs with `enclave_decode.py explain` (CTest interop_docs
// fails until they agree).
#include <sodium.h>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <charconv>
#include <ctime>
#include <nlohmann/json.hpp>
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/csv.h"
#include "enclave/dataset/sealed_dataset.h"
using namespace enclave;
using nlohmann::json;
#define CHECK(x) do { auto _s = (x); if (!_s.ok()) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, _s.ToString().c_str()); return 1; } } while (0)
std::vector<uint8_t> Hex(const std::string& s) { return HexDecode(s).value(); }
int main(int argc, char** argv) {
  if (argc != 6) { fprintf(stderr, "usage: keystore passfile csv out dataset_id\n"); return 2; }
  std::string ks_path = argv[1], pass_path = argv[2], csv_path = argv[3], out_path = argv[4], dataset_id = argv[5];
  if (sodium_init() < 0) return 1;
  std::ifstream pf(pass_path); std::string pass; std::getline(pf, pass);
  std::ifstream kf(ks_path); std::stringstream ss; ss << kf.rdbuf();
  json doc = json::parse(ss.str());
  auto ks_id = Hex(doc["keystore_id"]);
  auto salt = Hex(doc["kdf"]["salt"]);
  uint64_t ops = doc["kdf"]["opslimit"], mem = doc["kdf"]["memlimit_bytes"];
  uint8_t pass_key[32];
  if (crypto_pwhash(pass_key, 32, pass.data(), pass.size(), salt.data(), ops, mem, crypto_pwhash_ALG_ARGON2ID13)) return 1;
  ByteWriter ka; ka.Bytes("enclave keystore v1 kek"); ka.Bytes(ks_id); ka.U64(ops); ka.U64(mem); ka.Bytes(salt);
  auto kn = Hex(doc["kek"]["nonce"]), kw = Hex(doc["kek"]["wrapped"]);
  uint8_t kek[32]; unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(kek, &len, nullptr, kw.data(), kw.size(), ka.bytes().data(), ka.bytes().size(), kn.data(), pass_key)) { fprintf(stderr, "bad pass\n"); return 1; }
  printf("passphrase_key %s\nkek %s\n", HexEncode(ByteSpan(pass_key, 32)).c_str(), HexEncode(ByteSpan(kek, 32)).c_str());
  std::vector<uint8_t> dek_bytes(32); for (int i = 0; i < 32; ++i) dek_bytes[i] = uint8_t(i);
  crypto::Id128 key_id; for (int i = 0; i < 16; ++i) key_id[i] = uint8_t(0xa0 + i);
  // Keystore entry for the fixed DEK.
  ByteWriter da; da.Bytes("enclave keystore v1 dek"); da.Bytes(ks_id); da.Bytes(key_id); da.U16(1);
  da.U16(uint16_t(dataset_id.size())); da.Bytes(dataset_id);
  uint8_t dn[24]; randombytes_buf(dn, 24);
  std::vector<uint8_t> dw(48);
  crypto_aead_xchacha20poly1305_ietf_encrypt(dw.data(), &len, dek_bytes.data(), 32, da.bytes().data(), da.bytes().size(), nullptr, dn, kek);
  char created[32]; std::time_t t = std::time(nullptr); std::tm tm{}; gmtime_r(&t, &tm);
  std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  doc["data_keys"].push_back({{"dataset_id", dataset_id}, {"key_id", HexEncode(key_id)}, {"suite", "aes-256-gcm"},
                              {"created", created}, {"nonce", HexEncode(ByteSpan(dn, 24))}, {"wrapped", HexEncode(dw)}});
  { std::ofstream o(ks_path + ".new"); o << doc.dump(2) << "\n"; }
  std::rename((ks_path + ".new").c_str(), ks_path.c_str());
  printf("dek_aad %s\n", HexEncode(da.bytes()).c_str());
  // Seal.
  dataset::LabelSpec spec; spec.column = "card"; spec.positive = "yes";
  auto scan = dataset::ScanCsv(csv_path, spec); CHECK(scan.status());
  const auto& schema = scan->schema;
  crypto::SealParams p;
  p.suite = crypto::Suite::kAes256Gcm;
  std::copy(ks_id.begin(), ks_id.end(), p.keystore_id.begin());
  p.key_id = key_id; p.object_id = dataset_id;
  p.chunk_size = 2 * schema.record_bytes();
  p.payload_length = scan->rows * schema.record_bytes();
  p.metadata = dataset::EncodeSchema(schema);
  auto dek = crypto::SecretBytes::CopyFrom(dek_bytes); CHECK(dek.status());
  auto out = AtomicOutputFile::Create(out_path, true); CHECK(out.status());
  crypto::FileSink sink(&*out);
  auto w = crypto::SealedFileWriter::Create(p, *dek, &sink); CHECK(w.status());
  auto csv = dataset::CsvReader::Open(csv_path); CHECK(csv.status());
  std::vector<std::string> row; CHECK(csv->Next(&row).status());
  std::vector<uint8_t> plain;
  while (*csv->Next(&row)) {
    std::vector<float> rec; float label = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      auto k = schema.columns[i].kind;
      if (k == dataset::ColumnKind::kLabel) { label = row[i] == "yes" ? 1.f : 0.f; }
      else if (k == dataset::ColumnKind::kYesNo) rec.push_back(row[i] == "yes" ? 1.f : 0.f);
      else { float f; std::from_chars(row[i].data(), row[i].data() + row[i].size(), f); rec.push_back(f); }
    }
    rec.push_back(label);
    auto b = ByteSpan(reinterpret_cast<const uint8_t*>(rec.data()), rec.size() * 4);
    plain.insert(plain.end(), b.begin(), b.end());
    CHECK((*w)->Append(b));
  }
  CHECK((*w)->Finish());
  CHECK(out->Commit());
  const auto& h = (*w)->header();
  auto pk = crypto::HkdfSha256(*dek, h.salt, "enclave sealed-file v1 payload key", 32);
  auto hk = crypto::HkdfSha256(*dek, h.salt, "enclave sealed-file v1 header key", 32);
  printf("salt %s\npayload_key %s\nheader_key %s\ncommitment %s\ntag %s\nheader_digest %s\nplaintext %s\n",
         HexEncode(h.salt).c_str(), HexEncode(pk->ExposeSecret()).c_str(), HexEncode(hk->ExposeSecret()).c_str(),
         HexEncode(h.commitment).c_str(), HexEncode(h.tag).c_str(), HexEncode(h.header_digest).c_str(), HexEncode(plain).c_str());
  printf("file_sha256 %s\n", HexEncode(*crypto::SealedFileDigest(out_path)).c_str());
  return 0;
}
