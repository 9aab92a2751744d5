#include "enclave/trainer/job.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/crypto/sealed_file.h"
#include "job_internal.h"

namespace enclave::trainer {
namespace {

// Walks one table, handing out its keys once each and rejecting what is left.
class Table {
 public:
  Table(const toml::table& t, std::string where, const std::string& source)
      : t_(t), where_(std::move(where)), source_(source) {}

  std::string At(const toml::node& n) const {
    return source_ + ":" + std::to_string(n.source().begin.line);
  }
  std::string Name(std::string_view key) const { return where_.empty() ? std::string(key) : where_ + "." + std::string(key); }

  const toml::node* Get(std::string_view key) {
    used_.insert(std::string(key));
    return t_.get(key);
  }

  Status Error(const toml::node& n, std::string_view key, const std::string& what) const {
    return InvalidInput(At(n) + ": '" + Name(key) + "' " + what);
  }

  Status String(std::string_view key, std::string* out, bool required = false) {
    const toml::node* n = Get(key);
    if (n == nullptr) return required ? Missing(key) : OkStatus();
    if (!n->is_string()) return Error(*n, key, "must be a string");
    *out = n->as_string()->get();
    return OkStatus();
  }

  Status Int(std::string_view key, int64_t lo, int64_t hi, int64_t* out, bool required = false) {
    const toml::node* n = Get(key);
    if (n == nullptr) return required ? Missing(key) : OkStatus();
    if (!n->is_integer()) return Error(*n, key, "must be an integer");
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) {
      return Error(*n, key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
    }
    *out = v;
    return OkStatus();
  }

  template <typename T>
  Status UInt(std::string_view key, int64_t lo, int64_t hi, T* out, bool required = false) {
    int64_t v = static_cast<int64_t>(*out);
    RETURN_IF_ERROR(Int(key, lo, hi, &v, required));
    *out = static_cast<T>(v);
    return OkStatus();
  }

  // A float (an integer is accepted: `lr = 1`) in [lo, hi], open ends when asked.
  Status Number(std::string_view key, double lo, double hi, bool lo_open, bool hi_open, double* out) {
    const toml::node* n = Get(key);
    if (n == nullptr) return OkStatus();
    double v = 0;
    if (n->is_floating_point()) {
      v = n->as_floating_point()->get();
    } else if (n->is_integer()) {
      v = static_cast<double>(n->as_integer()->get());
    } else {
      return Error(*n, key, "must be a number");
    }
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) {
      std::ostringstream range;
      range << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
      std::ostringstream got;
      got << v;
      return Error(*n, key, "must be in " + range.str() + ", got " + got.str());
    }
    *out = v;
    return OkStatus();
  }

  // The range is checked again after rounding to float: `lr = 1e-50` is in (0, 10] as a
  // double but 0 as a float, and the trainer would silently not learn.
  Status Float(std::string_view key, double lo, double hi, bool lo_open, bool hi_open, float* out) {
    double v = *out;
    RETURN_IF_ERROR(Number(key, lo, hi, lo_open, hi_open, &v));
    const float f = static_cast<float>(v);
    const double back = f;
    const bool ok = (lo_open ? back > lo : back >= lo) && (hi_open ? back < hi : back <= hi);
    if (!ok) return Error(*Get(key), key, "is out of range once rounded to a 32-bit float");
    *out = f;
    return OkStatus();
  }

  template <typename E>
  Status Enum(std::string_view key, const std::map<std::string, E>& values, E* out) {
    std::string s;
    const toml::node* n = t_.get(key);
    RETURN_IF_ERROR(String(key, &s));
    if (n == nullptr) return OkStatus();
    auto it = values.find(s);
    if (it == values.end()) {
      std::string allowed;
      for (const auto& [k, v] : values) allowed += (allowed.empty() ? "" : ", ") + k;
      return Error(*n, key, "must be one of " + allowed + ", got '" + s + "'");
    }
    *out = it->second;
    return OkStatus();
  }

  Status Bool(std::string_view key, bool* out) {
    const toml::node* n = Get(key);
    if (n == nullptr) return OkStatus();
    if (!n->is_boolean()) return Error(*n, key, "must be true or false");
    *out = n->as_boolean()->get();
    return OkStatus();
  }

  Status StringArray(std::string_view key, std::vector<std::string>* out) {
    const toml::node* n = Get(key);
    if (n == nullptr) return OkStatus();
    const toml::array* a = n->as_array();
    if (a == nullptr) return Error(*n, key, "must be an array of strings");
    out->clear();
    for (const toml::node& e : *a) {
      if (!e.is_string()) return Error(e, key, "must be an array of strings");
      out->push_back(e.as_string()->get());
    }
    return OkStatus();
  }

