// enclave-train: the data scientist's CLI. Runs a training job (run: the model leaves
// sealed to the tenant's export key, with a report and a training-curve plot; encrypted
// checkpoints and --resume) or a stratified k-fold cross-validation of it (cv) on the CPU
// or GPU backend; and predict, the data owner's use of a model. Thin: the work is in
// trainer/ and session/.
//
// Keys: with a job [broker] table and no --keystore, the attested mode
// (session/attested_job.h):
// this host's TPM attests to the broker, the data keys live only in this process, the
// lease is renewed in the background and training stops when it ends, and the report is
// signed with the attested report key. With --keystore, a development mode that says so
// on stderr and in the report.
#include <signal.h>

#include <atomic>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "cli.h"
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/common/progress.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
#include "enclave/dataset/csv.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/checkpoint.h"
#include "enclave/trainer/clear_outputs.h"
#include "enclave/trainer/curves.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/importance.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/metrics.h"
#include "enclave/trainer/metrics_report.h"
#include "enclave/trainer/model_file.h"
#include "enclave/trainer/model_seal.h"
#include "enclave/trainer/nccl_collective.h"
#include "enclave/trainer/plot.h"
#include "enclave/trainer/predict.h"
#include "enclave/trainer/trainer.h"
#include "enclave/trainer/tune.h"
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
#include "enclave/session/attested_job.h"
#endif
#include "distributed.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;
using namespace enclave::trainer;
using namespace enclave::session;

// Each verb's help is its own: the flags whose meaning differs between verbs (--json,
// --force, --device, --keystore) have one FlagSpec per verb.
const FlagSpec kRunJson{"json", "", "emit one JSON line per epoch and per checkpoint, and a final JSON line, on stdout"};
const FlagSpec kCvJson{"json", "", "emit one JSON line per epoch of each fold and a final JSON summary line on stdout"};
const FlagSpec kPredictJson{"json", "", "print one JSON document on stdout: the summary, and the predictions "
                                        "themselves unless --out is given"};
const FlagSpec kJob{"job", "F.toml", "job specification (docs/formats/job.md)", true};
const FlagSpec kKeystore{"keystore", "K", "local tenant keystore holding the data keys (development mode)"};
const FlagSpec kDevice{"device", "cpu|gpu|auto", "override the job's device"};
const FlagSpec kRunForce{"force", "", "overwrite existing outputs (report, plot, model) in the output directory"};
const FlagSpec kCvForce{"force", "", "overwrite an existing cv_metrics.json in the output directory"};
const FlagSpec kTuneJson{"json", "", "emit one JSON line per configuration (its values, per-fold metric, mean, std) "
                                     "and a final JSON line with the best on stdout"};
const FlagSpec kTuneForce{"force", "", "overwrite an existing tune_metrics.json in the output directory"};
const FlagSpec kExportKey{"export-key", "F.pub",
                          "the tenant's export public key file (enclave-data keystore export-key show --out); "
                          "overrides the job's export_key; one of them is required (development mode)"};
const FlagSpec kResume{"resume", "", "continue from the newest checkpoint in OUTPUT_DIR/checkpoints"};
const FlagSpec kStopAfter{"stop-after-step", "N",
                          "write a checkpoint after optimizer step N and stop (interruption, for testing resume)"};

const FlagSpec kTcti{"tcti", "TCTI", "attested mode: the TPM (default device:/dev/tpmrm0, else scripts/swtpm-start's)"};
const FlagSpec kState{"state", "DIR", "attested mode: the host state of enclave-attest register (default "
                                      "/var/lib/enclave-attest)"};
const FlagSpec kEventLog{"event-log", "PATH", "attested mode: boot event log to send (default: the kernel's; "
                                              "--event-log= sends none)"};
const FlagSpec kWorldSize{"world-size", "N", "data-parallel training over N ranks (CPU backend; default 1)"};
const FlagSpec kRank{"rank", "R", "this process's rank, 0..N-1 (rank 0 writes the report and model)"};
const FlagSpec kRendezvous{"rendezvous", "DIR", "static rendezvous: a directory every rank reads and writes (listen "
                                                "handles only: routing, not secrets); attested mode default: the broker"};
const FlagSpec kPeerTimeout{"peer-timeout", "SEC", "a rank silent this long fails the run (default 120)"};
const FlagSpec kImaLog{"ima-log", "PATH", "attested mode: IMA log to send (default: the kernel's; --ima-log= sends none)"};

constexpr const char* kDevWarning =
    "DEVELOPMENT MODE: no key broker, no attestation: data and checkpoint keys come from a local keystore (or "
    "the data is clear CSV); the report is not signed. Do not use with real data.";
constexpr const char* kReportName = "report.json";
constexpr const char* kPlotName = "training-curve.svg";
constexpr const char* kCurvesName = "evaluation-curves.svg";  // binary models with validation rows
constexpr const char* kModelName = "model.sealed";
constexpr uint64_t kMaxModelBytes = uint64_t{2} << 30;

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// parameters_sha256: the SHA-256 of the parameters' float32 bytes, computed where they
// stay (on the GPU backend, on the device).
Result<std::string> ParamsDigest(Backend& backend, const TrainResult& r) {
  if (r.family == ModelFamily::kXgboost) return HexEncode(crypto::Sha256(r.trees.booster.ExposeSecret()));
  ASSIGN_OR_RETURN(const crypto::Digest256 d, DigestResident(backend, r.Resident().params, r.shape.parameter_count()));
  return HexEncode(d);
}

// One epoch's metrics at full precision (the shortest text that reads back as the same
// double). Without a validation split (`validation` false) every val_* key the job asks
// for is null, as is a metric that cannot be computed. Regression (`regression`, or
// validation RMSE present): val_rmse, val_mae, val_r2 instead of accuracy and AUC.
// One epoch's values, those of the job's clear outputs only (regression has its own).
json EpochJson(const EpochMetrics& m, const ClearOutputs& clear, bool validation = true) {
  auto val = [validation](double v) { return validation ? Num(v) : json(nullptr); };
  json j = {{"epoch", m.epoch}, {"lr", m.lr}, {"seconds", m.seconds}};
  if (clear.loss) {
    j["train_loss"] = Num(m.train_loss);
    j["val_loss"] = val(m.val_loss);
  }
  if (clear.rmse) j["val_rmse"] = val(m.val_rmse);
  if (clear.mae) j["val_mae"] = val(m.val_mae);
  if (clear.r2) j["val_r2"] = val(m.val_r2);
  if (clear.accuracy) j["val_accuracy"] = val(m.val_accuracy);
  if (clear.roc_auc) j["val_roc_auc"] = val(m.val_auc);
  return j;
}

// For people: "loss 0.1234 val_loss ... val_acc ...", the clear outputs only.
std::string EpochText(const EpochMetrics& m, const ClearOutputs& clear, bool validation) {
  std::string t;
  auto add = [&t](const char* name, double v) { t += std::string(t.empty() ? "" : " ") + name + " " + HumanMetric(v); };
  if (clear.loss) add("loss", m.train_loss);
  if (!validation) return t + (t.empty() ? "" : " ") + "(no validation split)";
  if (clear.loss) add("val_loss", m.val_loss);
  if (clear.rmse) add("val_rmse", m.val_rmse);
  if (clear.mae) add("val_mae", m.val_mae);
  if (clear.r2) add("val_r2", m.val_r2);
  if (clear.accuracy) add("val_acc", m.val_accuracy);
  if (clear.roc_auc) add("val_auc", m.val_auc);
  return t;
}

// Why a run has no validation metrics, for people: "no validation split (validation_fraction = 0)".
std::string NoValidationSplit(const JobSpec& job) {
  if (job.validation_fraction == 0) return "no validation split (validation_fraction = 0)";
  char f[32];
  std::snprintf(f, sizeof(f), "%g", job.validation_fraction);
  return std::string("no validation split (validation_fraction ") + f + " leaves no validation rows)";
}

json JobJson(const std::string& path, const JobSpec& job) {
  return {{"file", path}, {"name", job.name}, {"sha256", HexEncode(job.digest)}, {"seed", job.seed}};
}

// What the inputs were made of (the plan, not the fitted fills: those are statistics of
// the training rows and travel only in the sealed model).
json PreprocessingJson(const Preprocessing& p) {
  if (p.identity()) return nullptr;
  static const char* const kImpute[] = {"median", "mean", "most_frequent", "keep_missing"};
  size_t indicators = 0, one_hot = 0, categorical = 0;
  for (const ColumnPlan& c : p.columns) {
    indicators += c.indicator ? 1 : 0;
    if (c.kind == dataset::ColumnKind::kCategorical) {
      ++categorical;
      one_hot += c.categories + 1;
    }
  }
  return {{"impute", kImpute[static_cast<int>(p.impute)]},
          {"raw_features", p.raw_features()},
          {"indicator_columns", indicators},
          {"categorical_columns", categorical},
          {"one_hot_columns", one_hot}};
}

