#include "enclave/trainer/trees.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <xgboost/c_api.h>

#include <bit>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "enclave/dataset/schema.h"

namespace enclave::trainer {
namespace {

// XGBoost's last error as one line: its messages carry a "[hh:mm:ss] file:line: " prefix,
// may span lines and may end in a stack trace; the trace goes, the lines are joined.
std::string LastError() {
  const char* e = XGBGetLastError();
  std::string s = e != nullptr ? e : "";
  if (size_t t = s.find("Stack trace:"); t != std::string::npos) s.resize(t);
  if (s.size() > 11 && s[0] == '[' && s[9] == ']' && s[10] == ' ') s.erase(0, 11);
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? "no message" : out;
}

// The one wrapper around every XGBoost call: its return code (0 ok, -1 error, -2 slice
// out of range) becomes a Status naming the call.
Status Xgb(int rc, const char* call) {
  if (rc == 0) return OkStatus();
  return Internal(std::string(call) + " failed (" + std::to_string(rc) + "): " + LastError());
}
#define XGB_CALL(call, ...) Xgb(call(__VA_ARGS__), #call)

// Before the XGBoost calls of every entry point: XGBoost logs warnings and training
// progress to stderr by default, and the trainer's output is its own JSON lines. Its
// global configuration is per thread (a thread-local store), hence every time.
Status Quiet() { return XGB_CALL(XGBSetGlobalConfig, "{\"verbosity\": 0}"); }

// Owns one XGBoost handle and frees it with `Free`.
template <typename H, int (*Free)(H)>
class Handle {
 public:
  Handle() = default;
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Handle() {
    if (h_ != nullptr) Free(h_);
  }
  H get() const { return h_; }
  H* out() { return &h_; }

