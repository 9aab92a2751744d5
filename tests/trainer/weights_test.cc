// [training] class_weight and sample_weight_column (issue 18 §5): each training row's loss
// and gradient count (class weight x sample weight) times; "balanced" is computed from the
// training rows only; the weight column leaves the features.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/model.h"
#include "enclave/trainer/trainer.h"
#include "enclave/trainer/weights.h"

namespace enclave::trainer {
namespace {

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("weights_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    backend_ = MakeCpuBackend();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Two overlapping Gaussian classes, `positives` of `rows` in class "yes" (mean shifted by
  // 1 in both features), a weight column w = 1 + (row % 3), the label last.
  std::string ImbalancedCsv(size_t rows, size_t positives, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> noise(0, 1);
    const std::string path = (dir_ / "imbalanced.csv").string();
    std::ofstream f(path);
    f << "x1,w,x2,y\n";
    for (size_t r = 0; r < rows; ++r) {
      const bool pos = r % (rows / positives) == 0 && r / (rows / positives) < positives;
      const double shift = pos ? 1.0 : 0.0;
      f << noise(gen) + shift << "," << 1 + r % 3 << "," << noise(gen) + shift << "," << (pos ? "yes" : "no") << "\n";
    }
    return path;
  }

  Result<LoadedData> Load(const std::string& path, const JobSpec& job) {
    JobSpec j = job;
    DatasetSpec d;
    d.id = "synthetic";
    d.path = path;
    d.format = DatasetFormat::kCsv;
    d.label = "y";
    d.positive = "yes";
    j.datasets = {d};
    return LoadJobData(*backend_, j, nullptr);
  }

  static double Sensitivity(const TrainResult& r, const LoadedData& data, const Split& split) {
    size_t tp = 0, pos = 0;
    for (size_t i = 0; i < split.val.size(); ++i) {
      if (data.labels[split.val[i]] != 1.0f) continue;
      ++pos;
      tp += r.val_predictions[i] >= 0.5f ? 1 : 0;
    }
    return static_cast<double>(tp) / static_cast<double>(pos);
  }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(WeightsTest, TheWeightColumnLeavesTheFeaturesAndCarriesEachRowsWeight) {
  const std::string csv = ImbalancedCsv(200, 20, 1);
  JobSpec plain;
  auto all = Load(csv, plain);
  ASSERT_TRUE(all.ok()) << all.status().message();
  JobSpec weighted;
  weighted.weights.column = "w";
  auto data = Load(csv, weighted);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_EQ(all->features, 3u);
  ASSERT_EQ(data->features, 2u);
  ASSERT_EQ(data->schema.columns.size(), 3u);
  for (const dataset::Column& c : data->schema.columns) EXPECT_NE(c.name, "w");
  ASSERT_EQ(data->sample_weights.size(), 200u);
  for (size_t r = 0; r < 200; ++r) {
    EXPECT_EQ(data->sample_weights[r], static_cast<float>(1 + r % 3)) << r;
    EXPECT_EQ(data->x.get().data[r * 2], all->x.get().data[r * 3]) << r;
    EXPECT_EQ(data->x.get().data[r * 2 + 1], all->x.get().data[r * 3 + 2]) << r;
  }
}

TEST_F(WeightsTest, AWeightColumnThatCannotCarryWeightsIsRefused) {
  const std::string bad = (dir_ / "bad.csv").string();
  std::ofstream(bad) << "x1,w,y\n0.5,1,yes\n0.1,-2,no\n0.3,1,no\n";
  auto expect = [&](const std::string& path, const std::string& column, const std::string& fragment) {
    JobSpec job;
    job.weights.column = column;
    auto r = Load(path, job);
    ASSERT_FALSE(r.ok()) << column;
    EXPECT_EQ(r.status().code(), Code::kInvalidInput);
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  };
  expect(bad, "w", "training.sample_weight_column 'w': data row 2 has weight -2 (weights must be finite and >= 0)");
  expect(bad, "nope", "training.sample_weight_column 'nope': the data has no such column");
  expect(bad, "y", "training.sample_weight_column 'y' is the label column");
  const std::string kinds = (dir_ / "kinds.csv").string();
  std::ofstream(kinds) << "x1,w,ward,y\n0.5,NA,a,yes\n0.1,2,b,no\n0.3,1,a,no\n";
  expect(kinds, "w", "training.sample_weight_column 'w' allows missing values");
  expect(kinds, "ward", "training.sample_weight_column 'ward' must be a numeric column");
}

TEST_F(WeightsTest, BalancedWeightsComeFromTheTrainingRowsOnly) {
  auto data = Load(ImbalancedCsv(200, 20, 2), JobSpec{});
  ASSERT_TRUE(data.ok()) << data.status().message();
  auto split = StratifiedSplit(data->labels, data->classes, 0.25, 7);
  ASSERT_TRUE(split.ok());
  size_t pos = 0;
  for (uint32_t r : split->train) pos += data->labels[r] == 1.0f ? 1 : 0;
  const double n = static_cast<double>(split->train.size());
  WeightSpec spec;
  spec.rule = ClassWeightRule::kBalanced;
  auto w = ClassWeightsFor(spec, *data, split->train);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 2u);
  EXPECT_DOUBLE_EQ((*w)[0], n / (2 * (n - static_cast<double>(pos))));
  EXPECT_DOUBLE_EQ((*w)[1], n / (2 * static_cast<double>(pos)));
  // Given weights must name every class of the data, and no other.
  spec.rule = ClassWeightRule::kGiven;
  spec.given = {{"yes", 4.0}};
  auto missing = ClassWeightsFor(spec, *data, split->train);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "training.class_weight gives no weight for class 'no'");
  spec.given = {{"yes", 4.0}, {"no", 1.0}, {"maybe", 2.0}};
  auto unknown = ClassWeightsFor(spec, *data, split->train);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "training.class_weight names class 'maybe', which the data does not have");
  spec.given = {{"yes", 4.0}, {"no", 1.5}};
  auto given = ClassWeightsFor(spec, *data, split->train);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, (std::vector<double>{1.5, 4.0}));
}

