// The trainer on the CPU, side by side with its baselines in one run:
//
//   epoch/sealed        one epoch that streams the dataset from disk: SealedDatasetReader
//                       (read, authenticate, decrypt into locked memory) into the CPU
//                       backend, then one training epoch (MLP 64 ReLU, AdamW, batch 200)
//   epoch/clear         the same with the same float32 records read from a plaintext file
//                       (no decryption): the baseline for the sealed-data overhead
//   run20/sealed, run20/clear  a whole job as enclave-train runs it: the data decrypted
//                       (or read) once into backend memory, then 20 epochs
//   load/sealed, load/clear   the data part alone
//   stream/sealed, stream/clear  a [streaming] job (4 epochs): every epoch re-reads its rows,
//                       a window of blocks at a time, while a reader thread prepares the
//                       next window; sealed: authenticate and decrypt the chunks again, clear:
//                       pread the same records from the plaintext file. Timed in WALL time
//                       per epoch (epochs 2-4), because the reader runs on another core; the
//                       process CPU time of both is printed too (the work the overlap hides)
//   mlp_1m/ours         one training epoch on 1,000,000 synthetic rows (20 features,
//                       dataset::WriteSyntheticCsv), MLP 64 ReLU, Adam, batch 200
//   mlp_1m/sklearn      scikit-learn's MLPClassifier on the same records and architecture
//                       (bench/sklearn_mlp.py, /usr/bin/python3), one epoch, best of 3
//
// Both sides use one BLAS thread (enclave-train pins OpenBLAS to one thread for
// determinism; the script runs with OPENBLAS_NUM_THREADS=1), and both are timed in CPU
// time of that one thread (the script: time.process_time), so that other processes on the
// machine do not skew the comparison; the reported "Time" is that CPU time. After the run, the ratios
// (sealed/clear epoch time, ours/sklearn samples per second) are printed on stderr.
// Data lives in $ENCLAVE_BENCH_DIR (default /tmp/enclave-bench-train), made once.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "python_baseline.h"
#include "enclave/crypto/keystore.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/trainer.h"

namespace {

namespace fs = std::filesystem;
using namespace enclave;
using namespace enclave::trainer;

constexpr uint64_t kEpochRows = 200000;
constexpr uint32_t kEpochFeatures = 32;
constexpr uint64_t kBigRows = 1000000;
constexpr uint32_t kBigFeatures = 20;
constexpr uint32_t kHidden = 64, kBatch = 200;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "enclave_bench_train: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what + ": " + s.ToString());
}

fs::path Dir() {
  const char* d = std::getenv("ENCLAVE_BENCH_DIR");
  return d != nullptr ? fs::path(d) : fs::path("/tmp/enclave-bench-train");
}

JobSpec MlpJob(int epochs = 1) {
  auto job = ParseJob("output_dir = \"unused\"\nseed = 1\n[[datasets]]\nid = \"synthetic\"\npath = \"unused\"\n"
                      "[model]\nhidden = [64]\n[training]\nepochs = " + std::to_string(epochs) +
                      "\nbatch_size = 200\nvalidation_fraction = 0.0\n"
                      "[optimizer]\ntype = \"adamw\"\nlr = 0.001\nl2 = 0.0000005\n",
                      "bench.toml", "");
  Check(job.status(), "job");
  return std::move(job).value();
}

// The plaintext records of a CSV as one float32 file (the sealed format's record layout).
void WriteRecords(const std::string& csv, const fs::path& out) {
  DatasetSpec spec;
  spec.id = "synthetic";
  spec.path = csv;
  spec.format = DatasetFormat::kCsv;
  spec.label = "y";
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  dataset::DatasetSchema schema;
  uint64_t rows = 0;
  Check(ReadDatasetRecords(spec, nullptr, &schema, &rows, [](const dataset::DatasetSchema&, uint64_t) { return OkStatus(); },
                           [&](const float* r, uint64_t, uint64_t n) {
                             f.write(reinterpret_cast<const char*>(r),
                                     static_cast<std::streamsize>(n * schema.columns.size() * sizeof(float)));
                             return f ? OkStatus() : IoError("write");
                           }),
        "records of " + csv);
}

struct Fixture {
  fs::path dir;
  std::string keystore, sealed, clear, big_records;
  std::optional<crypto::Keystore> ks;
  dataset::DatasetSchema schema;
};

