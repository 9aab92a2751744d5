// enclave-data: the data owner's CLI. Seals CSV files into sealed datasets, manages the
// tenant keystore and its export keys, inspects, verifies and opens sealed files and
// exported models. Thin: the work is in dataset/ and crypto/.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>
#include <sstream>

#include "cli.h"
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/common/progress.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
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

const char* KindName(dataset::ColumnKind kind) {
  switch (kind) {
    case dataset::ColumnKind::kLabel: return "label";
    case dataset::ColumnKind::kYesNo: return "yes/no";
    case dataset::ColumnKind::kCategorical: return "categorical";
    default: return "numeric";
  }
}

const char* TaskName(dataset::Task task) {
  return task == dataset::Task::kRegression ? "regression" : "classification";
}

json SchemaJson(const dataset::DatasetSchema& schema) {
  json cols = json::array();
  for (const auto& c : schema.columns) {
    json col = {{"name", c.name}, {"kind", KindName(c.kind)}, {"missing_allowed", c.missing_allowed}};
    if (c.kind == dataset::ColumnKind::kCategorical) col["categories"] = c.categories.size();
    cols.push_back(col);
  }
  return {{"version", schema.NeedsV2() ? 2 : 1},
          {"task", TaskName(schema.task)},
          {"columns", cols},
          {"classes", schema.classes},
          {"features", schema.feature_count()}};
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
  std::printf("schema       v%d, %s\n", info.schema.NeedsV2() ? 2 : 1, TaskName(info.schema.task));
  std::printf("columns:\n");
  for (const auto& c : info.schema.columns) {
    std::string kind = c.kind == dataset::ColumnKind::kYesNo ? "yes/no -> 0/1" : KindName(c.kind);
    if (c.kind == dataset::ColumnKind::kLabel && info.schema.task == dataset::Task::kRegression) kind += " (number)";
    if (c.kind == dataset::ColumnKind::kCategorical) kind += ", " + std::to_string(c.categories.size()) + " categories";
    if (c.missing_allowed) kind += ", missing values allowed";
    std::printf("  %-32s %s\n", c.name.c_str(), kind.c_str());
  }
  if (info.schema.task == dataset::Task::kClassification) {
    std::printf("classes:\n");
    for (size_t i = 0; i < info.schema.classes.size(); ++i) {
      std::printf("  %zu = %s\n", i, info.schema.classes[i].c_str());
    }
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
    json exports = json::array();
    for (const auto& e : ks.export_keys()) {
      exports.push_back({{"name", e.name},
                         {"key_id", HexEncode(e.key_id)},
                         {"algorithm", "x25519"},
                         {"public_key", HexEncode(e.public_key)},
                         {"created", e.created}});
    }
    cli::PrintJson({{"ok", true}, {"keystore_id", HexEncode(ks.id())}, {"data_keys", keys}, {"export_keys", exports}});
    return OkStatus();
  }
  std::printf("keystore %s (id %s), %zu data keys, %zu export keys\n", args.Get("keystore").c_str(),
              HexEncode(ks.id()).c_str(), ks.entries().size(), ks.export_keys().size());
  for (const auto& e : ks.entries()) {
    std::printf("  %-32s %s %-18s %s\n", e.dataset_id.c_str(), HexEncode(e.key_id).c_str(),
                std::string(crypto::SuiteName(e.suite)).c_str(), e.created.c_str());
  }
  for (const auto& e : ks.export_keys()) {
    std::printf("  export key %-21s %s x25519             %s\n", e.name.c_str(), HexEncode(e.key_id).c_str(),
                e.created.c_str());
  }
  return OkStatus();
}

