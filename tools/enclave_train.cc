// enclave-train: the data scientist's CLI. Runs a training job (run) or a stratified
// k-fold cross-validation of it (cv) on the CPU or GPU backend. Thin: the work is in train/.
//
// Until the key broker exists, data keys come from a local keystore in a development mode
// that says so on stderr and in the report.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli.h"
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/common/progress.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/train/backend.h"
#include "enclave/train/data.h"
#include "enclave/train/job.h"
#include "enclave/train/trainer.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;
using namespace enclave::train;

const FlagSpec kJson{"json", "", "emit one JSON line per epoch and a JSON summary on stdout"};
const FlagSpec kJob{"job", "F.toml", "job specification (docs/formats/job.md)", true};
const FlagSpec kKeystore{"keystore", "K", "local tenant keystore holding the data keys (development mode)"};
const FlagSpec kDevice{"device", "cpu|gpu|auto", "override the job's device"};
const FlagSpec kForce{"force", "", "overwrite an existing metrics file in the output directory"};

constexpr const char* kDevWarning =
    "DEVELOPMENT MODE: no key broker, no attestation: data keys come from a local keystore (or the data is "
    "clear CSV); the model is not exported. Do not use with real data.";

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string ParamsDigest(const LockedArray<float>& params) {
  return HexEncode(crypto::Sha256({reinterpret_cast<const uint8_t*>(params.data()), params.size() * sizeof(float)}));
}

json EpochJson(const EpochMetrics& m, uint32_t metrics) {
  json j = {{"epoch", m.epoch}, {"lr", m.lr}, {"seconds", m.seconds}};
  if (metrics & kMetricLoss) {
    j["train_loss"] = Num(m.train_loss);
    j["val_loss"] = Num(m.val_loss);
  }
  if (metrics & kMetricAccuracy) j["val_accuracy"] = Num(m.val_accuracy);
  if (metrics & kMetricRocAuc) j["val_roc_auc"] = Num(m.val_auc);
  return j;
}

json JobJson(const std::string& path, const JobSpec& job) {
  return {{"file", path}, {"name", job.name}, {"sha256", HexEncode(job.digest)}, {"seed", job.seed}};
}

json ModelJson(const TrainResult& r) {
  return {{"inputs", r.shape.inputs},
          {"hidden", r.shape.hidden},
          {"activation", ActivationName(r.shape.activation)},
          {"classes", r.shape.classes},
          {"parameters", r.shape.parameter_count()}};
}

json SourcesJson(const LoadedData& data) {
  json a = json::array();
  for (const SourceInfo& s : data.sources) {
    a.push_back({{"id", s.id},
                 {"path", s.path},
                 {"format", s.format == DatasetFormat::kSealed ? "sealed" : "csv"},
                 {"rows", s.rows},
                 {"sha256", HexEncode(s.file_digest)}});
  }
  return a;
}

// Prints a one-line progress display on a terminal (never with --json).
class EpochLine {
 public:
  EpochLine(bool enabled, uint32_t epochs) : enabled_(enabled && StderrIsTerminal()), epochs_(epochs) {}
  void Step(uint32_t epoch, uint64_t done, uint64_t total) {
    if (!enabled_ || (done % 16 != 0 && done != total)) return;
    const int filled = static_cast<int>(30.0 * static_cast<double>(done) / static_cast<double>(total));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(30, '.');
    std::fprintf(stderr, "\r%sepoch %u/%u [%s]", prefix_.c_str(), epoch, epochs_, bar.c_str());
    std::fflush(stderr);
  }
  void Epoch(const EpochMetrics& m) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r%sepoch %u/%u loss %.4f val_loss %.4f val_acc %.4f val_auc %.4f lr %.3g  \n",
                 prefix_.c_str(), m.epoch, epochs_, m.train_loss, m.val_loss, m.val_accuracy, m.val_auc, m.lr);
  }
  void set_prefix(std::string p) { prefix_ = std::move(p); }

 private:
  bool enabled_;
  uint32_t epochs_;
  std::string prefix_;
};

struct Session {
  JobSpec job;
  std::unique_ptr<Backend> backend;
  LoadedData data;
  std::optional<crypto::Keystore> keystore;
  std::string key_source;
};

