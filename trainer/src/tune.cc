#include "enclave/trainer/tune.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "enclave/common/files.h"
#include "enclave/trainer/metrics_report.h"
#include "enclave/trainer/rng.h"
#include "job_internal.h"

namespace enclave::trainer {
namespace {

using nlohmann::json;

std::string At(const std::string& source, const toml::node& n) {
  return source + ":" + std::to_string(n.source().begin.line);
}

// Whether a job key may be a [tune] parameter. Tunable: what changes the model a fold
// trains (its shape, optimizer, schedule, preprocessing, the trees' parameters). Not: what
// decides the data or the folds (loaded once, the same folds for every configuration), where
// things go, and how a model is judged. Returns null when tunable; else why not, or "" for
// a key that is no job key at all.
const char* WhyNotTunable(std::string_view key) {
  static const std::set<std::string_view> kTunable = {
      "model.hidden", "model.activation",
      "training.epochs", "training.batch_size", "training.early_stopping_patience", "training.class_weight",
      "optimizer.type", "optimizer.lr", "optimizer.weight_decay", "optimizer.l2", "optimizer.momentum",
      "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
      "schedule.type", "schedule.warmup_epochs", "schedule.step_epochs", "schedule.gamma", "schedule.min_lr",
      "preprocess.impute", "preprocess.indicators",
      "trees.rounds", "trees.max_depth", "trees.eta", "trees.min_child_weight", "trees.subsample",
      "trees.colsample_bytree", "trees.lambda", "trees.alpha", "trees.gamma", "trees.max_bin",
      "trees.early_stopping_rounds"};
  static const std::map<std::string_view, const char*> kFixed = {
      {"name", "it names the job"},
      {"seed", "it decides the folds: every configuration is cross-validated on the same folds"},
      {"device", "the data are loaded once, on one backend"},
      {"output_dir", "it is where the results go"},
      {"export_key", "tune exports no model"},
      {"model.family", "a search is over one model family (their keys differ): search each family in a job of its own"},
      {"training.validation_fraction", "cross-validation ignores it: each fold is held out in turn"},
      {"training.metrics", "it says what is shown, not what is trained"},
      {"training.sample_weight_column", "the data are loaded once (the weight column leaves the features then)"},
      {"trees.threads", "it does not change the model"}};
  static const std::map<std::string_view, const char*> kFixedTables = {
      {"datasets", "the data are loaded once"},
      {"broker", "it says where the keys come from"},
      {"checkpoint", "tune writes no checkpoints"},
      {"streaming", "tune loads the data once"},
      {"evaluation", "it says how a model is judged, not how it is trained (tune compares by [tune] metric)"},
      {"tune", "it is the search itself"}};
  if (kTunable.count(key) != 0) return nullptr;
  if (auto it = kFixed.find(key); it != kFixed.end()) return it->second;
  const size_t dot = key.find('.');
  if (auto it = kFixedTables.find(key.substr(0, dot)); it != kFixedTables.end()) return it->second;
  return "";
}

json TomlToJson(const toml::node& n) {
  if (const auto* v = n.as_integer()) return v->get();
  if (const auto* v = n.as_floating_point()) return v->get();
  if (const auto* v = n.as_string()) return v->get();
  if (const auto* v = n.as_boolean()) return v->get();
  if (const auto* a = n.as_array()) {
    json j = json::array();
    for (const toml::node& e : *a) j.push_back(TomlToJson(e));
    return j;
  }
  if (const auto* t = n.as_table()) {
    json j = json::object();
    for (const auto& [k, v] : *t) j[std::string(k.str())] = TomlToJson(v);
    return j;
  }
  return nullptr;  // dates and times: no job key takes one, and the job parser refuses them
}

// One [tune.parameters] entry: the job key and its candidate list in the table.
struct ParamNode {
  std::string key;
  const toml::array* values;
};

// The entries of [tune.parameters] in the order written: a quoted key ("optimizer.lr" =
// [...]) or a dotted one (optimizer.lr = [...], a sub-table), each an array.
Status CollectParams(const toml::table& t, const std::string& prefix, const std::string& source,
                     std::vector<ParamNode>* out) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      RETURN_IF_ERROR(CollectParams(*sub, key + ".", source, out));
    } else if (const toml::array* a = v.as_array()) {
      out->push_back({key, a});
    } else {
      return InvalidInput(At(source, v) + ": 'tune.parameters' \"" + key + "\" must be an array of candidate values");
    }
  }
  return OkStatus();
}