 private:
  H h_ = nullptr;
};
using DMatrix = Handle<DMatrixHandle, XGDMatrixFree>;
using Booster = Handle<BoosterHandle, XGBoosterFree>;

const char* Objective(TreeTask task) {
  switch (task) {
    case TreeTask::kBinary: return "binary:logistic";
    case TreeTask::kMulticlass: return "multi:softprob";
    default: return "reg:squarederror";
  }
}

const char* EvalMetric(TreeTask task) {
  switch (task) {
    case TreeTask::kBinary: return "logloss";
    case TreeTask::kMulticlass: return "mlogloss";
    default: return "rmse";
  }
}

// Shortest round-trip decimal, as Python's str(float) writes it: the cross-check passes
// the same strings, and XGBoost parses every float parameter to float32 either way.
std::string Num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Rows of features: every value finite or exactly the missing NaN.
Status CheckFeatures(const float* x, size_t rows, size_t features, const char* what) {
  for (size_t i = 0; i < rows * features; ++i) {
    const float v = x[i];
    if (std::isfinite(v) || std::bit_cast<uint32_t>(v) == dataset::kMissingBits) continue;
    return InvalidInput(std::string(what) + " row " + std::to_string(i / features) + ", feature " +
                        std::to_string(i % features) + ": " + (std::isnan(v) ? "a NaN other than the missing value "
                                                                               "0x7fc00000" : "an infinity"));
  }
  return OkStatus();
}

Status CheckLabels(TreeTask task, uint32_t classes, const float* y, size_t rows, const char* what) {
  for (size_t i = 0; i < rows; ++i) {
    const float v = y[i];
    const bool ok = task == TreeTask::kRegression
                        ? std::isfinite(v)
                        : (std::isfinite(v) && v >= 0 && v < static_cast<float>(classes) && v == std::floor(v));
    if (!ok) {
      std::string expected = task == TreeTask::kRegression ? "a finite value"
                                                           : "a class index 0.." + std::to_string(classes - 1);
      return InvalidInput(std::string(what) + " label of row " + std::to_string(i) + " is not " + expected);
    }
  }
  return OkStatus();
}

Result<DMatrix> MakeDMatrix(const float* x, size_t rows, size_t features, int threads) {
  DMatrix d;
  RETURN_IF_ERROR(XGB_CALL(XGDMatrixCreateFromMat_omp, x, rows, features, std::numeric_limits<float>::quiet_NaN(),
                           d.out(), threads));
  return d;
}

Status SetParam(const Booster& b, const char* name, const std::string& value) {
  if (int rc = XGBoosterSetParam(b.get(), name, value.c_str()); rc != 0) {
    return Internal(std::string("XGBoosterSetParam(") + name + "=" + value + ") failed: " + LastError());
  }
  return OkStatus();
}

// One line of XGBoosterEvalOneIter: "[3]\ttrain-logloss:0.1234\tval-logloss:0.2345",
// values printed with 17 significant digits. Parsed strictly: the names and the metric we
// asked for, in order, each value a whole number.
Status ParseEval(std::string_view line, int iter, const char* metric, bool with_val, double* train, double* val) {
  auto bad = [&](const std::string& why) {
    return Internal("XGBoosterEvalOneIter returned an unexpected line (" + why + "): '" + std::string(line) + "'");
  };
  const std::string head = "[" + std::to_string(iter) + "]";
  if (!line.starts_with(head)) return bad("no " + head);
  line.remove_prefix(head.size());
  for (const char* name : {"train", "val"}) {
    double* out = std::string_view(name) == "train" ? train : val;
    if (out == val && !with_val) break;
    const std::string key = std::string("\t") + name + "-" + metric + ":";
    if (!line.starts_with(key)) return bad("no " + key.substr(1));
    line.remove_prefix(key.size());
    const size_t end = std::min(line.find('\t'), line.size());
    const std::string num(line.substr(0, end));
    char* stop = nullptr;
    errno = 0;
    *out = std::strtod(num.c_str(), &stop);
    if (num.empty() || stop != num.c_str() + num.size() || errno == ERANGE) return bad("value '" + num + "'");
    line.remove_prefix(end);
  }
  if (!line.empty()) return bad("trailing '" + std::string(line) + "'");
  return OkStatus();
}

Result<crypto::SecretBytes> SaveUbj(const Booster& b) {
  bst_ulong len = 0;
  const char* bytes = nullptr;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterSaveModelToBuffer, b.get(), "{\"format\": \"ubj\"}", &len, &bytes));
  if (bytes == nullptr || len == 0) return Internal("XGBoosterSaveModelToBuffer returned no bytes");
  return crypto::SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>(bytes), static_cast<size_t>(len)});
}

uint32_t ExpectedClasses(TreeTask task, uint32_t classes) {
  return task == TreeTask::kMulticlass ? classes : task == TreeTask::kBinary ? 2 : 1;
}

