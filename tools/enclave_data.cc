// enclave-data: the data owner's CLI. Seals CSV files into sealed datasets, manages the
// tenant keystore, inspects, verifies and opens sealed files. Thin: the work is in
// dataset/ and crypto/.
#include <cstdio>
#include <optional>
#include <sstream>

#include "cli.h"
#include "enclave/common/bytes.h"
#include "enclave/common/progress.h"
#include "enclave/crypto/keystore.h"
#include "enclave/dataset/sealed_dataset.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;

const FlagSpec kJson{"json", "", "print the result as JSON"};
const FlagSpec kKeystore{"keystore", "K", "tenant keystore file", true};
const FlagSpec kForce{"force", "", "overwrite an existing output file"};

dataset::ProgressFn Progress(const Args& args, ProgressBar* bar) {
  if (args.json()) return {};
  return [bar](uint64_t done, uint64_t) { bar->Update(done); };
}

Result<crypto::Keystore> UnlockKeystore(const Args& args) {
  ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "Keystore passphrase", false));
  return crypto::Keystore::Unlock(args.Get("keystore"), pass);
}

json SchemaJson(const dataset::DatasetSchema& schema) {
  json cols = json::array();
  for (const auto& c : schema.columns) {
    const char* kind = c.kind == dataset::ColumnKind::kLabel ? "label"
                       : c.kind == dataset::ColumnKind::kYesNo ? "yes/no"
                                                               : "numeric";
    cols.push_back({{"name", c.name}, {"kind", kind}});
  }
  return {{"columns", cols}, {"classes", schema.classes}, {"features", schema.feature_count()}};
}

// `authenticated`: whether the header was checked with the data key (not so for inspect).
json InfoJson(const std::string& path, const dataset::DatasetInfo& info, bool authenticated) {
  const auto& h = info.header;
  return {{"ok", true},
          {"authenticated", authenticated},
          {"file", path},
          {"format_version", h.version},
          {"dataset_id", h.params.object_id},
          {"suite", crypto::SuiteName(h.params.suite)},
          {"keystore_id", HexEncode(h.params.keystore_id)},
          {"key_id", HexEncode(h.params.key_id)},
          {"rows", info.rows},
          {"chunk_bytes", h.params.chunk_size},
          {"chunks", h.chunk_count},
          {"payload_bytes", h.params.payload_length},
          {"file_bytes", h.FileSize()},
          {"sha256", HexEncode(info.file_digest)},
          {"schema", SchemaJson(info.schema)}};
}

void PrintInfo(const std::string& path, const dataset::DatasetInfo& info) {
  const auto& h = info.header;
  std::printf("file         %s\n", path.c_str());
  std::printf("dataset id   %s\n", h.params.object_id.c_str());
  std::printf("suite        %s\n", std::string(crypto::SuiteName(h.params.suite)).c_str());
  std::printf("keystore id  %s\n", HexEncode(h.params.keystore_id).c_str());
  std::printf("key id       %s\n", HexEncode(h.params.key_id).c_str());
  std::printf("rows         %llu\n", static_cast<unsigned long long>(info.rows));
  std::printf("features     %u\n", info.schema.feature_count());
  std::printf("chunks       %llu x %u bytes\n", static_cast<unsigned long long>(h.chunk_count), h.params.chunk_size);
  std::printf("file size    %llu bytes\n", static_cast<unsigned long long>(h.FileSize()));
  std::printf("sha256       %s\n", HexEncode(info.file_digest).c_str());
  std::printf("columns:\n");
  for (const auto& c : info.schema.columns) {
    const char* kind = c.kind == dataset::ColumnKind::kLabel ? "label"
                       : c.kind == dataset::ColumnKind::kYesNo ? "yes/no -> 0/1"
                                                               : "numeric";
    std::printf("  %-32s %s\n", c.name.c_str(), kind);
  }
  std::printf("classes:\n");
  for (size_t i = 0; i < info.schema.classes.size(); ++i) {
    std::printf("  %zu = %s\n", i, info.schema.classes[i].c_str());
  }
  std::printf("(header read without a key: not authenticated; `verify` authenticates it)\n");
}