Result<std::vector<ParamNode>> SortedParams(const toml::table& params, const std::string& source) {
  std::vector<ParamNode> out;
  RETURN_IF_ERROR(CollectParams(params, "", source, &out));
  std::stable_sort(out.begin(), out.end(), [](const ParamNode& a, const ParamNode& b) {
    const auto pa = a.values->source().begin, pb = b.values->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return out;
}

constexpr uint32_t kKeep = std::numeric_limits<uint32_t>::max();

// The job `text` with, for each parameter whose pick is not kKeep, that candidate moved into
// its table (a moved node keeps its source line), and [tune] removed; parsed as a job.
Result<JobSpec> SubstitutedJob(std::string_view text, const std::string& source, const std::string& base_dir,
                               const std::vector<uint32_t>& picks) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Internal(source + ": the job no longer parses as TOML");  // it did a moment ago
  }
  const toml::table* params = root["tune"]["parameters"].as_table();
  if (params == nullptr) return Internal("SubstitutedJob: no [tune.parameters]");
  ASSIGN_OR_RETURN(std::vector<ParamNode> nodes, SortedParams(*params, source));
  std::string made_at;
  if (nodes.size() != picks.size()) return Internal("SubstitutedJob: picks do not match the parameters");
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (picks[p] == kKeep) continue;
    const std::string& key = nodes[p].key;
    const size_t dot = key.find('.');
    const std::string table = key.substr(0, dot), name = key.substr(dot + 1);
    toml::table* into = root.get_as<toml::table>(table);
    if (into == nullptr) {  // a table the job does not have: made for the candidate (it has no line)
      if (made_at.empty()) made_at = At(source, *nodes[p].values->get(picks[p]));
      into = root.insert_or_assign(table, toml::table{}).first->second.as_table();
    }
    // Our own freshly parsed tree: the candidate is moved out of [tune], which is dropped.
    toml::node& cand = *const_cast<toml::array*>(nodes[p].values)->get(picks[p]);
    cand.visit([&](auto& v) { into->insert_or_assign(name, std::move(v)); });
  }
  root.erase("tune");
  Result<JobSpec> job = internal::ParseJobTable(root, text, source, base_dir);
  if (!job.ok() && !made_at.empty()) {
    // An error about a table made here names line 0: name the candidate's instead.
    std::string m = job.status().message();
    const std::string zero = source + ":0:";
    if (const size_t at = m.find(zero); at != std::string::npos) m.replace(at, zero.size(), made_at + ":");
    return Status(job.status().code(), m);
  }
  return job;
}

}  // namespace