std::string Rfc3339(uint64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(unix_seconds);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json PublicKeyJson(const crypto::ExportPublicKey& key) {
  return {{"keystore_id", HexEncode(key.keystore_id)},
          {"key_id", HexEncode(key.key_id)},
          {"name", key.name},
          {"algorithm", "x25519"},
          {"public_key", HexEncode(key.public_key)},
          {"fingerprint", HexEncode(crypto::ExportKeyFingerprint(key))}};
}

// `keystore export-key create|show`: the tenant's X25519 export key pairs.
Status KeystoreExportKey(const Args& args) {
  const std::string action = args.positional()[0];
  if (action != "create" && action != "show") {
    return InvalidInput("keystore export-key: unknown action '" + action + "' (create or show)");
  }
  if (action == "create" && (args.Has("out") || args.Has("force"))) {
    return InvalidInput("--out and --force apply to `export-key show` only");
  }
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  crypto::ExportPublicKey key;
  if (action == "create") {
    ASSIGN_OR_RETURN(crypto::ExportKeyEntry entry, ks.CreateExportKey(args.Get("id", "export")));
    ASSIGN_OR_RETURN(key, crypto::ExportPublicKeyOf(ks, entry.name));
  } else {
    ASSIGN_OR_RETURN(key, crypto::ExportPublicKeyOf(ks, args.Get("id")));
    if (args.Has("out")) {
      const std::string text = crypto::EncodeExportPublicKey(key);
      ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(args.Get("out"), args.Has("force")));
      RETURN_IF_ERROR(out.Write(text.data(), text.size()));
      RETURN_IF_ERROR(out.Commit());
    }
  }
  const std::string fingerprint = HexEncode(crypto::ExportKeyFingerprint(key));
  if (args.json()) {
    json j = PublicKeyJson(key);
    j["ok"] = true;
    if (args.Has("out")) j["out"] = args.Get("out");
    cli::PrintJson(j);
  } else {
    std::printf("%s '%s' (key id %s) of keystore %s\npublic key   %s\nfingerprint  %s\n",
                action == "create" ? "created export key" : "export key", key.name.c_str(), HexEncode(key.key_id).c_str(),
                HexEncode(key.keystore_id).c_str(), HexEncode(key.public_key).c_str(), fingerprint.c_str());
    if (args.Has("out")) std::printf("wrote the public key file %s\n", args.Get("out").c_str());
  }
  return OkStatus();
}

json ModelJson(const std::string& path, const crypto::ModelExportInfo& info, bool authenticated) {
  const auto& h = info.header;
  const auto& m = info.metadata;
  const bool no_job = std::all_of(m.info.job_digest.begin(), m.info.job_digest.end(), [](uint8_t b) { return b == 0; });
  return {{"ok", true},
          {"authenticated", authenticated},
          {"file", path},
          {"content", "exported-model"},
          {"format_version", h.version},
          {"model_id", h.params.object_id},
          {"suite", crypto::SuiteName(h.params.suite)},
          {"keystore_id", HexEncode(h.params.keystore_id)},
          {"key_id", HexEncode(h.params.key_id)},
          {"recipient_public_key", HexEncode(m.recipient.recipient_public_key)},
          {"model_format", m.info.format_id},
          {"job_digest", no_job ? json(nullptr) : json(HexEncode(m.info.job_digest))},
          {"created", Rfc3339(m.info.created_unix)},
          {"created_unix", m.info.created_unix},
          {"chunk_bytes", h.params.chunk_size},
          {"chunks", h.chunk_count},
          {"payload_bytes", h.params.payload_length},
          {"file_bytes", h.FileSize()},
          {"sha256", HexEncode(info.file_digest)}};
}

void PrintModel(const std::string& path, const crypto::ModelExportInfo& info, bool authenticated) {
  json j = ModelJson(path, info, authenticated);
  std::printf("file          %s\n", path.c_str());
  std::printf("content       exported model (sealed to an export key)\n");
  std::printf("model id      %s\n", info.header.params.object_id.c_str());
  std::printf("model format  %s\n", info.metadata.info.format_id.c_str());
  std::printf("job digest    %s\n", j["job_digest"].is_null() ? "(none)" : j["job_digest"].get<std::string>().c_str());
  std::printf("created       %s\n", j["created"].get<std::string>().c_str());
  std::printf("suite         %s\n", std::string(crypto::SuiteName(info.header.params.suite)).c_str());
  std::printf("keystore id   %s\n", HexEncode(info.header.params.keystore_id).c_str());
  std::printf("export key id %s\n", HexEncode(info.header.params.key_id).c_str());
  std::printf("model bytes   %llu in %llu chunks\n", static_cast<unsigned long long>(info.header.params.payload_length),
              static_cast<unsigned long long>(info.header.chunk_count));
  std::printf("file size     %llu bytes\n", static_cast<unsigned long long>(info.header.FileSize()));
  std::printf("sha256        %s\n", HexEncode(info.file_digest).c_str());
  if (!authenticated) std::printf("(header read without a key: not authenticated; `verify` authenticates it)\n");
}

// The content type of a sealed file, from its structurally checked header.
Result<crypto::ContentType> ContentTypeOf(const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, crypto::SealedFileReader::Open(path));
  return reader->header().params.content_type;
}