Fixture& Data() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->dir = Dir();
    fs::create_directories(x->dir);
    const std::string csv = (x->dir / "epoch.csv").string();
    x->keystore = (x->dir / "bench.keystore").string();
    x->sealed = (x->dir / "epoch.sealed").string();
    x->clear = (x->dir / "epoch.records").string();
    x->big_records = (x->dir / "big.records").string();
    auto pass = crypto::SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>("benchmark passphrase"), 20});
    Check(pass.status(), "passphrase");
    if (!fs::exists(x->sealed) || !fs::exists(x->keystore) || !fs::exists(x->clear)) {
      std::fprintf(stderr, "enclave_bench_train: making the epoch data set in %s\n", x->dir.c_str());
      fs::remove(x->keystore);
      fs::remove(x->sealed);
      Check(dataset::WriteSyntheticCsv(csv, kEpochRows, kEpochFeatures, 7, true), "synthetic csv");
      Check(crypto::Keystore::Init(x->keystore, *pass, crypto::KdfParams{2, 19ull << 20}), "keystore");
      auto ks = crypto::Keystore::Unlock(x->keystore, *pass);
      Check(ks.status(), "unlock");
      dataset::SealOptions o;
      o.csv_path = csv;
      o.out_path = x->sealed;
      o.label.column = "y";
      o.dataset_id = "synthetic";
      Check(dataset::SealCsv(o, *ks).status(), "seal");
      WriteRecords(csv, x->clear);
    }
    auto ks = crypto::Keystore::Unlock(x->keystore, *pass);
    Check(ks.status(), "unlock");
    x->ks.emplace(std::move(ks).value());
    auto info = dataset::InspectSealed(x->sealed);
    Check(info.status(), "inspect");
    x->schema = info->schema;
    if (!fs::exists(x->big_records)) {
      std::fprintf(stderr, "enclave_bench_train: making the 1,000,000-row data set in %s\n", x->dir.c_str());
      const std::string big_csv = (x->dir / "big.csv").string();
      Check(dataset::WriteSyntheticCsv(big_csv, kBigRows, kBigFeatures, 11, true), "synthetic csv");
      WriteRecords(big_csv, x->big_records);
      fs::remove(big_csv);
    }
    return x;
  }();
  return *f;
}

// The clear baseline of the loader: the same records from a plaintext file, read in 64 KiB
// pieces into locked memory, checked and uploaded, as the sealed path does chunk by chunk;
// the difference is exactly authentication and decryption.
Result<LoadedData> LoadClearRecords(Backend& be, const std::string& path, const dataset::DatasetSchema& schema) {
  LoadedData d;
  d.schema = schema;
  d.features = schema.feature_count();
  d.classes = static_cast<uint32_t>(schema.classes.size());
  const size_t width = schema.columns.size();
  const uint64_t bytes = fs::file_size(path);
  d.rows = bytes / (width * sizeof(float));
  ASSIGN_OR_RETURN(OwnedBuffer records, AllocOwned(be, d.rows * width));
  const size_t chunk_rows = (64 * 1024) / (width * sizeof(float));
  ASSIGN_OR_RETURN(LockedArray<float> buf, LockedArray<float>::Create(chunk_rows * width));
  std::ifstream f(path, std::ios::binary);
  for (size_t row = 0; row < d.rows; row += chunk_rows) {
    const size_t n = std::min(chunk_rows, d.rows - row);
    f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n * width * sizeof(float)));
    if (!f) return IoError("short read");
    RETURN_IF_ERROR(CheckRecords(schema, path, buf.data(), row, n));
    RETURN_IF_ERROR(be.Upload(records.get().Slice(row * width, n * width), buf.data(), n * width));
  }
  ASSIGN_OR_RETURN(d.x, AllocOwned(be, d.rows * d.features));
  ASSIGN_OR_RETURN(d.y, AllocOwned(be, d.rows));
  RETURN_IF_ERROR(be.SplitRecords(records, d.rows, d.features, d.x, d.y));
  ASSIGN_OR_RETURN(d.labels, LockedArray<float>::Create(d.rows));
  RETURN_IF_ERROR(be.Download(d.labels.data(), d.y, d.rows));
  return d;
}

// The streaming baseline: the same records, pread from the plaintext file and checked, as
// the sealed table authenticates, decrypts and checks them.
class ClearFileTable : public RecordTable {
 public:
  ClearFileTable(const std::string& path, const dataset::DatasetSchema& schema) : path_(path), schema_(schema) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) Die("open " + path);
    width_ = schema.columns.size();
    rows_ = fs::file_size(path) / (width_ * sizeof(float));
  }
  ~ClearFileTable() override { ::close(fd_); }
  Status Read(uint64_t first, uint64_t count, float* out) override {
    const size_t bytes = count * width_ * sizeof(float);
    const ssize_t got = ::pread(fd_, out, bytes, static_cast<off_t>(first * width_ * sizeof(float)));
    if (got != static_cast<ssize_t>(bytes)) return IoError("short read");
    return CheckRecords(schema_, path_, out, first, count);
  }

 private:
  std::string path_;
  dataset::DatasetSchema schema_;
  int fd_ = -1;
};