// Total gain per raw feature column (a categorical column's one-hot inputs summed), largest
// first: which columns the trees split on, and how much that helped.
Result<json> TreeGainJson(const TrainResult& r, const dataset::DatasetSchema& schema) {
  ASSIGN_OR_RETURN(std::vector<double> gain, FeatureGain(r.trees));
  std::vector<std::pair<double, std::string>> by_column;
  size_t at = 0, j = 0;
  for (const dataset::Column& col : schema.columns) {
    if (col.kind == dataset::ColumnKind::kLabel) continue;
    const ColumnPlan& c = r.preprocessing.columns[j++];
    const size_t width = c.kind == dataset::ColumnKind::kCategorical ? size_t{c.categories} + 1 : 1;
    double sum = 0;
    for (size_t i = 0; i < width && at + i < gain.size(); ++i) sum += gain[at + i];
    at += width + (c.indicator ? 1 : 0);
    by_column.emplace_back(sum, col.name);
  }
  std::stable_sort(by_column.begin(), by_column.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  json out = json::array();
  for (const auto& [g, name] : by_column) out.push_back({{"column", name}, {"total_gain", g}});
  return out;
}

json ModelJson(const TrainResult& r) {
  if (r.family == ModelFamily::kXgboost) {
    const TreeSpec& t = r.trees_spec;
    return {{"family", "xgboost"},
            {"preprocessing", PreprocessingJson(r.preprocessing)},
            {"inputs", r.shape.inputs},
            {"classes", r.shape.classes},
            {"task", TreeTaskName(r.trees.task)},
            {"rounds", t.rounds},
            {"rounds_kept", r.trees.best_rounds},
            {"trees", {{"max_depth", t.max_depth}, {"eta", t.eta}, {"min_child_weight", t.min_child_weight},
                       {"subsample", t.subsample}, {"colsample_bytree", t.colsample_bytree}, {"lambda", t.lambda},
                       {"alpha", t.alpha}, {"gamma", t.gamma}, {"max_bin", t.max_bin}, {"threads", t.threads},
                       {"early_stopping_rounds", t.early_stopping_rounds}}},
            {"booster_bytes", r.trees.booster.size()},
            {"library", "XGBoost (Debian libxgboost, C API), on the CPU"}};
  }
  return {{"family", "mlp"},
          {"preprocessing", PreprocessingJson(r.preprocessing)},
          {"inputs", r.shape.inputs},
          {"hidden", r.shape.hidden},
          {"activation", ActivationName(r.shape.activation)},
          {"classes", r.shape.classes},
          {"parameters", r.shape.parameter_count()}};
}

// [training] weights as they were applied: the rule, each class's weight from these
// training rows (by class name; cv: null here, each fold's in its entry), the
// sample-weight column; null without weights.
json WeightsJson(const JobSpec& job, const std::vector<double>* class_weights, const std::vector<std::string>& classes) {
  if (!job.weights.any()) return nullptr;
  json per_class = nullptr;
  if (class_weights != nullptr && !class_weights->empty()) {
    per_class = json::object();
    for (size_t c = 0; c < class_weights->size() && c < classes.size(); ++c) per_class[classes[c]] = (*class_weights)[c];
  }
  const char* rule = job.weights.rule == ClassWeightRule::kBalanced ? "balanced"
                     : job.weights.rule == ClassWeightRule::kGiven  ? "given"
                                                                    : nullptr;
  return {{"class_weight", rule != nullptr ? json(rule) : json(nullptr)},
          {"class_weights", per_class},
          {"sample_weight_column", job.weights.column.empty() ? json(nullptr) : json(job.weights.column)}};
}

// The validation board's metrics (metrics_report.h) of predictions `pred` (rows x 1, or
// rows x classes) against `labels`, with bootstrap intervals; a binary model's threshold by
// the job's rule ([evaluation]: fixed, or chosen on these same rows, which the JSON says).
// *model_threshold (binary): the threshold, as the model file stores it (f32); the metrics
// are computed at exactly that value.
// With `shown` false (the job's clear outputs leave board_metrics out) only the
// threshold is chosen, and the answer is null.
Result<json> BoardMetrics(const JobSpec& job, const float* pred, const float* labels, size_t rows, uint32_t classes,
                          float* model_threshold = nullptr, bool shown = true) {
  EvalOptions opt;
  opt.bootstrap_resamples = job.evaluation.bootstrap_resamples;
  opt.calibration_bins = job.evaluation.calibration_bins;
  opt.seed = job.seed;
  if (classes == 0) {
    if (!shown) return json(nullptr);
    ASSIGN_OR_RETURN(RegressionReport rr, EvaluateRegression(pred, labels, rows, opt));
    return json{{"rows", rows}, {"metrics", ToJson(rr)}};
  }
  json threshold = nullptr;
  if (classes == 2) {
    opt.threshold = static_cast<float>(job.evaluation.threshold);
    threshold = {{"rule", "fixed"}, {"value", opt.threshold}};
    if (job.evaluation.rule != ThresholdRule::kFixed) {
      const bool youden = job.evaluation.rule == ThresholdRule::kYouden;
      ASSIGN_OR_RETURN(ThresholdChoice choice,
                       youden ? ChooseThresholdYouden(pred, labels, rows)
                              : ChooseThresholdForSensitivity(pred, labels, rows, job.evaluation.target_sensitivity));
      opt.threshold = static_cast<float>(choice.threshold);  // a predicted value: exact in f32
      threshold = {{"rule", youden ? "youden" : "target_sensitivity"},
                   {"value", choice.threshold},
                   {"chosen_on", "these rows (the metrics at it are optimistic for new data)"},
                   {"choice", ToJson(choice)}};
      if (!youden) threshold["target_sensitivity"] = job.evaluation.target_sensitivity;
    }
    if (model_threshold != nullptr) *model_threshold = static_cast<float>(opt.threshold);
  }
  if (!shown) return json(nullptr);
  ASSIGN_OR_RETURN(ClassificationReport cr, EvaluateClassification(pred, labels, rows, classes, opt));
  return json{{"rows", rows}, {"threshold", threshold}, {"metrics", ToJson(cr)}};
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
  EpochLine(bool enabled, uint32_t epochs, const ClearOutputs& clear)
      : enabled_(enabled && StderrIsTerminal()), epochs_(epochs), clear_(clear) {}
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
    const std::string values = EpochText(m, clear_, validation_);
    std::fprintf(stderr, "\r%sepoch %u/%u %s%slr %.4g  \n", prefix_.c_str(), m.epoch, epochs_, values.c_str(),
                 values.empty() ? "" : " ", m.lr);
  }
  void set_prefix(std::string p) { prefix_ = std::move(p); }
  void set_epochs(uint32_t e) { epochs_ = e; }
  void set_validation(bool v) { validation_ = v; }

 private:
  bool enabled_;
  uint32_t epochs_;
  ClearOutputs clear_;
  std::string prefix_;
  bool validation_ = true;
};

struct Session {
  JobSpec job;
  // What this job shows in clear (trainer/clear_outputs.h): every report, JSON line,
  // plot and console line below writes only these (in the attested mode: what the broker
  // approved for the release).
  ClearOutputs clear;
  std::unique_ptr<Backend> backend;
  LoadedData data;
  std::optional<crypto::Keystore> keystore;
  std::string key_source;
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  std::unique_ptr<AttestedJob> attested;  // the attested mode: keys from the broker
#endif
  bool Attested() const {
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
    return attested != nullptr;
#else
    return false;
#endif
  }
  crypto::Keystore* Keys() {
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
    if (attested) return &attested->keystore();
#endif
    return keystore ? &*keystore : nullptr;
  }
};

// The job's clear outputs once the task is known, with a note when training.metrics names
// metrics of the other task (they are not shown: docs/formats/job.md).
ClearOutputs JobClearOutputs(const JobSpec& job, const std::string& kind, bool regression) {
  const uint32_t other = regression ? (kMetricAccuracy | kMetricRocAuc) : (kMetricRmse | kMetricMae | kMetricR2);
  if (job.metrics != kAllMetrics && (job.metrics & other) != 0) {
    std::fprintf(stderr, "enclave-train: note: %s: %s do not apply to a %s label and are not shown\n",
                 JobPathAt(job, "training.metrics").c_str(), regression ? "accuracy and roc_auc" : "rmse, mae and r2",
                 regression ? "regression" : "classification");
  }
  return ClearOutputsOf(job, kind, regression);
}

// `checkpoints`: the run writes or reads checkpoints, whose key is in the keystore.
// The job's backend.
Result<std::unique_ptr<Backend>> MakeJobBackend(const JobSpec& job) { return MakeBackend(job.device); }

// `claim_epochs` (tune): the epochs the release claims, when not the job's own (the most any
// configuration trains).
Result<Session> Prepare(const Args& args, bool checkpoints, const std::string& kind, uint32_t rank = 0,
                        uint32_t world_size = 1, uint32_t claim_epochs = 0) {
  Session s;
  ASSIGN_OR_RETURN(s.job, LoadJob(args.Get("job")));
  // XGBoost allocates (and copies the rows into) memory of its own: in tree mode every page
  // of the process is locked first (exit 8 when the kernel refuses; SECURITY.md).
  if (s.job.family == ModelFamily::kXgboost) RETURN_IF_ERROR(LockAllMemory());
  // A dataset path that does not exist fails here, naming its key and line, before any
  // key is asked for.
  RETURN_IF_ERROR(CheckJobPaths(s.job));
  if (args.Has("device")) {
    const std::string d = args.Get("device");
    if (d == "cpu") s.job.device = Device::kCpu;
    else if (d == "gpu") s.job.device = Device::kGpu;
    else if (d == "auto") s.job.device = Device::kAuto;
    else return InvalidInput("--device must be cpu, gpu or auto, got '" + d + "'");
  }
  bool sealed = false;
  for (const DatasetSpec& d : s.job.datasets) sealed = sealed || d.format == DatasetFormat::kSealed;
  if (!s.job.broker.url.empty() && !args.Has("keystore")) {
    // The broker's files too, named by key and line, before this host attests.
    RETURN_IF_ERROR(CheckInputFile(JobPathAt(s.job, "broker.ca"), s.job.broker.ca));
    if (!s.job.broker.witness_policy.empty()) {
      RETURN_IF_ERROR(CheckInputFile(JobPathAt(s.job, "broker.witness_policy"), s.job.broker.witness_policy));
    }
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
    AttestedJob::Options o;
    o.tcti = args.Get("tcti");
    o.state_dir = args.Get("state", "/var/lib/enclave-attest");
    if (args.Has("event-log")) o.logs.event_log = args.Get("event-log");
    if (args.Has("ima-log")) o.logs.ima_log = args.Get("ima-log");
    o.release.kind = kind;
    o.release.rank = rank;
    o.release.world_size = world_size;
    JobSpec claimed = s.job;
    if (claim_epochs > 0) claimed.epochs = claim_epochs;
    auto attested = AttestedJob::Start(claimed, o);
    if (!attested.ok()) return attested.status().Annotate("attested key release from " + s.job.broker.url);
    s.attested = std::move(attested).value();
    const broker::Lease& l = s.attested->release().lease;
    s.key_source = "broker " + s.job.broker.url + ": lease " + l.lease_id + " under data-use policy " + l.policy_id;
    std::fprintf(stderr, "enclave-train: attested: %zu data key(s) released by %s (lease %s, renew by %lld)\n",
                 s.attested->release().keys.size(), s.job.broker.url.c_str(), l.lease_id.c_str(),
                 static_cast<long long>(l.reattest_by));
    ASSIGN_OR_RETURN(s.backend, MakeJobBackend(s.job));
    ASSIGN_OR_RETURN(s.data, LoadJobData(*s.backend, s.job, s.Keys()));
    s.clear = JobClearOutputs(s.job, kind, s.data.classes == 0);
    // The claims were made from the sealed headers' task; the data are those files.
    if (s.clear.Names() != s.attested->clear_outputs()) {
      return Internal("the job's clear outputs differ from those its key release claimed: nothing written");
    }
    return s;
#else
    return Unsupported("this enclave-train was built without the attested mode (tpm2-tss or the broker missing)");
#endif
  }
  std::fprintf(stderr, "enclave-train: WARNING: %s\n", kDevWarning);
  if (checkpoints && !args.Has("keystore")) {
    return FailedPrecondition(
        "checkpoints are encrypted with a key from the keystore: without a key broker, give --keystore (development mode)");
  }
  if (world_size > 1 && !args.Has("keystore")) {
    return FailedPrecondition("a distributed run needs a job communication key: without a key broker, give --keystore "
                              "(development mode: every rank derives it from the tenant keystore)");
  }
  if (sealed || checkpoints || world_size > 1) {
    if (!args.Has("keystore")) {
      return FailedPrecondition("the job reads sealed datasets: without a key broker, give --keystore (development mode)");
    }
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "Keystore passphrase", false));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(args.Get("keystore"), pass));
    s.keystore.emplace(std::move(ks));
    s.key_source = "local keystore " + args.Get("keystore") + " (development mode, no broker)";
    std::fprintf(stderr, "enclave-train: WARNING: %s keys from the local keystore %s, not from an attested broker\n",
                 sealed ? "data" : checkpoints ? "checkpoint" : "communication", args.Get("keystore").c_str());
  }
  if (!sealed) {
    if (!s.keystore) s.key_source = "none: clear CSV input (development mode)";
    std::fprintf(stderr, "enclave-train: WARNING: training from clear CSV (development only)\n");
  }
  if (!s.job.broker.url.empty()) {
    std::fprintf(stderr, "enclave-train: note: --keystore given: the job's [broker] is not asked for keys\n");
  }
  ASSIGN_OR_RETURN(s.backend, MakeJobBackend(s.job));
  ASSIGN_OR_RETURN(s.data, LoadJobData(*s.backend, s.job, s.Keys()));
  s.clear = JobClearOutputs(s.job, kind, s.data.classes == 0);
  return s;
}