// The model's booster, loaded and checked against the model's own fields (objective,
// classes, features, rounds), so that a mismatched TreeModel is refused instead of its
// predictions being misread. The bytes come from a model we trained or an authenticated
// model file: XGBoost's parser is not meant for hostile input.
Result<Booster> LoadBooster(const TreeModel& model, uint32_t threads) {
  RETURN_IF_ERROR(Quiet());
  if (model.booster.empty()) return InvalidInput("tree model has no booster bytes");
  if (model.features == 0) return InvalidInput("tree model has 0 features");
  Booster b;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterCreate, nullptr, 0, b.out()));
  const auto bytes = model.booster.ExposeSecret();
  RETURN_IF_ERROR(XGB_CALL(XGBoosterLoadModelFromBuffer, b.get(), bytes.data(), bytes.size()));
  RETURN_IF_ERROR(SetParam(b, "nthread", std::to_string(threads)));
  bst_ulong features = 0;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterGetNumFeature, b.get(), &features));
  if (features != model.features) {
    return InvalidInput("tree model: the booster has " + std::to_string(features) + " features, the model says " +
                        std::to_string(model.features));
  }
  int rounds = 0;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterBoostedRounds, b.get(), &rounds));
  if (rounds < 0 || static_cast<uint32_t>(rounds) != model.best_rounds) {
    return InvalidInput("tree model: the booster has " + std::to_string(rounds) + " rounds, the model says " +
                        std::to_string(model.best_rounds));
  }
  bst_ulong len = 0;
  const char* config = nullptr;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterSaveJsonConfig, b.get(), &len, &config));
  std::string objective, num_class;
  try {
    const auto j = nlohmann::json::parse(std::string_view(config, len));
    objective = j.at("learner").at("objective").at("name").get<std::string>();
    num_class = j.at("learner").at("learner_model_param").at("num_class").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return Internal(std::string("XGBoosterSaveJsonConfig: unexpected configuration: ") + e.what());
  }
  const uint32_t classes = ExpectedClasses(model.task, model.classes);
  const std::string want_class = model.task == TreeTask::kMulticlass ? std::to_string(classes) : "0";
  if (objective != Objective(model.task) || num_class != want_class) {
    return InvalidInput("tree model: the booster is objective " + objective + " with num_class " + num_class +
                        ", the model says " + TreeTaskName(model.task) + " with " + std::to_string(model.classes) +
                        " classes");
  }
  return b;
}

}  // namespace

const char* TreeTaskName(TreeTask task) {
  switch (task) {
    case TreeTask::kBinary: return "binary";
    case TreeTask::kMulticlass: return "multiclass";
    default: return "regression";
  }
}

