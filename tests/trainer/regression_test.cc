// Regression (issue 18 §4, the network family): half squared error on the standardized
// target, splits of one stratum, RMSE / MAE / R^2 in the target's units, the model file's
// version 2 with the target's scale, and predictions of the model file equal to the
// trainer's own. On the breast-cancer sample: mean_area from the other columns (the
// diagnosis, text, becomes a categorical column).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "enclave/crypto/hash.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/model_file.h"
#include "enclave/trainer/predict.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {
namespace {

DatasetSpec AreaSpec() {
  DatasetSpec d;
  d.id = "breast-cancer";
  d.path = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";
  d.format = DatasetFormat::kCsv;
  d.label = "mean_area";
  d.task = dataset::Task::kRegression;
  return d;
}

JobSpec LinearJob() {
  JobSpec job;
  job.seed = 11;
  job.epochs = 60;
  job.optimizer.lr = 0.01f;
  return job;
}

TEST(Regression, SplitsAreSeededAndOfOneStratum) {
  auto labels = LockedArray<float>::Create(10);
  ASSERT_TRUE(labels.ok());
  for (size_t i = 0; i < 10; ++i) (*labels)[i] = 100.0f + static_cast<float>(i) * 0.5f;  // targets, not classes
  auto a = StratifiedSplit(*labels, 0, 0.3, 4), b = StratifiedSplit(*labels, 0, 0.3, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->val.size(), 3u);
  EXPECT_EQ(a->train.size(), 7u);
  EXPECT_EQ(std::memcmp(a->val.data(), b->val.data(), 3 * sizeof(uint32_t)), 0);
  auto folds = StratifiedKFold(*labels, 0, 3, 4);
  ASSERT_TRUE(folds.ok());
  size_t total = 0;
  for (const Split& s : *folds) total += s.val.size();
  EXPECT_EQ(total, 10u);
  EXPECT_EQ((*folds)[0].val.size(), 4u);
}

TEST(Regression, LinearModelOfTheSampleAndItsModelFile) {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, {AreaSpec()}, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_EQ(data->classes, 0u);
  ASSERT_EQ(data->schema.task, dataset::Task::kRegression);
  const JobSpec job = LinearJob();
  auto split = StratifiedSplit(data->labels, 0, 0.2, job.seed);
  ASSERT_TRUE(split.ok());
  auto r = Train(*backend, job, *data, *split);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->shape.regression());
  EXPECT_EQ(r->shape.outputs(), 1u);
  const EpochMetrics& last = r->epochs.back();
  EXPECT_TRUE(std::isnan(last.val_accuracy) && std::isnan(last.val_auc));
  EXPECT_GT(last.val_r2, 0.97) << "mean_area is close to linear in mean_perimeter and worst_area";
  EXPECT_GT(last.val_rmse, 0);
  EXPECT_LT(last.val_rmse, 80);  // mean_area spans 143..2501
  EXPECT_LE(last.val_mae, last.val_rmse);
  EXPECT_LT(last.train_loss, r->epochs.front().train_loss);
  // The target's scale, from the training rows: near the sample's mean area (654.9).
  EXPECT_GT(r->label_mean, 600);
  EXPECT_LT(r->label_mean, 710);
  EXPECT_GT(r->label_scale, 300);

  auto model = MakeModelFile(r->shape, data->schema, r->mean, r->inv_std, r->params, &r->preprocessing);
  ASSERT_TRUE(model.ok());
  model->label_mean = r->label_mean;
  model->label_scale = r->label_scale;
  auto bytes = EncodeModelFile(*model);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(bytes->ExposeSecret()[8], 2);
  EXPECT_STREQ(ModelFormatIdFor(model->preprocessing, model->shape), "enclave-train-model/2");
  auto parsed = ParseModelFile(bytes->ExposeSecret());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->shape.classes, 0u);
  EXPECT_EQ(parsed->label_mean, r->label_mean);
  EXPECT_EQ(parsed->label_scale, r->label_scale);
  auto again = EncodeModelFile(*parsed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::memcmp(again->ExposeSecret().data(), bytes->ExposeSecret().data(), bytes->size()), 0);

  // The model file predicts the CSV as the trainer predicts its loaded rows, bit for bit.
  auto table = ReadFeatureCsv(AreaSpec().path, parsed->schema, &parsed->preprocessing);
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_TRUE(table->has_labels);
  auto from_file = PredictProbabilities(*backend, *parsed, table->x.data(), table->rows);
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  double sse = 0;
  for (size_t i = 0; i < table->rows; ++i) {
    const double d = static_cast<double>((*from_file)[i]) - table->labels[i];
    sse += d * d;
    EXPECT_EQ(table->labels[i], data->labels[i]);
  }
  EXPECT_LT(std::sqrt(sse / static_cast<double>(table->rows)), 80);

  // A damaged target scale is refused: zero scale.
  std::vector<uint8_t> b(bytes->ExposeSecret().begin(), bytes->ExposeSecret().end());
  const size_t body = b.size() - kModelDigestBytes;
  const size_t scale_at = body - 4 * (2 * r->shape.inputs + r->shape.parameter_count()) - 4;
  std::memset(b.data() + scale_at, 0, 4);
  const crypto::Digest256 d = crypto::Sha256(ByteSpan(b.data(), body));
  std::memcpy(b.data() + body, d.data(), d.size());
  auto bad = ParseModelFile(b);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must be finite and the scale positive"), std::string::npos)
      << bad.status().message();
}

TEST(Regression, CrossValidation) {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, {AreaSpec()}, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().message();
  JobSpec job = LinearJob();
  job.epochs = 30;
  auto cv = CrossValidate(*backend, job, *data, 3);
  ASSERT_TRUE(cv.ok()) << cv.status().message();
  EXPECT_GT(cv->mean_r2, 0.95);
  EXPECT_TRUE(std::isnan(cv->mean_accuracy));
  EXPECT_GT(cv->mean_rmse, 0);
}

}  // namespace
}  // namespace enclave::trainer