Result<Session> Prepare(const Args& args) {
  Session s;
  ASSIGN_OR_RETURN(s.job, LoadJob(args.Get("job")));
  if (args.Has("device")) {
    const std::string d = args.Get("device");
    if (d == "cpu") s.job.device = Device::kCpu;
    else if (d == "gpu") s.job.device = Device::kGpu;
    else if (d == "auto") s.job.device = Device::kAuto;
    else return InvalidInput("--device must be cpu, gpu or auto, got '" + d + "'");
  }
  bool sealed = false;
  for (const DatasetSpec& d : s.job.datasets) sealed = sealed || d.format == DatasetFormat::kSealed;
  std::fprintf(stderr, "enclave-train: WARNING: %s\n", kDevWarning);
  if (sealed) {
    if (!args.Has("keystore")) {
      return FailedPrecondition("the job reads sealed datasets: without a key broker, give --keystore (development mode)");
    }
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "Keystore passphrase", false));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(args.Get("keystore"), pass));
    s.keystore.emplace(std::move(ks));
    s.key_source = "local keystore " + args.Get("keystore") + " (development mode, no broker)";
    std::fprintf(stderr, "enclave-train: WARNING: data keys from the local keystore %s, not from an attested broker\n",
                 args.Get("keystore").c_str());
  } else {
    s.key_source = "none: clear CSV input (development mode)";
    std::fprintf(stderr, "enclave-train: WARNING: training from clear CSV (development only)\n");
  }
  if (!s.job.broker_url.empty()) {
    std::fprintf(stderr, "enclave-train: note: broker_url is reserved and not used yet\n");
  }
  ASSIGN_OR_RETURN(s.backend, MakeBackend(s.job.device));
  ASSIGN_OR_RETURN(s.data, LoadDatasets(*s.backend, s.job.datasets, s.keystore ? &*s.keystore : nullptr));
  return s;
}

json ReportHeader(const Args& args, const Session& s, const char* verb) {
  return {{"ok", true},
          {"verb", verb},
          {"mode", "development"},
          {"warning", kDevWarning},
          {"key_source", s.key_source},
          {"model_exported", false},
          {"job", JobJson(args.Get("job"), s.job)},
          {"device", s.backend->kind()},
          {"backend", s.backend->Describe()},
          {"datasets", SourcesJson(s.data)},
          {"rows", s.data.rows},
          {"features", s.data.features},
          {"classes", s.data.schema.classes}};
}

void EmitLine(const json& j) {
  std::cout << j.dump() << "\n";
  std::cout.flush();
}

Result<AtomicOutputFile> OpenReport(const Session& s, const std::string& name, bool force) {
  std::error_code ec;
  std::filesystem::create_directories(s.job.output_dir, ec);
  if (ec) return IoError("creating output directory " + s.job.output_dir + ": " + ec.message());
  return AtomicOutputFile::Create((std::filesystem::path(s.job.output_dir) / name).string(), force);
}

