// Strict parsing of the job TOML: the examples parse; every error names the key and line.
#include "enclave/trainer/job.h"
#include "enclave/common/bytes.h"
#include "enclave/trainer/clear_outputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace enclave::trainer {
namespace {

const char* kMinimal = R"(output_dir = "out"
[[datasets]]
id = "d1"
path = "d1.sealed"
)";

Result<JobSpec> Parse(const std::string& text) { return ParseJob(text, "job.toml", "/jobs"); }

void ExpectError(const std::string& text, const std::string& fragment) {
  auto r = Parse(text);
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(Job, MinimalHasDocumentedDefaults) {
  auto r = Parse(kMinimal);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output_dir, "/jobs/out");
  ASSERT_EQ(r->datasets.size(), 1u);
  EXPECT_EQ(r->datasets[0].path, "/jobs/d1.sealed");
  EXPECT_EQ(r->datasets[0].format, DatasetFormat::kSealed);
  EXPECT_EQ(r->epochs, 100u);
  EXPECT_EQ(r->batch_size, 32u);
  EXPECT_DOUBLE_EQ(r->validation_fraction, 0.2);
  EXPECT_EQ(r->device, Device::kAuto);
  EXPECT_EQ(r->optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_TRUE(r->model.hidden.empty());
  EXPECT_EQ(r->seed, 0u);
}

TEST(Job, FullSpec) {
  auto r = Parse(R"(name = "full"
seed = 42
device = "cpu"
output_dir = "/abs/out"
[broker]
url = "https://broker.example:8443"
ca = "broker-ca.pem"
policy = "hipaa-medical"
requester = "alice@hospital.example"
job_id = "full-1"
[[datasets]]
id = "a"
path = "a.csv"
format = "csv"
label = "y"
positive = "yes"
[[datasets]]
id = "b"
path = "/data/b.csv"
format = "csv"
label = "y"
classes = ["no", "yes"]
[model]
hidden = [64, 32]
activation = "tanh"
[training]
epochs = 7
batch_size = 128
validation_fraction = 0.25
metrics = ["accuracy"]
[optimizer]
type = "sgd"
lr = 0.05
momentum = 0.8
weight_decay = 0.01
l2 = 1e-4
[schedule]
type = "step"
warmup_epochs = 1
step_epochs = 3
gamma = 0.5
)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->seed, 42u);
  EXPECT_EQ(r->device, Device::kCpu);
  EXPECT_EQ(r->broker.url, "https://broker.example:8443");
  EXPECT_EQ(r->broker.ca, "/jobs/broker-ca.pem");
  EXPECT_EQ(r->broker.policy, "hipaa-medical");
  EXPECT_EQ(r->broker.requester, "alice@hospital.example");
  EXPECT_EQ(r->broker.job_id, "full-1");
  EXPECT_EQ(r->output_dir, "/abs/out");
  EXPECT_EQ(r->datasets[1].path, "/data/b.csv");
  EXPECT_EQ(*r->datasets[0].positive, "yes");
  EXPECT_EQ(r->datasets[1].classes, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(r->model.hidden, (std::vector<uint32_t>{64, 32}));
  EXPECT_EQ(r->model.activation, kernels::kActTanh);
  EXPECT_EQ(r->metrics, static_cast<uint32_t>(kMetricAccuracy));
  EXPECT_EQ(r->optimizer.kind, OptimizerKind::kSgd);
  EXPECT_FLOAT_EQ(r->optimizer.momentum, 0.8f);
  EXPECT_EQ(r->schedule.kind, kernels::kLrStep);
  EXPECT_EQ(r->schedule.step_epochs, 3u);
}

TEST(Job, BrokerTable) {
  auto r = Parse(kMinimal);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->broker.url.empty());
  EXPECT_EQ(r->broker.job_id, "job-" + HexEncode(ByteSpan(r->digest.data(), 8)));  // the default
  const std::string b = std::string(kMinimal) + "[broker]\nurl = \"https://b:1\"\nca = \"ca.pem\"\npolicy = \"p\"\n";
  ExpectError(b, "missing required key 'broker.requester'");
  ExpectError(b + "requester = \"r\"\nurl2 = 1\n", "unknown key 'broker.url2'");
  ExpectError(std::string(kMinimal) + "[broker]\nurl = \"http://b:1\"\nca = \"c\"\npolicy = \"p\"\nrequester = \"r\"\n",
              "'broker.url' must be https://HOST:PORT");
  ExpectError(b + "requester = \"r\"\njob_id = \"a b\"\n", "'broker.job_id'");
}