json ReportHeader(const Args& args, const Session& s, const char* verb) {
  json lease = nullptr;
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested) {
    const broker::Release& r = s.attested->release();
    lease = {{"broker", s.attested->url()},
             {"lease_id", r.lease.lease_id},
             {"job_id", r.lease.job_id},
             {"host_id", r.lease.host_id},
             {"policy_id", r.lease.policy_id},
             {"policy_sha256", HexEncode(r.lease.policy_sha256)},
             {"audit_index", r.audit_index}};
    // The witnessed release: proofs that the key.released entries are in a checkpoint the
    // witnesses cosigned (an officer checks them against the log with verify-proof).
    if (!r.audit_proofs.empty()) {
      json proofs = json::array(), by = json::array();
      for (const audit::Proof& p : r.audit_proofs) proofs.push_back(p.ToJson());
      for (const audit::CosignedBy& c : r.witnessed_by) by.push_back(c.name);
      lease["audit_proofs"] = std::move(proofs);
      lease["witnessed_by"] = std::move(by);
    }
  }
#endif
  return {{"ok", true},
          {"verb", verb},
          {"mode", s.Attested() ? "attested" : "development"},
          {"development_mode", !s.Attested()},
          {"warning", s.Attested() ? json(nullptr) : json(kDevWarning)},
          {"key_source", s.key_source},
          {"lease", lease},
          {"model_exported", false},
          {"job", JobJson(args.Get("job"), s.job)},
          {"device", s.backend->kind()},
          {"backend", s.backend->Describe()},
          {"streaming", s.job.streaming.enabled ? json{{"block_rows", s.job.streaming.block_rows},
                                                       {"window_blocks", s.job.streaming.window_blocks}}
                                                 : json(nullptr)},
          {"datasets", SourcesJson(s.data)},
          {"rows", s.data.rows},
          {"features", s.data.features},
          {"classes", s.data.schema.classes}};
}

void EmitLine(const json& j) {
  std::cout << cli::DumpJson(j) << "\n";
  std::cout.flush();
}

// The report's text: column and class names need not be UTF-8 (sealed-dataset.md), so
// ill-formed bytes become U+FFFD instead of throwing after the model and plot are written.
// The signed text (attested mode) is this same text.
std::string ReportText(const json& report) { return cli::DumpJson(report, 2) + "\n"; }

// An output file, refused when it exists unless `force`: the message names --force.
Result<AtomicOutputFile> CreateOutput(const std::string& path, bool force) {
  Result<AtomicOutputFile> out = AtomicOutputFile::Create(path, force);
  if (!out.ok() && out.status().code() == Code::kAlreadyExists) {
    return AlreadyExists(path + " exists (use --force to overwrite)");
  }
  return out;
}

Result<AtomicOutputFile> OpenReport(const Session& s, const std::string& name, bool force) {
  std::error_code ec;
  std::filesystem::create_directories(s.job.output_dir, ec);
  if (ec) {
    return IoError(JobPathAt(s.job, "output_dir") + ": " + s.job.output_dir + ": cannot create the directory: " +
                   ec.message());
  }
  return CreateOutput((std::filesystem::path(s.job.output_dir) / name).string(), force);
}

Status WriteReport(AtomicOutputFile& out, const json& report) {
  const std::string text = ReportText(report);
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

TrainCallbacks Callbacks(const Args& args, const ClearOutputs& clear, EpochLine* line, const json& extra,
                         uint32_t* current_epoch, bool validation = true) {
  TrainCallbacks cb;
  cb.on_step = [line, current_epoch](uint64_t done, uint64_t total) { line->Step(*current_epoch, done, total); };
  cb.on_epoch = [&args, clear, line, extra, current_epoch, validation](const EpochMetrics& m) {
    ++*current_epoch;
    if (args.json()) {
      json j = {{"event", "epoch"}};
      j.update(extra);
      j.update(EpochJson(m, clear, validation));
      EmitLine(j);
    } else {
      line->Epoch(m);
    }
  };
  return cb;
}

std::string OutPath(const Session& s, const std::string& name) {
  return (std::filesystem::path(s.job.output_dir) / name).string();
}

// The accuracy of the final model over every row of the job's datasets (training and
// validation), computed as `predict` computes it: the number a data owner gets back by
// running `predict` on the same data. The model and loaded data stay in backend memory.
// Streamed data is read again in pieces of whole prediction batches (kEvalBatch rows from
// row 0, as predict batches them), so every row's prediction is the same bits.
Result<double> AllRowsAccuracy(Backend& backend, const ResidentModel& model, const LoadedData& data) {
  const uint32_t classes = model.shape.classes;
  if (data.table == nullptr) {
    ASSIGN_OR_RETURN(LockedArray<float> probs, PredictResident(backend, model, data.x, data.rows));
    return Accuracy(probs.data(), data.labels.data(), data.rows, classes, model.threshold);
  }
  if (model.preprocessing != nullptr && !model.preprocessing->identity()) {
    return Internal("AllRowsAccuracy: streamed data has nothing to preprocess");
  }
  const size_t F = data.features, width = data.table->width(), piece = 64 * kEvalBatch;
  const size_t most = static_cast<size_t>(std::min<uint64_t>(piece, data.rows));  // rows in the largest piece
  // The table writes backend memory (on the GPU: device memory): split there.
  ASSIGN_OR_RETURN(OwnedBuffer records, AllocOwned(backend, most * width));
  ASSIGN_OR_RETURN(OwnedBuffer xd, AllocOwned(backend, most * F));
  ASSIGN_OR_RETURN(OwnedBuffer yd, AllocOwned(backend, most));
  RETURN_IF_ERROR(backend.Synchronize());
  uint64_t correct = 0;
  for (uint64_t first = 0; first < data.rows; first += piece) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, data.rows - first));
    RETURN_IF_ERROR(data.table->Read(first, n, records.get().data));
    RETURN_IF_ERROR(backend.SplitRecords(records, n, F, xd, yd));
    ASSIGN_OR_RETURN(LockedArray<float> probs, PredictResident(backend, model, xd, n));
    const double acc = Accuracy(probs.data(), data.labels.data() + first, n, classes, model.threshold);
    correct += static_cast<uint64_t>(std::llround(acc * static_cast<double>(n)));
  }
  return static_cast<double>(correct) / static_cast<double>(data.rows);
}

// SIGINT/SIGTERM during training: remembered here, acted on after the current step (a
// final checkpoint, then exit 15). The handler resets itself, so a second signal kills.
std::atomic<int> g_stop_signal{0};
extern "C" void OnStopSignal(int sig) { g_stop_signal.store(sig); }

class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    // A signal the parent chose to ignore (nohup, a shell's background job) stays ignored.
    if (old_int_.sa_handler == SIG_IGN) sigaction(SIGINT, &old_int_, nullptr);
    if (old_term_.sa_handler == SIG_IGN) sigaction(SIGTERM, &old_term_, nullptr);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// What the model relies on: permutation importance on the validation rows (loaded data on
// the CPU backend; else null with the reason), and the trees' gain.
Result<json> ImportanceJson(const Session& s, const TrainResult& r, const Split& split) {
  json out = {{"permutation", nullptr}, {"permutation_note", nullptr}};
  const uint32_t repeats = s.job.evaluation.permutation_repeats;
  if (repeats == 0) {
    out["permutation_note"] = "off (evaluation.permutation_repeats = 0)";
  } else if (split.val.empty()) {
    out["permutation_note"] = "no validation rows";
  } else if (s.data.table != nullptr || std::string_view(s.backend->kind()) != "cpu") {
    out["permutation_note"] = "computed on loaded data on the CPU backend only (not yet on the GPU or streamed)";
  } else {
    ASSIGN_OR_RETURN(std::vector<ColumnImportance> imp,
                     PermutationImportance(*s.backend, r, s.data, split, s.job.seed, repeats));
    std::stable_sort(imp.begin(), imp.end(), [](const auto& a, const auto& b) { return a.mean_drop > b.mean_drop; });
    json a = json::array();
    for (const ColumnImportance& c : imp) {
      a.push_back({{"column", c.column}, {"mean_drop", c.mean_drop}, {"std_drop", c.std_drop}});
    }
    out["permutation"] = std::move(a);
    out["permutation_note"] = std::string("drop of the validation ") + (r.shape.regression() ? "R^2" : "accuracy") +
                              " when the column is shuffled among the validation rows, over " +
                              std::to_string(repeats) + " shuffles";
  }
  if (r.family == ModelFamily::kXgboost) {
    ASSIGN_OR_RETURN(out["gain"], TreeGainJson(r, s.data.schema));
  }
  return out;
}

// The trees' model file (model.md, family 1), sealed from locked memory like the CPU
// backend's network.
Result<SealedModel> SealTreesModel(const TrainResult& r, const dataset::DatasetSchema& schema,
                                   const crypto::ExportPublicKey& to, const crypto::ModelSealOptions& opt,
                                   const std::string& path, bool force) {
  ModelFile m;
  m.family = ModelFamily::kXgboost;
  m.shape = r.shape;
  m.schema = schema;
  m.preprocessing = r.preprocessing;
  m.threshold = r.threshold;
  m.trees.task = r.trees.task;
  m.trees.features = r.trees.features;
  m.trees.classes = r.trees.classes;
  m.trees.best_rounds = r.trees.best_rounds;
  ASSIGN_OR_RETURN(m.trees.booster, r.trees.booster.Clone());
  ASSIGN_OR_RETURN(const crypto::SecretBytes bytes, EncodeModelFile(m));
  SealedModel out;
  out.plaintext_bytes = bytes.size();
  out.plaintext_sha256 = crypto::Sha256(bytes.ExposeSecret());
  ASSIGN_OR_RETURN(out.info, crypto::SealModelToFile(to, bytes.ExposeSecret(), opt, path, force));
  return out;
}

