// Streaming ([streaming]): the epoch's order is whole blocks per window; the trainer re-reads
// (and, sealed, re-decrypts) every training row once per epoch through RecordTable, holding
// two windows; sealed and clear streams train bit-identical models; a stopped and resumed
// streamed run ends bit-identical to an uninterrupted one; a chunk tampered with between
// epochs aborts the run; the standardization equals the in-memory one to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <chrono>
#include <mutex>
#include <thread>
#include <set>
#include <string>

#include "enclave/crypto/keystore.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/rng.h"
#include "enclave/trainer/trainer.h"
#include "train_state_copy.h"
#include "stream.h"
#include "file_damage.h"

namespace enclave::trainer {
namespace {

using test_util::CloneState;

namespace fs = std::filesystem;

const std::string kBreast = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";

// Window rows 64, batch 24: many windows, and batches that straddle two of them.
const char* kStreamMlp =
    "[model]\nhidden = [16]\nactivation = \"tanh\"\n[training]\nepochs = 3\nbatch_size = 24\n"
    "[optimizer]\ntype = \"adamw\"\nlr = 0.01\nweight_decay = 0.01\n[streaming]\nblock_rows = 16\nwindow_blocks = 4\n";

// Counts what the trainer reads, passing every read through to the real table.
class CountingTable : public RecordTable {
 public:
  explicit CountingTable(std::shared_ptr<RecordTable> inner) : inner_(std::move(inner)) {
    rows_ = inner_->rows();
    width_ = inner_->width();
    reads_per_row.assign(rows_, 0);
  }
  Status Read(uint64_t first, uint64_t count, float* out) override {
    std::lock_guard<std::mutex> lk(mu_);
    for (uint64_t r = first; r < first + count; ++r) ++reads_per_row[r];
    largest_read = std::max(largest_read, count);
    return inner_->Read(first, count, out);
  }
  std::vector<int> reads_per_row;
  uint64_t largest_read = 0;

 private:
  std::shared_ptr<RecordTable> inner_;
  std::mutex mu_;
};

class Streaming : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enclave-train-stream-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto pass = crypto::SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>("correct horse battery"), 21});
    ASSERT_TRUE(pass.ok());
    const std::string ks_path = (dir_ / "tenant.keystore").string();
    ASSERT_TRUE(crypto::Keystore::Init(ks_path, *pass, crypto::KdfParams{2, 19ull << 20}).ok());
    auto ks = crypto::Keystore::Unlock(ks_path, *pass);
    ASSERT_TRUE(ks.ok());
    ks_.emplace(std::move(ks).value());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Seal(uint32_t chunk_records) {
    dataset::SealOptions o;
    o.csv_path = kBreast;
    o.out_path = (dir_ / "bc.sealed").string();
    o.label.column = "diagnosis";
    o.label.positive = "malignant";
    o.dataset_id = "bc";
    o.chunk_records = chunk_records;
    auto info = dataset::SealCsv(o, *ks_);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return o.out_path;
  }

  JobSpec Job(const std::string& dataset_lines, const std::string& extra) {
    const std::string text = "seed = 11\noutput_dir = \"" + (dir_ / "out").string() + "\"\n" + extra + "\n" +
                             "[[datasets]]\n" + dataset_lines;
    auto job = ParseJob(text, "test.toml", dir_.string());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return std::move(job).value();
  }
  JobSpec ClearJob(const std::string& extra) {
    return Job("id = \"bc\"\npath = \"" + kBreast + "\"\nformat = \"csv\"\nlabel = \"diagnosis\"\npositive = \"malignant\"\n",
               extra);
  }

  Result<TrainResult> Run(const JobSpec& job, const TrainCallbacks& cb = {}, const TrainState* resume = nullptr) {
    auto be = MakeCpuBackend();
    ASSIGN_OR_RETURN(LoadedData data, LoadJobData(*be, job, &*ks_));
    ASSIGN_OR_RETURN(Split split, StratifiedSplit(data.labels, data.classes, job.validation_fraction, job.seed));
    return Train(*be, job, data, split, cb, resume);
  }

  static bool BitIdentical(const LockedArray<float>& a, const LockedArray<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  fs::path dir_;
  std::optional<crypto::Keystore> ks_;
};