Result<LoadedData> OpenClearStream(const std::string& path, const dataset::DatasetSchema& schema) {
  LoadedData d;
  d.schema = schema;
  d.features = schema.feature_count();
  d.classes = static_cast<uint32_t>(schema.classes.size());
  auto table = std::make_shared<ClearFileTable>(path, schema);
  d.rows = table->rows();
  ASSIGN_OR_RETURN(d.labels, LockedArray<float>::Create(d.rows));
  const size_t per = 8192, width = table->width();
  ASSIGN_OR_RETURN(LockedArray<float> buf, LockedArray<float>::Create(per * width));
  for (uint64_t row = 0; row < d.rows; row += per) {
    const size_t n = std::min<uint64_t>(per, d.rows - row);
    RETURN_IF_ERROR(table->Read(row, n, buf.data()));
    for (size_t i = 0; i < n; ++i) d.labels[row + i] = buf[i * width + d.features];
  }
  d.table = std::move(table);
  return d;
}

Result<LoadedData> LoadSealed(Backend& be) {
  DatasetSpec spec;
  spec.id = "synthetic";
  spec.path = Data().sealed;
  return LoadDatasets(be, {spec}, &*Data().ks);
}

std::map<std::string, std::vector<double>> g_seconds;  // per benchmark name, per iteration

// CPU time of this thread: the work is single-threaded (one BLAS thread), and CPU time is
// robust to other processes competing for the cores, which wall time is not.
double ThreadSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Record(benchmark::State& state, const std::string& name, double seconds) {
  state.SetIterationTime(seconds);
  g_seconds[name].push_back(seconds);
}

void Epoch(benchmark::State& state, bool sealed, int epochs) {
  Fixture& fx = Data();
  const bool train = epochs > 0;
  const JobSpec job = MlpJob(train ? epochs : 1);
  auto be = MakeCpuBackend();
  const std::string name =
      std::string(epochs == 0 ? "load/" : epochs == 1 ? "epoch/" : "run20/") + (sealed ? "sealed" : "clear");
  size_t rows = 0;
  for (auto _ : state) {
    const double t0 = ThreadSeconds();
    auto data = sealed ? LoadSealed(*be) : LoadClearRecords(*be, fx.clear, fx.schema);
    Check(data.status(), name);
    rows = data->rows;
    if (train) {
      auto split = StratifiedSplit(data->labels, data->classes, 0.0, job.seed);
      Check(split.status(), "split");
      auto r = Train(*be, job, *data, *split);
      Check(r.status(), "train");
      benchmark::DoNotOptimize(r->params.data());
    }
    Record(state, name, ThreadSeconds() - t0);
  }
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}

double ProcessSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Stream(benchmark::State& state, bool sealed) {
  Fixture& fx = Data();
  JobSpec job = MlpJob(4);
  job.streaming.enabled = true;
  job.streaming.block_rows = 8192;
  job.streaming.window_blocks = 4;
  auto be = MakeCpuBackend();
  const std::string name = std::string("stream/") + (sealed ? "sealed" : "clear");
  for (auto _ : state) {
    Result<LoadedData> data = [&]() -> Result<LoadedData> {
      if (!sealed) return OpenClearStream(fx.clear, fx.schema);
      DatasetSpec spec;
      spec.id = "synthetic";
      spec.path = fx.sealed;
      return OpenDatasetsForStreaming({spec}, &*fx.ks);
    }();
    Check(data.status(), name);
    auto split = StratifiedSplit(data->labels, data->classes, 0.0, job.seed);
    Check(split.status(), "split");
    const double cpu0 = ProcessSeconds();
    auto r = Train(*be, job, *data, *split);
    Check(r.status(), "train");
    double wall = 0;
    for (size_t e = 1; e < r->epochs.size(); ++e) wall += r->epochs[e].seconds;
    const double per_epoch = wall / static_cast<double>(r->epochs.size() - 1);
    g_seconds[name + "/cpu"].push_back((ProcessSeconds() - cpu0) / static_cast<double>(r->epochs.size()));
    Record(state, name, per_epoch);
  }
}

void BM_StreamSealed(benchmark::State& s) { Stream(s, true); }
void BM_StreamClear(benchmark::State& s) { Stream(s, false); }

void BM_EpochSealed(benchmark::State& s) { Epoch(s, true, 1); }
void BM_EpochClear(benchmark::State& s) { Epoch(s, false, 1); }
void BM_Run20Sealed(benchmark::State& s) { Epoch(s, true, 20); }
void BM_Run20Clear(benchmark::State& s) { Epoch(s, false, 20); }
void BM_LoadSealed(benchmark::State& s) { Epoch(s, true, 0); }
void BM_LoadClear(benchmark::State& s) { Epoch(s, false, 0); }