Status Run(const Args& args) {
  ASSIGN_OR_RETURN(uint64_t stop_after, args.GetU64("stop-after-step", 0));
  if (args.Has("stop-after-step") && stop_after == 0) return InvalidInput("--stop-after-step must be at least 1");
  ASSIGN_OR_RETURN(DistributedOptions dist, DistributedFromArgs(args));
  // In a distributed run rank 0 writes the report, plot and model; the other ranks only
  // their checkpoints (beside rank 0's, under their own directory names).
  const bool writes_outputs = dist.rank == 0;
  ASSIGN_OR_RETURN(JobSpec peek, LoadJob(args.Get("job")));
  const bool development = args.Has("keystore") || peek.broker.url.empty();
  if (dist.distributed() && dist.rendezvous_dir.empty() && development) {
    return InvalidInput("--world-size " + std::to_string(dist.world_size) +
                        " needs --rendezvous DIR in development mode (the attested mode meets at the broker)");
  }
  if (peek.family == ModelFamily::kXgboost && (args.Has("resume") || stop_after > 0 || dist.distributed())) {
    return InvalidInput(std::string(args.Has("resume") ? "--resume" : stop_after > 0 ? "--stop-after-step" : "--world-size") +
                        " does not apply to [model] family = \"xgboost\" (trees train in one process, without "
                        "checkpoints)");
  }
  const bool checkpoints = peek.checkpoint.every_steps > 0 || args.Has("resume") || stop_after > 0;
  // The export key first, before any key, data or output: a run that cannot deliver its
  // model does not train. In the attested mode it is the one the broker sends (below).
  std::string key_path = args.Has("export-key") ? args.Get("export-key") : peek.export_key;
  const std::string key_where = args.Has("export-key") ? "--export-key" : JobPathAt(peek, "export_key");
  std::optional<crypto::ExportPublicKey> export_key;
  if (writes_outputs && development) {
    if (key_path.empty()) {
      return FailedPrecondition(args.Get("job") + ": no export key: the trained model leaves only sealed to the "
                                "tenant's export key; give --export-key F.pub or the job's export_key (make F.pub "
                                "with enclave-data keystore export-key show --out F.pub); nothing was trained");
    }
    RETURN_IF_ERROR(CheckInputFile(key_where, key_path));
    Result<crypto::ExportPublicKey> k = crypto::ReadExportPublicKey(key_path);
    if (!k.ok()) return k.status().Annotate(key_where);
    export_key = *k;
  }
  // Attested mode: before any key is asked for (a run that could not write its report
  // would waste a release and its audit entries).
  if (writes_outputs && !peek.broker.url.empty() && !args.Has("keystore") && !args.Has("force")) {
    for (const char* name : {kReportName, kPlotName, kCurvesName}) {
      const std::string p = (std::filesystem::path(peek.output_dir) / name).string();
      if (std::filesystem::exists(p)) return AlreadyExists(p + " exists (use --force to overwrite)");
    }
  }
  ASSIGN_OR_RETURN(Session s, Prepare(args, checkpoints, "train", dist.rank, dist.world_size));
  if (s.job.tune.enabled && writes_outputs) {
    std::fprintf(stderr, "enclave-train: note: [tune] is read by enclave-train tune; run trains the job as written\n");
  }
  const bool force = args.Has("force");

  // The other ranks, before anything is written: every rank proves the job key to its
  // neighbours (the attested mode: the key the broker released to this rank's process).
  std::unique_ptr<trainer::Collective> collective;  // the ring (CPU backend) or NCCL (GPU backend)
  RingCollective* ring = nullptr;
  if (dist.distributed()) {
    const bool gpu = std::string(s.backend->kind()) == "gpu";
    if (gpu && !trainer::NcclBuilt()) {
      return Unsupported("distributed training on the GPU backend needs a CUDA build (NCCL): use --device cpu");
    }
    crypto::SecretBytes job_key;
    std::unique_ptr<net::HandleExchange> exchange;  // null: the --rendezvous directory
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
    if (s.attested) {
      ASSIGN_OR_RETURN(job_key, s.attested->release().job_key.Clone());
      if (dist.rendezvous_dir.empty()) exchange = s.attested->RendezvousExchange();
    }
#endif
    if (!exchange && dist.rendezvous_dir.empty()) {
      return InvalidInput("--world-size " + std::to_string(dist.world_size) +
                          " needs --rendezvous DIR in development mode (the attested mode meets at the broker)");
    }
    if (job_key.empty()) {
      if (!s.keystore) {
        return FailedPrecondition("a distributed run needs a job communication key: from the broker (attested mode) "
                                  "or, in development mode, from --keystore");
      }
      ASSIGN_OR_RETURN(job_key, DevelopmentJobKey(*s.keystore, s.job));
    }
    if (gpu) {
      auto joined = JoinNcclJob(s.job, job_key, dist, exchange.get());
      if (!joined.ok()) {
        return joined.status().Annotate("joining the NCCL communicator of " + std::to_string(dist.world_size) + " ranks");
      }
      collective = std::move(joined).value();
      std::fprintf(stderr,
                   "enclave-train: rank %u of %u: NCCL communicator joined (inter-host traffic only through the "
                   "encrypted enclave plugin)\n",
                   dist.rank, dist.world_size);
    } else {
      auto joined = RingCollective::Join(s.job, job_key, dist, exchange.get());
      if (!joined.ok()) return joined.status().Annotate("joining the ring of " + std::to_string(dist.world_size) + " ranks");
      ring = joined->get();
      collective = std::move(joined).value();
      std::fprintf(stderr,
                   "enclave-train: rank %u of %u: ring connected, listening on %s (encrypted; both neighbours proved "
                   "the job key)\n",
                   dist.rank, dist.world_size, ring->listen_address().c_str());
    }
  }

  // The attested mode: the export key the broker sent (the policy allows no other output).
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (writes_outputs && s.attested) {
    const crypto::ExportPublicKey& from_broker = s.attested->release().export_key;
    if (!key_path.empty()) {
      RETURN_IF_ERROR(CheckInputFile(key_where, key_path));
      Result<crypto::ExportPublicKey> named = crypto::ReadExportPublicKey(key_path);
      if (!named.ok()) return named.status().Annotate(key_where);
      if (named->public_key != from_broker.public_key)
        return PermissionDenied(key_where + ": export key " + key_path + " is not the tenant export key the broker sent");
    }
    export_key = from_broker;
    key_path = "(from the broker)";
  }
#endif
  if (writes_outputs && !export_key) {
    return Internal("no export key after the checks before training");  // unreachable: refused above
  }
  // Every output is checked before training starts; each appears only when complete.
  std::optional<AtomicOutputFile> report_out, plot_out, curves_out;
  const std::string model_path = OutPath(s, kModelName);
  if (writes_outputs) {
    ASSIGN_OR_RETURN(AtomicOutputFile r, OpenReport(s, kReportName, force));
    report_out.emplace(std::move(r));
    ASSIGN_OR_RETURN(AtomicOutputFile p, CreateOutput(OutPath(s, kPlotName), force));
    plot_out.emplace(std::move(p));
    ASSIGN_OR_RETURN(AtomicOutputFile c, CreateOutput(OutPath(s, kCurvesName), force));
    curves_out.emplace(std::move(c));
    if (export_key && !force && std::filesystem::exists(model_path)) {
      return AlreadyExists(model_path + " exists (use --force to overwrite)");
    }
    if (s.Attested() && !force && std::filesystem::exists(report_out->path() + ".sig")) {
      return AlreadyExists(report_out->path() + ".sig exists (use --force to overwrite)");
    }
  }

  const std::string ckpt_dir =
      OutPath(s, dist.rank == 0 ? std::string(kCheckpointDirName)
                                : std::string(kCheckpointDirName) + "-rank-" + std::to_string(dist.rank));
  std::optional<CheckpointKey> ckpt_key;
  std::optional<TrainState> resume;
  std::string resumed_from;
  // The attested mode can always checkpoint (its key is derived from the job key), so an
  // interrupted attested run leaves one even without [checkpoint].
  if (checkpoints || s.Attested()) {
    ASSIGN_OR_RETURN(CheckpointKey k, CheckpointKeyFromKeystore(*s.Keys(), true));
    ckpt_key.emplace(std::move(k));
  }
  if (checkpoints) {
    std::error_code ec;
    std::filesystem::create_directories(ckpt_dir, ec);
    if (ec) return IoError("creating " + ckpt_dir + ": " + ec.message());
  }
  if (args.Has("resume")) {
    ASSIGN_OR_RETURN(resumed_from, LatestCheckpoint(ckpt_dir));
    ASSIGN_OR_RETURN(TrainState st, ReadCheckpoint(resumed_from, *s.Keys(), s.job.digest));
    resume.emplace(std::move(st));
    std::fprintf(stderr, "enclave-train: resuming from %s (step %llu, epoch %u)\n", resumed_from.c_str(),
                 static_cast<unsigned long long>(resume->step), resume->epoch);
  }

  ASSIGN_OR_RETURN(Split split, StratifiedSplit(s.data.labels, s.data.classes, s.job.validation_fraction, s.job.seed));
  // validation_fraction = 0 (or one too small for any row): no validation metrics; the
  // console, the JSON lines, the report and the plot say so instead of printing NaN.
  const bool validation = !split.val.empty();
  const bool regression = s.data.classes == 0;
  if (!validation && s.data.classes == 2 && s.job.evaluation.rule != ThresholdRule::kFixed) {
    const bool youden = s.job.evaluation.rule == ThresholdRule::kYouden;
    return InvalidInput(JobPathAt(s.job, youden ? "evaluation.threshold" : "evaluation.target_sensitivity") +
                        ": the threshold is chosen on the validation rows, and this run has " +
                        NoValidationSplit(s.job) + ": nothing was trained");
  }
  if (!validation && !args.json()) std::fprintf(stderr, "enclave-train: %s\n", NoValidationSplit(s.job).c_str());
  EpochLine line(!args.json(), s.job.epochs, s.clear);
  line.set_validation(validation);
  uint32_t epoch = resume ? resume->epoch : 1;
  TrainCallbacks cb = Callbacks(args, s.clear, &line, json::object(), &epoch, validation);
  cb.model_stays_on_backend = true;  // sealed where it is (on the GPU backend: on the device)
  uint64_t written = 0;
  std::string last_checkpoint;
  std::function<bool()> lease_ended = [] { return false; };
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested) lease_ended = [a = s.attested.get()] { return !a->LeaseHeld(); };
#endif
  if (ckpt_key) {
    cb.checkpoint_every = s.job.checkpoint.every_steps;
    cb.on_checkpoint = [&](const ResidentTrainState& resident) -> Status {
      const TrainState& st = resident.host;
      // A job without [checkpoint] writes one only when interrupted, not when its lease ended.
      if (!checkpoints && lease_ended()) return OkStatus();
      const std::string path = CheckpointPath(ckpt_dir, st.step);
      std::error_code ec;
      std::filesystem::create_directories(ckpt_dir, ec);
      if (ec) return IoError("creating " + ckpt_dir + ": " + ec.message());
      RETURN_IF_ERROR(WriteCheckpoint(*ckpt_key, s.job.digest, resident, path));
      RETURN_IF_ERROR(PruneCheckpoints(ckpt_dir, std::max<uint32_t>(s.job.checkpoint.keep, 1)));
      ++written;
      last_checkpoint = path;
      if (args.json()) EmitLine({{"event", "checkpoint"}, {"step", st.step}, {"epoch", st.epoch}, {"file", path}});
      return OkStatus();
    };
  }
  // Asked at every step: a stop signal, --stop-after-step, and (attested) the lease, which
  // when it ends stops training with nothing written.
  cb.should_stop = [stop_after, lease_ended](uint64_t step) {
    return g_stop_signal.load() != 0 || step == stop_after || lease_ended();
  };
  std::optional<TrainResult> trained;
  {
    StopSignals signals;
    ASSIGN_OR_RETURN(trained, Train(*s.backend, s.job, s.data, split, cb, resume ? &*resume : nullptr, collective.get()));
  }
  TrainResult& r = *trained;
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested && !s.attested->LeaseHeld()) {
    return PermissionDenied("the lease ended during training (" + s.attested->LeaseEndReason() +
                            "): training stopped, no report or model written, keys wiped");
  }
