// Determinism, end to end on real files: (1) the same job and seed train a bit-identical
// model twice; (2) training from a sealed dataset gives weights bit-identical to training
// from the CSV it was sealed from; (3) the comparison can fail (another seed differs).
// Also: a sealed file with another dataset id, or tampered, is refused before training.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "enclave/crypto/keystore.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/rng.h"
#include "enclave/trainer/trainer.h"
#include "file_damage.h"

namespace enclave::trainer {
namespace {

namespace fs = std::filesystem;

class Determinism : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enclave-train-det-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto pass = crypto::SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>("correct horse battery"), 21});
    ASSERT_TRUE(pass.ok());
    ks_path_ = (dir_ / "tenant.keystore").string();
    ASSERT_TRUE(crypto::Keystore::Init(ks_path_, *pass, crypto::KdfParams{2, 19ull << 20}).ok());
    auto ks = crypto::Keystore::Unlock(ks_path_, *pass);
    ASSERT_TRUE(ks.ok());
    ks_.emplace(std::move(ks).value());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Seal(const std::string& csv, const std::string& label, const std::string& positive,
                   const std::string& id, crypto::Suite suite, uint32_t chunk_records) {
    dataset::SealOptions o;
    o.csv_path = csv;
    o.out_path = (dir_ / (id + ".sealed")).string();
    o.label.column = label;
    o.label.positive = positive;
    o.suite = suite;
    o.dataset_id = id;
    o.chunk_records = chunk_records;
    auto info = dataset::SealCsv(o, *ks_);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return o.out_path;
  }

  JobSpec Job(const std::string& dataset_lines, const std::string& extra) {
    const std::string text = "seed = 5\noutput_dir = \"" + (dir_ / "out").string() + "\"\n" + extra + "\n" +
                             "[[datasets]]\n" + dataset_lines;
    auto job = ParseJob(text, "test.toml", dir_.string());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return std::move(job).value();
  }

  Result<TrainResult> RunJob(const JobSpec& job) {
    auto be = MakeCpuBackend();
    ASSIGN_OR_RETURN(LoadedData data, LoadDatasets(*be, job.datasets, &*ks_));
    ASSIGN_OR_RETURN(Split split, StratifiedSplit(data.labels, data.classes, job.validation_fraction, job.seed));
    return Train(*be, job, data, split);
  }

  static bool BitIdentical(const LockedArray<float>& a, const LockedArray<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  fs::path dir_;
  std::string ks_path_;
  std::optional<crypto::Keystore> ks_;
};

const std::string kBreast = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";
const std::string kCredit = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";

const char* kMlp =
    "[model]\nhidden = [16, 8]\nactivation = \"tanh\"\n[training]\nepochs = 4\nbatch_size = 16\n"
    "[optimizer]\ntype = \"adamw\"\nlr = 0.01\nweight_decay = 0.01\nl2 = 0.001\n[schedule]\ntype = \"cosine\"\n"
    "warmup_epochs = 1\n";

TEST_F(Determinism, SameJobSameSeedSameModel) {
  JobSpec job = Job("id = \"bc\"\npath = \"" + kBreast + "\"\nformat = \"csv\"\nlabel = \"diagnosis\"\npositive = \"malignant\"\n", kMlp);
  auto a = RunJob(job), b = RunJob(job);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(BitIdentical(a->params, b->params));
  EXPECT_TRUE(BitIdentical(a->mean, b->mean));
  EXPECT_EQ(a->epochs.back().train_loss, b->epochs.back().train_loss);

  job.seed = 6;
  auto c = RunJob(job);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(BitIdentical(a->params, c->params));
}

TEST_F(Determinism, SealedAndClearGiveBitIdenticalWeights) {
  struct Case {
    std::string csv, label, positive, id;
    crypto::Suite suite;
    uint32_t chunk_records;
    std::string extra;
  };
  const std::vector<Case> cases = {
      {kBreast, "diagnosis", "malignant", "breast-cancer", crypto::Suite::kAes256Gcm, 0, kMlp},
      // Credit: yes/no feature columns; chacha; tiny chunks (many chunk boundaries); SGD.
      {kCredit, "card", "yes", "credit-card", crypto::Suite::kChaCha20Poly1305, 7,
       "[model]\nhidden = [8]\n[training]\nepochs = 3\n[optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n"},
  };
  for (const Case& c : cases) {
    const std::string sealed = Seal(c.csv, c.label, c.positive, c.id, c.suite, c.chunk_records);
    JobSpec clear = Job("id = \"" + c.id + "\"\npath = \"" + c.csv + "\"\nformat = \"csv\"\nlabel = \"" + c.label +
                            "\"\npositive = \"" + c.positive + "\"\n",
                        c.extra);
    JobSpec sealed_job = Job("id = \"" + c.id + "\"\npath = \"" + sealed + "\"\n", c.extra);
    auto a = RunJob(clear), b = RunJob(sealed_job);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_GT(a->params.size(), 0u);
    EXPECT_TRUE(BitIdentical(a->params, b->params)) << c.id;
    EXPECT_TRUE(BitIdentical(a->inv_std, b->inv_std)) << c.id;
    EXPECT_EQ(a->epochs.back().val_accuracy, b->epochs.back().val_accuracy);
  }
}

TEST_F(Determinism, SealedFileMustCarryTheJobsDatasetId) {
  const std::string sealed = Seal(kBreast, "diagnosis", "malignant", "breast-cancer", crypto::Suite::kAes256Gcm, 0);
  JobSpec job = Job("id = \"other-dataset\"\npath = \"" + sealed + "\"\n", kMlp);
  auto r = RunJob(job);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied);
}

