// Data-parallel training over the encrypted ring (net/ring.h): ranks as threads of one
// process, each with its own CPU backend and its own copy of the data, exactly as separate
// processes would hold them. Checks: every rank ends with the same bits; a run repeats bit
// for bit; the result equals single-process training within the documented tolerance
// (docs/training.md "Distributed training"); a stop vote of one rank stops every rank
// after the same step.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "enclave/net/ring.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/trainer.h"
#include "train_state_copy.h"

namespace enclave::trainer {
namespace {

using test_util::CloneState;

namespace fs = std::filesystem;

class RingAdapter final : public Collective {
 public:
  explicit RingAdapter(std::unique_ptr<net::Ring> ring) : ring_(std::move(ring)) {}
  int rank() const override { return ring_->rank(); }
  int world_size() const override { return ring_->world_size(); }
  Status AllReduceSum(float* d, size_t n) override { return ring_->AllReduceSum(d, n); }
  Status AllReduceSum(double* d, size_t n) override { return ring_->AllReduceSum(d, n); }

 private:
  std::unique_ptr<net::Ring> ring_;
};

const std::string kBreast = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";
const std::string kCredit = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";

JobSpec MakeJob(const std::string& csv, const std::string& label, const std::string& positive, const std::string& extra) {
  const std::string text = "seed = 11\noutput_dir = \"/tmp\"\n" + extra + "\n[[datasets]]\nid = \"d\"\npath = \"" + csv +
                           "\"\nformat = \"csv\"\nlabel = \"" + label + "\"\npositive = \"" + positive + "\"\n";
  auto job = ParseJob(text, "test.toml", "/tmp");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return std::move(job).value();
}

Result<TrainResult> TrainOne(const JobSpec& job, Collective* collective, const TrainCallbacks& cb = {},
                             const TrainState* resume = nullptr) {
  auto be = MakeCpuBackend();
  ASSIGN_OR_RETURN(LoadedData data, LoadJobData(*be, job, nullptr));
  ASSIGN_OR_RETURN(Split split, StratifiedSplit(data.labels, data.classes, job.validation_fraction, job.seed));
  return Train(*be, job, data, split, cb, resume, collective);
}

// world ranks as threads; rank r's callbacks from make_cb(r), its resume state from resume_of(r).
std::vector<Result<TrainResult>> TrainRanks(const JobSpec& job, int world,
                                            const std::function<TrainCallbacks(int)>& make_cb = {},
                                            const std::function<const TrainState*(int)>& resume_of = {}) {
  char t[] = "/tmp/dist-test-XXXXXX";
  const std::string dir = mkdtemp(t);
  std::vector<Result<TrainResult>> out;
  for (int r = 0; r < world; ++r) out.emplace_back(Internal("not run"));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto key = crypto::SecretBytes::Create(32);
      auto ex = net::DirectoryExchange(dir, "job-dist-test");
      if (!key.ok() || !ex.ok()) return;
      net::RingOptions o;
      o.world_size = world;
      o.rank = r;
      o.comm_id = 77;
      o.timeout = std::chrono::seconds(120);
      auto ring = net::Ring::Connect(*key, o, **ex);
      if (!ring.ok()) {
        out[r] = ring.status();
        return;
      }
      RingAdapter c(std::move(ring).value());
      out[r] = TrainOne(job, &c, make_cb ? make_cb(r) : TrainCallbacks{}, resume_of ? resume_of(r) : nullptr);
    });
  }
  for (auto& th : ranks) th.join();
  fs::remove_all(dir);
  return out;
}

bool SameBits(const LockedArray<float>& a, const LockedArray<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The documented tolerance: every parameter within 1e-5 * max(1, |its single-process value|).
double WorstRelativeDiff(const LockedArray<float>& got, const LockedArray<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double{got[i]} - double{want[i]}) / std::max(1.0, std::fabs(double{want[i]}));
    worst = std::max(worst, d);
  }
  return worst;
}
constexpr double kTolerance = 1e-5;

struct Case {
  const char* name;
  std::string csv, label, positive, extra;
};

class DistributedTest : public ::testing::TestWithParam<int> {};

void CheckAgainstSingle(const Case& c, int world) {
  SCOPED_TRACE(std::string(c.name) + ", world " + std::to_string(world));
  const JobSpec job = MakeJob(c.csv, c.label, c.positive, c.extra);
  auto single = TrainOne(job, nullptr);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  auto ranks = TrainRanks(job, world);
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(ranks[r].ok()) << "rank " << r << ": " << ranks[r].status().ToString();
    EXPECT_TRUE(SameBits(ranks[r]->params, ranks[0]->params)) << "rank " << r << " differs from rank 0";
  }
  const TrainResult& d = *ranks[0];
  EXPECT_EQ(d.steps, single->steps);
  const double worst = WorstRelativeDiff(d.params, single->params);
  std::printf("%s, %d ranks: worst parameter difference %.3g (tolerance %.0e)\n", c.name, world, worst, kTolerance);
  EXPECT_LE(worst, kTolerance);
  EXPECT_NEAR(d.epochs.back().train_loss, single->epochs.back().train_loss, 1e-5);
  EXPECT_NEAR(d.epochs.back().val_accuracy, single->epochs.back().val_accuracy, 1e-9);
  // The sums really were reordered: not the single-process bits (else this test proves little).
  EXPECT_FALSE(SameBits(d.params, single->params));
}

const Case kLogreg{"breast cancer, logistic regression, AdamW", kBreast, "diagnosis", "malignant",
                   "[model]\nhidden = []\n[training]\nepochs = 20\nbatch_size = 32\n[optimizer]\ntype = \"adamw\"\nlr = 0.01\nl2 = 0.002\n"};