#endif
  if (r.stopped && g_stop_signal.load() != 0 && !r.stopped_by_peer) {
    const std::string sig = g_stop_signal.load() == SIGINT ? "SIGINT" : "SIGTERM";
    if (last_checkpoint.empty()) {
      return Interrupted(sig + ": stopped after step " + std::to_string(r.steps) +
                         "; no checkpoint (the job has no [checkpoint] table), nothing written");
    }
    return Interrupted(sig + ": stopped after step " + std::to_string(r.steps) + ", checkpoint " + last_checkpoint +
                       "; continue with: enclave-train run --job " + args.Get("job") + " --resume");
  }
  if (r.stopped) {
    // Nothing but the checkpoint: the uncommitted outputs are removed.
    if (args.json()) {
      EmitLine({{"event", "stopped"}, {"ok", true}, {"step", r.steps}, {"checkpoint", last_checkpoint},
                {"by_another_rank", r.stopped_by_peer}});
    } else {
      std::printf("stopped after step %llu%s; checkpoint %s\ncontinue with: enclave-train run --job %s --resume\n",
                  static_cast<unsigned long long>(r.steps),
                  r.stopped_by_peer ? " (another rank stopped: its lease ended, or it was asked to)" : "",
                  last_checkpoint.c_str(), args.Get("job").c_str());
    }
    return OkStatus();
  }
  ASSIGN_OR_RETURN(const std::string params_digest, ParamsDigest(*s.backend, r));
  if (!writes_outputs) {
    // Rank 0 holds the same parameters (the all-reduce hands every rank the same bits)
    // and writes the outputs; this rank reports what it trained.
    const EpochMetrics& f = r.Final();
    if (args.json()) {
      EmitLine({{"event", "done"}, {"ok", true}, {"rank", dist.rank}, {"world_size", dist.world_size},
                {"validation_split", validation},
                {"final", EpochJson(f, s.clear, validation)}, {"parameters_sha256", params_digest},
                {"ring_bytes_sent", ring != nullptr ? json(ring->bytes_sent()) : json(nullptr)}});
    } else {
      std::printf("rank %u of %u: trained %s for %u epochs%s%s\nparameters sha256 %s\n", dist.rank, dist.world_size,
                  s.job.name.c_str(), s.job.epochs, validation ? "" : ", ",
                  validation ? "" : NoValidationSplit(s.job).c_str(), params_digest.c_str());
    }
    return OkStatus();
  }

  // The validation board's metrics, and a binary model's decision threshold (fixed, or
  // chosen on these rows): the exported model carries it, and predict applies it.
  json validation_metrics = nullptr;
  if (r.shape.classes == 2) r.threshold = static_cast<float>(s.job.evaluation.threshold);
  if (r.val_rows > 0) {
    ASSIGN_OR_RETURN(LockedArray<float> val_labels, LockedArray<float>::Create(r.val_rows));
    for (size_t i = 0; i < r.val_rows; ++i) val_labels[i] = s.data.labels[split.val[i]];
    ASSIGN_OR_RETURN(validation_metrics, BoardMetrics(s.job, r.val_predictions.data(), val_labels.data(), r.val_rows,
                                                      r.shape.classes, &r.threshold, s.clear.board_metrics));
  }
  json all_rows = {{"rows", s.data.rows}};
  double all_rows_metric = 0;  // RMSE (regression) or accuracy over every row
  const bool all_rows_shown = r.shape.regression() ? s.clear.rmse : s.clear.accuracy;
  if (!all_rows_shown) {
    // Not among the job's clear outputs: not computed.
  } else if (r.family == ModelFamily::kXgboost && !r.shape.regression()) {
    ASSIGN_OR_RETURN(LockedArray<float> probs, PredictLoaded(*s.backend, r, s.data));
    all_rows_metric = Accuracy(probs.data(), s.data.labels.data(), s.data.rows, r.shape.classes, r.threshold);
    all_rows["accuracy"] = Num(all_rows_metric);
  } else if (r.shape.regression()) {  // loaded data only: regression is not streamed
    ASSIGN_OR_RETURN(LockedArray<float> pred, PredictLoaded(*s.backend, r, s.data));
    double sse = 0;
    for (size_t i = 0; i < s.data.rows; ++i) {
      const double d = static_cast<double>(pred[i]) - s.data.labels[i];
      sse += d * d;
    }
    all_rows_metric = std::sqrt(sse / static_cast<double>(s.data.rows));
    all_rows["rmse"] = Num(all_rows_metric);
  } else {
    ASSIGN_OR_RETURN(all_rows_metric, AllRowsAccuracy(*s.backend, r.Resident(), s.data));
    all_rows["accuracy"] = Num(all_rows_metric);
  }
  json report = ReportHeader(args, s, "run");
  report["model"] = ModelJson(r);
  report["weights"] = WeightsJson(s.job, &r.class_weights, s.data.schema.classes);
  report["train_rows"] = r.train_rows;
  report["val_rows"] = r.val_rows;
  report["validation_fraction"] = s.job.validation_fraction;
  report["validation_split"] = validation;
  report["steps"] = r.steps;
  report["distributed"] = dist.distributed()
                              ? json{{"world_size", dist.world_size},
                                     {"rank", dist.rank},
                                     {"all_reduce", ring != nullptr
                                                        ? "ring over libnccl-net-enclave (AES-256-GCM records)"
                                                        : "NCCL, inter-host through libnccl-net-enclave (AES-256-GCM records)"},
                                     {"ring_bytes_sent", ring != nullptr ? json(ring->bytes_sent()) : json(nullptr)}}
                              : json(nullptr);
  json epochs = json::array();
  for (const EpochMetrics& m : r.epochs) epochs.push_back(EpochJson(m, s.clear, validation));
  report["epochs"] = epochs;
  report["final"] = EpochJson(r.Final(), s.clear, validation);
  report["best_epoch"] = r.best_epoch > 0 ? json(r.best_epoch) : json(nullptr);
  report["validation_metrics"] = validation_metrics;
  if (s.job.evaluation.importance) {
    ASSIGN_OR_RETURN(report["importance"], ImportanceJson(s, r, split));
  } else {
    report["importance"] = {{"permutation", nullptr}, {"permutation_note", "off (evaluation.importance = false)"}};
  }
  if (s.clear.coefficients) {
    ASSIGN_OR_RETURN(report["coefficients"], LinearCoefficients(*s.backend, r, s.data.schema));
  } else {
    report["coefficients"] = nullptr;
  }
  report["all_rows"] = all_rows;
  report["parameters_sha256"] = params_digest;
  report["checkpoints"] = {{"every_steps", s.job.checkpoint.every_steps},
                           {"dir", ckpt_key ? json(ckpt_dir) : json(nullptr)},
                           {"written", written}};
  report["resumed_from"] = resume ? json{{"file", resumed_from}, {"step", r.resumed_step}, {"epoch", r.resumed_epoch}}
                                  : json(nullptr);
  report["plot"] = plot_out->path();
  // ROC, precision-recall and calibration of a binary model on its validation rows; else
  // the file is not written.
  report["evaluation_plot"] = nullptr;
  if (!s.clear.curves) {
    report["evaluation_plot_note"] = "off (evaluation.curves = false)";
  } else if (r.val_rows > 0 && r.shape.classes == 2) {
    ASSIGN_OR_RETURN(LockedArray<float> val_labels, LockedArray<float>::Create(r.val_rows));
    for (size_t i = 0; i < r.val_rows; ++i) val_labels[i] = s.data.labels[split.val[i]];
    EvalOptions opt;
    opt.bootstrap_resamples = 0;  // the curves and their AUC, AP and ECE need no intervals
    opt.calibration_bins = s.job.evaluation.calibration_bins;
    Result<ClassificationReport> cr = EvaluateClassification(r.val_predictions.data(), val_labels.data(), r.val_rows,
                                                             2, opt);
    Result<std::string> svg = cr.ok() ? EvaluationCurvesSvg(r.val_predictions.data(), val_labels.data(), r.val_rows,
                                                            *cr, s.job.name)
                                      : Result<std::string>(cr.status());
    if (svg.ok()) {
      RETURN_IF_ERROR(curves_out->Write(svg->data(), svg->size()));
      RETURN_IF_ERROR(curves_out->Commit());
      report["evaluation_plot"] = curves_out->path();
    } else {
      report["evaluation_plot_note"] = svg.status().message();  // e.g. one class among the validation rows
    }
  }
  report["signature"] = s.Attested() ? json(OutPath(s, std::string(kReportName) + ".sig")) : json(nullptr);
  report["signature_note"] = s.Attested() ? "report.json.sig: Ed25519 with the report key bound into the attested "
                                            "quote (docs/training.md, \"Signed report\")"
                                          : "not signed: development mode (keys not from the broker) has no attested report key";

  json exported = nullptr;
  if (export_key) {
    crypto::ModelSealOptions opt;
    opt.info.format_id = ModelFormatIdFor(r.preprocessing, r.shape, r.family, r.threshold);
    opt.info.job_digest = s.job.digest;
    ASSIGN_OR_RETURN(const SealedModel sealed,
                     r.family == ModelFamily::kXgboost
                         ? SealTreesModel(r, s.data.schema, *export_key, opt, model_path, force)
                         : SealResidentModel(*s.backend, r.Resident(), s.data.schema, *export_key, opt, model_path, force));
    const crypto::ModelExportInfo& info = sealed.info;
    exported = {{"file", model_path},
                {"sha256", HexEncode(info.file_digest)},
                {"format_id", opt.info.format_id},
                {"plaintext_bytes", sealed.plaintext_bytes},
                {"plaintext_sha256", HexEncode(sealed.plaintext_sha256)},
                {"sealed_on", s.backend->kind()},
                {"suite", std::string(crypto::SuiteName(info.header.params.suite))},
                {"export_key",
                 {{"file", key_path},
                  {"name", export_key->name},
                  {"keystore_id", HexEncode(export_key->keystore_id)},
                  {"key_id", HexEncode(export_key->key_id)},
                  {"fingerprint", HexEncode(crypto::ExportKeyFingerprint(*export_key))}}}};
    report["model_exported"] = true;
  }
  report["model_export"] = exported;

  PlotInfo plot;
  plot.title = s.job.name.empty() ? "training" : s.job.name;
  for (const SourceInfo& src : s.data.sources) {
    plot.datasets.push_back({src.id, std::filesystem::path(src.path).filename().string(), src.rows});
  }
  plot.train_rows = r.train_rows;
  plot.val_rows = r.val_rows;
  plot.validation_fraction = s.job.validation_fraction;
  plot.development_mode = !s.Attested();
  plot.regression = regression;
  plot.kept_epoch = r.best_epoch;
  const std::string svg = TrainingCurveSvg(r.epochs, s.clear.MetricBits(), plot);
  RETURN_IF_ERROR(plot_out->Write(svg.data(), svg.size()));
  RETURN_IF_ERROR(plot_out->Commit());
  const std::string path = report_out->path();
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested) {
    // The signature file first, then the report it signs (the report names it).
    const std::string text = ReportText(report);
    ASSIGN_OR_RETURN(std::string sig, s.attested->SignReport(text));
    ASSIGN_OR_RETURN(AtomicOutputFile sig_out, CreateOutput(path + ".sig", force));
    RETURN_IF_ERROR(sig_out.Write(sig.data(), sig.size()));
    RETURN_IF_ERROR(sig_out.Commit());
  }