Status internal::ParseTuneTable(const toml::table& root, std::string_view text, const std::string& source,
                                const std::string& base_dir, JobSpec* job) {
  const toml::table& tune = *root.get_as<toml::table>("tune");
  TuneSpec& spec = job->tune;
  spec = TuneSpec{};
  spec.enabled = true;
  spec.at = At(source, tune);
  spec.seed = job->seed;
  auto bad = [&](const toml::node& n, const std::string& key, const std::string& what) {
    return InvalidInput(At(source, n) + ": 'tune." + key + "' " + what);
  };
  for (const auto& [k, v] : tune) {
    static const std::set<std::string_view> kKeys = {"method", "trials", "folds", "metric", "seed", "parameters"};
    if (kKeys.count(k.str()) == 0) return InvalidInput(At(source, v) + ": unknown key 'tune." + std::string(k.str()) + "'");
  }
  if (root.get("streaming") != nullptr) {
    return InvalidInput(spec.at + ": [tune] and [streaming] do not go together: tune loads the data once and "
                        "cross-validates every configuration on it");
  }
  if (const toml::node* n = tune.get("method")) {
    const std::string m = n->value_or(std::string());
    if (m == "random") spec.method = TuneMethod::kRandom;
    else if (m != "grid") return bad(*n, "method", "must be one of grid, random" + (n->is_string() ? ", got '" + m + "'" : ""));
  }
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) -> Status {
    const toml::node* n = tune.get(key);
    if (n == nullptr) return OkStatus();
    if (!n->is_integer()) return bad(*n, key, "must be an integer");
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) {
      return bad(*n, key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
    }
    *out = v;
    return OkStatus();
  };
  int64_t v = 0;
  if (const toml::node* n = tune.get("trials")) {
    if (spec.method != TuneMethod::kRandom) return bad(*n, "trials", "applies only to method = \"random\" (a grid tries every combination)");
    RETURN_IF_ERROR(integer("trials", 1, kMaxTuneConfigurations, &v));
    spec.trials = static_cast<uint32_t>(v);
  } else if (spec.method == TuneMethod::kRandom) {
    return InvalidInput(spec.at + ": missing required key 'tune.trials' (method = \"random\")");
  }
  v = spec.folds;
  RETURN_IF_ERROR(integer("folds", 2, 100, &v));
  spec.folds = static_cast<uint32_t>(v);
  if (const toml::node* n = tune.get("seed")) {
    if (spec.method != TuneMethod::kRandom) return bad(*n, "seed", "applies only to method = \"random\" (it seeds the draws; the folds use the job's seed)");
    RETURN_IF_ERROR(integer("seed", 0, INT64_MAX, &v));
    spec.seed = static_cast<uint64_t>(v);
  }
  if (const toml::node* n = tune.get("metric")) {
    if (!n->is_string()) return bad(*n, "metric", "must be a string");
    spec.metric = n->as_string()->get();
    if (FindTuneMetric(spec.metric) == nullptr) {
      return bad(*n, "metric", "must be one of " + TuneMetricNames() + ", got '" + spec.metric + "'");
    }
  }
  const toml::node* pn = tune.get("parameters");
  if (pn == nullptr) return InvalidInput(spec.at + ": missing required key 'tune.parameters'");
  if (!pn->is_table()) return bad(*pn, "parameters", "must be a table ([tune.parameters])");
  ASSIGN_OR_RETURN(std::vector<ParamNode> nodes, SortedParams(*pn->as_table(), source));
  if (nodes.empty()) return bad(*pn, "parameters", "must name at least one job key");
  if (nodes.size() > kMaxTuneParameters) {
    return bad(*pn, "parameters", "may name at most " + std::to_string(kMaxTuneParameters) + " job keys");
  }
  spec.grid_size = 1;
  size_t candidates = 0;
  for (const ParamNode& p : nodes) {
    const std::string where = At(source, *p.values) + ": 'tune.parameters' \"" + p.key + "\"";
    if (const char* why = WhyNotTunable(p.key); why != nullptr) {
      if (*why == '\0') return InvalidInput(where + ": no such job key (a key is \"table.key\", e.g. \"optimizer.lr\")");
      return InvalidInput(where + " cannot be tuned: " + why);
    }
    if (p.values->empty()) return InvalidInput(where + " must list at least one candidate");
    candidates += p.values->size();
    if (candidates > kMaxTuneCandidates) {
      return InvalidInput(where + ": [tune.parameters] may list at most " + std::to_string(kMaxTuneCandidates) +
                          " candidates in all");
    }
    TuneParameter tp{p.key, At(source, *p.values), {}};
    std::vector<json> seen;
    for (const toml::node& c : *p.values) {
      json j = TomlToJson(c);
      if (std::find(seen.begin(), seen.end(), j) != seen.end()) {
        return InvalidInput(At(source, c) + ": 'tune.parameters' \"" + p.key + "\" lists the candidate " + j.dump() +
                            " twice");
      }
      seen.push_back(j);
      tp.candidates.push_back(j.dump());
    }
    const uint64_t n = p.values->size();
    spec.grid_size = spec.grid_size > std::numeric_limits<uint64_t>::max() / n ? std::numeric_limits<uint64_t>::max()
                                                                                 : spec.grid_size * n;
    spec.parameters.push_back(std::move(tp));
  }
  for (size_t i = 1; i < spec.parameters.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (spec.parameters[i].key == spec.parameters[j].key) {
        return InvalidInput(spec.parameters[i].at + ": 'tune.parameters' \"" + spec.parameters[i].key +
                            "\" is listed twice (also at " + spec.parameters[j].at + ")");
      }
    }
  }
  if (spec.method == TuneMethod::kGrid && spec.grid_size > kMaxTuneConfigurations) {
    return InvalidInput(spec.at + ": [tune] grid of " +
                        (spec.grid_size == std::numeric_limits<uint64_t>::max() ? std::string("over 2^64")
                                                                                : std::to_string(spec.grid_size)) +
                        " configurations: at most " + std::to_string(kMaxTuneConfigurations) +
                        " (fewer candidates, or method = \"random\" with trials)");
  }
  if (spec.method == TuneMethod::kRandom && spec.trials > spec.grid_size) {
    return bad(*tune.get("trials"), "trials", "(" + std::to_string(spec.trials) + ") exceeds the " +
                                                  std::to_string(spec.grid_size) +
                                                  " distinct configurations of the candidates (use method = \"grid\")");
  }
  // Every candidate, alone in the job as written: a value of the wrong type or range, or one
  // that does not apply to the job's model, is refused by the job's own rule, at its line.
  for (size_t p = 0; p < spec.parameters.size(); ++p) {
    for (uint32_t c = 0; c < spec.parameters[p].candidates.size(); ++c) {
      std::vector<uint32_t> picks(spec.parameters.size(), kKeep);
      picks[p] = c;
      Result<JobSpec> one = SubstitutedJob(text, source, base_dir, picks);
      if (!one.ok()) {
        return Status(one.status().code(), one.status().message() + " (candidate " + std::to_string(c + 1) + " of " +
                                               "'tune.parameters' \"" + spec.parameters[p].key + "\")");
      }
    }
  }
  return OkStatus();
}