Status CheckTreeSpec(const TreeSpec& s) {
  auto range = [](const char* name, double v, double lo, double hi, bool lo_open) -> Status {
    if (std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return OkStatus();
    return InvalidInput(std::string("trees.") + name + " must be in " + (lo_open ? "(" : "[") + Num(lo) + ", " +
                        Num(hi) + "], got " + Num(v));
  };
  RETURN_IF_ERROR(range("rounds", s.rounds, 1, kMaxTreeRounds, false));
  RETURN_IF_ERROR(range("max_depth", s.max_depth, 1, kMaxTreeDepth, false));
  RETURN_IF_ERROR(range("eta", s.eta, 0, 1, true));
  RETURN_IF_ERROR(range("min_child_weight", s.min_child_weight, 0, kMaxTreePenalty, false));
  RETURN_IF_ERROR(range("subsample", s.subsample, 0, 1, true));
  RETURN_IF_ERROR(range("colsample_bytree", s.colsample_bytree, 0, 1, true));
  RETURN_IF_ERROR(range("lambda", s.lambda, 0, kMaxTreePenalty, false));
  RETURN_IF_ERROR(range("alpha", s.alpha, 0, kMaxTreePenalty, false));
  RETURN_IF_ERROR(range("gamma", s.gamma, 0, kMaxTreePenalty, false));
  RETURN_IF_ERROR(range("max_bin", s.max_bin, 2, kMaxTreeBins, false));
  RETURN_IF_ERROR(range("threads", s.threads, 0, kMaxTreeThreads, false));
  RETURN_IF_ERROR(range("early_stopping_rounds", s.early_stopping_rounds, 0, kMaxTreeRounds, false));
  return OkStatus();
}

Result<TreeModel> TrainTrees(const TreeSpec& spec, TreeTask task, uint32_t classes, const TreeTrainInput& in,
                             uint64_t seed, const std::function<void(const TreeRound&)>& on_round,
                             const std::function<bool(uint32_t)>& should_stop) {
  RETURN_IF_ERROR(CheckTreeSpec(spec));
  switch (task) {
    case TreeTask::kBinary:
      if (classes != 2) return InvalidInput("binary trees need 2 classes, got " + std::to_string(classes));
      break;
    case TreeTask::kMulticlass:
      if (classes < 3 || classes > dataset::kMaxClasses) {
        return InvalidInput("multiclass trees need 3.." + std::to_string(dataset::kMaxClasses) + " classes, got " +
                            std::to_string(classes) + " (2 classes: binary)");
      }
      break;
    case TreeTask::kRegression:
      if (classes > 1) return InvalidInput("regression trees take 0 or 1 classes, got " + std::to_string(classes));
      break;
    default: return InvalidInput("unknown tree task");
  }
  if (in.rows == 0) return InvalidInput("no training rows");
  if (in.features == 0 || in.features > dataset::kMaxColumns) {
    return InvalidInput("features must be 1.." + std::to_string(dataset::kMaxColumns) + ", got " +
                        std::to_string(in.features));
  }
  if (in.rows > std::numeric_limits<size_t>::max() / in.features || in.rows > (uint64_t{1} << 40) ||
      in.val_rows > (uint64_t{1} << 40)) {
    return InvalidInput("too many rows");
  }
  if (in.x == nullptr || in.y == nullptr) return InvalidInput("training rows or labels missing (null)");
  if (in.val_rows > 0 && (in.x_val == nullptr || in.y_val == nullptr)) {
    return InvalidInput("validation rows or labels missing (null) for " + std::to_string(in.val_rows) + " rows");
  }
  if (spec.early_stopping_rounds > 0 && in.val_rows == 0) {
    return InvalidInput("trees.early_stopping_rounds needs validation rows");
  }
  RETURN_IF_ERROR(CheckFeatures(in.x, in.rows, in.features, "training"));
  RETURN_IF_ERROR(CheckLabels(task, classes, in.y, in.rows, "training"));
  if (in.val_rows > 0) {
    RETURN_IF_ERROR(CheckFeatures(in.x_val, in.val_rows, in.features, "validation"));
    RETURN_IF_ERROR(CheckLabels(task, classes, in.y_val, in.val_rows, "validation"));
  }
  if (in.weights != nullptr) {
    double sum = 0;
    for (size_t i = 0; i < in.rows; ++i) {
      if (!std::isfinite(in.weights[i]) || in.weights[i] < 0) {
        return InvalidInput("weight of row " + std::to_string(i) + " is not a finite value >= 0");
      }
      sum += in.weights[i];
    }
    if (!(sum > 0)) return InvalidInput("every sample weight is 0");
  }
  for (size_t i = 0; in.weights_val != nullptr && i < in.val_rows; ++i) {
    if (!std::isfinite(in.weights_val[i]) || in.weights_val[i] < 0) {
      return InvalidInput("weight of validation row " + std::to_string(i) + " is not a finite value >= 0");
    }
  }

  RETURN_IF_ERROR(Quiet());
  const int threads = static_cast<int>(spec.threads);
  ASSIGN_OR_RETURN(DMatrix train, MakeDMatrix(in.x, in.rows, in.features, threads));
  RETURN_IF_ERROR(XGB_CALL(XGDMatrixSetFloatInfo, train.get(), "label", in.y, in.rows));
  if (in.weights != nullptr) RETURN_IF_ERROR(XGB_CALL(XGDMatrixSetFloatInfo, train.get(), "weight", in.weights, in.rows));
  DMatrix val;
  const bool with_val = in.val_rows > 0;
  if (with_val) {
    ASSIGN_OR_RETURN(DMatrix v, MakeDMatrix(in.x_val, in.val_rows, in.features, threads));
    val = std::move(v);
    RETURN_IF_ERROR(XGB_CALL(XGDMatrixSetFloatInfo, val.get(), "label", in.y_val, in.val_rows));
    if (in.weights_val != nullptr) {
      RETURN_IF_ERROR(XGB_CALL(XGDMatrixSetFloatInfo, val.get(), "weight", in.weights_val, in.val_rows));
    }
  }

  Booster b;
  DMatrixHandle cache[2] = {train.get(), val.get()};
  // The matrices it will see, so XGBoost keeps their predictions cached between rounds.
  RETURN_IF_ERROR(XGB_CALL(XGBoosterCreate, cache, with_val ? 2 : 1, b.out()));
  const std::pair<const char*, std::string> params[] = {
      {"verbosity", "0"},
      {"objective", Objective(task)},
      {"eval_metric", EvalMetric(task)},
      {"tree_method", "hist"},
      {"seed", std::to_string(static_cast<int64_t>(seed))},  // XGBoost's seed is signed
      {"nthread", std::to_string(spec.threads)},
      {"max_depth", std::to_string(spec.max_depth)},
      {"eta", Num(spec.eta)},
      {"min_child_weight", Num(spec.min_child_weight)},
      {"subsample", Num(spec.subsample)},
      {"colsample_bytree", Num(spec.colsample_bytree)},
      {"lambda", Num(spec.lambda)},
      {"alpha", Num(spec.alpha)},
      {"gamma", Num(spec.gamma)},
      {"max_bin", std::to_string(spec.max_bin)},
  };
  for (const auto& [name, value] : params) RETURN_IF_ERROR(SetParam(b, name, value));
  if (task == TreeTask::kMulticlass) RETURN_IF_ERROR(SetParam(b, "num_class", std::to_string(classes)));

  const char* names[2] = {"train", "val"};
  uint32_t best_rounds = 0, since_best = 0;
  double best_loss = 0;
  uint32_t done = 0;
  for (uint32_t r = 0; r < spec.rounds; ++r) {
    const int iter = static_cast<int>(r);
    RETURN_IF_ERROR(XGB_CALL(XGBoosterUpdateOneIter, b.get(), iter, train.get()));
    done = r + 1;
    const char* line = nullptr;
    RETURN_IF_ERROR(XGB_CALL(XGBoosterEvalOneIter, b.get(), iter, cache, names, with_val ? 2 : 1, &line));
    TreeRound round{done, 0, std::numeric_limits<double>::quiet_NaN()};
    RETURN_IF_ERROR(ParseEval(line != nullptr ? line : "", iter, EvalMetric(task), with_val, &round.train_loss,
                              &round.val_loss));
    if (on_round) on_round(round);
    if (should_stop && should_stop(done)) return Interrupted("tree training stopped after round " + std::to_string(done));
    if (spec.early_stopping_rounds == 0) {
      best_rounds = done;
      continue;
    }
    // As XGBoost's Python EarlyStopping callback: an improvement is a strictly lower loss;
    // stop once the best is this many rounds old.
    if (best_rounds == 0 || round.val_loss < best_loss) {
      best_loss = round.val_loss;
      best_rounds = done;
      since_best = 0;
    } else if (++since_best >= spec.early_stopping_rounds) {
      break;
    }
  }
  if (best_rounds < done) {
    Booster sliced;
    RETURN_IF_ERROR(XGB_CALL(XGBoosterSlice, b.get(), 0, static_cast<int>(best_rounds), 1, sliced.out()));
    b = std::move(sliced);
  }
  int boosted = 0;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterBoostedRounds, b.get(), &boosted));
  if (boosted < 0 || static_cast<uint32_t>(boosted) != best_rounds) {
    return Internal("XGBoost kept " + std::to_string(boosted) + " rounds, expected " + std::to_string(best_rounds));
  }
  TreeModel model;
  model.task = task;
  model.features = static_cast<uint32_t>(in.features);
  model.classes = ExpectedClasses(task, classes);
  model.best_rounds = best_rounds;
  ASSIGN_OR_RETURN(model.booster, SaveUbj(b));
  return model;
}

