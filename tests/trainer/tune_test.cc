// [tune]: parsing, the configurations of a grid and of a random search (order,
// reproducibility, each parsed as a job), the errors (key and line named), the metric and
// the choice of the best (docs/formats/job.md, [tune]; docs/training.md, "Tune").
#include "enclave/trainer/tune.h"
#include "enclave/trainer/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace enclave::trainer {
namespace {

// Line 1..8: the base job; [tune] from line 9.
const char* kBase = R"(output_dir = "out"
seed = 5
[[datasets]]
id = "d1"
path = "d1.sealed"
[training]
epochs = 10
[optimizer]
)";

Result<TunePlan> Plan(const std::string& tune) { return ParseTunePlan(std::string(kBase) + tune, "job.toml", "/jobs"); }

void ExpectError(const std::string& tune, const std::string& fragment) {
  auto r = Plan(tune);
  ASSERT_FALSE(r.ok()) << tune;
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  // The job parser refuses the same (run and cv check [tune] too), except what only the
  // configurations show.
}

TEST(Tune, GridIsLexicographicInParameterOrderAsWritten) {
  // optimizer.lr is written first although "model" sorts before it: it varies slowest.
  auto r = Plan(R"([tune]
folds = 3
[tune.parameters]
"optimizer.lr" = [0.01, 0.1]
"model.hidden" = [[], [8], [16, 4]]
)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TuneSpec& s = r->base.tune;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.method, TuneMethod::kGrid);
  EXPECT_EQ(s.folds, 3u);
  EXPECT_EQ(s.grid_size, 6u);
  ASSERT_EQ(s.parameters.size(), 2u);
  EXPECT_EQ(s.parameters[0].key, "optimizer.lr");
  EXPECT_EQ(s.parameters[0].at, "job.toml:12");
  EXPECT_EQ(s.parameters[1].key, "model.hidden");
  EXPECT_EQ(s.parameters[1].candidates, (std::vector<std::string>{"[]", "[8]", "[16,4]"}));
  ASSERT_EQ(r->configurations.size(), 6u);
  const std::vector<std::vector<uint32_t>> want = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
  const std::vector<std::vector<uint32_t>> hidden = {{}, {8}, {16, 4}};
  for (size_t i = 0; i < 6; ++i) {
    const TuneConfiguration& c = r->configurations[i];
    EXPECT_EQ(c.index, i + 1);
    EXPECT_EQ(c.picks, want[i]);
    EXPECT_FLOAT_EQ(c.job.optimizer.lr, want[i][0] == 0 ? 0.01f : 0.1f);
    EXPECT_EQ(c.job.model.hidden, hidden[want[i][1]]);
    // Everything else is the base job's, and so is the digest.
    EXPECT_EQ(c.job.epochs, 10u);
    EXPECT_EQ(c.job.seed, 5u);
    EXPECT_EQ(c.job.output_dir, "/jobs/out");
    EXPECT_EQ(c.job.digest, r->base.digest);
    EXPECT_FALSE(c.job.tune.enabled);
  }
  EXPECT_EQ(DescribeConfiguration(s, r->configurations[5].picks), "optimizer.lr = 0.1, model.hidden = [16,4]");
  EXPECT_EQ(TunePicks(s), want);
  // The base job as written is what run and cv train.
  EXPECT_FLOAT_EQ(r->base.optimizer.lr, 0.001f);
}

TEST(Tune, DottedKeysAreTheSameParameters) {
  auto quoted = Plan("[tune]\n[tune.parameters]\n\"training.epochs\" = [5, 20]\n\"preprocess.impute\" = [\"mean\", \"median\"]\n");
  auto dotted = Plan("[tune]\n[tune.parameters]\ntraining.epochs = [5, 20]\npreprocess.impute = [\"mean\", \"median\"]\n");
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  ASSERT_TRUE(dotted.ok()) << dotted.status().ToString();
  ASSERT_EQ(dotted->configurations.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(quoted->configurations[i].picks, dotted->configurations[i].picks);
    EXPECT_EQ(dotted->configurations[i].job.epochs, i < 2 ? 5u : 20u);
    EXPECT_EQ(dotted->configurations[i].job.preprocess.impute, i % 2 == 0 ? Impute::kMean : Impute::kMedian);
  }
  // A table the base job does not have ([preprocess] here) is made for the candidate.
}