TEST(Job, PreprocessAndEvaluationTables) {
  auto job = ParseJob(std::string(kMinimal) + "[preprocess]\nimpute = \"mean\"\nindicators = false\n[evaluation]\n"
                      "target_sensitivity = 0.95\nbootstrap_resamples = 50\n", "job.toml", "/base");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->preprocess.impute, Impute::kMean);
  EXPECT_FALSE(job->preprocess.indicators);
  EXPECT_EQ(job->evaluation.rule, ThresholdRule::kTargetSensitivity);
  EXPECT_EQ(job->evaluation.target_sensitivity, 0.95);
  EXPECT_EQ(job->evaluation.bootstrap_resamples, 50u);
  auto defaults = ParseJob(kMinimal, "job.toml", "/base");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->preprocess.impute, Impute::kMedian);
  EXPECT_TRUE(defaults->preprocess.indicators);
  EXPECT_EQ(defaults->evaluation.rule, ThresholdRule::kFixed);
  EXPECT_EQ(defaults->evaluation.threshold, 0.5);
  EXPECT_EQ(defaults->evaluation.bootstrap_resamples, 1000u);
  ExpectError(std::string(kMinimal) + "[preprocess]\nimpute = \"zero\"\n",
              "job.toml:6: 'preprocess.impute' must be one of mean, median, most_frequent, got 'zero'");
  ExpectError(std::string(kMinimal) + "[preprocess]\nindicators = 1\n", "'preprocess.indicators' must be true or false");
  ExpectError(std::string(kMinimal) + "[evaluation]\nthreshold = \"best\"\n",
              "'evaluation.threshold' must be a number in [0, 1] or \"youden\", got 'best'");
  ExpectError(std::string(kMinimal) + "[evaluation]\nthreshold = 1.5\n", "'evaluation.threshold' must be in [0, 1]");
  ExpectError(std::string(kMinimal) + "[evaluation]\nthreshold = 0.4\ntarget_sensitivity = 0.9\n",
              "'evaluation.target_sensitivity' and 'threshold' exclude each other");
}