#endif
  RETURN_IF_ERROR(WriteReport(*report_out, report));  // last: it names the others
  json finished = nullptr;
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested) {
    // The broker logs job.finished from the signed report. The outputs are complete
    // already, so a broker that cannot be reached now is a warning, not a failure.
    auto index = s.attested->ReportFinished(ReportText(report));
    if (index.ok()) {
      finished = *index;
    } else {
      std::fprintf(stderr, "enclave-train: WARNING: the broker did not log the finished job: %s\n",
                   index.status().ToString().c_str());
    }
  }
#endif
  if (args.json()) {
    json done = {{"event", "done"}, {"ok", true}, {"report", path}, {"job_finished_audit_index", finished},
              {"validation_split", validation},
              {"final", report["final"]},
              {"parameters_sha256", report["parameters_sha256"]},
              {"model", export_key ? json(model_path) : json(nullptr)},
              {"model_sha256", export_key ? exported["sha256"] : json(nullptr)}};
    if (dist.distributed()) {
      done["rank"] = dist.rank;
      done["world_size"] = dist.world_size;
      done["ring_bytes_sent"] = ring != nullptr ? json(ring->bytes_sent()) : json(nullptr);
    }
    EmitLine(done);
  } else {
    const EpochMetrics& f = r.Final();
    if (!validation) {
      std::printf("trained %s on %zu rows for %u epochs on %s\n%s\n", s.job.name.c_str(), r.train_rows, s.job.epochs,
                  s.backend->Describe().c_str(), NoValidationSplit(s.job).c_str());
    } else {
      std::printf("trained %s on %zu rows (%zu validation) for %u epochs on %s\n", s.job.name.c_str(), r.train_rows,
                  r.val_rows, s.job.epochs, s.backend->Describe().c_str());
    }
    // The final values, those of the job's clear outputs only.
    std::string values;
    auto add = [&values](const std::string& name, double v) {
      values += (values.empty() ? "" : ", ") + name + " " + HumanMetric(v);
    };
    if (validation) {
      if (s.clear.rmse) add("validation RMSE", f.val_rmse);
      if (s.clear.mae) add("MAE", f.val_mae);
      if (s.clear.r2) add("R^2", f.val_r2);
      if (s.clear.accuracy) add("validation accuracy", f.val_accuracy);
      if (s.clear.roc_auc) add("ROC AUC", f.val_auc);
      if (s.clear.loss) add("validation loss", f.val_loss);
    }
    if (s.clear.loss) add("training loss", f.train_loss);
    if (!values.empty()) std::printf("%s\n", values.c_str());
    if (all_rows_shown) {
      std::printf("%s over all %zu rows %s\n", regression ? "RMSE" : "accuracy", s.data.rows,
                  HumanMetric(all_rows_metric).c_str());
    }
    std::printf("parameters sha256 %s\n", params_digest.c_str());
    if (export_key) {
      std::printf("model: %s (sealed to export key '%s', sha256 %s)\n", model_path.c_str(), export_key->name.c_str(),
                  exported["sha256"].get<std::string>().c_str());
    }
    std::printf("report: %s\nplot: %s\n", path.c_str(), plot_out->path().c_str());
    if (!finished.is_null()) std::printf("job.finished logged by the broker: audit entry %s\n", cli::DumpJson(finished).c_str());
  }
  return OkStatus();
}

// predict: the data owner's side. A plaintext model file (enclave-data open-model), or an
// exported one opened in locked memory with --keystore.
Status Predict(const Args& args) {
  const std::string model_path = args.Get("model");
  // --out first: an existing file is refused before the keystore is unlocked.
  std::optional<AtomicOutputFile> out;
  if (args.Has("out")) {
    ASSIGN_OR_RETURN(AtomicOutputFile o, CreateOutput(args.Get("out"), args.Has("force")));
    out.emplace(std::move(o));
  }
  crypto::SecretBytes bytes;
  std::string format_id = kModelFormatId;
  if (args.Has("keystore")) {
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "Keystore passphrase", false));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(args.Get("keystore"), pass));
    crypto::ModelExportInfo info;
    ASSIGN_OR_RETURN(bytes, crypto::OpenModelToMemory(model_path, ks, kMaxModelBytes, &info));
    format_id = info.metadata.info.format_id;
    if (format_id != kModelFormatId && format_id != kModelFormatIdV2 && format_id != kModelFormatIdV3) {
      return Unsupported(model_path + ": model format '" + format_id + "', this build reads '" + kModelFormatId +
                         "', '" + kModelFormatIdV2 + "' and '" + kModelFormatIdV3 + "'");
    }
  } else {
    // Straight into locked memory: the weights derive from the tenant's data.
    ASSIGN_OR_RETURN(FileReader f, FileReader::Open(model_path));
    if (f.size() > kMaxModelBytes) return InvalidInput(model_path + ": larger than a model file can be");
    ASSIGN_OR_RETURN(bytes, crypto::SecretBytes::Create(f.size()));
    if (f.size() > 0) RETURN_IF_ERROR(f.ReadAt(0, bytes.ExposeSecretMutable().data(), f.size()));
    if (bytes.size() >= 8 && std::memcmp(bytes.ExposeSecret().data(), crypto::kSealedMagic, 8) == 0) {
      return FailedPrecondition(model_path + " is an exported (sealed) model: give --keystore K, or open it first with "
                                "enclave-data open-model");
    }
  }
  Result<ModelFile> parsed = ParseModelFile(bytes.ExposeSecret());
  if (!parsed.ok()) return parsed.status().Annotate(model_path);
  const ModelFile& model = *parsed;
  // The version the file is in names its format; an envelope must have said the same.
  const std::string file_format = ModelFormatIdFor(model.preprocessing, model.shape, model.family, model.threshold);
  if (args.Has("keystore") && format_id != file_format) {
    return InvalidInput(model_path + ": the envelope says model format '" + format_id + "', the model inside is '" +
                        file_format + "'");
  }
  format_id = file_format;
  ASSIGN_OR_RETURN(FeatureTable t, ReadFeatureCsv(args.Get("csv"), model.schema, &model.preprocessing));
  Device device = Device::kCpu;
  if (args.Has("device")) {
    const std::string d = args.Get("device");
    if (d == "gpu") device = Device::kGpu;
    else if (d == "auto") device = Device::kAuto;
    else if (d != "cpu") return InvalidInput("--device must be cpu, gpu or auto, got '" + d + "'");
  }
  if (model.family == ModelFamily::kXgboost) {
    if (device == Device::kGpu) return InvalidInput("--device gpu: trees predict on the CPU (Debian's XGBoost has no CUDA)");
    device = Device::kCpu;
    RETURN_IF_ERROR(LockAllMemory());  // XGBoost's own allocations hold the rows
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(device));
  ASSIGN_OR_RETURN(LockedArray<float> probs, PredictProbabilities(*backend, model, t.x.data(), t.rows));
  const uint32_t C = model.shape.classes;

  // The predictions: row (1-based data row), predicted class name, one probability per
  // class, or for regression the predicted value (9 significant digits: a float32
  // exactly). As CSV text (--out, or stdout), or with --json and no --out in the JSON
  // document, the same numbers.
  const bool in_json = args.json() && !out;
  const bool regression = model.shape.regression();
  std::string text = "row,predicted";
  for (const std::string& c : model.schema.classes) text += "," + dataset::CsvEscape("p_" + c);
  text += "\n";
  json predictions = json::array();
  char num[32];
  for (size_t r = 0; r < t.rows && regression; ++r) {
    std::snprintf(num, sizeof(num), "%.9g", static_cast<double>(probs[r]));
    if (in_json) {
      predictions.push_back({{"row", r + 1}, {"predicted", std::strtod(num, nullptr)}});
    } else {
      text += std::to_string(r + 1) + "," + num + "\n";
    }
  }
  for (size_t r = 0; r < t.rows && !regression; ++r) {
    const std::string& predicted = model.schema.classes[PredictedClass(probs.data(), r, C, model.threshold)];
    json p_json = json::array();
    if (!in_json) text += std::to_string(r + 1) + "," + dataset::CsvEscape(predicted);
    for (uint32_t c = 0; c < C; ++c) {
      const float p = C == 2 ? (c == 1 ? probs[r] : 1.0f - probs[r]) : probs[r * C + c];
      std::snprintf(num, sizeof(num), "%.9g", static_cast<double>(p));
      if (in_json) {
        p_json.push_back(std::strtod(num, nullptr));
      } else {
        text += ",";
        text += num;
      }
    }
    if (in_json) {
      predictions.push_back({{"row", r + 1}, {"predicted", predicted}, {"probabilities", std::move(p_json)}});
    } else {
      text += "\n";
    }
  }
  const double accuracy =
      t.has_labels && !regression ? Accuracy(probs.data(), t.labels.data(), t.rows, C, model.threshold) : 0.0;
  double rmse = 0;
  for (size_t r = 0; r < t.rows && t.has_labels && regression; ++r) {
    const double d = static_cast<double>(probs[r]) - t.labels[r];
    rmse += d * d / static_cast<double>(t.rows);
  }
  rmse = std::sqrt(rmse);
  if (out) {
    RETURN_IF_ERROR(out->Write(text.data(), text.size()));
    RETURN_IF_ERROR(out->Commit());
  } else if (!args.json()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  if (args.json()) {
    json doc = {{"ok", true},
                {"model", model_path},
                {"model_format", format_id},
                {"rows", t.rows},
                {"classes", model.schema.classes},
                {"threshold", C == 2 ? json(model.threshold) : json(nullptr)},
                {"accuracy", t.has_labels && !regression ? json(accuracy) : json(nullptr)},
                {"rmse", t.has_labels && regression ? json(rmse) : json(nullptr)},
                {"out", out ? json(args.Get("out")) : json(nullptr)}};
    if (in_json) doc["predictions"] = std::move(predictions);
    cli::PrintJson(doc);
  } else if (out) {
    std::printf("%zu predictions written to %s\n", t.rows, args.Get("out").c_str());
  }
  if (!args.json() && t.has_labels) {
    if (regression) {
      std::fprintf(stderr, "rmse %s (%zu rows with targets)\n", HumanMetric(rmse).c_str(), t.rows);
    } else {
      const std::string at = C == 2 && model.threshold != kDefaultThreshold
                                 ? ", predicted " + model.schema.classes[1] + " at P >= " + HumanMetric(model.threshold)
                                 : "";
      std::fprintf(stderr, "accuracy %s (%zu rows with labels%s)\n", HumanMetric(accuracy).c_str(), t.rows, at.c_str());
    }
  }
  return OkStatus();
}