TEST(WindowShuffleTest, EachWindowIsWholeBlocksAndTheShortBlockComesLast) {
  for (size_t rows : {1u, 7u, 64u, 100u, 1000u}) {
    const StreamLayout l{rows, 8, 3};
    std::vector<uint32_t> order(rows);
    Rng rng(5, kStreamShuffle);
    WindowShuffle(l, rng, order.data());
    std::vector<uint32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < rows; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    for (size_t w = 0; w < l.windows(); ++w) {
      const size_t lo = w * l.window_rows(), hi = std::min(rows, lo + l.window_rows());
      std::set<uint32_t> blocks;
      for (size_t i = lo; i < hi; ++i) blocks.insert(order[i] / 8);
      size_t whole = 0;
      for (uint32_t k : blocks) whole += std::min<size_t>(rows, k * 8 + 8) - k * 8;
      EXPECT_LE(blocks.size(), 3u);
      EXPECT_EQ(whole, hi - lo) << "window " << w << " of " << rows << " rows splits a block";
      if (rows % 8 != 0 && w + 1 < l.windows()) {
        EXPECT_EQ(blocks.count(static_cast<uint32_t>(rows / 8)), 0u);
      }
    }
  }
  // Deterministic for a seed, different for another, and the rows inside a window are shuffled.
  const StreamLayout l{1000, 8, 3};
  std::vector<uint32_t> a(1000), b(1000), c(1000);
  Rng r1(5, kStreamShuffle), r2(5, kStreamShuffle), r3(6, kStreamShuffle);
  WindowShuffle(l, r1, a.data());
  WindowShuffle(l, r2, b.data());
  WindowShuffle(l, r3, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t in_block_order = 0;
  for (size_t i = 0; i + 1 < 24; ++i) in_block_order += a[i + 1] == a[i] + 1;
  EXPECT_LT(in_block_order, 12u);
}

// A table whose record r is (r, 2r, label r % 2), with an optional failing row.
class RowNumberTable : public RecordTable {
 public:
  explicit RowNumberTable(uint64_t rows, uint64_t failing_row = UINT64_MAX) : failing_(failing_row) {
    rows_ = rows;
    width_ = 3;
  }
  Status Read(uint64_t first, uint64_t count, float* out) override {
    if (first + count > rows_) return Internal("past the end");
    {
      std::lock_guard<std::mutex> lk(mu_);
      reads_ += count;
    }
    if (first <= failing_ && failing_ < first + count) return AuthFailed("chunk of row " + std::to_string(failing_));
    for (uint64_t i = 0; i < count; ++i) {
      out[3 * i] = static_cast<float>(first + i);
      out[3 * i + 1] = static_cast<float>(2 * (first + i));
      out[3 * i + 2] = static_cast<float>((first + i) % 2);
    }
    return OkStatus();
  }

  uint64_t rows_read() {
    std::lock_guard<std::mutex> lk(mu_);
    return reads_;
  }

 private:
  uint64_t failing_;
  std::mutex mu_;
  uint64_t reads_ = 0;
};

// A host array into a new backend buffer (WindowStream takes the moments in backend memory).
OwnedBuffer Up(Backend& be, const LockedArray<float>& a) {
  auto b = std::move(AllocOwned(be, a.size())).value();
  EXPECT_TRUE(be.Upload(b, a.data(), a.size()).ok());
  return b;
}

// Every batch gets exactly the rows order[lo, lo + n) names, standardized, with their
// labels, for batches inside a window, across two, and after a Begin mid-epoch.
TEST(WindowStreamTest, GathersExactlyTheRowsTheOrderNames) {
  RowNumberTable table(1000);
  // Every third row is a validation row: blocks are read as spans with holes.
  Split split;
  size_t nval = 0;
  for (size_t r = 0; r < 1000; ++r) nval += r % 3 == 0;
  split.train = std::move(LockedArray<uint32_t>::Create(1000 - nval)).value();
  split.val = std::move(LockedArray<uint32_t>::Create(nval)).value();
  for (size_t r = 0, t = 0, v = 0; r < 1000; ++r) (r % 3 == 0 ? split.val[v++] : split.train[t++]) = static_cast<uint32_t>(r);
  const size_t ntr = split.train.size();
  auto be = MakeCpuBackend();
  auto mean = std::move(LockedArray<float>::Create(2)).value(), inv_std = std::move(LockedArray<float>::Create(2)).value();
  mean[0] = 1.0f, mean[1] = 0.0f, inv_std[0] = 1.0f, inv_std[1] = 0.5f;  // x0 - 1, x1 / 2
  const StreamLayout layout{ntr, 10, 3};
  auto stream = WindowStream::Create(*be, table, split, layout, 2, Up(*be, mean), Up(*be, inv_std));
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  std::vector<uint32_t> order(ntr);
  Rng rng(3, kStreamShuffle);
  auto xb = std::move(AllocOwned(*be, 2 * 25)).value();
  auto yb = std::move(AllocOwned(*be, 25)).value();
  std::vector<float> x(50), y(25);
  for (int epoch = 0; epoch < 3; ++epoch) {
    WindowShuffle(layout, rng, order.data());
    const uint64_t from = epoch == 2 ? 7 * 25 : 0;  // the third epoch starts as a resumed one would
    ASSERT_TRUE((*stream)->Begin(order.data(), from).ok());
    for (uint64_t lo = from; lo < ntr; lo += 25) {
      const size_t n = std::min<size_t>(25, ntr - lo);
      ASSERT_TRUE((*stream)->Gather(lo, n, xb, yb).ok());
      ASSERT_TRUE(be->Download(x.data(), xb, 2 * n).ok());
      ASSERT_TRUE(be->Download(y.data(), yb, n).ok());
      for (size_t i = 0; i < n; ++i) {
        const float row = static_cast<float>(split.train[order[lo + i]]);
        ASSERT_EQ(x[2 * i], row - 1.0f) << "epoch " << epoch << " position " << lo + i;
        ASSERT_EQ(x[2 * i + 1], row) << "epoch " << epoch << " position " << lo + i;
        ASSERT_EQ(y[i], static_cast<float>(static_cast<uint64_t>(row) % 2));
      }
    }
  }
  // An order that splits a block across windows (not WindowShuffle's) is refused.
  std::iota(order.begin(), order.end(), 0u);
  std::swap(order[0], order[ntr - 1]);
  EXPECT_EQ((*stream)->Begin(order.data(), 0).code(), Code::kFailedPrecondition);
}

// With SetNext, the first window of the next order is read as soon as the last window of
// this one is resident, and Begin(next) keeps it instead of reading it again.
TEST(WindowStreamTest, PrefetchesTheNextOrdersFirstWindow) {
  RowNumberTable table(300);
  Split split;
  split.train = std::move(LockedArray<uint32_t>::Create(300)).value();
  std::iota(split.train.begin(), split.train.end(), 0u);
  auto be = MakeCpuBackend();
  auto mean = std::move(LockedArray<float>::Create(2)).value(), inv_std = std::move(LockedArray<float>::Create(2)).value();
  inv_std[0] = inv_std[1] = 1.0f;
  const StreamLayout layout{300, 20, 5};  // 3 windows of 100 rows, blocks of 20
  auto stream = WindowStream::Create(*be, table, split, layout, 2, Up(*be, mean), Up(*be, inv_std));
  ASSERT_TRUE(stream.ok());
  std::vector<uint32_t> a(300), b(300);
  Rng rng(9, kStreamShuffle);
  WindowShuffle(layout, rng, a.data());
  WindowShuffle(layout, rng, b.data());
  ASSERT_TRUE((*stream)->Begin(a.data(), 0).ok());
  (*stream)->SetNext(b.data());
  auto xb = std::move(AllocOwned(*be, 2 * 50)).value();
  auto yb = std::move(AllocOwned(*be, 50)).value();
  for (uint64_t lo = 0; lo < 300; lo += 50) ASSERT_TRUE((*stream)->Gather(lo, 50, xb, yb).ok());
  // All of order a (300 rows), then window 0 of b (100 rows) in the background.
  for (int i = 0; i < 500 && table.rows_read() < 400; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(table.rows_read(), 400u);
  ASSERT_TRUE((*stream)->Begin(b.data(), 0).ok());
  ASSERT_TRUE((*stream)->Gather(0, 50, xb, yb).ok());
  std::vector<float> x(100);
  ASSERT_TRUE(be->Download(x.data(), xb, 100).ok());
  for (size_t i = 0; i < 50; ++i) ASSERT_EQ(x[2 * i], static_cast<float>(b[i]));
  // Window 1 of b is being read now; window 0 was not read twice.
  for (int i = 0; i < 500 && table.rows_read() < 500; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(table.rows_read(), 500u);
  // Without SetNext, nothing is read ahead across the boundary.
  for (uint64_t lo = 50; lo < 300; lo += 50) ASSERT_TRUE((*stream)->Gather(lo, 50, xb, yb).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(table.rows_read(), 600u);
}

// A read failing in the reader thread reaches the loop as the Gather that needs it.
TEST(WindowStreamTest, AReaderFailureFailsTheGather) {
  RowNumberTable table(400, /*failing_row=*/390);
  Split split;
  split.train = std::move(LockedArray<uint32_t>::Create(400)).value();
  std::iota(split.train.begin(), split.train.end(), 0u);
  auto be = MakeCpuBackend();
  auto mean = std::move(LockedArray<float>::Create(2)).value(), inv_std = std::move(LockedArray<float>::Create(2)).value();
  inv_std[0] = inv_std[1] = 1.0f;
  const StreamLayout layout{400, 50, 2};  // 4 windows; row 390 is in block 7, in some window
  auto stream = WindowStream::Create(*be, table, split, layout, 2, Up(*be, mean), Up(*be, inv_std));
  ASSERT_TRUE(stream.ok());
  std::vector<uint32_t> order(400);
  Rng rng(1, kStreamShuffle);
  WindowShuffle(layout, rng, order.data());
  ASSERT_TRUE((*stream)->Begin(order.data(), 0).ok());
  auto xb = std::move(AllocOwned(*be, 2 * 40)).value();
  auto yb = std::move(AllocOwned(*be, 40)).value();
  Status last;
  uint64_t failed_at = 0;
  for (uint64_t lo = 0; lo < 400 && last.ok(); lo += 40) {
    last = (*stream)->Gather(lo, 40, xb, yb);
    failed_at = lo;
  }
  EXPECT_EQ(last.code(), Code::kAuthFailed) << last.ToString();
  // It fails at the first batch that needs the window holding row 390 (block 7), not earlier.
  const size_t window_start = static_cast<size_t>(std::find(order.begin(), order.end(), 390u) - order.begin()) / 100 * 100;
  EXPECT_EQ(failed_at, window_start / 40 * 40);
}

TEST_F(Streaming, SealedAndClearStreamsTrainBitIdenticalModels) {
  const std::string sealed = Seal(7);  // chunks of 7 records: blocks start mid-chunk
  const JobSpec clear = ClearJob(kStreamMlp);
  const JobSpec sealed_job = Job("id = \"bc\"\npath = \"" + sealed + "\"\n", kStreamMlp);
  ASSERT_TRUE(clear.streaming.enabled);
  auto a = Run(clear), b = Run(sealed_job), again = Run(sealed_job);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(BitIdentical(a->params, b->params));
  EXPECT_TRUE(BitIdentical(b->params, again->params));
  EXPECT_TRUE(BitIdentical(a->mean, b->mean));
  EXPECT_EQ(a->epochs.back().val_accuracy, b->epochs.back().val_accuracy);
  EXPECT_GE(b->epochs.back().val_accuracy, 0.93);
}

// The same job loaded once: another shuffle (so other weights), the same split and
// validation rows, the standardization equal to float rounding, a similar accuracy.
TEST_F(Streaming, MatchesInMemoryTrainingUpToTheShuffle) {
  const JobSpec streamed = ClearJob(kStreamMlp);
  JobSpec loaded = streamed;
  loaded.streaming.enabled = false;
  auto s = Run(streamed), m = Run(loaded);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(s->train_rows, m->train_rows);
  EXPECT_EQ(s->val_rows, m->val_rows);
  EXPECT_EQ(s->steps, m->steps);
  EXPECT_FALSE(BitIdentical(s->params, m->params));
  ASSERT_EQ(s->mean.size(), m->mean.size());
  for (size_t c = 0; c < s->mean.size(); ++c) {
    EXPECT_NEAR(s->mean[c], m->mean[c], 1e-6 * (1 + std::fabs(m->mean[c]))) << "feature " << c;
    EXPECT_NEAR(s->inv_std[c], m->inv_std[c], 1e-6 * m->inv_std[c]) << "feature " << c;
  }
  EXPECT_NEAR(s->epochs.back().val_accuracy, m->epochs.back().val_accuracy, 0.03);
}

// Every epoch reads every training row again (and nothing else but the validation rows
// in between), and no read is larger than one block's span.
TEST_F(Streaming, EveryEpochReReadsTheTrainingRows) {
  const std::string sealed = Seal(0);
  const JobSpec job = Job("id = \"bc\"\npath = \"" + sealed + "\"\n", kStreamMlp);
  auto be = MakeCpuBackend();
  auto data = LoadJobData(*be, job, &*ks_);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto counting = std::make_shared<CountingTable>(data->table);
  data->table = counting;
  auto split = StratifiedSplit(data->labels, data->classes, job.validation_fraction, job.seed);
  ASSERT_TRUE(split.ok());
  auto r = Train(*be, job, *data, *split);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // One pass for the standardization and validation rows, then one per epoch.
  for (uint32_t row : split->train) EXPECT_EQ(counting->reads_per_row[row], 1 + 3) << "training row " << row;
  size_t val_reads = 0;
  for (uint32_t row : split->val) val_reads += static_cast<size_t>(counting->reads_per_row[row]);
  EXPECT_GE(val_reads, split->val.size());
  EXPECT_LE(counting->largest_read, 16u * 3);  // a block of 16 training rows among ~20% validation rows
}

TEST_F(Streaming, StopAndResumeEndsBitIdenticalToAnUninterruptedRun) {
  const std::string sealed = Seal(5);
  const JobSpec job = Job("id = \"bc\"\npath = \"" + sealed + "\"\n", kStreamMlp);
  auto full = Run(job);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  // 455 training rows, batch 24: 19 steps per epoch. Step 3 ends at row 72, inside window 1;
  // step 8 straddles windows 2 and 3; step 19 ends the epoch; 27 is mid epoch 2.
  for (uint64_t stop_at : {3u, 8u, 19u, 27u}) {
    std::optional<TrainState> saved;
    TrainCallbacks cb;
    cb.should_stop = [&](uint64_t step) { return step == stop_at; };
    cb.on_checkpoint = [&](const ResidentTrainState& st) -> Status {
      ASSIGN_OR_RETURN(TrainState copy, CloneState(st));
      saved.emplace(std::move(copy));
      return OkStatus();
    };
    auto stopped = Run(job, cb);
    ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
    ASSERT_TRUE(stopped->stopped);
    ASSERT_TRUE(saved.has_value());
    EXPECT_EQ(saved->step, stop_at);
    auto resumed = Run(job, {}, &*saved);
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    EXPECT_TRUE(BitIdentical(resumed->params, full->params)) << "stopped after step " << stop_at;
    EXPECT_EQ(resumed->epochs.back().val_accuracy, full->epochs.back().val_accuracy);
  }
}

// A checkpoint's order that does not cut into whole blocks of the job's layout is refused
// before any step (not when the reader first meets the bad window).
TEST_F(Streaming, ResumeRefusesAnOrderOfAnotherLayoutUpFront) {
  const JobSpec job = ClearJob(kStreamMlp);
  std::optional<TrainState> saved;
  TrainCallbacks cb;
  cb.should_stop = [](uint64_t step) { return step == 2; };
  cb.on_checkpoint = [&](const ResidentTrainState& st) -> Status {
    ASSIGN_OR_RETURN(TrainState c, CloneState(st));
    saved.emplace(std::move(c));
    return OkStatus();
  };
  ASSERT_TRUE(Run(job, cb).ok());
  ASSERT_TRUE(saved.has_value());
  // Swap a row of window 4 (rows 256..319 of the order) with one of the last window: still
  // a permutation, and the first windows the resumed run needs are intact.
  std::swap(saved->order[260], saved->order[saved->order.size() - 1]);
  int steps = 0;
  TrainCallbacks count;
  count.on_step = [&](uint64_t, uint64_t) { ++steps; };
  auto r = Run(job, count, &*saved);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().ToString();
  EXPECT_EQ(steps, 0);
}

// The default layout (windows of 131,072 rows) on 455 training rows: one window, sized to
// the rows there are.
TEST_F(Streaming, DefaultLayoutOnASmallDataset) {
  const JobSpec job = ClearJob("[model]\nhidden = [16]\n[training]\nepochs = 3\n[optimizer]\nlr = 0.01\n[streaming]\n");
  ASSERT_TRUE(job.streaming.enabled);
  EXPECT_EQ(job.streaming.block_rows, 8192u);
  EXPECT_EQ(job.streaming.window_blocks, 16u);
  auto r = Run(job);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->epochs.back().val_accuracy, 0.93);
}

// Fail closed mid-run: the sealed file is changed in place after the label pass, so the
// damage is met by the reader thread while streaming an epoch, not by the loader.
TEST_F(Streaming, ChunkTamperedBetweenEpochsAbortsTheRun) {
  const std::string sealed = Seal(50);
  const JobSpec job = Job("id = \"bc\"\npath = \"" + sealed + "\"\n", kStreamMlp);
  auto be = MakeCpuBackend();
  auto data = LoadJobData(*be, job, &*ks_);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto split = StratifiedSplit(data->labels, data->classes, job.validation_fraction, job.seed);
  ASSERT_TRUE(split.ok());
  int epochs_seen = 0;
  TrainCallbacks cb;
  cb.on_epoch = [&](const EpochMetrics&) {
    if (++epochs_seen == 1) test_util::FlipByteFromEnd(sealed, 100);
  };
  auto r = Train(*be, job, *data, *split, cb);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAuthFailed) << r.status().ToString();
  EXPECT_EQ(epochs_seen, 1);
}

// The report's dataset digest names the bytes trained on: the loaders hash the file first,
// and a reader that then finds another header (the file swapped for another seal of the
// same data: same id and key, another salt) refuses it.
TEST_F(Streaming, ReadersRefuseAFileOtherThanTheOneHashedForTheReport) {
  const std::string path = Seal(7);
  auto first = crypto::DigestSealedFile(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  fs::rename(path, dir_ / "first.sealed");
  ASSERT_EQ(Seal(7), path);
  auto second = crypto::DigestSealedFile(path);
  ASSERT_TRUE(second.ok());
  ASSERT_NE(first->header, second->header);
  const JobSpec job = Job("id = \"bc\"\npath = \"" + path + "\"\n", kStreamMlp);
  dataset::DatasetSchema schema;
  uint64_t rows = 0;
  auto begin = [](const dataset::DatasetSchema&, uint64_t) { return OkStatus(); };
  auto fn = [](const float*, uint64_t, uint64_t) { return OkStatus(); };
  const Status swapped = ReadDatasetRecords(job.datasets[0], &*ks_, &schema, &rows, begin, fn, &first->header);
  EXPECT_EQ(swapped.code(), Code::kInvalidInput) << swapped.ToString();
  EXPECT_NE(swapped.message().find("changed while reading"), std::string::npos) << swapped.ToString();
  EXPECT_TRUE(ReadDatasetRecords(job.datasets[0], &*ks_, &schema, &rows, begin, fn, &second->header).ok());
  // Both loaders report the digest of the file they read.
  auto be = MakeCpuBackend();
  for (bool streamed : {true, false}) {
    JobSpec j = job;
    j.streaming.enabled = streamed;
    auto data = LoadJobData(*be, j, &*ks_);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_EQ(data->sources[0].file_digest, second->file);
  }
}

TEST_F(Streaming, CrossValidationStreamsEveryFold) {
  JobSpec job = ClearJob(kStreamMlp);
  auto be = MakeCpuBackend();
  auto data = LoadJobData(*be, job, &*ks_);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_NE(data->table, nullptr);
  auto cv = CrossValidate(*be, job, *data, 3);
  ASSERT_TRUE(cv.ok()) << cv.status().ToString();
  EXPECT_GE(cv->mean_accuracy, 0.93);
}

TEST_F(Streaming, AWindowMustHoldABatch) {
  JobSpec job = ClearJob(kStreamMlp);
  job.streaming.block_rows = 4;
  job.streaming.window_blocks = 2;  // 8 rows < batch 24
  auto r = Run(job);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  const std::string text = "output_dir = \"o\"\n[training]\nbatch_size = 64\n[streaming]\nblock_rows = 8\nwindow_blocks = 4\n"
                           "[[datasets]]\nid = \"a\"\npath = \"a.sealed\"\n";
  auto parsed = ParseJob(text, "job.toml", dir_.string());
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("streaming.block_rows"), std::string::npos) << parsed.status().ToString();
}

}  // namespace
}  // namespace enclave::trainer