Result<LockedArray<float>> PredictTrees(const TreeModel& model, const float* x, size_t rows, uint32_t threads) {
  if (threads > kMaxTreeThreads) return InvalidInput("threads must be 0.." + std::to_string(kMaxTreeThreads));
  ASSIGN_OR_RETURN(Booster b, LoadBooster(model, threads));
  const size_t cols = model.task == TreeTask::kMulticlass ? model.classes : 1;
  if (rows == 0) return LockedArray<float>::Create(0);
  if (x == nullptr) return InvalidInput("rows to predict missing (null)");
  if (rows > (uint64_t{1} << 40) / model.features) return InvalidInput("too many rows to predict");
  RETURN_IF_ERROR(CheckFeatures(x, rows, model.features, "prediction"));
  ASSIGN_OR_RETURN(DMatrix d, MakeDMatrix(x, rows, model.features, static_cast<int>(threads)));
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* out = nullptr;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterPredictFromDMatrix, b.get(), d.get(),
                           "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
                           "\"strict_shape\": true}",
                           &shape, &dim, &out));
  if (dim != 2 || shape == nullptr || out == nullptr || shape[0] != rows || shape[1] != cols) {
    return Internal("XGBoosterPredictFromDMatrix returned an unexpected shape (expected " + std::to_string(rows) +
                    " x " + std::to_string(cols) + ")");
  }
  ASSIGN_OR_RETURN(LockedArray<float> p, LockedArray<float>::Create(rows * cols));
  std::memcpy(p.data(), out, rows * cols * sizeof(float));
  return p;
}