TEST(Tune, RandomIsReproducibleDistinctAndSeeded) {
  const std::string tune = R"([tune]
method = "random"
trials = 12
seed = 11
metric = "log_loss"
[tune.parameters]
"optimizer.lr" = [0.001, 0.003, 0.01, 0.03, 0.1]
"training.batch_size" = [16, 32, 64]
"optimizer.weight_decay" = [0, 0.01]
)";
  auto a = Plan(tune), b = Plan(tune);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->base.tune.method, TuneMethod::kRandom);
  EXPECT_EQ(a->base.tune.seed, 11u);
  EXPECT_EQ(a->base.tune.grid_size, 30u);
  ASSERT_EQ(a->configurations.size(), 12u);
  std::set<std::vector<uint32_t>> distinct;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(a->configurations[i].picks, b->configurations[i].picks);
    distinct.insert(a->configurations[i].picks);
    const uint32_t batch[] = {16, 32, 64};
    EXPECT_EQ(a->configurations[i].job.batch_size, batch[a->configurations[i].picks[1]]);
  }
  EXPECT_EQ(distinct.size(), 12u);
  // The documented draw: per trial, Rng(seed, kStreamTune).Below(n) per parameter in
  // order; a repeated combination is drawn again.
  Rng rng(11, kStreamTune);
  std::set<std::vector<uint32_t>> seen;
  std::vector<std::vector<uint32_t>> want;
  while (want.size() < 12) {
    std::vector<uint32_t> p = {static_cast<uint32_t>(rng.Below(5)), static_cast<uint32_t>(rng.Below(3)),
                               static_cast<uint32_t>(rng.Below(2))};
    if (seen.insert(p).second) want.push_back(p);
  }
  EXPECT_EQ(TunePicks(a->base.tune), want);
  // Another seed, other draws; the default seed is the job's.
  TuneSpec other = a->base.tune;
  other.seed = 12;
  EXPECT_NE(TunePicks(other), want);
  auto d = Plan("[tune]\nmethod = \"random\"\ntrials = 3\n[tune.parameters]\n\"optimizer.lr\" = [0.1, 0.2, 0.3, 0.4]\n");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->base.tune.seed, 5u);
  // All of a grid, drawn at random: every configuration once.
  auto all = Plan("[tune]\nmethod = \"random\"\ntrials = 4\n[tune.parameters]\n\"optimizer.lr\" = [0.1, 0.2, 0.3, 0.4]\n");
  ASSERT_TRUE(all.ok());
  std::set<std::vector<uint32_t>> every;
  for (const TuneConfiguration& c : all->configurations) every.insert(c.picks);
  EXPECT_EQ(every.size(), 4u);
}

TEST(Tune, ClassWeightAndTreesCandidates) {
  auto r = ParseTunePlan(R"(output_dir = "out"
[[datasets]]
id = "d1"
path = "d1.sealed"
[model]
family = "xgboost"
[tune]
[tune.parameters]
"trees.max_depth" = [3, 6]
"training.class_weight" = ["balanced", { benign = 1, malignant = 2.5 }]
)", "job.toml", "/jobs");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->configurations.size(), 4u);
  EXPECT_EQ(r->configurations[0].job.trees.max_depth, 3u);
  EXPECT_EQ(r->configurations[0].job.weights.rule, ClassWeightRule::kBalanced);
  EXPECT_EQ(r->configurations[3].job.trees.max_depth, 6u);
  EXPECT_EQ(r->configurations[3].job.weights.rule, ClassWeightRule::kGiven);
  EXPECT_EQ(r->base.tune.parameters[1].candidates[1], R"({"benign":1,"malignant":2.5})");
}