TEST_F(Determinism, TamperedChunkAbortsBeforeTraining) {
  const std::string sealed = Seal(kBreast, "diagnosis", "malignant", "breast-cancer", crypto::Suite::kAes256Gcm, 50);
  test_util::FlipByteFromEnd(sealed, 100);  // inside the last chunk
  JobSpec job = Job("id = \"breast-cancer\"\npath = \"" + sealed + "\"\n", kMlp);
  auto r = RunJob(job);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAuthFailed) << r.status().ToString();
}

TEST_F(Determinism, SchemasOfSeveralDatasetsMustAgree) {
  const std::string a = Seal(kBreast, "diagnosis", "malignant", "breast-cancer", crypto::Suite::kAes256Gcm, 0);
  const std::string b = Seal(kCredit, "card", "yes", "credit-card", crypto::Suite::kAes256Gcm, 0);
  JobSpec job = Job("id = \"breast-cancer\"\npath = \"" + a + "\"\n[[datasets]]\nid = \"credit-card\"\npath = \"" + b + "\"\n", kMlp);
  auto be = MakeCpuBackend();
  auto r = LoadDatasets(*be, job.datasets, &*ks_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  // The same dataset twice (two ids would need two seals): concatenation works.
  const std::string a2 = Seal(kBreast, "diagnosis", "malignant", "breast-cancer-2", crypto::Suite::kAes256Gcm, 0);
  JobSpec two = Job("id = \"breast-cancer\"\npath = \"" + a + "\"\n[[datasets]]\nid = \"breast-cancer-2\"\npath = \"" + a2 + "\"\n", kMlp);
  auto both = LoadDatasets(*be, two.datasets, &*ks_);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->rows, 2u * 569u);
  EXPECT_EQ(both->sources.size(), 2u);
}

// Standardization comes from the training rows only: the trainer's mean and 1/std equal
// the population moments of exactly those rows (computed here in double), and differ
// from the moments of all rows.
TEST_F(Determinism, StandardizationFromTrainingRowsOnly) {
  JobSpec job = Job("id = \"bc\"\npath = \"" + kBreast + "\"\nformat = \"csv\"\nlabel = \"diagnosis\"\n"
                    "positive = \"malignant\"\n", "[training]\nepochs = 1\nvalidation_fraction = 0.3\n");
  auto be = MakeCpuBackend();
  auto data = LoadDatasets(*be, job.datasets, nullptr);
  ASSERT_TRUE(data.ok());
  auto split = StratifiedSplit(data->labels, data->classes, job.validation_fraction, job.seed);
  ASSERT_TRUE(split.ok());
  auto r = Train(*be, job, *data, *split);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const size_t F = data->features;
  std::vector<float> x(data->rows * F);
  ASSERT_TRUE(be->Download(x.data(), data->x, x.size()).ok());
  for (size_t c = 0; c < F; ++c) {
    double sum = 0, sq = 0, all = 0;
    for (uint32_t row : split->train) sum += x[row * F + c];
    const double mean = sum / static_cast<double>(split->train.size());
    for (uint32_t row : split->train) sq += (x[row * F + c] - mean) * (x[row * F + c] - mean);
    for (size_t row = 0; row < data->rows; ++row) all += x[row * F + c];
    const double inv_std = 1.0 / std::sqrt(sq / static_cast<double>(split->train.size()));
    EXPECT_NEAR(r->mean[c], mean, 1e-5 * (1 + std::fabs(mean))) << "feature " << c;
    EXPECT_NEAR(r->inv_std[c], inv_std, 1e-5 * inv_std) << "feature " << c;
    if (c == 0) {
      EXPECT_GT(std::fabs(all / static_cast<double>(data->rows) - mean), 1e-4);
    }
  }
}

// The softmax path end to end: three well-separated Gaussian blobs (a CSV written here,
// string class names) are learned by `cv` with near-perfect accuracy and a macro AUC.
TEST_F(Determinism, MulticlassEndToEnd) {
  const std::string csv = (dir_ / "blobs.csv").string();
  {
    std::ofstream f(csv);
    f << "x1,x2,flag,kind\n";
    Rng rng(77);
    const char* names[] = {"alpha", "beta", "gamma"};
    const float cx[] = {0, 4, -4}, cy[] = {4, -2, -2};
    for (int i = 0; i < 300; ++i) {
      const int c = i % 3;
      f << cx[c] + rng.Uniform(-1.5f, 1.5f) << "," << cy[c] + rng.Uniform(-1.5f, 1.5f) << ","
        << (rng.UniformFloat() < 0.5f ? "yes" : "no") << "," << names[c] << "\n";
    }
  }
  JobSpec job = Job("id = \"blobs\"\npath = \"" + csv + "\"\nformat = \"csv\"\nlabel = \"kind\"\n",
                    "[model]\nhidden = [8]\n[training]\nepochs = 30\n[optimizer]\nlr = 0.01\n");
  auto be = MakeCpuBackend();
  auto data = LoadDatasets(*be, job.datasets, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->classes, 3u);
  EXPECT_EQ(data->schema.classes, (std::vector<std::string>{"alpha", "beta", "gamma"}));
  auto cv = CrossValidate(*be, job, *data, 3);
  ASSERT_TRUE(cv.ok()) << cv.status().ToString();
  EXPECT_GE(cv->mean_accuracy, 0.97);
  EXPECT_GE(cv->mean_auc, 0.99);
  EXPECT_EQ(cv->folds[0].shape.outputs(), 3u);
}

}  // namespace
}  // namespace enclave::trainer