Status KeystoreInit(const Args& args) {
  crypto::KdfParams kdf;
  ASSIGN_OR_RETURN(kdf.opslimit, args.GetU64("kdf-opslimit", kdf.opslimit));
  ASSIGN_OR_RETURN(uint64_t mib, args.GetU64("kdf-memlimit-mib", kdf.memlimit_bytes >> 20));
  if (mib > (1u << 20)) return InvalidInput("--kdf-memlimit-mib too large");
  kdf.memlimit_bytes = mib << 20;
  ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "New keystore passphrase", true));
  RETURN_IF_ERROR(crypto::Keystore::Init(args.Get("keystore"), pass, kdf));
  ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(args.Get("keystore"), pass));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"keystore", args.Get("keystore")}, {"keystore_id", HexEncode(ks.id())}});
  } else {
    std::printf("created keystore %s (id %s)\n", args.Get("keystore").c_str(), HexEncode(ks.id()).c_str());
  }
  return OkStatus();
}

Status KeystoreList(const Args& args) {
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  if (args.json()) {
    json keys = json::array();
    for (const auto& e : ks.entries()) {
      keys.push_back({{"dataset_id", e.dataset_id},
                      {"key_id", HexEncode(e.key_id)},
                      {"suite", crypto::SuiteName(e.suite)},
                      {"created", e.created}});
    }
    cli::PrintJson({{"ok", true}, {"keystore_id", HexEncode(ks.id())}, {"data_keys", keys}});
    return OkStatus();
  }
  std::printf("keystore %s (id %s), %zu data keys\n", args.Get("keystore").c_str(), HexEncode(ks.id()).c_str(),
              ks.entries().size());
  for (const auto& e : ks.entries()) {
    std::printf("  %-32s %s %-18s %s\n", e.dataset_id.c_str(), HexEncode(e.key_id).c_str(),
                std::string(crypto::SuiteName(e.suite)).c_str(), e.created.c_str());
  }
  return OkStatus();
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    out.push_back(b == std::string::npos ? std::string() : item.substr(b, e - b + 1));
  }
  if (!s.empty() && s.back() == ',') out.push_back("");  // an empty last class, refused by validation
  return out;
}

Status Seal(const Args& args) {
  dataset::SealOptions o;
  o.csv_path = args.Get("csv");
  o.out_path = args.Get("out");
  o.label.column = args.Get("label");
  if (args.Has("positive")) o.label.positive = args.Get("positive");
  if (args.Has("classes")) o.label.classes = SplitComma(args.Get("classes"));
  if (o.label.positive && !o.label.classes.empty()) return InvalidInput("--positive and --classes exclude each other");
  ASSIGN_OR_RETURN(o.suite, crypto::ParseSuite(args.Get("suite")));
  o.dataset_id = args.Get("dataset-id");
  ASSIGN_OR_RETURN(uint64_t chunk_records, args.GetU64("chunk-records", 0));
  if (chunk_records > (1u << 30)) return InvalidInput("--chunk-records too large");
  o.chunk_records = static_cast<uint32_t>(chunk_records);
  o.overwrite = args.Has("force");
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  std::optional<ProgressBar> bar;  // the total is known once the CSV is open
  o.progress = [&](uint64_t done, uint64_t total) {
    if (!bar) bar.emplace("sealing", total, !args.json());
    bar->Update(done);
  };
  ASSIGN_OR_RETURN(dataset::DatasetInfo info, dataset::SealCsv(o, ks));
  if (bar) bar->Finish();
  if (args.json()) {
    json j = InfoJson(o.out_path, info, true);
    cli::PrintJson(j);
  } else {
    std::printf("sealed %llu rows x %u features of %s into %s (%s, %llu chunks)\nsha256 %s\n",
                static_cast<unsigned long long>(info.rows), info.schema.feature_count(), o.csv_path.c_str(),
                o.out_path.c_str(), std::string(crypto::SuiteName(o.suite)).c_str(),
                static_cast<unsigned long long>(info.header.chunk_count), HexEncode(info.file_digest).c_str());
  }
  return OkStatus();
}

Status Inspect(const Args& args) {
  const std::string path = args.positional()[0];
  ASSIGN_OR_RETURN(dataset::DatasetInfo info, dataset::InspectSealed(path));
  if (args.json()) cli::PrintJson(InfoJson(path, info, false));
  else PrintInfo(path, info);
  return OkStatus();
}