Status SealTo(const Args& args) {
  ASSIGN_OR_RETURN(crypto::ExportPublicKey key, crypto::ReadExportPublicKey(args.Get("pub")));
  crypto::ModelSealOptions o;
  ASSIGN_OR_RETURN(o.suite, crypto::ParseSuite(args.Get("suite", "aes-256-gcm")));
  o.model_id = args.Get("model-id", "model");
  o.info.format_id = args.Get("format-id");
  if (args.Has("job-digest")) {
    auto d = HexDecode(args.Get("job-digest"));
    if (!d.ok() || d->size() != 32) return InvalidInput("--job-digest must be 64 hex digits (a SHA-256)");
    std::copy(d->begin(), d->end(), o.info.job_digest.begin());
  }
  ASSIGN_OR_RETURN(uint64_t chunk, args.GetU64("chunk-bytes", crypto::kDefaultModelChunkBytes));
  if (chunk == 0 || chunk > crypto::kMaxChunkBytes) return InvalidInput("--chunk-bytes must be 1..2^30");
  o.chunk_size = static_cast<uint32_t>(chunk);
  ASSIGN_OR_RETURN(auto probe, FileReader::Open(args.Get("in")));
  ProgressBar bar("sealing", probe.size(), !args.json());
  ASSIGN_OR_RETURN(crypto::ModelExportInfo info,
                   crypto::SealModelFileToFile(key, args.Get("in"), o, args.Get("out"), args.Has("force"),
                                               [&](uint64_t done, uint64_t) { bar.Update(done); }));
  bar.Finish();
  if (args.json()) {
    json j = ModelJson(args.Get("out"), info, true);
    j["fingerprint"] = HexEncode(crypto::ExportKeyFingerprint(key));
    cli::PrintJson(j);
  } else {
    std::printf("sealed %llu bytes of %s to export key '%s' (fingerprint %s) into %s\nsha256 %s\n",
                static_cast<unsigned long long>(info.header.params.payload_length), args.Get("in").c_str(),
                key.name.c_str(), HexEncode(crypto::ExportKeyFingerprint(key)).c_str(), args.Get("out").c_str(),
                HexEncode(info.file_digest).c_str());
  }
  return OkStatus();
}

Status OpenModel(const Args& args) {
  const std::string path = args.Get("in");
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  ASSIGN_OR_RETURN(auto probe, crypto::SealedFileReader::Open(path));
  ProgressBar bar("opening", probe->header().params.payload_length, !args.json());
  ASSIGN_OR_RETURN(crypto::ModelExportInfo info,
                   crypto::OpenModelToFile(path, ks, args.Get("out"), args.Has("force"),
                                           [&](uint64_t done, uint64_t) { bar.Update(done); }));
  bar.Finish();
  if (args.json()) {
    json j = ModelJson(path, info, true);
    j["out"] = args.Get("out");
    cli::PrintJson(j);
  } else {
    std::printf("opened %s into %s: %llu bytes of model format '%s', all %llu chunks authenticated\n", path.c_str(),
                args.Get("out").c_str(), static_cast<unsigned long long>(info.header.params.payload_length),
                info.metadata.info.format_id.c_str(), static_cast<unsigned long long>(info.header.chunk_count));
  }
  return OkStatus();
}

// --classes (sealed-dataset.md, "Labels"): split at commas, items not trimmed, a trailing
// empty item dropped ("x,z," is x and z). Other empty items stay and are refused by the
// schema's rules (no empty class names).
std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

Status Seal(const Args& args) {
  dataset::SealOptions o;
  o.csv_path = args.Get("csv");
  o.out_path = args.Get("out");
  o.label.column = args.Get("label");
  if (args.Has("positive")) o.label.positive = args.Get("positive");
  if (args.Has("classes")) {
    o.label.classes = SplitComma(args.Get("classes"));
    if (o.label.classes.size() < 2) {
      return InvalidInput("--classes needs at least 2 class names, got '" + args.Get("classes") + "'");
    }
  }
  if (o.label.positive && !o.label.classes.empty()) return InvalidInput("--positive and --classes exclude each other");
  const std::string task = args.Get("task", "classification");
  if (task != "classification" && task != "regression") {
    return InvalidInput("--task must be classification or regression, got '" + task + "'");
  }
  if (task == "regression") o.label.task = dataset::Task::kRegression;
  o.cells.default_missing = !args.Has("no-default-missing");
  o.cells.missing = args.GetAll("missing");
  o.cells.categorical = args.GetAll("categorical");
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
  ASSIGN_OR_RETURN(crypto::ContentType type, ContentTypeOf(path));
  if (type == crypto::ContentType::kExportedModel) {
    ASSIGN_OR_RETURN(crypto::ModelExportInfo info, crypto::InspectModelExport(path));
    if (args.json()) cli::PrintJson(ModelJson(path, info, false));
    else PrintModel(path, info, false);
    return OkStatus();
  }
  ASSIGN_OR_RETURN(dataset::DatasetInfo info, dataset::InspectSealed(path));
  if (args.json()) cli::PrintJson(InfoJson(path, info, false));
  else PrintInfo(path, info);
  return OkStatus();
}

