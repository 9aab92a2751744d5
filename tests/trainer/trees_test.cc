// Gradient-boosted trees through XGBoost (trees.h): the three tasks on the breast cancer
// sample and on synthetic data, missing values, bit-identical boosters for the same seed,
// early stopping keeping its best round, per-feature gain, the input checks, and
// LockAllMemory. The whole process is locked first (as `enclave-train` in tree mode) when
// it runs as root; the Python cross-check is trees_crosscheck.py.
#include "enclave/trainer/trees.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "enclave/dataset/schema.h"
#include "enclave/trainer/metrics.h"

#if defined(__SANITIZE_ADDRESS__)
#define ENCLAVE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENCLAVE_TEST_ASAN 1
#endif
#endif

namespace enclave::trainer {
namespace {

class LockEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (::geteuid() != 0) return;  // then only the failure path is checked (below)
    Status s = LockAllMemory();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
};
const auto* const kLockEnv = ::testing::AddGlobalTestEnvironment(new LockEnvironment);

// data/samples/breast_cancer_wisconsin.csv: 30 numeric features, then diagnosis
// (malignant = 1, benign = 0).
struct Table {
  std::vector<std::string> names;
  std::vector<float> x, y;
  size_t rows = 0, features = 0;
};

const Table& BreastCancer() {
  static const Table table = [] {
    Table t;
    std::ifstream in(std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv");
    std::string line;
    std::getline(in, line);
    std::stringstream head(line);
    for (std::string cell; std::getline(head, cell, ',');) t.names.push_back(cell);
    t.features = t.names.size() - 1;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::stringstream row(line);
      std::string cell;
      for (size_t j = 0; j < t.features; ++j) {
        std::getline(row, cell, ',');
        t.x.push_back(std::stof(cell));
      }
      std::getline(row, cell, ',');
      t.y.push_back(cell == "malignant" ? 1.0f : 0.0f);
      ++t.rows;
    }
    return t;
  }();
  return table;
}

// Rows i % 5 == 4 are held out.
struct Split {
  std::vector<float> x, y, x_test, y_test;
};

Split HoldOut(const std::vector<float>& x, const std::vector<float>& y, size_t features) {
  Split s;
  for (size_t i = 0; i < y.size(); ++i) {
    auto& xs = i % 5 == 4 ? s.x_test : s.x;
    auto& ys = i % 5 == 4 ? s.y_test : s.y;
    xs.insert(xs.end(), x.begin() + i * features, x.begin() + (i + 1) * features);
    ys.push_back(y[i]);
  }
  return s;
}

// Training rows x (rows x features) with labels y.
TreeTrainInput Rows(const std::vector<float>& x, const std::vector<float>& y, size_t features) {
  TreeTrainInput in;
  in.x = x.data();
  in.y = y.data();
  in.rows = y.size();
  in.features = features;
  return in;
}

TreeTrainInput Input(const Split& s, size_t features, bool with_val = false) {
  TreeTrainInput in = Rows(s.x, s.y, features);
  if (with_val) {
    in.x_val = s.x_test.data();
    in.y_val = s.y_test.data();
    in.val_rows = s.y_test.size();
  }
  return in;
}

// One thread: OpenMP's barriers make two threads several times slower than one on a
// loaded 2-core machine. SameSeedSameBytes uses two.
TreeSpec Spec(uint32_t rounds = 50) {
  TreeSpec spec;
  spec.rounds = rounds;
  spec.threads = 1;
  return spec;
}

// Three Gaussian blobs in 6 dimensions (features 3..5 noise).
void Blobs(size_t rows, uint64_t seed, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const float centers[3][3] = {{0, 0, 0}, {2.5f, 0, 1}, {0, 2.5f, -1}};
  for (size_t i = 0; i < rows; ++i) {
    const size_t c = i % 3;
    for (size_t j = 0; j < 6; ++j) x->push_back((j < 3 ? centers[c][j] : 0.0f) + noise(rng));
    y->push_back(static_cast<float>(c));
  }
}

TEST(Trees, BinaryBreastCancer) {
  const Table& t = BreastCancer();
  ASSERT_EQ(t.rows, 569u);
  ASSERT_EQ(t.features, 30u);
  const Split s = HoldOut(t.x, t.y, t.features);
  std::vector<TreeRound> rounds;
  auto m = TrainTrees(Spec(), TreeTask::kBinary, 2, Input(s, t.features, true), 7,
                      [&](const TreeRound& r) { rounds.push_back(r); });
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->task, TreeTask::kBinary);
  EXPECT_EQ(m->features, 30u);
  EXPECT_EQ(m->classes, 2u);
  EXPECT_EQ(m->best_rounds, 50u);
  ASSERT_EQ(rounds.size(), 50u);
  for (size_t i = 0; i < rounds.size(); ++i) {
    EXPECT_EQ(rounds[i].round, i + 1);
    EXPECT_TRUE(std::isfinite(rounds[i].train_loss) && std::isfinite(rounds[i].val_loss));
  }
  EXPECT_LT(rounds.back().train_loss, rounds.front().train_loss);
  EXPECT_LT(rounds.back().train_loss, 0.05);
  const auto b = m->booster.ExposeSecret();
  ASSERT_GT(b.size(), 2u);
  EXPECT_EQ(b[0], '{');  // UBJ: an object of typed keys ('L' length), not JSON text
  EXPECT_EQ(b[1], 'L');