std::vector<std::vector<uint32_t>> TunePicks(const TuneSpec& spec) {
  const size_t P = spec.parameters.size();
  std::vector<std::vector<uint32_t>> out;
  if (P == 0) return out;
  if (spec.method == TuneMethod::kGrid) {
    std::vector<uint32_t> picks(P, 0);
    for (uint64_t k = 0; k < spec.grid_size; ++k) {
      out.push_back(picks);
      for (size_t p = P; p-- > 0;) {  // odometer: the last parameter fastest
        if (++picks[p] < spec.parameters[p].candidates.size()) break;
        picks[p] = 0;
      }
    }
    return out;
  }
  Rng rng(spec.seed, kStreamTune);
  std::set<std::vector<uint32_t>> drawn;
  while (out.size() < spec.trials && drawn.size() < spec.grid_size) {
    std::vector<uint32_t> picks(P);
    for (size_t p = 0; p < P; ++p) picks[p] = static_cast<uint32_t>(rng.Below(spec.parameters[p].candidates.size()));
    if (drawn.insert(picks).second) out.push_back(std::move(picks));
  }
  return out;
}

std::string DescribeConfiguration(const TuneSpec& spec, const std::vector<uint32_t>& picks) {
  std::string s;
  for (size_t p = 0; p < spec.parameters.size() && p < picks.size(); ++p) {
    s += (p == 0 ? "" : ", ") + spec.parameters[p].key + " = " + spec.parameters[p].candidates[picks[p]];
  }
  return s;
}

Result<TunePlan> ParseTunePlan(std::string_view text, const std::string& source, const std::string& base_dir) {
  TunePlan plan;
  ASSIGN_OR_RETURN(plan.base, ParseJob(text, source, base_dir));
  const TuneSpec& spec = plan.base.tune;
  if (!spec.enabled) {
    return InvalidInput(source + ": the job has no [tune] table: tune needs one (docs/formats/job.md, [tune])");
  }
  const std::vector<std::vector<uint32_t>> all = TunePicks(spec);
  for (size_t i = 0; i < all.size(); ++i) {
    Result<JobSpec> job = SubstitutedJob(text, source, base_dir, all[i]);
    if (!job.ok()) {
      return Status(job.status().code(), spec.at + ": [tune] configuration " + std::to_string(i + 1) + " of " +
                                             std::to_string(all.size()) + " (" + DescribeConfiguration(spec, all[i]) +
                                             "): " + job.status().message());
    }
    plan.configurations.push_back({static_cast<uint32_t>(i + 1), all[i], std::move(job).value()});
  }
  return plan;
}

Result<TunePlan> LoadTunePlan(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxJobBytes));
  const std::string base = std::filesystem::path(path).parent_path().string();
  return ParseTunePlan(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path, base);
}