const Case kMlp{"breast cancer, MLP 32-16 tanh, SGD momentum", kBreast, "diagnosis", "malignant",
                "[model]\nhidden = [32, 16]\nactivation = \"tanh\"\n[training]\nepochs = 15\nbatch_size = 50\n"
                "[optimizer]\ntype = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.0001\n"};
const Case kCreditMlp{"credit card, MLP 64 relu, AdamW", kCredit, "card", "yes",
                      "[model]\nhidden = [64]\n[training]\nepochs = 10\nbatch_size = 64\n[optimizer]\ntype = \"adamw\"\nlr = 0.003\n"};

// [streaming]: every rank streams the same windows and trains its share of each batch.
const Case kStreamed{"breast cancer, MLP 16, AdamW, streamed (blocks of 16, windows of 3)", kBreast, "diagnosis",
                     "malignant",
                     "[model]\nhidden = [16]\n[training]\nepochs = 6\nbatch_size = 40\n[optimizer]\ntype = \"adamw\"\n"
                     "lr = 0.01\n[streaming]\nblock_rows = 16\nwindow_blocks = 3\n"};

TEST_P(DistributedTest, EqualsSingleProcessWithinTolerance) {
  for (const Case* c : {&kLogreg, &kMlp, &kCreditMlp, &kStreamed}) CheckAgainstSingle(*c, GetParam());
}
INSTANTIATE_TEST_SUITE_P(Ranks, DistributedTest, ::testing::Values(2, 3, 4));

TEST(DistributedRunTest, RepeatsBitForBit) {
  const JobSpec job = MakeJob(kMlp.csv, kMlp.label, kMlp.positive, kMlp.extra);
  auto a = TrainRanks(job, 3), b = TrainRanks(job, 3);
  ASSERT_TRUE(a[0].ok() && b[0].ok());
  EXPECT_TRUE(SameBits(a[0]->params, b[0]->params));
}

TEST(DistributedRunTest, OneRanksStopStopsEveryRankAfterTheSameStep) {
  const JobSpec job = MakeJob(kLogreg.csv, kLogreg.label, kLogreg.positive, kLogreg.extra);
  auto ranks = TrainRanks(job, 3, [](int r) {
    TrainCallbacks cb;
    if (r == 2) cb.should_stop = [](uint64_t step) { return step == 17; };
    return cb;
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ranks[r].ok()) << ranks[r].status().ToString();
    EXPECT_TRUE(ranks[r]->stopped) << "rank " << r;
    EXPECT_EQ(ranks[r]->steps, 17u) << "rank " << r;
    EXPECT_EQ(ranks[r]->stopped_by_peer, r != 2) << "rank " << r;
    EXPECT_TRUE(SameBits(ranks[r]->params, ranks[0]->params));
  }
}

// Ranks that would start from different states (one resumed from another checkpoint step,
// or the same step with other parameters) refuse before the first step instead of
// training apart.
TEST(DistributedRunTest, RanksThatStartFromDifferentStatesRefuse) {
  const JobSpec job = MakeJob(kLogreg.csv, kLogreg.label, kLogreg.positive, kLogreg.extra);
  std::vector<TrainState> saved;
  TrainCallbacks cb;
  cb.on_checkpoint = [&saved](const ResidentTrainState& st) -> Status {
    ASSIGN_OR_RETURN(TrainState c, CloneState(st));
    saved.push_back(std::move(c));
    return OkStatus();
  };
  cb.checkpoint_every = 5;
  cb.should_stop = [](uint64_t step) { return step == 10; };
  ASSERT_TRUE(TrainOne(job, nullptr, cb).ok());
  ASSERT_EQ(saved.size(), 2u);  // steps 5 and 10
  // Both from step 10: they train together.
  auto same = TrainRanks(job, 2, {}, [&saved](int) { return &saved[1]; });
  ASSERT_TRUE(same[0].ok() && same[1].ok()) << same[0].status().ToString() << " / " << same[1].status().ToString();
  // Rank 1 from step 5, rank 0 from step 10.
  auto ranks = TrainRanks(job, 2, {}, [&saved](int r) { return &saved[r == 0 ? 1 : 0]; });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(ranks[r].ok()) << "rank " << r;
    EXPECT_EQ(ranks[r].status().code(), Code::kFailedPrecondition) << ranks[r].status().ToString();
    EXPECT_NE(ranks[r].status().message().find("starts at step 5 and rank 0 at step 10"), std::string::npos)
        << ranks[r].status().ToString();
  }
  // The same step, one parameter changed on rank 1.
  auto changed = CloneState(saved[1]);
  ASSERT_TRUE(changed.ok());
  changed->params[0] += 1.0f;
  auto other = TrainRanks(job, 2, {}, [&](int r) { return r == 0 ? &saved[1] : &*changed; });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(other[r].ok()) << "rank " << r;
    EXPECT_NE(other[r].status().message().find("with other data, parameters or optimizer state"), std::string::npos)
        << other[r].status().ToString();
  }
}

TEST(DistributedRunTest, MoreRanksThanRowsInABatchStillTrains) {
  // batch 3 over 4 ranks: one rank has no row in every step and contributes zeros.
  const JobSpec job = MakeJob(kLogreg.csv, kLogreg.label, kLogreg.positive,
                              "[model]\nhidden = []\n[training]\nepochs = 2\nbatch_size = 3\n[optimizer]\ntype = \"sgd\"\nlr = 0.01\n");
  auto single = TrainOne(job, nullptr);
  auto ranks = TrainRanks(job, 4);
  ASSERT_TRUE(single.ok() && ranks[0].ok()) << ranks[0].status().ToString();
  EXPECT_LE(WorstRelativeDiff(ranks[0]->params, single->params), kTolerance);
}

}  // namespace
}  // namespace enclave::trainer