  auto p = PredictTrees(*m, s.x_test.data(), s.y_test.size());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), s.y_test.size());
  for (float v : *p) EXPECT_TRUE(v >= 0 && v <= 1) << v;
  const double acc = Accuracy(p->data(), s.y_test.data(), s.y_test.size(), 2);
  const double auc = RocAuc(p->data(), s.y_test.data(), s.y_test.size(), 2);
  std::printf("binary: held-out accuracy %.4f, ROC AUC %.4f\n", acc, auc);
  EXPECT_GE(acc, 0.93);
  EXPECT_GE(auc, 0.98);
}

TEST(Trees, MulticlassBlobs) {
  std::vector<float> x, y;
  Blobs(3000, 11, &x, &y);
  const Split s = HoldOut(x, y, 6);
  auto m = TrainTrees(Spec(30), TreeTask::kMulticlass, 3, Input(s, 6, true), 3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->classes, 3u);
  auto p = PredictTrees(*m, s.x_test.data(), s.y_test.size());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), s.y_test.size() * 3);
  for (size_t i = 0; i < s.y_test.size(); ++i) {
    const float sum = (*p)[3 * i] + (*p)[3 * i + 1] + (*p)[3 * i + 2];
    EXPECT_NEAR(sum, 1.0f, 1e-5f);
  }
  const double acc = Accuracy(p->data(), s.y_test.data(), s.y_test.size(), 3);
  std::printf("multiclass: held-out accuracy %.4f\n", acc);
  // The blobs overlap: the Bayes rate is about 0.9.
  EXPECT_GE(acc, 0.85);
}

TEST(Trees, RegressionMeanArea) {
  // mean_area from the other 29 features (radius and perimeter carry it almost exactly).
  const Table& t = BreastCancer();
  const size_t target = 3;
  ASSERT_EQ(t.names[target], "mean_area");
  std::vector<float> x, y;
  for (size_t i = 0; i < t.rows; ++i) {
    for (size_t j = 0; j < t.features; ++j) {
      if (j != target) x.push_back(t.x[i * t.features + j]);
    }
    y.push_back(t.x[i * t.features + target]);
  }
  const Split s = HoldOut(x, y, t.features - 1);
  auto m = TrainTrees(Spec(100), TreeTask::kRegression, 0, Input(s, t.features - 1), 5);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->classes, 1u);
  auto p = PredictTrees(*m, s.x_test.data(), s.y_test.size());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), s.y_test.size());
  const double mean = std::accumulate(s.y_test.begin(), s.y_test.end(), 0.0) / static_cast<double>(s.y_test.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < s.y_test.size(); ++i) {
    ss_res += (s.y_test[i] - (*p)[i]) * (s.y_test[i] - (*p)[i]);
    ss_tot += (s.y_test[i] - mean) * (s.y_test[i] - mean);
  }
  const double r2 = 1 - ss_res / ss_tot;
  std::printf("regression: held-out R^2 %.4f\n", r2);
  EXPECT_GE(r2, 0.97);
}