// The weighted gradient of a batch is the weighted sum of its rows' gradients, through
// every layer.
TEST_F(WeightsTest, AWeightedGradientIsTheWeightedSumOfTheRowsGradients) {
  ModelShape shape;
  shape.inputs = 3;
  shape.hidden = {5, 4};
  shape.classes = 3;
  const size_t rows = 5, P = shape.parameter_count();
  auto model = Mlp::Create(*backend_, shape, rows, 11);
  ASSERT_TRUE(model.ok());
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(rows * 3), y = {0, 2, 1, 1, 0}, w = {0.0f, 1.0f, 2.5f, 0.5f, 3.0f};
  for (float& v : x) v = nd(gen);
  auto up = [&](const std::vector<float>& v) {
    auto b = AllocOwned(*backend_, v.size());
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(backend_->Upload(*b, v.data(), v.size()).ok());
    return std::move(b).value();
  };
  OwnedBuffer X = up(x), Y = up(y), W = up(w);
  ASSERT_TRUE(model->Forward(X, rows).ok());
  double loss = 0;
  ASSERT_TRUE(model->Backward(X, Y, rows, &loss, rows, W).ok());
  std::vector<float> weighted(P);
  ASSERT_TRUE(backend_->Download(weighted.data(), model->grads(), P).ok());
  std::vector<double> want(P, 0.0);
  double want_loss = 0;
  for (size_t r = 0; r < rows; ++r) {
    OwnedBuffer xr = up(std::vector<float>(x.begin() + r * 3, x.begin() + (r + 1) * 3)), yr = up({y[r]});
    ASSERT_TRUE(model->Forward(xr, 1).ok());
    double row_loss = 0;
    ASSERT_TRUE(model->Backward(xr, yr, 1, &row_loss, rows).ok());
    std::vector<float> g(P);
    ASSERT_TRUE(backend_->Download(g.data(), model->grads(), P).ok());
    for (size_t i = 0; i < P; ++i) want[i] += w[r] * g[i];
    want_loss += w[r] * row_loss;
  }
  for (size_t i = 0; i < P; ++i) EXPECT_NEAR(weighted[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
  EXPECT_NEAR(loss, want_loss, 1e-6 * (1 + want_loss));
}

// A weight of 2 on every class doubles every gradient exactly: with plain SGD that is the
// same training as twice the learning rate, bit for bit, and the same reported losses.
TEST_F(WeightsTest, UniformClassWeightTwoIsDoubleTheLearningRateBitForBit) {
  auto data = Load(ImbalancedCsv(300, 60, 4), JobSpec{});
  ASSERT_TRUE(data.ok()) << data.status().message();
  JobSpec job;
  job.seed = 9;
  job.epochs = 15;
  job.batch_size = 16;
  job.model.hidden = {8};
  job.optimizer.kind = OptimizerKind::kSgd;
  job.optimizer.lr = 0.01f;
  auto split = StratifiedSplit(data->labels, data->classes, 0.2, job.seed);
  ASSERT_TRUE(split.ok());
  JobSpec weighted = job;
  weighted.weights.rule = ClassWeightRule::kGiven;
  weighted.weights.given = {{"no", 2.0}, {"yes", 2.0}};
  JobSpec faster = job;
  faster.optimizer.lr = 0.02f;
  auto a = Train(*backend_, weighted, *data, *split);
  auto b = Train(*backend_, faster, *data, *split);
  auto plain = Train(*backend_, job, *data, *split);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok() && plain.ok());
  ASSERT_EQ(a->params.size(), b->params.size());
  EXPECT_EQ(std::memcmp(a->params.data(), b->params.data(), a->params.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a->params.data(), plain->params.data(), a->params.size() * sizeof(float)), 0);
  EXPECT_EQ(a->epochs.back().train_loss, b->epochs.back().train_loss);
  EXPECT_EQ(a->epochs.back().val_loss, b->epochs.back().val_loss);
  EXPECT_EQ(a->class_weights, (std::vector<double>{2.0, 2.0}));
}

// On a 9:1 table an unweighted model at threshold 0.5 finds few positives; balanced class
// weights make the positives count as much as the negatives, for both model families.
TEST_F(WeightsTest, BalancedClassWeightsRaiseTheSensitivityOnAnImbalancedTable) {
  auto data = Load(ImbalancedCsv(2000, 200, 5), JobSpec{});
  ASSERT_TRUE(data.ok()) << data.status().message();
  for (ModelFamily family : {ModelFamily::kMlp, ModelFamily::kXgboost}) {
    JobSpec job;
    job.seed = 3;
    job.family = family;
    job.epochs = 30;
    job.trees.rounds = 30;
    job.trees.max_depth = 3;
    job.trees.threads = 1;
    if (family == ModelFamily::kXgboost) job.epochs = job.trees.rounds;
    auto split = StratifiedSplit(data->labels, data->classes, 0.3, job.seed);
    ASSERT_TRUE(split.ok());
    JobSpec balanced = job;
    balanced.weights.rule = ClassWeightRule::kBalanced;
    auto plain = Train(*backend_, job, *data, *split);
    auto weighted = Train(*backend_, balanced, *data, *split);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    ASSERT_TRUE(weighted.ok()) << weighted.status().message();
    const double s0 = Sensitivity(*plain, *data, *split), s1 = Sensitivity(*weighted, *data, *split);
    EXPECT_GT(s1, s0 + 0.3) << ModelFamilyName(family) << ": sensitivity " << s0 << " unweighted, " << s1 << " balanced";
    EXPECT_GT(s1, 0.45) << ModelFamilyName(family);
    ASSERT_EQ(weighted->class_weights.size(), 2u);
    EXPECT_GT(weighted->class_weights[1], 4.0);  // about 10 / 2
  }
}

TEST_F(WeightsTest, EveryTrainingRowWeighingZeroIsRefused) {
  const std::string csv = (dir_ / "zero.csv").string();
  {
    std::ofstream f(csv);
    f << "w,y\n";
    for (int r = 0; r < 40; ++r) f << "1," << (r % 2 ? "yes" : "no") << "\n";
  }
  JobSpec job;
  job.weights.column = "w";
  auto data = Load(csv, job);
  ASSERT_FALSE(data.ok());  // the only feature column
  EXPECT_NE(data.status().message().find("is the only feature column"), std::string::npos) << data.status().message();
  {
    std::ofstream f(csv);
    f << "x1,x2,w,y\n";
    for (int r = 0; r < 40; ++r) f << r * 0.1 << "," << r % 7 << ",0," << (r % 2 ? "yes" : "no") << "\n";
  }
  auto zero = Load(csv, job);
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  auto split = StratifiedSplit(zero->labels, zero->classes, 0.2, 1);
  ASSERT_TRUE(split.ok());
  auto r = Train(*backend_, job, *zero, *split);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_NE(r.status().message().find("every training row has weight 0"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace enclave::trainer