// What a job claims to show in clear (docs/training.md, "What leaves in clear").
TEST(Job, ClearOutputsFollowTheJobKindAndTask) {
  using V = std::vector<std::string>;
  auto d = Parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(ClearOutputsOf(*d, "train", false).Names(),
            (V{"loss", "accuracy", "roc_auc", "board_metrics", "curves", "importance"}));
  EXPECT_EQ(ClearOutputsOf(*d, "cv", false).Names(), (V{"loss", "accuracy", "roc_auc", "board_metrics"}));
  EXPECT_EQ(ClearOutputsOf(*d, "train", true).Names(), (V{"loss", "rmse", "mae", "r2", "board_metrics", "importance"}));
  EXPECT_EQ(ClearOutputNames().size(), 10u);

  auto narrow = Parse(std::string(kMinimal) +
                      "[training]\nmetrics = [\"loss\", \"r2\"]\nvalidation_fraction = 0\n[evaluation]\ncurves = false\n");
  ASSERT_TRUE(narrow.ok()) << narrow.status().ToString();
  // No validation rows: no board, no curves, no permutation importance in run; cv has folds.
  EXPECT_EQ(ClearOutputsOf(*narrow, "train", false).Names(), (V{"loss"}));
  EXPECT_EQ(ClearOutputsOf(*narrow, "train", true).Names(), (V{"loss", "r2"}));
  EXPECT_EQ(ClearOutputsOf(*narrow, "cv", true).Names(), (V{"loss", "r2", "board_metrics"}));
  EXPECT_EQ(ClearOutputsOf(*narrow, "cv", true).MetricBits(), kMetricLoss | kMetricR2);

  auto off = Parse(std::string(kMinimal) +
                   "[evaluation]\nboard_metrics = false\nimportance = false\ncoefficients = true\n");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(ClearOutputsOf(*off, "train", false).Names(), (V{"loss", "accuracy", "roc_auc", "curves", "coefficients"}));
  EXPECT_EQ(ClearOutputsOf(*off, "cv", false).Names(), (V{"loss", "accuracy", "roc_auc"}));
  auto no_repeats = Parse(std::string(kMinimal) + "[evaluation]\npermutation_repeats = 0\n");
  ASSERT_TRUE(no_repeats.ok());
  EXPECT_FALSE(ClearOutputsOf(*no_repeats, "train", false).importance);  // the network has no gain

  ExpectError(std::string(kMinimal) + "[training]\nmetrics = [\"f1\"]\n",
              "has unknown metric 'f1' (loss, accuracy, roc_auc, rmse, mae, r2)");
  ExpectError(std::string(kMinimal) + "[evaluation]\ncurves = 1\n", "'evaluation.curves'");
}

TEST(Job, ClassAndSampleWeights) {
  auto balanced = Parse(std::string(kMinimal) + "[training]\nclass_weight = \"balanced\"\nsample_weight_column = \"w\"\n");
  ASSERT_TRUE(balanced.ok()) << balanced.status().message();
  EXPECT_EQ(balanced->weights.rule, ClassWeightRule::kBalanced);
  EXPECT_EQ(balanced->weights.column, "w");
  EXPECT_TRUE(balanced->weights.any());
  auto given = Parse(std::string(kMinimal) + "[training]\nclass_weight = { no = 1, yes = 3.5 }\n");
  ASSERT_TRUE(given.ok()) << given.status().message();
  EXPECT_EQ(given->weights.rule, ClassWeightRule::kGiven);
  ASSERT_EQ(given->weights.given.size(), 2u);
  EXPECT_TRUE(given->weights.column.empty());
  double yes = 0;
  for (const auto& [name, w] : given->weights.given) yes = name == "yes" ? w : yes;
  EXPECT_EQ(yes, 3.5);
  auto none = Parse(kMinimal);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->weights.any());
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = \"equal\"\n",
              "job.toml:6: 'training.class_weight' must be \"balanced\" or a table of class = weight, got 'equal'");
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = 2\n", "'training.class_weight' must be \"balanced\"");
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = { yes = 0 }\n",
              "'training.class_weight' 'yes' must be in (0, 1e6], got 0");
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = { yes = \"3\" }\n",
              "'training.class_weight' 'yes' must be a number");
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = {}\n", "'training.class_weight' must name at least one class");
  ExpectError(std::string(kMinimal) + "[training]\nsample_weight_column = \"\"\n",
              "'training.sample_weight_column' must name a column");
  ExpectError(std::string(kMinimal) + "[training]\nclass_weight = \"balanced\"\n[streaming]\n",
              "job.toml:6: 'training.class_weight' and [streaming] do not go together yet");
}