TEST(Trees, MissingValues) {
  const Table& t = BreastCancer();
  std::vector<float> x = t.x;
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> u(0, 1);
  size_t deleted = 0;
  for (float& v : x) {
    if (u(rng) < 0.2) {
      v = dataset::MissingValue();
      ++deleted;
    }
  }
  ASSERT_EQ(std::bit_cast<uint32_t>(dataset::MissingValue()), dataset::kMissingBits);
  EXPECT_NEAR(static_cast<double>(deleted) / static_cast<double>(x.size()), 0.2, 0.01);
  const Split s = HoldOut(x, t.y, t.features);
  auto m = TrainTrees(Spec(), TreeTask::kBinary, 2, Input(s, t.features), 7);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto p = PredictTrees(*m, s.x_test.data(), s.y_test.size());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (float v : *p) EXPECT_TRUE(std::isfinite(v));
  const double acc = Accuracy(p->data(), s.y_test.data(), s.y_test.size(), 2);
  std::printf("binary with 20%% of cells missing: held-out accuracy %.4f\n", acc);
  EXPECT_GE(acc, 0.88);
}

TEST(Trees, SameSeedSameBytes) {
  const Table& t = BreastCancer();
  const Split s = HoldOut(t.x, t.y, t.features);
  TreeSpec spec = Spec(30);
  spec.threads = 2;  // the result must not depend on how the rows are shared out
  spec.subsample = 0.7;  // the seed matters only with sampling
  spec.colsample_bytree = 0.6;
  auto a = TrainTrees(spec, TreeTask::kBinary, 2, Input(s, t.features, true), 42);
  auto b = TrainTrees(spec, TreeTask::kBinary, 2, Input(s, t.features, true), 42);
  auto c = TrainTrees(spec, TreeTask::kBinary, 2, Input(s, t.features, true), 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().ToString() << b.status().ToString() << c.status().ToString();
  const auto ab = a->booster.ExposeSecret(), bb = b->booster.ExposeSecret(), cb = c->booster.ExposeSecret();
  ASSERT_EQ(ab.size(), bb.size());
  EXPECT_EQ(std::memcmp(ab.data(), bb.data(), ab.size()), 0);
  EXPECT_FALSE(ab.size() == cb.size() && std::memcmp(ab.data(), cb.data(), ab.size()) == 0);

  std::vector<float> x, y;
  Blobs(600, 1, &x, &y);
  const Split m = HoldOut(x, y, 6);
  auto ma = TrainTrees(spec, TreeTask::kMulticlass, 3, Input(m, 6), 9);
  auto mb = TrainTrees(spec, TreeTask::kMulticlass, 3, Input(m, 6), 9);
  ASSERT_TRUE(ma.ok() && mb.ok());
  ASSERT_EQ(ma->booster.size(), mb->booster.size());
  EXPECT_EQ(std::memcmp(ma->booster.ExposeSecret().data(), mb->booster.ExposeSecret().data(), ma->booster.size()), 0);
}

TEST(Trees, EarlyStoppingKeepsTheBestRound) {
  const Table& t = BreastCancer();
  const Split s = HoldOut(t.x, t.y, t.features);
  TreeSpec spec = Spec(300);
  spec.eta = 0.5;  // overfits within the rounds: the validation loss turns up
  spec.early_stopping_rounds = 10;
  std::vector<TreeRound> rounds;
  auto m = TrainTrees(spec, TreeTask::kBinary, 2, Input(s, t.features, true), 1,
                      [&](const TreeRound& r) { rounds.push_back(r); });
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_LT(rounds.size(), 300u) << "did not stop early";
  size_t best = 0;  // first minimum
  for (size_t i = 1; i < rounds.size(); ++i) {
    if (rounds[i].val_loss < rounds[best].val_loss) best = i;
  }
  EXPECT_EQ(m->best_rounds, best + 1);
  EXPECT_EQ(rounds.size(), best + 1 + 10);  // stopped 10 rounds after the best

  // The kept model is the model of a run that stopped there.
  spec.early_stopping_rounds = 0;
  spec.rounds = m->best_rounds;
  auto ref = TrainTrees(spec, TreeTask::kBinary, 2, Input(s, t.features, true), 1);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto p = PredictTrees(*m, s.x_test.data(), s.y_test.size());
  auto q = PredictTrees(*ref, s.x_test.data(), s.y_test.size());
  ASSERT_TRUE(p.ok() && q.ok());
  for (size_t i = 0; i < p->size(); ++i) EXPECT_EQ((*p)[i], (*q)[i]) << i;
  std::printf("early stopping: best round %u of %zu\n", m->best_rounds, rounds.size());
}

TEST(Trees, ShouldStopInterrupts) {
  const Table& t = BreastCancer();
  const Split s = HoldOut(t.x, t.y, t.features);
  uint32_t asked = 0;
  auto m = TrainTrees(Spec(20), TreeTask::kBinary, 2, Input(s, t.features), 1, {}, [&](uint32_t round) {
    asked = round;
    return round == 3;
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInterrupted);
  EXPECT_EQ(asked, 3u);
}

TEST(Trees, FeatureGain) {
  // y depends on features 0 and 1 only; feature 4 is constant (never split on).
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x, y;
  for (size_t i = 0; i < 2000; ++i) {
    float r[5] = {n(rng), n(rng), n(rng), n(rng), 1.0f};
    x.insert(x.end(), r, r + 5);
    y.push_back(r[0] + 0.5f * r[1] > 0 ? 1.0f : 0.0f);
  }
  TreeTrainInput in = Rows(x, y, 5);
  auto m = TrainTrees(Spec(20), TreeTask::kBinary, 2, in, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto g = FeatureGain(*m);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->size(), 5u);
  for (double v : *g) EXPECT_GE(v, 0);
  EXPECT_EQ((*g)[4], 0.0);
  const double total = std::accumulate(g->begin(), g->end(), 0.0);
  EXPECT_GT((*g)[0], (*g)[1]);
  EXPECT_GT(((*g)[0] + (*g)[1]) / total, 0.9);

  // Multiclass: summed over every class's trees, still one entry per feature.
  std::vector<float> bx, by;
  Blobs(900, 2, &bx, &by);
  in = Rows(bx, by, 6);
  auto mm = TrainTrees(Spec(10), TreeTask::kMulticlass, 3, in, 1);
  ASSERT_TRUE(mm.ok()) << mm.status().ToString();
  auto mg = FeatureGain(*mm);
  ASSERT_TRUE(mg.ok()) << mg.status().ToString();
  ASSERT_EQ(mg->size(), 6u);
  EXPECT_GT((*mg)[0] + (*mg)[1] + (*mg)[2], (*mg)[3] + (*mg)[4] + (*mg)[5]);
}

TEST(Trees, SampleWeights) {
  // Weight 0 on every positive row: the trees learn that everything is negative.
  const Table& t = BreastCancer();
  std::vector<float> w(t.rows);
  for (size_t i = 0; i < t.rows; ++i) w[i] = t.y[i] == 1.0f ? 0.0f : 1.0f;
  TreeTrainInput in = Rows(t.x, t.y, t.features);
  in.weights = w.data();
  auto m = TrainTrees(Spec(10), TreeTask::kBinary, 2, in, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto p = PredictTrees(*m, t.x.data(), t.rows);
  ASSERT_TRUE(p.ok());
  for (float v : *p) EXPECT_LT(v, 0.5f);
}

void ExpectRefused(const Result<TreeModel>& r, const std::string& fragment) {
  ASSERT_FALSE(r.ok()) << fragment;
  EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(Trees, BadInputRefused) {
  const Table& t = BreastCancer();
  TreeTrainInput in = Rows(t.x, t.y, t.features);
  const TreeSpec spec = Spec(2);

  TreeTrainInput none = in;
  none.rows = 0;
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, none, 1), "no training rows");
  TreeTrainInput nofeat = in;
  nofeat.features = 0;
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, nofeat, 1), "features must be");

  std::vector<float> y = t.y;
  y[17] = std::numeric_limits<float>::quiet_NaN();
  TreeTrainInput nan_label = in;
  nan_label.y = y.data();
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, nan_label, 1), "label of row 17");
  ExpectRefused(TrainTrees(spec, TreeTask::kRegression, 0, nan_label, 1), "label of row 17 is not a finite value");
  y[17] = 2;
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, nan_label, 1), "class index 0..1");
  y[17] = 0.5f;
  ExpectRefused(TrainTrees(spec, TreeTask::kMulticlass, 3, nan_label, 1), "class index 0..2");

  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 3, in, 1), "binary trees need 2 classes, got 3");
  ExpectRefused(TrainTrees(spec, TreeTask::kMulticlass, 2, in, 1), "multiclass trees need 3..65536 classes, got 2");
  ExpectRefused(TrainTrees(spec, TreeTask::kMulticlass, 70000, in, 1), "got 70000");
  ExpectRefused(TrainTrees(spec, TreeTask::kRegression, 2, in, 1), "regression trees take 0 or 1 classes");

  std::vector<float> x = t.x;
  x[5 * t.features + 2] = std::numeric_limits<float>::infinity();
  TreeTrainInput bad_x = in;
  bad_x.x = x.data();
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, bad_x, 1), "training row 5, feature 2: an infinity");
  x[5 * t.features + 2] = std::bit_cast<float>(0x7fc00001u);  // a NaN, but not the missing value
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, bad_x, 1), "a NaN other than the missing value");

  TreeSpec es = spec;
  es.early_stopping_rounds = 3;
  ExpectRefused(TrainTrees(es, TreeTask::kBinary, 2, in, 1), "needs validation rows");
  TreeSpec eta0 = spec;
  eta0.eta = 0;
  ExpectRefused(TrainTrees(eta0, TreeTask::kBinary, 2, in, 1), "trees.eta must be in (0, 1], got 0");
  TreeSpec bins = spec;
  bins.max_bin = 1;
  ExpectRefused(TrainTrees(bins, TreeTask::kBinary, 2, in, 1), "trees.max_bin");

  TreeTrainInput val = in;
  val.val_rows = 4;
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, val, 1), "validation rows or labels missing");

  std::vector<float> w(t.rows, 1.0f);
  w[3] = -1;
  TreeTrainInput weighted = in;
  weighted.weights = w.data();
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, weighted, 1), "weight of row 3");
  std::fill(w.begin(), w.end(), 0.0f);
  ExpectRefused(TrainTrees(spec, TreeTask::kBinary, 2, weighted, 1), "every sample weight is 0");
}