Status Verify(const Args& args) {
  const std::string path = args.positional()[0];
  ASSIGN_OR_RETURN(crypto::Keystore ks, UnlockKeystore(args));
  ASSIGN_OR_RETURN(auto probe, crypto::SealedFileReader::Open(path));
  if (probe->header().params.content_type == crypto::ContentType::kExportedModel) {
    ProgressBar bar("verifying", probe->header().params.payload_length, !args.json());
    ASSIGN_OR_RETURN(crypto::ModelExportInfo info,
                     crypto::VerifyModelExport(path, ks, [&](uint64_t done, uint64_t) { bar.Update(done); }));
    bar.Finish();
    if (args.json()) {
      json j = ModelJson(path, info, true);
      j["verified_chunks"] = info.header.chunk_count;
      cli::PrintJson(j);
    } else {
      std::printf("OK: %s: exported model, all %llu chunks authenticated, sha256 %s\n", path.c_str(),
                  static_cast<unsigned long long>(info.header.chunk_count), HexEncode(info.file_digest).c_str());
    }
    return OkStatus();
  }
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
      {"keystore export-key", "create an X25519 export key pair, or show/write its public key file", "create|show", 1,
       {kKeystore, pass, {"id", "NAME", "export key name (create: default 'export'; show: default the newest)"},
        {"out", "F.pub", "show: write the public key file here"}, kForce, kJson},
       KeystoreExportKey},
      {"seal", "seal a CSV file into a sealed dataset under a fresh data key", "", 0,
       {{"csv", "F", "input CSV with a header line", true},
        {"label", "COL", "name of the label column", true},
        {"positive", "VALUE", "binary label: VALUE is class 1, the one other value class 0"},
        {"classes", "A,B,...", "fixed class list in index order; other values are errors"},
        {"task", "TASK", "classification (default) or regression (a numeric label, stored as its value)"},
        {"categorical", "COL", "seal feature column COL as categorical whatever its values", false, true},
        {"missing", "TOKEN", "cells equal to TOKEN (after trimming) are missing values", false, true},
        {"no-default-missing", "", "empty, NA, NaN and null cells are not missing values"},
        {"suite", "SUITE", "aes-256-gcm or chacha20-poly1305", true},
        {"dataset-id", "ID", "dataset id (letters, digits, . _ - :)", true},
        kKeystore, {"out", "F.sealed", "output file", true},
        {"chunk-records", "N", "records per chunk (default: what fits in 64 KiB)"}, kForce, pass, kJson},
       Seal},
      {"inspect", "show a sealed file's header: ids, suite, schema or model facts, sizes, digest (no key)", "F.sealed", 1, {kJson},
       Inspect},
      {"verify", "authenticate every chunk of a sealed dataset or exported model", "F.sealed", 1, {kKeystore, pass, kJson}, Verify},
      {"open", "decrypt a sealed file back into CSV (owner side)", "F.sealed", 1,
       {kKeystore, {"out", "F.csv", "output CSV", true}, kForce, pass, kJson}, Open},
      {"seal-to", "seal a file (a trained model) to a tenant's export public key (no keystore needed)", "", 0,
       {{"pub", "F.pub", "the tenant's export public key file (keystore export-key show --out)", true},
        {"in", "F", "the plaintext model (opaque bytes)", true},
        {"out", "F.sealed", "output file", true},
        {"format-id", "ID", "the model's plaintext format id (letters, digits, . _ - : / +)", true},
        {"job-digest", "HEX", "SHA-256 of the job specification (default: none)"},
        {"model-id", "ID", "model id in the header (default 'model')"},
        {"suite", "SUITE", "aes-256-gcm (default) or chacha20-poly1305"},
        {"chunk-bytes", "N", "plaintext bytes per chunk (default 1 MiB)"}, kForce, kJson},
       SealTo},
      {"open-model", "decrypt an exported model with the tenant keystore (owner side)", "", 0,
       {kKeystore, {"in", "F.sealed", "the exported model", true}, {"out", "F", "the plaintext model", true}, kForce,
        pass, kJson},
       OpenModel},
      {"synth", "write synthetic tabular data (for benchmarks)", "", 0,
       {{"rows", "N", "rows", true}, {"features", "D", "numeric feature columns", true},
        {"seed", "S", "random seed (default 1)"}, {"out", "F.csv", "output CSV", true}, kForce, kJson},
       Synth},
  };
  return cli::Main(p, argc, argv);
}