// The output file of cv or tune (cv_metrics.json, tune_metrics.json), refused when it
// exists unless --force, and in the attested mode its signature too, before any training.
Result<AtomicOutputFile> OpenMetricsFile(const Args& args, const Session& s, const char* name) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, OpenReport(s, name, args.Has("force")));
  if (s.Attested() && !args.Has("force") && std::filesystem::exists(out.path() + ".sig")) {
    return AlreadyExists(out.path() + ".sig exists (use --force to overwrite)");
  }
  return out;
}

// The callbacks of cross-validation runs: a progress line per epoch on a terminal or, with
// `epoch_lines` and --json, a JSON line per epoch (with `extra` and the fold); in the
// attested mode training stops when the lease ends. CrossValidate takes the callbacks once,
// so they forward to the current fold's.
class CvProgress {
 public:
  CvProgress(const Args& args, const Session& s, bool epoch_lines)
      : args_(args), clear_(s.clear), line_(!args.json(), s.job.epochs, s.clear), epoch_lines_(epoch_lines) {
    forward.model_stays_on_backend = true;  // only the digests of the folds' parameters are reported
    forward.on_step = [this](uint64_t d, uint64_t t) { if (cb_.on_step) cb_.on_step(d, t); };
    forward.on_epoch = [this](const EpochMetrics& m) { if (cb_.on_epoch) cb_.on_epoch(m); };
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
    // As in run: when the lease ends, cross-validation stops and nothing is written.
    if (s.attested) forward.should_stop = [a = s.attested.get()](uint64_t) { return !a->LeaseHeld(); };
#endif
  }
  CvProgress(const CvProgress&) = delete;
  CvProgress& operator=(const CvProgress&) = delete;

  // Before fold f of n of `job` (which must outlive the fold): `label` prefixes the
  // progress line, `extra` goes into the JSON lines.
  void Fold(const JobSpec& job, uint32_t f, uint32_t n, const std::string& label, json extra) {
    epoch_ = 1;
    extra["fold"] = f;
    line_.set_epochs(job.epochs);
    line_.set_prefix(label + "fold " + std::to_string(f) + "/" + std::to_string(n) + " ");
    cb_ = Callbacks(args_, clear_, &line_, extra, &epoch_);
    if (args_.json() && !epoch_lines_) cb_.on_epoch = [this](const EpochMetrics&) { ++epoch_; };
  }

  TrainCallbacks forward;

 private:
  const Args& args_;
  ClearOutputs clear_;  // every configuration's are the job's: [tune] cannot change them
  EpochLine line_;
  bool epoch_lines_;
  uint32_t epoch_ = 1;
  TrainCallbacks cb_;
};

// Attested mode: a lease that ended during cross-validation stops it, nothing written.
Status LeaseEnded([[maybe_unused]] const Session& s) {
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested && !s.attested->LeaseHeld()) {
    return PermissionDenied("the lease ended during cross-validation (" + s.attested->LeaseEndReason() +
                            "): stopped, nothing written, keys wiped");
  }
#endif
  return OkStatus();
}

// One cross-validation's results as cv_metrics.json has them: `folds` (each fold's final
// metrics, rows, parameter digest, class weights), `out_of_fold_metrics` (pooled over the
// folds: every row predicted once, by the model that did not see it) and the means.
Result<json> CvResultJson(const Session& s, const JobSpec& job, const CvResult& cv) {
  json out;
  json fj = json::array();
  double acc_sq = 0;
  for (size_t i = 0; i < cv.folds.size(); ++i) {
    const TrainResult& r = cv.folds[i];
    const EpochMetrics& f = r.Final();
    acc_sq += (f.val_accuracy - cv.mean_accuracy) * (f.val_accuracy - cv.mean_accuracy);
    json j = EpochJson(f, s.clear);
    j["fold"] = i + 1;
    j["train_rows"] = r.train_rows;
    j["val_rows"] = r.val_rows;
    ASSIGN_OR_RETURN(j["parameters_sha256"], ParamsDigest(*s.backend, r));
    if (!r.class_weights.empty()) j["class_weights"] = r.class_weights;
    fj.push_back(j);
  }
  out["folds"] = fj;
  ASSIGN_OR_RETURN(out["out_of_fold_metrics"],
                   BoardMetrics(job, cv.out_of_fold.data(), s.data.labels.data(), s.data.rows,
                                cv.folds[0].shape.classes, nullptr, s.clear.board_metrics));
  // The means over the folds: null where the job's clear outputs leave the metric out.
  const double std_accuracy = std::sqrt(acc_sq / static_cast<double>(cv.folds.size()));
  out["mean_accuracy"] = s.clear.accuracy ? Num(cv.mean_accuracy) : json(nullptr);
  out["std_accuracy"] = s.clear.accuracy ? Num(std_accuracy) : json(nullptr);
  out["mean_roc_auc"] = s.clear.roc_auc ? Num(cv.mean_auc) : json(nullptr);
  out["mean_rmse"] = s.clear.rmse ? Num(cv.mean_rmse) : json(nullptr);
  out["mean_r2"] = s.clear.r2 ? Num(cv.mean_r2) : json(nullptr);
  return out;
}

// Writes a cv or tune report: in the attested mode signed like run's report (docs/training.md,
// "Signed report"), the signature first; the broker's job report endpoint takes only run
// reports (it logs the exported model), so these stay local.
Status CommitMetrics(const Args& args, Session& s, AtomicOutputFile& out, json& report) {
  RETURN_IF_ERROR(LeaseEnded(s));  // nothing is written once the lease has ended
  report["signature"] = s.Attested() ? json(out.path() + ".sig") : json(nullptr);
#ifdef ENCLAVE_HAVE_ATTESTED_MODE
  if (s.attested) {
    const std::string text = ReportText(report);
    ASSIGN_OR_RETURN(std::string sig, s.attested->SignReport(text));
    ASSIGN_OR_RETURN(AtomicOutputFile sig_out, CreateOutput(out.path() + ".sig", args.Has("force")));
    RETURN_IF_ERROR(sig_out.Write(sig.data(), sig.size()));
    RETURN_IF_ERROR(sig_out.Commit());
  }
#else
  (void)args;
#endif
  return WriteReport(out, report);
}

Status Cv(const Args& args) {
  ASSIGN_OR_RETURN(uint64_t folds, args.GetU64("folds", 5));
  if (folds < 2 || folds > 100) return InvalidInput("--folds must be in 2..100");
  ASSIGN_OR_RETURN(Session s, Prepare(args, false, "cv"));
  if (s.job.tune.enabled) {
    std::fprintf(stderr, "enclave-train: note: [tune] is read by enclave-train tune; cv validates the job as written\n");
  }
  ASSIGN_OR_RETURN(AtomicOutputFile out, OpenMetricsFile(args, s, "cv_metrics.json"));
  CvProgress progress(args, s, true);
  Result<CvResult> validated = CrossValidate(*s.backend, s.job, s.data, static_cast<uint32_t>(folds), progress.forward,
                                             [&](uint32_t f, uint32_t n) { progress.Fold(s.job, f, n, "", {}); });
  RETURN_IF_ERROR(LeaseEnded(s));
  if (!validated.ok()) return validated.status();
  CvResult cv = std::move(validated).value();
  json report = ReportHeader(args, s, "cv");
  report["model"] = ModelJson(cv.folds[0]);
  report["weights"] = WeightsJson(s.job, nullptr, s.data.schema.classes);
  ASSIGN_OR_RETURN(json results, CvResultJson(s, s.job, cv));
  report.update(results);
  const std::string path = out.path();
  RETURN_IF_ERROR(CommitMetrics(args, s, out, report));
  if (args.json()) {
    EmitLine({{"event", "done"}, {"ok", true}, {"metrics_file", path}, {"folds", folds},
              {"mean_accuracy", report["mean_accuracy"]}, {"mean_roc_auc", report["mean_roc_auc"]},
              {"mean_rmse", report["mean_rmse"]}, {"mean_r2", report["mean_r2"]}});
  } else {
    std::string values;  // the job's clear outputs only
    auto add = [&values](const std::string& text) { values += (values.empty() ? "" : ", ") + text; };
    if (s.clear.rmse) add("mean RMSE " + HumanMetric(cv.mean_rmse));
    if (s.clear.r2) add("mean R^2 " + HumanMetric(cv.mean_r2));
    if (s.clear.accuracy) {
      add("mean accuracy " + HumanMetric(cv.mean_accuracy) + " (std " +
          HumanMetric(report["std_accuracy"].is_number() ? report["std_accuracy"].get<double>() : NAN) + ")");
    }
    if (s.clear.roc_auc) add("mean ROC AUC " + HumanMetric(cv.mean_auc));
    std::printf("%llu-fold cross-validation of %s on %zu rows (%s)\n%s%smetrics: %s\n",
                static_cast<unsigned long long>(folds), s.job.name.c_str(), s.data.rows, s.backend->Describe().c_str(),
                values.c_str(), values.empty() ? "" : "\n", path.c_str());
  }
  return OkStatus();
}