Status WriteReport(AtomicOutputFile& out, const json& report) {
  const std::string text = report.dump(2) + "\n";
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

TrainCallbacks Callbacks(const Args& args, const JobSpec& job, EpochLine* line, const json& extra,
                         uint32_t* current_epoch) {
  TrainCallbacks cb;
  cb.on_step = [line, current_epoch](uint64_t done, uint64_t total) { line->Step(*current_epoch, done, total); };
  cb.on_epoch = [&args, &job, line, extra, current_epoch](const EpochMetrics& m) {
    ++*current_epoch;
    if (args.json()) {
      json j = {{"event", "epoch"}};
      j.update(extra);
      j.update(EpochJson(m, job.metrics));
      EmitLine(j);
    } else {
      line->Epoch(m);
    }
  };
  return cb;
}

Status Run(const Args& args) {
  ASSIGN_OR_RETURN(Session s, Prepare(args));
  ASSIGN_OR_RETURN(AtomicOutputFile out, OpenReport(s, "metrics.json", args.Has("force")));
  ASSIGN_OR_RETURN(Split split, StratifiedSplit(s.data.labels, s.data.classes, s.job.validation_fraction, s.job.seed));
  EpochLine line(!args.json(), s.job.epochs);
  uint32_t epoch = 1;
  TrainCallbacks cb = Callbacks(args, s.job, &line, json::object(), &epoch);
  ASSIGN_OR_RETURN(TrainResult r, Train(*s.backend, s.job, s.data, split, cb));
  json report = ReportHeader(args, s, "run");
  report["model"] = ModelJson(r);
  report["train_rows"] = r.train_rows;
  report["val_rows"] = r.val_rows;
  report["steps"] = r.steps;
  json epochs = json::array();
  for (const EpochMetrics& m : r.epochs) epochs.push_back(EpochJson(m, s.job.metrics));
  report["epochs"] = epochs;
  report["final"] = EpochJson(r.epochs.back(), s.job.metrics);
  report["parameters_sha256"] = ParamsDigest(r.params);
  const std::string path = (std::filesystem::path(s.job.output_dir) / "metrics.json").string();
  RETURN_IF_ERROR(WriteReport(out, report));
  if (args.json()) {
    EmitLine({{"event", "done"}, {"ok", true}, {"metrics_file", path}, {"final", report["final"]},
              {"parameters_sha256", report["parameters_sha256"]}});
  } else {
    const EpochMetrics& f = r.epochs.back();
    std::printf("trained %s on %zu rows (%zu validation) for %u epochs on %s\n"
                "validation accuracy %.4f, ROC AUC %.4f, loss %.4f\nparameters sha256 %s\nmetrics: %s\n",
                s.job.name.c_str(), r.train_rows, r.val_rows, s.job.epochs, s.backend->Describe().c_str(),
                f.val_accuracy, f.val_auc, f.val_loss, ParamsDigest(r.params).c_str(), path.c_str());
  }
  return OkStatus();
}

Status Cv(const Args& args) {
  ASSIGN_OR_RETURN(uint64_t folds, args.GetU64("folds", 5));
  if (folds < 2 || folds > 100) return InvalidInput("--folds must be in 2..100");
  ASSIGN_OR_RETURN(Session s, Prepare(args));
  ASSIGN_OR_RETURN(AtomicOutputFile out, OpenReport(s, "cv_metrics.json", args.Has("force")));
  EpochLine line(!args.json(), s.job.epochs);
  uint32_t epoch = 1;
  json extra = json::object();
  TrainCallbacks cb;
  auto on_fold = [&](uint32_t f, uint32_t n) {
    epoch = 1;
    extra = {{"fold", f}};
    cb = Callbacks(args, s.job, &line, extra, &epoch);
    line.set_prefix("fold " + std::to_string(f) + "/" + std::to_string(n) + " ");
  };
  // The callbacks change per fold; CrossValidate takes them once, so forward through this.
  TrainCallbacks forward;
  forward.on_step = [&](uint64_t d, uint64_t t) { cb.on_step(d, t); };
  forward.on_epoch = [&](const EpochMetrics& m) { cb.on_epoch(m); };
  ASSIGN_OR_RETURN(CvResult cv, CrossValidate(*s.backend, s.job, s.data, static_cast<uint32_t>(folds), forward, on_fold));
  json report = ReportHeader(args, s, "cv");
  report["model"] = ModelJson(cv.folds[0]);
  json fj = json::array();
  double acc_sq = 0;
  for (size_t i = 0; i < cv.folds.size(); ++i) {
    const TrainResult& r = cv.folds[i];
    const EpochMetrics& f = r.epochs.back();
    acc_sq += (f.val_accuracy - cv.mean_accuracy) * (f.val_accuracy - cv.mean_accuracy);
    json j = EpochJson(f, s.job.metrics);
    j["fold"] = i + 1;
    j["train_rows"] = r.train_rows;
    j["val_rows"] = r.val_rows;
    j["parameters_sha256"] = ParamsDigest(r.params);
    fj.push_back(j);
  }
  report["folds"] = fj;
  report["mean_accuracy"] = Num(cv.mean_accuracy);
  report["std_accuracy"] = Num(std::sqrt(acc_sq / static_cast<double>(cv.folds.size())));
  report["mean_roc_auc"] = Num(cv.mean_auc);
  const std::string path = (std::filesystem::path(s.job.output_dir) / "cv_metrics.json").string();
  RETURN_IF_ERROR(WriteReport(out, report));
  if (args.json()) {
    EmitLine({{"event", "done"}, {"ok", true}, {"metrics_file", path}, {"folds", folds},
              {"mean_accuracy", report["mean_accuracy"]}, {"mean_roc_auc", report["mean_roc_auc"]}});
  } else {
    std::printf("%llu-fold cross-validation of %s on %zu rows (%s)\nmean accuracy %.4f (std %.4f), mean ROC AUC %.4f\n"
                "metrics: %s\n",
                static_cast<unsigned long long>(folds), s.job.name.c_str(), s.data.rows, s.backend->Describe().c_str(),
                cv.mean_accuracy, report["std_accuracy"].get<double>(), cv.mean_auc, path.c_str());
  }
  return OkStatus();
}

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-train";
  p.summary = "train a model on sealed datasets (CPU or GPU backend)";
  p.holds_keys = true;
  const FlagSpec pass = cli::PassphraseFdFlag();
  p.verbs = {
      {"run", "train the job's model on its datasets with a stratified validation split", "", 0,
       {kJob, kKeystore, pass, kDevice, kForce, kJson}, Run},
      {"cv", "stratified k-fold cross-validation of the job (shuffled, seeded)", "", 0,
       {kJob, {"folds", "K", "number of folds (default 5)"}, kKeystore, pass, kDevice, kForce, kJson}, Cv},
  };
  return cli::Main(p, argc, argv);
}