TEST(Trees, MismatchedModelRefused) {
  const Table& t = BreastCancer();
  TreeTrainInput in = Rows(t.x, t.y, t.features);
  auto m = TrainTrees(Spec(3), TreeTask::kBinary, 2, in, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto expect = [&](TreeModel& model, const std::string& fragment) {
    auto p = PredictTrees(model, t.x.data(), 1);
    ASSERT_FALSE(p.ok()) << fragment;
    EXPECT_NE(p.status().message().find(fragment), std::string::npos) << p.status().message();
  };
  m->task = TreeTask::kRegression;
  expect(*m, "objective binary:logistic");
  m->task = TreeTask::kBinary;
  m->features = 29;
  expect(*m, "the booster has 30 features, the model says 29");
  m->features = 30;
  m->best_rounds = 4;
  expect(*m, "the booster has 3 rounds");
  m->best_rounds = 3;
  std::vector<float> x(t.features, 1.0f);
  x[0] = std::numeric_limits<float>::infinity();
  auto p = PredictTrees(*m, x.data(), 1);
  EXPECT_FALSE(p.ok());
  auto ok = PredictTrees(*m, t.x.data(), 2);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();

  // Damaged booster bytes: XGBoost's error, as one line naming the call.
  auto bytes = m->booster.ExposeSecretMutable();
  bytes[1] = '#';
  auto damaged = PredictTrees(*m, t.x.data(), 1);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("XGBoosterLoadModelFromBuffer failed"), std::string::npos)
      << damaged.status().message();
  EXPECT_EQ(damaged.status().message().find('\n'), std::string::npos) << damaged.status().message();
}

TEST(Trees, LockAllMemoryFailsAsTheTrainerDoes) {
#ifdef ENCLAVE_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer makes mlockall a no-op";
#else
  // A child under a 64 KiB RLIMIT_MEMLOCK (and, when this runs as root, not root any more:
  // root's CAP_IPC_LOCK ignores the limit) cannot lock its whole memory.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::munlockall();
    struct rlimit lim = {65536, 65536};
    if (::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) ::_exit(2);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(2);
    Status s = LockAllMemory();
    const bool as_expected = !s.ok() && s.code() == Code::kFailedPrecondition &&
                             s.message().find("mlockall") != std::string::npos &&
                             s.message().find("65536 bytes") != std::string::npos;
    if (!as_expected) std::fprintf(stderr, "child: %s\n", s.ToString().c_str());
    ::_exit(as_expected ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

}  // namespace
}  // namespace enclave::trainer