TEST(Job, DigestIsOfTheBytes) {
  auto a = Parse(kMinimal), b = Parse(std::string(kMinimal) + "\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->digest, b->digest);
}

TEST(Job, UnknownKeysNameKeyAndLine) {
  ExpectError(std::string("epochs = 3\n") + kMinimal, "job.toml:1: unknown key 'epochs'");
  ExpectError(std::string(kMinimal) + "epochs = 3\n", "job.toml:5: unknown key 'datasets[0].epochs'");
  ExpectError(std::string(kMinimal) + "[model]\nhiden = [3]\n", "job.toml:6: unknown key 'model.hiden'");
  ExpectError(std::string(kMinimal) + "colour = \"blue\"\n", "unknown key 'datasets[0].colour'");
  ExpectError(std::string(kMinimal) + "[optimiser]\n", "job.toml:5: unknown key 'optimiser'");
}

TEST(Job, TypesAndRanges) {
  ExpectError(std::string(kMinimal) + "[training]\nepochs = \"ten\"\n", "job.toml:6: 'training.epochs' must be an integer");
  ExpectError(std::string(kMinimal) + "[training]\nepochs = 0\n", "'training.epochs' must be in 1..1000000");
  ExpectError(std::string(kMinimal) + "[training]\nvalidation_fraction = 0.95\n", "validation_fraction");
  ExpectError(std::string(kMinimal) + "[optimizer]\nlr = -1\n", "'optimizer.lr' must be in (0");
  ExpectError(std::string(kMinimal) + "[optimizer]\nlr = nan\n", "'optimizer.lr'");
  ExpectError("output_dir = \"o\"\n[[datasets]]\nid = \"d\"\npath = \"p.csv\"\nformat = \"csv\"\nlabel = \"\"\n",
              "'datasets[0].label' must name a column");
  // In range as a double, zero as the float the trainer uses (found by fuzz_job_toml).
  ExpectError(std::string(kMinimal) + "[optimizer]\nlr = 1e-50\n", "'optimizer.lr' is out of range once rounded to a 32-bit float");
  ExpectError(std::string(kMinimal) + "[optimizer]\ntype = \"adam\"\n", "must be one of adamw, sgd");
  ExpectError(std::string(kMinimal) + "[optimizer]\ntype = \"sgd\"\nbeta1 = 0.9\n", "does not apply");
  ExpectError(std::string(kMinimal) + "[model]\nhidden = [0]\n", "layer sizes");
  ExpectError(std::string(kMinimal) + "[model]\nactivation = \"gelu\"\n", "'model.activation' must be one of");
  ExpectError(std::string(kMinimal) + "[training]\nmetrics = [\"f1\"]\n", "unknown metric 'f1'");
  ExpectError(std::string(kMinimal) + "[schedule]\ngamma = 0.5\n", "does not apply to schedule type 'constant'");
  ExpectError(std::string(kMinimal) + "device = \"tpu\"\n", "'datasets[0].device'");  // after [[datasets]]: a dataset key
  ExpectError(std::string("device = \"tpu\"\n") + kMinimal, "job.toml:1: 'device' must be one of auto, cpu, gpu");
  ExpectError(std::string("seed = -1\n") + kMinimal, "'seed' must be in 0..");
  ExpectError(std::string("model = 3\n") + kMinimal, "'model' must be a table");
}

TEST(Job, RequiredAndConsistency) {
  ExpectError("[[datasets]]\nid = \"d\"\npath = \"p\"\n", "missing required key 'output_dir'");
  ExpectError("output_dir = \"o\"\n", "missing required key 'datasets'");
  ExpectError("output_dir = \"o\"\n[[datasets]]\npath = \"p\"\n", "missing required key 'datasets[0].id'");
  ExpectError("output_dir = \"o\"\n[[datasets]]\nid = \"bad id!\"\npath = \"p\"\n", "datasets[0].id");
  ExpectError(std::string(kMinimal) + "[[datasets]]\nid = \"d1\"\npath = \"q\"\n", "dataset id 'd1' listed twice");
  ExpectError(std::string(kMinimal) + "label = \"y\"\n", "only for format = \"csv\"");
  ExpectError("output_dir = \"o\"\n[[datasets]]\nid = \"d\"\npath = \"p\"\nformat = \"csv\"\n",
              "missing required key 'datasets[0].label'");
  ExpectError("output_dir = \"o\"\n[[datasets]]\nid = \"d\"\npath = \"p\"\nformat = \"csv\"\nlabel = \"y\"\n"
              "positive = \"a\"\nclasses = [\"a\", \"b\"]\n",
              "exclude each other");
  ExpectError(std::string(kMinimal) + "[training]\nepochs = 2\n[schedule]\nwarmup_epochs = 2\n", "warmup_epochs");
}

TEST(Job, ExportKeyAndCheckpoint) {
  auto none = Parse(kMinimal);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->export_key.empty());
  EXPECT_EQ(none->checkpoint.every_steps, 0u);
  auto r = Parse(std::string("export_key = \"keys/tenant.pub\"\n") + kMinimal + "[checkpoint]\nevery_steps = 50\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->export_key, "/jobs/keys/tenant.pub");
  EXPECT_EQ(r->checkpoint.every_steps, 50u);
  EXPECT_EQ(r->checkpoint.keep, 2u);
  auto abs = Parse(std::string("export_key = \"/k/t.pub\"\n") + kMinimal + "[checkpoint]\nevery_steps = 1\nkeep = 5\n");
  ASSERT_TRUE(abs.ok());
  EXPECT_EQ(abs->export_key, "/k/t.pub");
  EXPECT_EQ(abs->checkpoint.keep, 5u);
  ExpectError(std::string("export_key = \"\"\n") + kMinimal, "job.toml:1: 'export_key' must not be empty");
  ExpectError(std::string("export_key = 3\n") + kMinimal, "'export_key' must be a string");
  ExpectError(std::string(kMinimal) + "[checkpoint]\nkeep = 3\n", "missing required key 'checkpoint.every_steps'");
  ExpectError(std::string(kMinimal) + "[checkpoint]\nevery_steps = 0\n", "'checkpoint.every_steps' must be in 1..");
  ExpectError(std::string(kMinimal) + "[checkpoint]\nevery_steps = 5\nkeep = 0\n", "'checkpoint.keep' must be in 1..1000");
  ExpectError(std::string(kMinimal) + "[checkpoint]\nevery_steps = 5\ndir = \"x\"\n", "unknown key 'checkpoint.dir'");
  ExpectError(std::string("checkpoint = 5\n") + kMinimal, "job.toml:1: 'checkpoint' must be a table");
}

TEST(Job, SyntaxErrorsNameTheLine) {
  ExpectError("output_dir = \"o\"\n\n[[datasets]\n", "job.toml:3:");
  ExpectError("output_dir = \"o\"\noutput_dir = \"p\"\n", "job.toml:2:");
}

TEST(Job, ExamplesParse) {
  for (const char* name : {"breast_cancer_logreg", "breast_cancer_mlp", "credit_card_logreg", "credit_card_mlp",
                           "breast_cancer_sealed"}) {
    auto r = LoadJob(std::string(ENCLAVE_EXAMPLES) + "/" + name + ".toml");
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  }
}

// toml++ limits the nesting of arrays and inline tables but not the parts of a dotted key
// or a table header; 100 000 of them overflowed its recursive walk (a segfault). The parser
// refuses more than 32 parts, or more than 32 open brackets, before toml++ sees the text.
TEST(Job, DeepDottedKeysAndHeadersAreRefusedBeforeParsing) {
  const std::string base = "output_dir = \"o\"\n[[datasets]]\nid = \"d\"\npath = \"p\"\n";
  std::string deep_key = "a", deep_header = "[a";
  for (int i = 0; i < 100000; ++i) deep_key += ".a", deep_header += ".a";
  ExpectError(base + deep_key + " = 1\n", "job.toml:5: a dotted key or table header has more than 32 parts");
  ExpectError(base + deep_header + "]\n", "job.toml:5: a dotted key or table header has more than 32 parts");
  ExpectError(deep_key + " = 1\n", "job.toml:1: a dotted key or table header has more than 32 parts");
  std::string quoted = "\"a\"";
  for (int i = 0; i < 100000; ++i) quoted += " . 'a'";
  ExpectError(base + "[model]\n" + quoted + " = 1\n",
              "job.toml:6: a dotted key or table header has more than 32 parts");
  ExpectError(base + "x = " + std::string(33, '[') + std::string(33, ']') + "\n",
              "job.toml:5: arrays, inline tables and table headers nested more than 32 deep");
  // 32 parts pass the scan (and are then an unknown key); dots in strings and comments,
  // floats and dates are not counted.
  std::string parts32 = "a";
  for (int i = 1; i < 32; ++i) parts32 += ".a";
  ExpectError(base + parts32 + " = 1\n", "unknown key");
  std::string dotted_string(1000, '.');
  auto r = Parse("name = \"" + dotted_string + "\" # " + dotted_string + "\nseed = 1\n" + base +
                 "[optimizer]\nlr = 1.5e-3\n");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// [model] family and [trees]: the trees' keys with their ranges, and what applies to one
// family refused with the other.
TEST(Job, ModelFamilyAndTrees) {
  auto mlp = Parse(kMinimal);
  ASSERT_TRUE(mlp.ok());
  EXPECT_EQ(mlp->family, ModelFamily::kMlp);
  auto plain = Parse(std::string(kMinimal) + "[model]\nfamily = \"xgboost\"\n");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->family, ModelFamily::kXgboost);
  EXPECT_EQ(plain->trees.rounds, 100u);  // the documented defaults
  EXPECT_EQ(plain->trees.max_depth, 6u);
  EXPECT_DOUBLE_EQ(plain->trees.eta, 0.3);
  EXPECT_EQ(plain->trees.max_bin, 256u);
  EXPECT_EQ(plain->trees.threads, 0u);
  EXPECT_EQ(plain->trees.early_stopping_rounds, 0u);

  const std::string xgb = std::string(kMinimal) + "[model]\nfamily = \"xgboost\"\n";
  auto r = Parse(xgb + "[training]\nvalidation_fraction = 0.25\nmetrics = [\"loss\", \"roc_auc\"]\n"
                       "[trees]\nrounds = 300\nmax_depth = 4\neta = 0.05\nmin_child_weight = 2\nsubsample = 0.8\n"
                       "colsample_bytree = 0.5\nlambda = 2\nalpha = 0.5\ngamma = 1e-3\nmax_bin = 64\nthreads = 2\n"
                       "early_stopping_rounds = 20\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TreeSpec& t = r->trees;
  EXPECT_EQ(t.rounds, 300u);
  EXPECT_EQ(t.max_depth, 4u);
  EXPECT_DOUBLE_EQ(t.eta, 0.05);
  EXPECT_DOUBLE_EQ(t.min_child_weight, 2);
  EXPECT_DOUBLE_EQ(t.subsample, 0.8);
  EXPECT_DOUBLE_EQ(t.colsample_bytree, 0.5);
  EXPECT_DOUBLE_EQ(t.lambda, 2);
  EXPECT_DOUBLE_EQ(t.alpha, 0.5);
  EXPECT_DOUBLE_EQ(t.gamma, 1e-3);
  EXPECT_EQ(t.max_bin, 64u);
  EXPECT_EQ(t.threads, 2u);
  EXPECT_EQ(t.early_stopping_rounds, 20u);
  EXPECT_TRUE(CheckTreeSpec(t).ok());

  ExpectError(std::string(kMinimal) + "[model]\nfamily = \"forest\"\n", "job.toml:6: 'model.family' must be one of mlp, xgboost");
  ExpectError(xgb + "[trees]\nrounds = 0\n", "job.toml:8: 'trees.rounds' must be in 1..100000, got 0");
  ExpectError(xgb + "[trees]\nrounds = 1.5\n", "'trees.rounds' must be an integer");
  ExpectError(xgb + "[trees]\nmax_depth = 33\n", "'trees.max_depth' must be in 1..32");
  ExpectError(xgb + "[trees]\neta = 0\n", "'trees.eta' must be in (0, 1], got 0");
  ExpectError(xgb + "[trees]\neta = \"fast\"\n", "'trees.eta' must be a number");
  ExpectError(xgb + "[trees]\nsubsample = 1.5\n", "'trees.subsample' must be in (0, 1]");
  ExpectError(xgb + "[trees]\ncolsample_bytree = 0\n", "'trees.colsample_bytree'");
  ExpectError(xgb + "[trees]\nlambda = -1\n", "'trees.lambda' must be in [0, ");
  ExpectError(xgb + "[trees]\nalpha = inf\n", "'trees.alpha'");
  ExpectError(xgb + "[trees]\ngamma = nan\n", "'trees.gamma'");
  ExpectError(xgb + "[trees]\nmin_child_weight = -0.5\n", "'trees.min_child_weight'");
  ExpectError(xgb + "[trees]\nmax_bin = 1\n", "'trees.max_bin' must be in 2..65536");
  ExpectError(xgb + "[trees]\nthreads = 2000\n", "'trees.threads' must be in 0..1024");
  ExpectError(xgb + "[trees]\nearly_stopping_rounds = -1\n", "'trees.early_stopping_rounds' must be in 0..100000");
  ExpectError(xgb + "[trees]\nnum_round = 10\n", "job.toml:8: unknown key 'trees.num_round'");
  ExpectError(xgb + "trees = 3\n", "job.toml:7: unknown key 'model.trees'");
  ExpectError(std::string("trees = 3\n") + xgb, "job.toml:1: 'trees' must be a table");

  // One family's keys with the other.
  ExpectError(std::string(kMinimal) + "[trees]\nrounds = 5\n", "job.toml:5: 'trees' applies only to [model] family = \"xgboost\"");
  ExpectError(std::string(kMinimal) + "[model]\nfamily = \"mlp\"\n[trees]\n", "job.toml:7: 'trees' applies only");
  ExpectError(xgb + "hidden = [8]\n", "job.toml:7: 'model.hidden' does not apply to [model] family = \"xgboost\"");
  ExpectError(xgb + "activation = \"tanh\"\n", "job.toml:7: 'model.activation' does not apply");
  ExpectError(xgb + "[training]\nepochs = 5\n", "job.toml:8: 'training.epochs' does not apply to [model] family = \"xgboost\" (the rounds are 'trees.rounds')");
  ExpectError(xgb + "[training]\nbatch_size = 5\n", "'training.batch_size' does not apply");
  ExpectError(xgb + "[optimizer]\nlr = 0.1\n", "job.toml:7: 'optimizer' does not apply to [model] family = \"xgboost\"");
  ExpectError(xgb + "[schedule]\ntype = \"cosine\"\n", "'schedule' does not apply");
  ExpectError(xgb + "[streaming]\n", "'streaming' does not apply");
  ExpectError(xgb + "[checkpoint]\nevery_steps = 10\n", "'checkpoint' does not apply");
  ExpectError(std::string("device = \"gpu\"\n") + xgb, "job.toml:1: 'device' = \"gpu\" does not apply");
  EXPECT_TRUE(Parse(std::string("device = \"cpu\"\n") + xgb).ok());
  ExpectError(xgb + "[training]\nvalidation_fraction = 0\n[trees]\nearly_stopping_rounds = 5\n",
              "job.toml:10: 'trees.early_stopping_rounds' needs validation rows");
  EXPECT_TRUE(Parse(xgb + "[training]\nvalidation_fraction = 0\n[trees]\nrounds = 5\n").ok());
}

// The fuzz seeds double as parser tests: valid-* must parse, invalid-* must not.
TEST(Job, FuzzSeeds) {
  size_t valid = 0, invalid = 0;
  for (const auto& e : std::filesystem::directory_iterator(ENCLAVE_JOB_CORPUS)) {
    const std::string name = e.path().filename().string();
    auto r = LoadJob(e.path().string());
    if (name.rfind("valid-", 0) == 0) {
      EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      ++valid;
    } else if (name.rfind("invalid-", 0) == 0) {
      EXPECT_FALSE(r.ok()) << name;
      ++invalid;
    }
  }
  EXPECT_GE(valid, 5u);
  EXPECT_GE(invalid, 3u);
}

}  // namespace
}  // namespace enclave::trainer