namespace {
constexpr TuneMetric kMetrics[] = {
    {"accuracy", true, true, false, false},  {"roc_auc", true, true, false, false},
    {"log_loss", false, true, false, false}, {"average_precision", true, true, false, true},
    {"brier", false, true, false, false},    {"rmse", false, false, true, false},
    {"mae", false, false, true, false},      {"r2", true, false, true, false},
};
}  // namespace

const TuneMetric* FindTuneMetric(std::string_view name) {
  for (const TuneMetric& m : kMetrics) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

std::string TuneMetricNames() {
  std::string s;
  for (const TuneMetric& m : kMetrics) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

Result<const TuneMetric*> ResolveTuneMetric(const TuneSpec& spec, uint32_t classes) {
  const bool regression = classes == 0;
  const std::string name = !spec.metric.empty() ? spec.metric : regression ? "rmse" : "roc_auc";
  const TuneMetric* m = FindTuneMetric(name);
  if (m == nullptr) return InvalidInput(spec.at + ": 'tune.metric' must be one of " + TuneMetricNames());
  if (regression && !m->regression) {
    return InvalidInput(spec.at + ": 'tune.metric' \"" + name + "\" is a classification metric and the label is a "
                        "regression target (rmse, mae, r2)");
  }
  if (!regression && !m->classification) {
    return InvalidInput(spec.at + ": 'tune.metric' \"" + name + "\" is a regression metric and the label has classes");
  }
  if (m->binary_only && classes != 2) {
    return InvalidInput(spec.at + ": 'tune.metric' \"" + name + "\" needs a binary label, this one has " +
                        std::to_string(classes) + " classes");
  }
  return m;
}

Result<std::vector<double>> FoldScores(const TuneMetric& metric, const CvResult& cv, const LoadedData& data,
                                       uint64_t seed) {
  const std::string name = metric.name;
  std::vector<double> out;
  const bool from_predictions = name == "average_precision" || name == "brier";
  std::vector<Split> splits;
  if (from_predictions) {
    ASSIGN_OR_RETURN(splits, StratifiedKFold(data.labels, data.classes, static_cast<uint32_t>(cv.folds.size()), seed));
  }
  for (size_t f = 0; f < cv.folds.size(); ++f) {
    const EpochMetrics& m = cv.folds[f].Final();
    if (name == "accuracy") out.push_back(m.val_accuracy);
    else if (name == "roc_auc") out.push_back(m.val_auc);
    else if (name == "log_loss") out.push_back(m.val_loss);
    else if (name == "rmse") out.push_back(m.val_rmse);
    else if (name == "mae") out.push_back(m.val_mae);
    else if (name == "r2") out.push_back(m.val_r2);
    if (!from_predictions) continue;
    const LockedArray<uint32_t>& val = splits[f].val;
    ASSIGN_OR_RETURN(LockedArray<float> labels, LockedArray<float>::Create(val.size()));
    for (size_t i = 0; i < val.size(); ++i) labels[i] = data.labels[val[i]];
    EvalOptions opt;
    opt.bootstrap_resamples = 0;
    ASSIGN_OR_RETURN(ClassificationReport r, EvaluateClassification(cv.folds[f].val_predictions.data(), labels.data(),
                                                                    val.size(), data.classes, opt));
    if (name == "average_precision") out.push_back(r.binary_metrics.average_precision.value);
    else out.push_back(r.binary ? r.binary_metrics.brier.value : r.multiclass_metrics.brier.value);
  }
  return out;
}

TuneScore Summarize(const std::vector<double>& per_fold) {
  TuneScore s;
  const double n = static_cast<double>(per_fold.size());
  for (double v : per_fold) s.mean += v;
  s.mean /= n;
  for (double v : per_fold) s.std += (v - s.mean) * (v - s.mean);  // as cv's std_accuracy
  s.std = std::sqrt(s.std / n);
  if (per_fold.empty() || std::isnan(s.mean)) s.mean = s.std = std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::vector<size_t> RankConfigurations(const std::vector<double>& means, bool higher_is_better) {
  std::vector<size_t> order(means.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double x = means[a], y = means[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return higher_is_better ? x > y : x < y;
  });
  return order;
}

}  // namespace enclave::trainer