// The clear output a [tune] metric is part of (docs/training.md, "What leaves in clear").
std::string ClearOutputOfTuneMetric(std::string_view metric) {
  if (metric == "log_loss") return "loss";
  if (metric == "average_precision" || metric == "brier") return "board_metrics";
  return std::string(metric);  // accuracy, roc_auc, rmse, mae, r2
}

bool ClearOutputsAllow(const ClearOutputs& clear, const std::string& name) {
  const std::vector<std::string> names = clear.Names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A configuration's parameter values as JSON, by key.
json TuneValuesJson(const TuneSpec& spec, const std::vector<uint32_t>& picks) {
  json j = json::object();
  for (size_t p = 0; p < spec.parameters.size(); ++p) j[spec.parameters[p].key] = json::parse(spec.parameters[p].candidates[picks[p]]);
  return j;
}

// tune: every configuration of the job's [tune] search cross-validated on the same folds
// of data loaded once; tune_metrics.json reports them all and the best.
Status Tune(const Args& args) {
  // Every configuration is made and parsed before any key is asked for or data read.
  ASSIGN_OR_RETURN(TunePlan plan, LoadTunePlan(args.Get("job")));
  const TuneSpec& spec = plan.base.tune;
  uint32_t most_epochs = 0;
  for (const TuneConfiguration& c : plan.configurations) most_epochs = std::max(most_epochs, c.job.epochs);
  // The release is a cross-validation's (kind "cv": the broker knows run and cv), claiming
  // the most epochs any configuration trains.
  ASSIGN_OR_RETURN(Session s, Prepare(args, false, "cv", 0, 1, most_epochs));
  if (s.job.digest != plan.base.digest) {
    return InvalidInput(args.Get("job") + ": the job file changed while it was read");
  }
  ASSIGN_OR_RETURN(const TuneMetric* metric, ResolveTuneMetric(spec, s.data.classes));
  // The search's metric leaves in clear too: it must be one of the job's clear outputs
  // (what the release claimed), before anything is trained.
  if (const std::string needs = ClearOutputOfTuneMetric(metric->name); !ClearOutputsAllow(s.clear, needs)) {
    return InvalidInput(spec.at + ": [tune] metric '" + metric->name + "' is shown in clear as '" + needs +
                        "', which this job does not show (training.metrics, [evaluation]): nothing was trained");
  }
  ASSIGN_OR_RETURN(AtomicOutputFile out, OpenMetricsFile(args, s, "tune_metrics.json"));
  if (args.Has("device")) {
    for (TuneConfiguration& c : plan.configurations) c.job.device = s.job.device;
  }
  const size_t n = plan.configurations.size();
  const char* method = spec.method == TuneMethod::kGrid ? "grid" : "random";
  if (!args.json()) {
    std::fprintf(stderr, "enclave-train: %s search: %zu configuration(s), %u-fold cross-validation each, by %s (%s "
                 "is better)\n", method, n, spec.folds, metric->name, metric->higher_is_better ? "higher" : "lower");
  }
  CvProgress progress(args, s, false);
  json configurations = json::array();
  std::vector<double> means;
  std::vector<TuneScore> scores;
  for (const TuneConfiguration& c : plan.configurations) {
    const std::string label = "configuration " + std::to_string(c.index) + "/" + std::to_string(n) + " ";
    Result<CvResult> validated =
        CrossValidate(*s.backend, c.job, s.data, spec.folds, progress.forward,
                      [&](uint32_t f, uint32_t k) { progress.Fold(c.job, f, k, label, {{"configuration", c.index}}); });
    RETURN_IF_ERROR(LeaseEnded(s));
    if (!validated.ok()) {
      return validated.status().Annotate("[tune] configuration " + std::to_string(c.index) + " (" +
                                         DescribeConfiguration(spec, c.picks) + ")");
    }
    const CvResult cv = std::move(validated).value();
    ASSIGN_OR_RETURN(std::vector<double> per_fold, FoldScores(*metric, cv, s.data, c.job.seed));
    const TuneScore score = Summarize(per_fold);
    json per_fold_json = json::array();
    for (double v : per_fold) per_fold_json.push_back(Num(v));
    json j = {{"configuration", c.index},
              {"parameters", TuneValuesJson(spec, c.picks)},
              {"metric_per_fold", per_fold_json},
              {"mean", Num(score.mean)},
              {"std", Num(score.std)},
              {"model", ModelJson(cv.folds[0])}};
    ASSIGN_OR_RETURN(json results, CvResultJson(s, c.job, cv));
    j.update(results);
    if (args.json()) {
      EmitLine({{"event", "configuration"}, {"configuration", c.index}, {"of", n}, {"parameters", j["parameters"]},
                {"metric", metric->name}, {"metric_per_fold", per_fold_json}, {"mean", j["mean"]}, {"std", j["std"]}});
    }
    configurations.push_back(std::move(j));
    means.push_back(score.mean);
    scores.push_back(score);
  }
  const std::vector<size_t> order = RankConfigurations(means, metric->higher_is_better);
  for (size_t r = 0; r < order.size(); ++r) configurations[order[r]]["rank"] = r + 1;
  const bool found = !order.empty() && !std::isnan(means[order[0]]);
  const size_t best = found ? order[0] : 0;
  json report = ReportHeader(args, s, "tune");
  report["weights"] = WeightsJson(s.job, nullptr, s.data.schema.classes);
  json params = json::array();
  for (const TuneParameter& p : spec.parameters) {
    json cands = json::array();
    for (const std::string& c : p.candidates) cands.push_back(json::parse(c));
    params.push_back({{"key", p.key}, {"candidates", cands}});
  }
  report["search"] = {{"method", method},
                      {"metric", metric->name},
                      {"direction", metric->higher_is_better ? "higher is better" : "lower is better"},
                      {"folds", spec.folds},
                      {"fold_seed", s.job.seed},
                      {"seed", spec.method == TuneMethod::kRandom ? json(spec.seed) : json(nullptr)},
                      {"trials", spec.method == TuneMethod::kRandom ? json(spec.trials) : json(nullptr)},
                      {"grid_size", spec.grid_size},
                      {"configurations", n},
                      {"parameters", params},
                      {"selection", "the best mean over the folds; equal means: the earlier configuration; a "
                                    "configuration with an undefined mean is never the best"}};
  report["configurations"] = configurations;
  report["best"] = found ? json{{"configuration", best + 1},
                                {"parameters", configurations[best]["parameters"]},
                                {"mean", configurations[best]["mean"]},
                                {"std", configurations[best]["std"]}}
                         : json(nullptr);
  const std::string path = out.path();
  RETURN_IF_ERROR(CommitMetrics(args, s, out, report));
  if (args.json()) {
    EmitLine({{"event", "done"}, {"ok", true}, {"metrics_file", path}, {"configurations", n},
              {"metric", metric->name}, {"best", report["best"]}});
    return OkStatus();
  }
  // For people: one row per configuration in search order, 4 significant digits.
  std::printf("%s search of %s: %zu configuration(s), %u-fold cross-validation on %zu rows (%s), by mean %s (%s "
              "is better)\n", method, s.job.name.c_str(), n, spec.folds, s.data.rows, s.backend->Describe().c_str(),
              metric->name, metric->higher_is_better ? "higher" : "lower");
  std::printf("%4s %4s  %-10s %-10s  %s\n", "#", "rank", "mean", "std", "parameters");
  for (size_t i = 0; i < n; ++i) {
    std::printf("%4zu %4zu  %-10s %-10s  %s\n", i + 1, configurations[i]["rank"].get<size_t>(),
                HumanMetric(scores[i].mean).c_str(), HumanMetric(scores[i].std).c_str(),
                DescribeConfiguration(spec, plan.configurations[i].picks).c_str());
  }
  if (found) {
    std::printf("best: configuration %zu (%s): mean %s %s (std %s)\n", best + 1,
                DescribeConfiguration(spec, plan.configurations[best].picks).c_str(), metric->name,
                HumanMetric(scores[best].mean).c_str(), HumanMetric(scores[best].std).c_str());
  } else {
    std::printf("best: none (%s is undefined for every configuration)\n", metric->name);
  }
  std::printf("metrics: %s\n", path.c_str());
  return OkStatus();
}

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-train";
  p.summary = "train a model on sealed datasets (CPU or GPU backend) and use it";
  p.holds_keys = true;
  const FlagSpec pass = cli::PassphraseFdFlag();
  p.verbs = {
      {"run", "train the job's model with a stratified validation split; the model leaves sealed to the export key",
       "", 0, {kJob, kKeystore, pass, kExportKey, kDevice, kResume, kStopAfter, kRunForce, kTcti, kState, kEventLog,
               kImaLog, kWorldSize, kRank, kRendezvous, kPeerTimeout, kRunJson}, Run},
      {"cv", "stratified k-fold cross-validation of the job (shuffled, seeded)", "", 0,
       {kJob, {"folds", "K", "number of folds (default 5)"}, kKeystore, pass, kDevice, kCvForce, kTcti, kState, kEventLog,
        kImaLog, kCvJson}, Cv},
      {"tune", "grid or random search over the job's [tune] parameters, each configuration cross-validated on the "
               "same folds; reports every configuration and the best (tune_metrics.json)", "", 0,
       {kJob, kKeystore, pass, kDevice, kTuneForce, kTcti, kState, kEventLog, kImaLog, kTuneJson}, Tune},
      {"predict", "class predictions and probabilities of a model for the rows of a CSV (data owner side)", "", 0,
       {{"model", "M", "plaintext model file (enclave-data open-model), or an exported one with --keystore", true},
        {"keystore", "K", "the tenant keystore: open the exported model M in locked memory"},
        pass,
        {"csv", "F", "CSV with a header row and the model's feature columns (the label column is optional)", true},
        {"out", "F.csv", "write the predictions here (atomically) instead of stdout"},
        {"force", "", "overwrite --out"},
        {"device", "cpu|gpu|auto", "where to predict (default cpu)"},
        kPredictJson},
       Predict},
  };
  return cli::Main(p, argc, argv);
}