Status Verify(const Args& args) {
  const std::string path = args.positional()[0];
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  ASSIGN_OR_RETURN(auto probe, crypto::SealedFileReader::Open(path));
  ProgressBar real("verifying", probe->header().FileSize(), !args.json());
  ASSIGN_OR_RETURN(dataset::DatasetInfo info, dataset::VerifySealed(path, ks, Progress(args, &real)));
  real.Finish();
  if (args.json()) {
    json j = InfoJson(path, info, true);
    j["verified_chunks"] = info.header.chunk_count;
    cli::PrintJson(j);
  } else {
    std::printf("OK: %s: all %llu chunks authenticated, %llu rows valid, sha256 %s\n", path.c_str(),
                static_cast<unsigned long long>(info.header.chunk_count), static_cast<unsigned long long>(info.rows),
                HexEncode(info.file_digest).c_str());
  }
  return OkStatus();
}

Status Open(const Args& args) {
  const std::string path = args.positional()[0];
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  ASSIGN_OR_RETURN(auto probe, crypto::SealedFileReader::Open(path));
  ProgressBar bar("opening", probe->header().FileSize(), !args.json());
  RETURN_IF_ERROR(dataset::OpenSealedToCsv(path, ks, args.Get("out"), args.Has("force"), Progress(args, &bar)));
  bar.Finish();
  if (args.json()) cli::PrintJson({{"ok", true}, {"file", path}, {"out", args.Get("out")}});
  else std::printf("opened %s into %s\n", path.c_str(), args.Get("out").c_str());
  return OkStatus();
}

Status Synth(const Args& args) {
  ASSIGN_OR_RETURN(uint64_t rows, args.GetU64("rows", 0));
  ASSIGN_OR_RETURN(uint64_t features, args.GetU64("features", 0));
  ASSIGN_OR_RETURN(uint64_t seed, args.GetU64("seed", 1));
  if (features > 100000) return InvalidInput("--features at most 100000");
  ProgressBar bar("generating", rows, !args.json());
  RETURN_IF_ERROR(dataset::WriteSyntheticCsv(args.Get("out"), rows, static_cast<uint32_t>(features), seed,
                                             args.Has("force"), Progress(args, &bar)));
  bar.Finish();
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"out", args.Get("out")}, {"rows", rows}, {"features", features}, {"label", "y"}});
  } else {
    std::printf("wrote %llu rows x %llu features (label column 'y') to %s\n", static_cast<unsigned long long>(rows),
                static_cast<unsigned long long>(features), args.Get("out").c_str());
  }
  return OkStatus();
}

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-data";
  p.summary = "seal datasets for the confidential training enclave; manage the tenant keystore";
  p.holds_keys = true;
  const FlagSpec pass = cli::PassphraseFdFlag();
  p.verbs = {
      {"keystore init", "create a tenant keystore with a fresh key-encryption key", "", 0,
       {kKeystore, pass, {"kdf-opslimit", "N", "Argon2id passes (default 3, minimum 2)"},
        {"kdf-memlimit-mib", "N", "Argon2id memory in MiB (default 128, minimum 19)"}, kJson},
       KeystoreInit},
      {"keystore list", "list the data keys in a keystore (never their bytes)", "", 0, {kKeystore, pass, kJson},
       KeystoreList},
      {"seal", "seal a CSV file into a sealed dataset under a fresh data key", "", 0,
       {{"csv", "F", "input CSV with a header line", true},
        {"label", "COL", "name of the label column", true},
        {"positive", "VALUE", "binary label: VALUE is class 1, the one other value class 0"},
        {"classes", "A,B,...", "fixed class list in index order; other values are errors"},
        {"suite", "SUITE", "aes-256-gcm or chacha20-poly1305", true},
        {"dataset-id", "ID", "dataset id (letters, digits, . _ - :)", true},
        kKeystore, {"out", "F.sealed", "output file", true},
        {"chunk-records", "N", "records per chunk (default: what fits in 64 KiB)"}, kForce, pass, kJson},
       Seal},
      {"inspect", "show a sealed file's header: ids, suite, schema, sizes, digest (no key)", "F.sealed", 1, {kJson},
       Inspect},
      {"verify", "authenticate every chunk of a sealed file", "F.sealed", 1, {kKeystore, pass, kJson}, Verify},
      {"open", "decrypt a sealed file back into CSV (owner side)", "F.sealed", 1,
       {kKeystore, {"out", "F.csv", "output CSV", true}, kForce, pass, kJson}, Open},
      {"synth", "write synthetic tabular data (for benchmarks)", "", 0,
       {{"rows", "N", "rows", true}, {"features", "D", "numeric feature columns", true},
        {"seed", "S", "random seed (default 1)"}, {"out", "F.csv", "output CSV", true}, kForce, kJson},
       Synth},
  };
  return cli::Main(p, argc, argv);
}