  // Every key of the table must have been asked for.
  Status Finish() const {
    for (const auto& [k, v] : t_) {
      if (used_.count(std::string(k.str())) == 0) {
        return InvalidInput(At(v) + ": unknown key '" + Name(k.str()) + "'");
      }
    }
    return OkStatus();
  }

  Status Missing(std::string_view key) const {
    const auto line = t_.source().begin.line;
    return InvalidInput(source_ + ":" + std::to_string(line) + ": missing required key '" + Name(key) + "'");
  }

  const toml::table& table() const { return t_; }

 private:
  const toml::table& t_;
  std::string where_;
  const std::string& source_;
  std::set<std::string> used_;
};

// A sub-table, or null when absent; an error when present with another type.
Result<const toml::table*> SubTable(Table& parent, std::string_view key) {
  const toml::node* n = parent.Get(key);
  if (n == nullptr) return static_cast<const toml::table*>(nullptr);
  if (!n->is_table()) return parent.Error(*n, key, "must be a table ([" + std::string(key) + "])");
  return n->as_table();
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  std::filesystem::path path(p);
  if (path.is_absolute() || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

Status ParseDataset(const toml::table& t, const std::string& source, const std::string& base_dir, size_t i,
                    DatasetSpec* d, std::map<std::string, std::string>* key_at) {
  Table tab(t, "datasets[" + std::to_string(i) + "]", source);
  RETURN_IF_ERROR(tab.String("id", &d->id, true));
  if (Status s = crypto::ValidateObjectId(d->id); !s.ok()) {
    return InvalidInput(tab.At(*t.get("id")) + ": 'datasets[" + std::to_string(i) + "].id': " + s.message());
  }
  RETURN_IF_ERROR(tab.String("path", &d->path, true));
  if (d->path.empty()) return tab.Error(*t.get("path"), "path", "must not be empty");
  d->path = Resolve(base_dir, d->path);
  key_at->emplace(tab.Name("path"), tab.At(*t.get("path")));
  RETURN_IF_ERROR(tab.Enum<DatasetFormat>("format", {{"sealed", DatasetFormat::kSealed}, {"csv", DatasetFormat::kCsv}},
                                          &d->format));
  const bool csv = d->format == DatasetFormat::kCsv;
  for (const char* key : {"label", "positive", "classes", "task"}) {
    const toml::node* n = t.get(key);
    if (n != nullptr && !csv) return tab.Error(*n, key, "is only for format = \"csv\" (a sealed file carries its schema)");
  }
  if (csv) {
    RETURN_IF_ERROR(tab.String("label", &d->label, true));
    if (d->label.empty()) return tab.Error(*t.get("label"), "label", "must name a column");
    std::string positive;
    const toml::node* pos = t.get("positive");
    RETURN_IF_ERROR(tab.String("positive", &positive));
    if (pos != nullptr) d->positive = positive;
    RETURN_IF_ERROR(tab.StringArray("classes", &d->classes));
    if (pos != nullptr && !d->classes.empty()) {
      return tab.Error(*pos, "positive", "and 'classes' exclude each other");
    }
    RETURN_IF_ERROR(tab.Enum<dataset::Task>(
        "task", {{"classification", dataset::Task::kClassification}, {"regression", dataset::Task::kRegression}},
        &d->task));
    if (const toml::node* n = t.get("task"); n != nullptr && d->task == dataset::Task::kRegression &&
                                            (pos != nullptr || !d->classes.empty())) {
      return tab.Error(*n, "task", "regression takes no 'positive' or 'classes' (a regression label has no classes)");
    }
  }
  return tab.Finish();
}

}  // namespace

std::string JobPathAt(const JobSpec& job, const std::string& key) {
  auto it = job.key_at.find(key);
  return it == job.key_at.end() ? key : it->second + ": " + key;
}

Status CheckInputFile(const std::string& where, const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  const std::string at = where + ": " + path + ": ";
  if (st.type() == std::filesystem::file_type::not_found) return NotFound(at + "no such file");
  if (ec == std::errc::permission_denied) return PermissionDenied(at + "permission denied");
  if (ec) return IoError(at + ec.message());
  if (st.type() == std::filesystem::file_type::directory) return InvalidInput(at + "is a directory, not a file");
  if (st.type() != std::filesystem::file_type::regular) return InvalidInput(at + "not a regular file");
  return OkStatus();
}

Status CheckJobPaths(const JobSpec& job) {
  for (size_t i = 0; i < job.datasets.size(); ++i) {
    RETURN_IF_ERROR(CheckInputFile(JobPathAt(job, "datasets[" + std::to_string(i) + "].path"), job.datasets[i].path));
  }
  return OkStatus();
}

const char* DeviceName(Device d) {
  switch (d) {
    case Device::kCpu: return "cpu";
    case Device::kGpu: return "gpu";
    default: return "auto";
  }
}

const char* ActivationName(Activation a) {
  switch (a) {
    case kernels::kActRelu: return "relu";
    case kernels::kActTanh: return "tanh";
    case kernels::kActSigmoid: return "sigmoid";
    default: return "identity";
  }
}

const char* ScheduleName(int kind) {
  switch (kind) {
    case kernels::kLrStep: return "step";
    case kernels::kLrCosine: return "cosine";
    default: return "constant";
  }
}

namespace {

// toml++ bounds the nesting of arrays and inline tables, but not the parts of a dotted key
// or table header (`a.a.a… = 1`, `[a.a.a…]`): 100 000 of them overflow its recursive walk.
// So before parsing, outside strings and comments (docs/formats/job.md, "Limits"): at most
// kMaxKeyParts parts in any dotted chain, at most kMaxBrackets arrays, inline tables and
// header brackets open at once.
constexpr int kMaxKeyParts = 32;
constexpr int kMaxBrackets = 32;

Status CheckNesting(std::string_view text, const std::string& source) {
  uint64_t line = 1;
  int parts = 0, brackets = 0;
  bool after_part = false, after_dot = false;
  auto where = [&] { return source + ":" + std::to_string(line) + ": "; };
  auto part = [&]() -> Status {
    parts = after_dot ? parts + 1 : 1;
    after_part = true;
    after_dot = false;
    if (parts > kMaxKeyParts) {
      return InvalidInput(where() + "a dotted key or table header has more than " + std::to_string(kMaxKeyParts) +
                          " parts");
    }
    return OkStatus();
  };
  auto bare = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  size_t i = 0;
  const size_t n = text.size();
  // Skips the string that starts at i, counting its newlines. An unterminated one ends the
  // scan; toml++ reports it.
  auto skip_string = [&]() {
    const char q = text[i];
    const std::string_view triple = q == '"' ? std::string_view("\"\"\"") : std::string_view("'''");
    const bool multi = text.substr(i, 3) == triple;
    i += multi ? 3 : 1;
    while (i < n) {
      const char c = text[i];
      if (c == '\\' && q == '"') {
        if (i + 1 < n && text[i + 1] == '\n') ++line;
        i += 2;
        continue;
      }
      if (c == '\n') {
        ++line;
        if (!multi) return;
      }
      if (c == q && (!multi || text.substr(i, 3) == triple)) {
        i += multi ? 3 : 1;
        while (multi && i < n && text[i] == q) ++i;  // up to two more quotes end the content
        return;
      }
      ++i;
    }
  };
  while (i < n) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      RETURN_IF_ERROR(part());
      skip_string();
      continue;
    }
    if (bare(c)) {
      RETURN_IF_ERROR(part());
      while (i < n && bare(text[i])) ++i;
      continue;
    }
    if (c == '.' && after_part) {
      after_part = false;
      after_dot = true;
    } else if (c != ' ' && c != '\t') {  // spaces and tabs may surround the dots of a key
      parts = 0;
      after_part = after_dot = false;
      if (c == '#') {
        while (i < n && text[i] != '\n') ++i;
        continue;
      }
      if (c == '\n') ++line;
      if (c == '[' || c == '{') {
        if (++brackets > kMaxBrackets) {
          return InvalidInput(where() + "arrays, inline tables and table headers nested more than " +
                              std::to_string(kMaxBrackets) + " deep");
        }
      } else if ((c == ']' || c == '}') && brackets > 0) {
        --brackets;
      }
    }
    ++i;
  }
  return OkStatus();
}

// [trees]: the XGBoost parameters of `[model] family = "xgboost"` (trees.h has the ranges).
Status ParseTrees(const toml::table& tab, const std::string& source, TreeSpec* s) {
  Table t(tab, "trees", source);
  RETURN_IF_ERROR(t.UInt("rounds", 1, kMaxTreeRounds, &s->rounds));
  RETURN_IF_ERROR(t.UInt("max_depth", 1, kMaxTreeDepth, &s->max_depth));
  RETURN_IF_ERROR(t.Number("eta", 0.0, 1.0, true, false, &s->eta));
  RETURN_IF_ERROR(t.Number("min_child_weight", 0.0, kMaxTreePenalty, false, false, &s->min_child_weight));
  RETURN_IF_ERROR(t.Number("subsample", 0.0, 1.0, true, false, &s->subsample));
  RETURN_IF_ERROR(t.Number("colsample_bytree", 0.0, 1.0, true, false, &s->colsample_bytree));
  RETURN_IF_ERROR(t.Number("lambda", 0.0, kMaxTreePenalty, false, false, &s->lambda));
  RETURN_IF_ERROR(t.Number("alpha", 0.0, kMaxTreePenalty, false, false, &s->alpha));
  RETURN_IF_ERROR(t.Number("gamma", 0.0, kMaxTreePenalty, false, false, &s->gamma));
  RETURN_IF_ERROR(t.UInt("max_bin", 2, kMaxTreeBins, &s->max_bin));
  RETURN_IF_ERROR(t.UInt("threads", 0, kMaxTreeThreads, &s->threads));
  RETURN_IF_ERROR(t.UInt("early_stopping_rounds", 0, kMaxTreeRounds, &s->early_stopping_rounds));
  return t.Finish();
}

// [training] class_weight = "balanced" | { CLASS = WEIGHT, ... } and sample_weight_column.
// The class names are checked against the data's classes when it is read (weights.h).
Status ParseWeights(Table& t, const toml::table& training, WeightSpec* w) {
  if (const toml::node* n = t.Get("class_weight")) {
    if (n->is_string()) {
      if (n->as_string()->get() != "balanced") {
        return t.Error(*n, "class_weight", "must be \"balanced\" or a table of class = weight, got '" +
                                               n->as_string()->get() + "'");
      }
      w->rule = ClassWeightRule::kBalanced;
    } else if (const toml::table* given = n->as_table()) {
      if (given->empty()) return t.Error(*n, "class_weight", "must name at least one class");
      for (const auto& [name, value] : *given) {
        const std::string cls(name.str());
        double v = 0;
        if (value.is_floating_point()) {
          v = value.as_floating_point()->get();
        } else if (value.is_integer()) {
          v = static_cast<double>(value.as_integer()->get());
        } else {
          return t.Error(value, "class_weight", "'" + cls + "' must be a number");
        }
        if (!std::isfinite(v) || !(v > 0) || v > kMaxClassWeight) {
          std::ostringstream got;
          got << v;
          return t.Error(value, "class_weight", "'" + cls + "' must be in (0, 1e6], got " + got.str());
        }
        w->given.emplace_back(cls, v);
      }
      w->rule = ClassWeightRule::kGiven;
    } else {
      return t.Error(*n, "class_weight", "must be \"balanced\" or a table of class = weight");
    }
  }
  RETURN_IF_ERROR(t.String("sample_weight_column", &w->column));
  if (const toml::node* n = training.get("sample_weight_column"); n != nullptr && w->column.empty()) {
    return t.Error(*n, "sample_weight_column", "must name a column");
  }
  return OkStatus();
}

// What applies to one model family only is refused with the other, never ignored: the
// network's tables and keys with xgboost, [trees] with mlp.
Status CheckModelFamily(const toml::table& root, const JobSpec& job, const std::string& source) {
  auto at = [&](const toml::node& n) { return source + ":" + std::to_string(n.source().begin.line) + ": "; };
  if (job.family == ModelFamily::kMlp) {
    if (const toml::node* n = root.get("trees")) {
      return InvalidInput(at(*n) + "'trees' applies only to [model] family = \"xgboost\"");
    }
    return OkStatus();
  }
  const std::string why = " does not apply to [model] family = \"xgboost\"";
  if (const toml::table* m = root.get_as<toml::table>("model")) {
    for (const char* key : {"hidden", "activation"}) {
      if (const toml::node* n = m->get(key)) return InvalidInput(at(*n) + "'model." + key + "'" + why);
    }
  }
  // The rounds are trees.rounds; the trees see all training rows at once, in memory.
  if (const toml::table* tr = root.get_as<toml::table>("training")) {
    for (const char* key : {"epochs", "batch_size", "early_stopping_patience"}) {
      if (const toml::node* n = tr->get(key)) {
        return InvalidInput(at(*n) + "'training." + key + "'" + why + (std::string_view(key) == "epochs"
                                                                            ? " (the rounds are 'trees.rounds')"
                                                                            : ""));
      }
    }
  }
  for (const char* key : {"optimizer", "schedule", "streaming", "checkpoint"}) {
    if (const toml::node* n = root.get(key)) return InvalidInput(at(*n) + "'" + key + "'" + why);
  }
  // Debian's XGBoost is built without CUDA.
  if (job.device == Device::kGpu) {
    return InvalidInput(at(*root.get("device")) + "'device' = \"gpu\"" + why + " (XGBoost runs on the CPU)");
  }
  if (job.trees.early_stopping_rounds > 0 && job.validation_fraction == 0) {
    const toml::node* n = root["trees"]["early_stopping_rounds"].node();
    return InvalidInput((n != nullptr ? at(*n) : source + ": ") +
                        "'trees.early_stopping_rounds' needs validation rows ('training.validation_fraction' > 0)");
  }
  return OkStatus();
}

}  // namespace