Result<std::vector<double>> FeatureGain(const TreeModel& model) {
  ASSIGN_OR_RETURN(Booster b, LoadBooster(model, 1));
  bst_ulong n = 0, dim = 0;
  const char** names = nullptr;
  const bst_ulong* shape = nullptr;
  const float* scores = nullptr;
  RETURN_IF_ERROR(XGB_CALL(XGBoosterFeatureScore, b.get(), "{\"importance_type\": \"total_gain\"}", &n, &names, &dim,
                           &shape, &scores));
  if (n > 0 && (dim != 1 || shape == nullptr || shape[0] != n || names == nullptr || scores == nullptr)) {
    return Internal("XGBoosterFeatureScore returned an unexpected shape");
  }
  std::vector<double> gain(model.features, 0.0);
  std::vector<bool> seen(model.features, false);
  for (bst_ulong i = 0; i < n; ++i) {
    // Without feature names XGBoost names feature j "f<j>".
    const std::string_view name = names[i] != nullptr ? names[i] : "";
    uint32_t j = 0;
    const char* end = name.data() + name.size();
    auto r = name.size() > 1 && name[0] == 'f' ? std::from_chars(name.data() + 1, end, j)
                                               : std::from_chars_result{name.data(), std::errc::invalid_argument};
    if (r.ec != std::errc() || r.ptr != end || j >= model.features || seen[j] || !std::isfinite(scores[i])) {
      return Internal("XGBoosterFeatureScore returned an unexpected feature '" + std::string(name) + "'");
    }
    seen[j] = true;
    gain[j] = scores[i];
  }
  return gain;
}

Status LockAllMemory() {
  if (::mlockall(MCL_CURRENT | MCL_FUTURE) == 0) return OkStatus();
  const int err = errno;
  struct rlimit limit {};
  std::string soft = "unknown";
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    soft = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_cur) + " bytes";
  }
  std::string size = "unknown";  // what MCL_CURRENT had to lock
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmSize:", 7) == 0) size = std::to_string(std::strtoull(line + 7, nullptr, 10) * 1024) + " bytes";
    }
    std::fclose(f);
  }
  return FailedPrecondition("cannot lock the process's memory into RAM for tree training (mlockall: " +
                            std::string(std::strerror(err)) + "; the process maps " + size +
                            ", RLIMIT_MEMLOCK soft limit " + soft +
                            "): raise the limit (ulimit -l, systemd LimitMEMLOCK=, docker --ulimit memlock=) "
                            "or grant CAP_IPC_LOCK");
}

}  // namespace enclave::trainer
