// Early stopping (issue 18 §5): training stops once the validation loss has not improved
// for `early_stopping_patience` epochs and keeps the best epoch's model, which is exactly
// the model of a run that stopped at that epoch (training is deterministic).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {
namespace {

TEST(EarlyStopping, KeepsTheBestEpochsModel) {
  DatasetSpec d;
  d.id = "credit-card";
  d.path = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";
  d.format = DatasetFormat::kCsv;
  d.label = "card";
  d.positive = "yes";
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, {d}, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().message();
  JobSpec job;
  job.seed = 5;
  job.epochs = 300;
  job.model.hidden = {32};
  job.optimizer.lr = 0.03f;  // fast enough to overfit well before 300 epochs
  job.early_stopping_patience = 6;
  auto split = StratifiedSplit(data->labels, data->classes, 0.2, job.seed);
  ASSERT_TRUE(split.ok());
  auto stopped = Train(*backend, job, *data, *split);
  ASSERT_TRUE(stopped.ok()) << stopped.status().message();
  ASSERT_GT(stopped->best_epoch, 0u) << "never stopped early: the test shows nothing";
  const uint32_t best = stopped->best_epoch;
  ASSERT_EQ(stopped->epochs.size(), best + 6u);
  for (const EpochMetrics& m : stopped->epochs) EXPECT_GE(m.val_loss, stopped->Final().val_loss) << m.epoch;
  EXPECT_EQ(stopped->Final().epoch, best);

  JobSpec exact = job;
  exact.epochs = best;
  exact.early_stopping_patience = 0;
  auto plain = Train(*backend, exact, *data, *split);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_EQ(plain->params.size(), stopped->params.size());
  EXPECT_EQ(std::memcmp(plain->params.data(), stopped->params.data(), plain->params.size() * sizeof(float)), 0)
      << "the kept parameters are not those of epoch " << best;
  ASSERT_EQ(plain->val_predictions.size(), stopped->val_predictions.size());
  EXPECT_EQ(std::memcmp(plain->val_predictions.data(), stopped->val_predictions.data(),
                        plain->val_predictions.size() * sizeof(float)),
            0);
  EXPECT_EQ(plain->best_epoch, 0u);
}

TEST(EarlyStopping, JobKeyNeedsValidationRowsAndNoCheckpoints) {
  const std::string base = "output_dir = \"o\"\n[[datasets]]\nid = \"d\"\npath = \"p\"\n";
  auto ok = ParseJob(base + "[training]\nearly_stopping_patience = 10\n", "job.toml", "/b");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->early_stopping_patience, 10u);
  auto no_val = ParseJob(base + "[training]\nvalidation_fraction = 0\nearly_stopping_patience = 10\n", "job.toml", "/b");
  ASSERT_FALSE(no_val.ok());
  EXPECT_NE(no_val.status().message().find("'training.early_stopping_patience' needs validation rows"), std::string::npos)
      << no_val.status().message();
  auto ckpt = ParseJob(base + "[training]\nearly_stopping_patience = 3\n[checkpoint]\nevery_steps = 10\n", "job.toml", "/b");
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("[checkpoint] do not go together"), std::string::npos) << ckpt.status().message();
}

}  // namespace
}  // namespace enclave::trainer