const char* ModelFamilyName(ModelFamily f) { return f == ModelFamily::kXgboost ? "xgboost" : "mlp"; }

Result<JobSpec> ParseJob(std::string_view text, const std::string& source, const std::string& base_dir) {
  RETURN_IF_ERROR(CheckNesting(text, source));
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidInput(source + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  return internal::ParseJobTable(root, text, source, base_dir);
}

Result<JobSpec> internal::ParseJobTable(const toml::table& root, std::string_view text, const std::string& source,
                                        const std::string& base_dir) {
  JobSpec job;
  job.digest = crypto::Sha256({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  Table top(root, "", source);
  RETURN_IF_ERROR(top.String("name", &job.name));
  int64_t seed = 0;
  RETURN_IF_ERROR(top.Int("seed", 0, INT64_MAX, &seed));
  job.seed = static_cast<uint64_t>(seed);
  RETURN_IF_ERROR(top.Enum<Device>("device", {{"cpu", Device::kCpu}, {"gpu", Device::kGpu}, {"auto", Device::kAuto}},
                                   &job.device));
  RETURN_IF_ERROR(top.String("output_dir", &job.output_dir, true));
  if (job.output_dir.empty()) return top.Error(*root.get("output_dir"), "output_dir", "must not be empty");
  job.output_dir = Resolve(base_dir, job.output_dir);
  job.key_at.emplace("output_dir", top.At(*root.get("output_dir")));
  RETURN_IF_ERROR(top.String("export_key", &job.export_key));
  if (const toml::node* n = root.get("export_key"); n != nullptr && job.export_key.empty()) {
    return top.Error(*n, "export_key", "must not be empty");
  }
  if (!job.export_key.empty()) {
    job.export_key = Resolve(base_dir, job.export_key);
    job.key_at.emplace("export_key", top.At(*root.get("export_key")));
  }

  // [[datasets]]
  const toml::node* ds = top.Get("datasets");
  if (ds == nullptr) return top.Missing("datasets");
  const toml::array* arr = ds->as_array();
  if (arr == nullptr || arr->empty() || !arr->is_array_of_tables()) {
    return top.Error(*ds, "datasets", "must be one or more [[datasets]] tables");
  }
  if (arr->size() > 64) return top.Error(*ds, "datasets", "may list at most 64 datasets");
  std::set<std::string> ids;
  for (size_t i = 0; i < arr->size(); ++i) {
    DatasetSpec d;
    RETURN_IF_ERROR(ParseDataset(*arr->get(i)->as_table(), source, base_dir, i, &d, &job.key_at));
    if (!ids.insert(d.id).second) {
      return InvalidInput(source + ":" + std::to_string(arr->get(i)->source().begin.line) + ": dataset id '" + d.id +
                          "' listed twice");
    }
    job.datasets.push_back(std::move(d));
  }

  // [broker]
  job.broker.job_id = "job-" + HexEncode(ByteSpan(job.digest.data(), 8));
  ASSIGN_OR_RETURN(const toml::table* broker, SubTable(top, "broker"));
  if (broker != nullptr) {
    Table t(*broker, "broker", source);
    RETURN_IF_ERROR(t.String("url", &job.broker.url, true));
    if (!job.broker.url.starts_with("https://") || job.broker.url.size() <= 8)
      return t.Error(*broker->get("url"), "url", "must be https://HOST:PORT");
    RETURN_IF_ERROR(t.String("ca", &job.broker.ca, true));
    if (job.broker.ca.empty()) return t.Error(*broker->get("ca"), "ca", "must not be empty");
    job.broker.ca = Resolve(base_dir, job.broker.ca);
    job.key_at.emplace("broker.ca", t.At(*broker->get("ca")));
    RETURN_IF_ERROR(t.String("policy", &job.broker.policy, true));
    if (Status st = crypto::ValidateObjectId(job.broker.policy); !st.ok())
      return t.Error(*broker->get("policy"), "policy", st.message());
    RETURN_IF_ERROR(t.String("requester", &job.broker.requester, true));
    if (job.broker.requester.empty() || job.broker.requester.size() > 256)
      return t.Error(*broker->get("requester"), "requester", "must be 1..256 bytes");
    for (char c : job.broker.requester) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return t.Error(*broker->get("requester"), "requester", "must not contain control characters");
    }
    if (const toml::node* n = broker->get("job_id"); n != nullptr) {
      RETURN_IF_ERROR(t.String("job_id", &job.broker.job_id));
      if (Status st = crypto::ValidateObjectId(job.broker.job_id); !st.ok()) return t.Error(*n, "job_id", st.message());
    }
    if (const toml::node* n = broker->get("witness_policy"); n != nullptr) {
      RETURN_IF_ERROR(t.String("witness_policy", &job.broker.witness_policy));
      if (job.broker.witness_policy.empty()) return t.Error(*n, "witness_policy", "must not be empty");
      job.broker.witness_policy = Resolve(base_dir, job.broker.witness_policy);
      job.key_at.emplace("broker.witness_policy", t.At(*n));
    }
    RETURN_IF_ERROR(t.Finish());
  }

  // [model]
  ASSIGN_OR_RETURN(const toml::table* model, SubTable(top, "model"));
  if (model != nullptr) {
    Table t(*model, "model", source);
    RETURN_IF_ERROR(t.Enum<ModelFamily>("family", {{"mlp", ModelFamily::kMlp}, {"xgboost", ModelFamily::kXgboost}},
                                        &job.family));
    const toml::node* hidden = t.Get("hidden");
    if (hidden != nullptr) {
      const toml::array* h = hidden->as_array();
      if (h == nullptr) return t.Error(*hidden, "hidden", "must be an array of layer sizes");
      if (h->size() > 16) return t.Error(*hidden, "hidden", "may have at most 16 layers");
      for (const toml::node& e : *h) {
        if (!e.is_integer() || e.as_integer()->get() < 1 || e.as_integer()->get() > 65536) {
          return t.Error(e, "hidden", "layer sizes must be integers in 1..65536");
        }
        job.model.hidden.push_back(static_cast<uint32_t>(e.as_integer()->get()));
      }
    }
    RETURN_IF_ERROR(t.Enum<Activation>(
        "activation", {{"relu", kernels::kActRelu}, {"tanh", kernels::kActTanh}, {"sigmoid", kernels::kActSigmoid}},
        &job.model.activation));
    RETURN_IF_ERROR(t.Finish());
  }

  // [training]
  ASSIGN_OR_RETURN(const toml::table* training, SubTable(top, "training"));
  if (training != nullptr) {
    Table t(*training, "training", source);
    RETURN_IF_ERROR(t.UInt("epochs", 1, 1000000, &job.epochs));
    RETURN_IF_ERROR(t.UInt("batch_size", 1, 1 << 20, &job.batch_size));
    RETURN_IF_ERROR(t.Number("validation_fraction", 0.0, 0.9, false, false, &job.validation_fraction));
    RETURN_IF_ERROR(t.UInt("early_stopping_patience", 0, 1000000, &job.early_stopping_patience));
    if (const toml::node* n = t.Get("early_stopping_patience"); n != nullptr && job.early_stopping_patience > 0) {
      if (job.validation_fraction == 0) {
        return t.Error(*n, "early_stopping_patience", "needs validation rows ('training.validation_fraction' > 0)");
      }
      if (root.get("checkpoint") != nullptr) {
        return t.Error(*n, "early_stopping_patience", "and [checkpoint] do not go together yet (checkpoints do not keep the best epoch)");
      }
    }
    RETURN_IF_ERROR(ParseWeights(t, *training, &job.weights));
    const toml::node* mn = training->get("metrics");
    std::vector<std::string> metrics;
    RETURN_IF_ERROR(t.StringArray("metrics", &metrics));
    if (mn != nullptr) {
      job.key_at.emplace("training.metrics", t.At(*mn));
      job.metrics = 0;
      const std::map<std::string, Metric> known = {{"loss", kMetricLoss}, {"accuracy", kMetricAccuracy},
                                                   {"roc_auc", kMetricRocAuc}, {"rmse", kMetricRmse},
                                                   {"mae", kMetricMae}, {"r2", kMetricR2}};
      for (const std::string& m : metrics) {
        auto it = known.find(m);
        if (it == known.end()) {
          return t.Error(*mn, "metrics", "has unknown metric '" + m + "' (loss, accuracy, roc_auc, rmse, mae, r2)");
        }
        job.metrics |= it->second;
      }
      if (job.metrics == 0) return t.Error(*mn, "metrics", "must name at least one metric");
    }
    RETURN_IF_ERROR(t.Finish());
  }

  // [optimizer]
  ASSIGN_OR_RETURN(const toml::table* opt, SubTable(top, "optimizer"));
  if (opt != nullptr) {
    Table t(*opt, "optimizer", source);
    OptimizerSpec& o = job.optimizer;
    RETURN_IF_ERROR(t.Enum<OptimizerKind>("type", {{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}},
                                          &o.kind));
    RETURN_IF_ERROR(t.Float("lr", 0.0, 10.0, true, false, &o.lr));
    RETURN_IF_ERROR(t.Float("weight_decay", 0.0, 1.0, false, false, &o.weight_decay));
    RETURN_IF_ERROR(t.Float("l2", 0.0, 100.0, false, false, &o.l2));
    const bool sgd = o.kind == OptimizerKind::kSgd;
    for (const char* key : sgd ? std::vector<const char*>{"beta1", "beta2", "eps"} : std::vector<const char*>{"momentum"}) {
      if (const toml::node* n = opt->get(key)) {
        return t.Error(*n, key, std::string("does not apply to optimizer type '") + (sgd ? "sgd" : "adamw") + "'");
      }
    }
    RETURN_IF_ERROR(t.Float("momentum", 0.0, 1.0, false, true, &o.momentum));
    RETURN_IF_ERROR(t.Float("beta1", 0.0, 1.0, false, true, &o.beta1));
    RETURN_IF_ERROR(t.Float("beta2", 0.0, 1.0, false, true, &o.beta2));
    RETURN_IF_ERROR(t.Float("eps", 0.0, 1.0, true, false, &o.eps));
    RETURN_IF_ERROR(t.Finish());
  }

  // [schedule]
  ASSIGN_OR_RETURN(const toml::table* sched, SubTable(top, "schedule"));
  if (sched != nullptr) {
    Table t(*sched, "schedule", source);
    ScheduleSpec& s = job.schedule;
    RETURN_IF_ERROR(t.Enum<int>("type",
                                {{"constant", kernels::kLrConstant}, {"step", kernels::kLrStep},
                                 {"cosine", kernels::kLrCosine}},
                                &s.kind));
    RETURN_IF_ERROR(t.UInt("warmup_epochs", 0, 1000000, &s.warmup_epochs));
    const bool step = s.kind == kernels::kLrStep, cosine = s.kind == kernels::kLrCosine;
    for (const char* key : {"step_epochs", "gamma", "min_lr"}) {
      const bool applies = std::string_view(key) == "min_lr" ? cosine : step;
      if (const toml::node* n = sched->get(key); n != nullptr && !applies) {
        return t.Error(*n, key, std::string("does not apply to schedule type '") + ScheduleName(s.kind) + "'");
      }
    }
    RETURN_IF_ERROR(t.UInt("step_epochs", 1, 1000000, &s.step_epochs));
    RETURN_IF_ERROR(t.Float("gamma", 0.0, 1.0, true, false, &s.gamma));
    RETURN_IF_ERROR(t.Float("min_lr", 0.0, 10.0, false, false, &s.min_lr));
    RETURN_IF_ERROR(t.Finish());
  }
  // [checkpoint]
  ASSIGN_OR_RETURN(const toml::table* ckpt, SubTable(top, "checkpoint"));
  if (ckpt != nullptr) {
    Table t(*ckpt, "checkpoint", source);
    RETURN_IF_ERROR(t.UInt("every_steps", 1, int64_t{1} << 40, &job.checkpoint.every_steps, true));
    RETURN_IF_ERROR(t.UInt("keep", 1, 1000, &job.checkpoint.keep));
    RETURN_IF_ERROR(t.Finish());
  }
  // [streaming]
  ASSIGN_OR_RETURN(const toml::table* stream, SubTable(top, "streaming"));
  if (stream != nullptr) {
    Table t(*stream, "streaming", source);
    job.streaming.enabled = true;
    RETURN_IF_ERROR(t.UInt("block_rows", 1, int64_t{1} << 24, &job.streaming.block_rows));
    RETURN_IF_ERROR(t.UInt("window_blocks", 1, 65536, &job.streaming.window_blocks));
    RETURN_IF_ERROR(t.Finish());
    // A batch then spans at most two windows, so two resident windows always suffice.
    if (uint64_t{job.streaming.block_rows} * job.streaming.window_blocks < job.batch_size) {
      return InvalidInput(source + ": 'streaming.block_rows' x 'streaming.window_blocks' (" +
                          std::to_string(uint64_t{job.streaming.block_rows} * job.streaming.window_blocks) +
                          " rows) must be at least 'training.batch_size' (" + std::to_string(job.batch_size) + ")");
    }
  }
  if (job.streaming.enabled && job.weights.any()) {
    const char* key = job.weights.column.empty() ? "class_weight" : "sample_weight_column";
    const toml::node* n = root["training"][key].node();
    return InvalidInput(source + ":" + std::to_string(n->source().begin.line) + ": 'training." + key +
                        "' and [streaming] do not go together yet (weights train on loaded data)");
  }
  // [preprocess]
  ASSIGN_OR_RETURN(const toml::table* prep, SubTable(top, "preprocess"));
  if (prep != nullptr) {
    Table t(*prep, "preprocess", source);
    RETURN_IF_ERROR(t.Enum<Impute>(
        "impute", {{"median", Impute::kMedian}, {"mean", Impute::kMean}, {"most_frequent", Impute::kMostFrequent}},
        &job.preprocess.impute));
    RETURN_IF_ERROR(t.Bool("indicators", &job.preprocess.indicators));
    RETURN_IF_ERROR(t.Finish());
  }
  // [evaluation]
  ASSIGN_OR_RETURN(const toml::table* eval, SubTable(top, "evaluation"));
  if (eval != nullptr) {
    Table t(*eval, "evaluation", source);
    const toml::node* th = t.Get("threshold");
    const toml::node* sens = t.Get("target_sensitivity");
    if (th != nullptr && sens != nullptr) return t.Error(*sens, "target_sensitivity", "and 'threshold' exclude each other");
    if (th != nullptr) job.key_at.emplace("evaluation.threshold", t.At(*th));
    if (sens != nullptr) job.key_at.emplace("evaluation.target_sensitivity", t.At(*sens));
    if (th != nullptr && th->is_string()) {
      if (th->as_string()->get() != "youden") {
        return t.Error(*th, "threshold", "must be a number in [0, 1] or \"youden\", got '" + th->as_string()->get() + "'");
      }
      job.evaluation.rule = ThresholdRule::kYouden;
    } else {
      RETURN_IF_ERROR(t.Number("threshold", 0, 1, false, false, &job.evaluation.threshold));
    }
    if (sens != nullptr) {
      job.evaluation.rule = ThresholdRule::kTargetSensitivity;
      RETURN_IF_ERROR(t.Number("target_sensitivity", 0, 1, true, false, &job.evaluation.target_sensitivity));
    }
    RETURN_IF_ERROR(t.UInt("bootstrap_resamples", 0, 100000, &job.evaluation.bootstrap_resamples));
    RETURN_IF_ERROR(t.UInt("calibration_bins", 2, 100, &job.evaluation.calibration_bins));
    RETURN_IF_ERROR(t.UInt("permutation_repeats", 0, 1000, &job.evaluation.permutation_repeats));
    RETURN_IF_ERROR(t.Bool("coefficients", &job.evaluation.coefficients));
    RETURN_IF_ERROR(t.Bool("board_metrics", &job.evaluation.board_metrics));
    RETURN_IF_ERROR(t.Bool("curves", &job.evaluation.curves));
    RETURN_IF_ERROR(t.Bool("importance", &job.evaluation.importance));
    RETURN_IF_ERROR(t.Finish());
  }
  if (job.schedule.kind == kernels::kLrCosine && job.schedule.min_lr > job.optimizer.lr) {
    return InvalidInput(source + ": 'schedule.min_lr' is above 'optimizer.lr'");
  }
  if (job.schedule.warmup_epochs >= job.epochs && job.schedule.warmup_epochs > 0) {
    return InvalidInput(source + ": 'schedule.warmup_epochs' must be below 'training.epochs'");
  }
  // [trees]
  ASSIGN_OR_RETURN(const toml::table* trees, SubTable(top, "trees"));
  if (trees != nullptr) RETURN_IF_ERROR(ParseTrees(*trees, source, &job.trees));
  RETURN_IF_ERROR(CheckModelFamily(root, job, source));
  // The trees' rounds play the epochs' part in every output (progress, JSON lines, plot).
  if (job.family == ModelFamily::kXgboost) job.epochs = job.trees.rounds;
  const toml::node* tune = top.Get("tune");
  RETURN_IF_ERROR(top.Finish());
  // [tune] last: each of its candidates is checked in this (otherwise valid) job (tune.cc).
  if (tune != nullptr) {
    if (!tune->is_table()) return top.Error(*tune, "tune", "must be a table ([tune])");
    RETURN_IF_ERROR(internal::ParseTuneTable(root, text, source, base_dir, &job));
  }
  return job;
}

Result<JobSpec> LoadJob(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxJobBytes));
  const std::string base = std::filesystem::path(path).parent_path().string();
  return ParseJob(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path, base);
}

}  // namespace enclave::trainer