TEST(Tune, ErrorsNameTheKeyAndLine) {
  // [tune] starts at line 9, [tune.parameters] at 10, its first entry at 11.
  ExpectError("[tune]\n[tune.parameters]\n\"model.hiden\" = [[8]]\n", "job.toml:11: 'tune.parameters' \"model.hiden\": no such job key");
  ExpectError("[tune]\n[tune.parameters]\n\"seed\" = [1, 2]\n", "job.toml:11: 'tune.parameters' \"seed\" cannot be tuned: it decides the folds");
  ExpectError("[tune]\n[tune.parameters]\n\"datasets.path\" = [\"a\"]\n", "\"datasets.path\" cannot be tuned");
  ExpectError("[tune]\n[tune.parameters]\n\"training.validation_fraction\" = [0.1]\n", "cannot be tuned: cross-validation ignores it");
  ExpectError("[tune]\n[tune.parameters]\n\"evaluation.threshold\" = [0.3]\n", "cannot be tuned");
  ExpectError("[tune]\n[tune.parameters]\n\"model.family\" = [\"mlp\", \"xgboost\"]\n", "cannot be tuned: a search is over one model family");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = []\n", "job.toml:11: 'tune.parameters' \"optimizer.lr\" must list at least one candidate");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = 0.1\n", "job.toml:11: 'tune.parameters' \"optimizer.lr\" must be an array");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = [0.1, 0.1]\n", "lists the candidate 0.1 twice");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = [1, 1.0]\n", "lists the candidate 1.0 twice");
  ExpectError("[tune]\n[tune.parameters]\n", "job.toml:10: 'tune.parameters' must name at least one job key");
  ExpectError("[tune]\nfolds = 3\n", "missing required key 'tune.parameters'");
  // A candidate of the wrong type or range: the job's own rule, at the candidate's line.
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = [0.1,\n  \"fast\"]\n",
              "job.toml:12: 'optimizer.lr' must be a number (candidate 2 of 'tune.parameters' \"optimizer.lr\")");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.lr\" = [0]\n", "job.toml:11: 'optimizer.lr' must be in (0, 10], got 0");
  ExpectError("[tune]\n[tune.parameters]\n\"model.hidden\" = [[8], [0]]\n", "layer sizes must be integers in 1..65536");
  ExpectError("[tune]\n[tune.parameters]\n\"trees.max_depth\" = [3]\n", "job.toml:11: 'trees' applies only to [model] family = \"xgboost\"");
  ExpectError("[tune]\n[tune.parameters]\n\"optimizer.momentum\" = [0.5]\n", "job.toml:11: 'optimizer.momentum' does not apply to optimizer type 'adamw'");
  // [tune]'s own keys.
  ExpectError("[tune]\nmethod = \"bayes\"\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "job.toml:10: 'tune.method' must be one of grid, random, got 'bayes'");
  ExpectError("[tune]\ntrials = 3\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "job.toml:10: 'tune.trials' applies only to method = \"random\"");
  ExpectError("[tune]\nseed = 3\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "'tune.seed' applies only to method = \"random\"");
  ExpectError("[tune]\nmethod = \"random\"\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "job.toml:9: missing required key 'tune.trials'");
  ExpectError("[tune]\nmethod = \"random\"\ntrials = 3\n[tune.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n",
              "job.toml:11: 'tune.trials' (3) exceeds the 2 distinct configurations");
  ExpectError("[tune]\nfolds = 1\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "job.toml:10: 'tune.folds' must be in 2..100, got 1");
  ExpectError("[tune]\nmetric = \"auc\"\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "'tune.metric' must be one of accuracy, roc_auc");
  ExpectError("[tune]\nfold = 3\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n", "job.toml:10: unknown key 'tune.fold'");
  auto not_table = ParseJob("tune = 3\n" + std::string(kBase), "job.toml", "/jobs");
  ASSERT_FALSE(not_table.ok());
  EXPECT_NE(not_table.status().message().find("job.toml:1: 'tune' must be a table"), std::string::npos)
      << not_table.status().message();
  // Caps: at most 1000 candidates in all, 1000 configurations in a grid.
  std::string long_list = "[tune]\n[tune.parameters]\n\"training.epochs\" = [";
  for (int i = 1; i <= 1001; ++i) long_list += std::to_string(i) + (i < 1001 ? ", " : "]\n");
  ExpectError(long_list, "job.toml:11: 'tune.parameters' \"training.epochs\": [tune.parameters] may list at most 1000 candidates in all");
  std::string many = "[tune]\n[tune.parameters]\n";
  for (const char* key : {"optimizer.lr", "optimizer.l2", "optimizer.weight_decay"}) {
    many += std::string("\"") + key + "\" = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11]\n";
  }
  ExpectError(many, "job.toml:9: [tune] grid of 1331 configurations: at most 1000");
  // ... which a random search samples from.
  many.insert(7, "method = \"random\"\ntrials = 20\n");
  auto sampled = Plan(many);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
  EXPECT_EQ(sampled->configurations.size(), 20u);
}

TEST(Tune, StreamingAndConfigurationErrors) {
  auto streaming = ParseTunePlan(std::string(kBase) + "[streaming]\n[tune]\n[tune.parameters]\n\"optimizer.lr\" = [0.1]\n",
                                 "job.toml", "/jobs");
  ASSERT_FALSE(streaming.ok());
  EXPECT_NE(streaming.status().message().find("job.toml:10: [tune] and [streaming] do not go together"),
            std::string::npos)
      << streaming.status().message();
  // Each candidate is fine alone, one combination is not: an error naming the configuration.
  auto r = ParseTunePlan(R"(output_dir = "out"
[[datasets]]
id = "d1"
path = "d1.sealed"
[schedule]
type = "cosine"
[optimizer]
lr = 0.1
[tune]
[tune.parameters]
"optimizer.lr" = [0.1, 0.005]
"schedule.min_lr" = [0.001, 0.01]
)", "job.toml", "/jobs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_NE(r.status().message().find("job.toml:9: [tune] configuration 4 of 4 (optimizer.lr = 0.005, "
                                      "schedule.min_lr = 0.01): job.toml: 'schedule.min_lr' is above 'optimizer.lr'"),
            std::string::npos)
      << r.status().message();
  // The job parser (run, cv) checks [tune] as far as single candidates go.
  auto job = ParseJob(std::string(kBase) + "[tune]\n[tune.parameters]\n\"optimizer.lr\" = [0]\n", "job.toml", "/jobs");
  EXPECT_FALSE(job.ok());
  // A job without [tune] is no search.
  auto none = ParseTunePlan(kBase, "job.toml", "/jobs");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("the job has no [tune] table"), std::string::npos);
}

TEST(Tune, MetricFitsTheLabel) {
  TuneSpec s;
  s.at = "job.toml:9";
  auto m = ResolveTuneMetric(s, 2);
  ASSERT_TRUE(m.ok());
  EXPECT_STREQ((*m)->name, "roc_auc");
  EXPECT_TRUE((*m)->higher_is_better);
  m = ResolveTuneMetric(s, 0);
  ASSERT_TRUE(m.ok());
  EXPECT_STREQ((*m)->name, "rmse");
  EXPECT_FALSE((*m)->higher_is_better);
  s.metric = "average_precision";
  EXPECT_TRUE(ResolveTuneMetric(s, 2).ok());
  EXPECT_FALSE(ResolveTuneMetric(s, 3).ok());
  s.metric = "r2";
  EXPECT_FALSE(ResolveTuneMetric(s, 2).ok());
  s.metric = "accuracy";
  EXPECT_FALSE(ResolveTuneMetric(s, 0).ok());
  for (const char* lower : {"log_loss", "brier", "rmse", "mae"}) EXPECT_FALSE(FindTuneMetric(lower)->higher_is_better);
  for (const char* higher : {"accuracy", "roc_auc", "average_precision", "r2"}) {
    EXPECT_TRUE(FindTuneMetric(higher)->higher_is_better);
  }
}

TEST(Tune, BestIsTheArgmaxTiesToTheEarlierUndefinedLast) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(RankConfigurations({0.9, 0.95, 0.95, nan, 0.8}, true), (std::vector<size_t>{1, 2, 0, 4, 3}));
  EXPECT_EQ(RankConfigurations({0.9, 0.95, 0.95, nan, 0.8}, false), (std::vector<size_t>{4, 0, 1, 2, 3}));
  EXPECT_EQ(RankConfigurations({nan, 0.5}, true), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(RankConfigurations({nan, nan}, true), (std::vector<size_t>{0, 1}));
  const TuneScore s = Summarize({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(1.25));  // population standard deviation, as cv's
  EXPECT_TRUE(std::isnan(Summarize({1, nan}).mean));
  EXPECT_TRUE(std::isnan(Summarize({1, nan}).std));
}

// Independent of metrics_report.cc: scikit-learn's step-wise average precision, and the
// Brier score, of (p, y) pairs.
double AveragePrecision(std::vector<std::pair<float, float>> py) {
  std::sort(py.begin(), py.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double positives = 0;
  for (const auto& [p, y] : py) positives += y;
  double ap = 0, tp = 0, fp = 0, recall = 0;
  for (size_t i = 0; i < py.size();) {
    size_t j = i;
    for (; j < py.size() && py[j].first == py[i].first; ++j) (py[j].second == 1 ? tp : fp) += 1;
    const double r = tp / positives;
    ap += (r - recall) * tp / (tp + fp);
    recall = r;
    i = j;
  }
  return ap;
}

TEST(Tune, FoldScoresAreEachFoldsOwnRows) {
  // 40 rows, 4 folds of the real fold assignment; each fold's "model" predicts its rows.
  const size_t n = 40;
  const uint64_t seed = 3;
  LoadedData data;
  data.rows = n;
  data.classes = 2;
  auto labels = LockedArray<float>::Create(n);
  ASSERT_TRUE(labels.ok());
  data.labels = std::move(labels).value();
  for (size_t i = 0; i < n; ++i) data.labels[i] = (i * 7 + i / 3) % 3 == 0 ? 1.0f : 0.0f;
  auto splits = StratifiedKFold(data.labels, 2, 4, seed);
  ASSERT_TRUE(splits.ok());
  CvResult cv;
  std::vector<std::vector<std::pair<float, float>>> rows(4);
  for (size_t f = 0; f < 4; ++f) {
    TrainResult r;
    EpochMetrics m;
    m.val_accuracy = 0.5 + 0.1 * static_cast<double>(f);
    m.val_auc = 0.6 + 0.1 * static_cast<double>(f);
    m.val_loss = 0.3 - 0.05 * static_cast<double>(f);
    r.epochs.push_back(m);
    const LockedArray<uint32_t>& val = (*splits)[f].val;
    auto pred = LockedArray<float>::Create(val.size());
    ASSERT_TRUE(pred.ok());
    r.val_predictions = std::move(pred).value();
    for (size_t i = 0; i < val.size(); ++i) {
      // Scores that depend on the row and the fold, with ties.
      r.val_predictions[i] = static_cast<float>((val[i] * 13 + f * 5) % 10) / 10.0f;
      rows[f].emplace_back(r.val_predictions[i], data.labels[val[i]]);
    }
    cv.folds.push_back(std::move(r));
  }
  auto ap = FoldScores(*FindTuneMetric("average_precision"), cv, data, seed);
  auto brier = FoldScores(*FindTuneMetric("brier"), cv, data, seed);
  auto acc = FoldScores(*FindTuneMetric("accuracy"), cv, data, seed);
  auto auc = FoldScores(*FindTuneMetric("roc_auc"), cv, data, seed);
  auto loss = FoldScores(*FindTuneMetric("log_loss"), cv, data, seed);
  ASSERT_TRUE(ap.ok() && brier.ok() && acc.ok() && auc.ok() && loss.ok()) << ap.status().ToString();
  for (size_t f = 0; f < 4; ++f) {
    EXPECT_NEAR((*ap)[f], AveragePrecision(rows[f]), 1e-12) << f;
    double b = 0;
    for (const auto& [p, y] : rows[f]) b += (static_cast<double>(p) - y) * (static_cast<double>(p) - y);
    EXPECT_NEAR((*brier)[f], b / static_cast<double>(rows[f].size()), 1e-12) << f;
    EXPECT_EQ((*acc)[f], cv.folds[f].epochs[0].val_accuracy);
    EXPECT_EQ((*auc)[f], cv.folds[f].epochs[0].val_auc);
    EXPECT_EQ((*loss)[f], cv.folds[f].epochs[0].val_loss);
  }
}

}  // namespace
}  // namespace enclave::trainer