void BM_Mlp1mOurs(benchmark::State& state) {
  Fixture& fx = Data();
  const JobSpec job = MlpJob();
  auto be = MakeCpuBackend();
  dataset::DatasetSchema schema;
  schema.columns.resize(kBigFeatures + 1);
  for (uint32_t i = 0; i < kBigFeatures; ++i) schema.columns[i].name = "f" + std::to_string(i);
  schema.columns[kBigFeatures] = {"y", dataset::ColumnKind::kLabel, false, {}};
  schema.classes = {"0", "1"};
  auto data = LoadClearRecords(*be, fx.big_records, schema);
  Check(data.status(), "1M records");
  auto split = StratifiedSplit(data->labels, data->classes, 0.0, job.seed);
  Check(split.status(), "split");
  for (auto _ : state) {
    const double t0 = ThreadSeconds();
    auto r = Train(*be, job, *data, *split);
    Check(r.status(), "train");
    Record(state, "mlp_1m/ours", ThreadSeconds() - t0);
  }
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(data->rows), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Mlp1mSklearn(benchmark::State& state) {
  Fixture& fx = Data();
  // The source folder's absolute path (__FILE__ is relative to the build folder, so the
  // binary would find the script only when started from there).
  const fs::path script = fs::path(ENCLAVE_BENCH_SOURCE_DIR) / "sklearn_mlp.py";
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 '" + script.string() + "' '" +
                          fx.big_records + "' " + std::to_string(kBigFeatures) + " " + std::to_string(kHidden) + " " +
                          std::to_string(kBatch) + " 1";
  for (auto _ : state) {
    const std::optional<std::string> line = PythonBaselineLine(cmd);
    if (!line) Die("scikit-learn baseline failed (python3-sklearn installed?): " + cmd);
    const std::optional<double> at = JsonNumberAfter(*line, "seconds");
    if (!at) Die("unexpected output: " + *line);
    const double seconds = *at;
    Record(state, "mlp_1m/sklearn", seconds);
  }
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(kBigRows), benchmark::Counter::kIsIterationInvariantRate);
}

// Interleaved registration: the two sides of each comparison run back to back.
BENCHMARK(BM_LoadClear)->Name("load/clear")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(9);
BENCHMARK(BM_LoadSealed)->Name("load/sealed")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(9);
BENCHMARK(BM_EpochClear)->Name("epoch/clear")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(7);
BENCHMARK(BM_EpochSealed)->Name("epoch/sealed")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(7);
BENCHMARK(BM_StreamClear)->Name("stream/clear")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_StreamSealed)->Name("stream/sealed")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_Run20Clear)->Name("run20/clear")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Run20Sealed)->Name("run20/sealed")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Mlp1mOurs)->Name("mlp_1m/ours")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Mlp1mSklearn)->Name("mlp_1m/sklearn")->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PrintRatios() {
  auto ratio = [](const char* what, const std::string& a, const std::string& b, bool inverse) {
    auto ia = g_seconds.find(a), ib = g_seconds.find(b);
    if (ia == g_seconds.end() || ib == g_seconds.end()) return;
    const double ma = Median(ia->second), mb = Median(ib->second);
    const double na = *std::min_element(ia->second.begin(), ia->second.end());
    const double nb = *std::min_element(ib->second.begin(), ib->second.end());
    if (inverse) {
      std::fprintf(stderr, "%-44s median %8.1f vs %8.1f ms: ours/baseline samples/s = %.2f (min: %.2f)\n", what,
                   ma * 1e3, mb * 1e3, mb / ma, nb / na);
    } else {
      std::fprintf(stderr, "%-44s median %8.1f vs %8.1f ms: overhead %+.1f%% (min: %+.1f%%)\n", what, ma * 1e3,
                   mb * 1e3, (ma / mb - 1) * 100, (na / nb - 1) * 100);
    }
  };
  std::fprintf(stderr, "\nper iteration (median and best of the iterations):\n");
  ratio("load: sealed vs clear records", "load/sealed", "load/clear", false);
  ratio("epoch (load + train): sealed vs clear", "epoch/sealed", "epoch/clear", false);
  ratio("job (load once + 20 epochs): sealed vs clear", "run20/sealed", "run20/clear", false);
  ratio("streamed epoch (wall): sealed vs clear", "stream/sealed", "stream/clear", false);
  ratio("streamed epoch (process CPU): sealed vs clear", "stream/sealed/cpu", "stream/clear/cpu", false);
  ratio("MLP 64, 1M rows, 1 epoch: ours vs sklearn", "mlp_1m/ours", "mlp_1m/sklearn", true);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintRatios();
  return 0;
}
