// Gradient-boosted trees: trainer::TrainTrees (XGBoost's C API, trainer/src/trees.cc)
// side by side with XGBoost's own Python package on the same data, threads and parameters:
//
//   trees/ours     TrainTrees on 100,000 synthetic rows x 30 features (binary, 5% of the
//                  cells missing): the input checks, XGBoost's DMatrix, 100 rounds of
//                  tree_method hist (depth 6, eta 0.3, 256 bins) with the training logloss
//                  evaluated every round, the model saved as UBJ into locked memory
//   trees/python   bench/xgboost_train.py (/usr/bin/python3, python3-xgboost): the
//                  DMatrix from numpy, xgboost.train with the training rows as evaluation
//                  set, save_raw("ubj"); timed inside the script, without interpreter start
//                  and imports
//
// Both sides use THREADS threads (default 2; env ENCLAVE_BENCH_TREES_THREADS) and seed 1.
// The two alternate, PAIRS pairs (default 5; env ENCLAVE_BENCH_TREES_PAIRS), so load on the
// shared machine falls on both alike. Our side runs as enclave-train's tree mode does, with
// the whole process locked into RAM (LockAllMemory: every page XGBoost maps is faulted in
// and pinned at once; ENCLAVE_BENCH_TREES_UNLOCKED=1 leaves it out); the Python side is not
// locked. "Time" is wall time (XGBoost is multi-threaded); the
// process CPU time of both is kept too. After the run the ratios (python time / our time:
// above 1 means we are faster) are printed on stderr, median and best of the pairs.
// On a shared machine run it with OMP_WAIT_POLICY=passive (libgomp reads it at start-up,
// for both sides): with the default spin-waiting, two threads on a loaded 2-core VM were
// 3-5x slower than one and too noisy to compare (README.md, Performance).
// Data lives in $ENCLAVE_BENCH_DIR (default /tmp/enclave-bench-trees), made once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "python_baseline.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/trees.h"

namespace {

namespace fs = std::filesystem;
using namespace enclave;
using namespace enclave::trainer;

constexpr size_t kRows = 100000, kFeatures = 30;
constexpr uint32_t kRounds = 100;
constexpr uint64_t kSeed = 1;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "enclave_bench_trees: %s\n", what.c_str());
  std::exit(1);
}

uint32_t EnvInt(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : fallback;
}

uint32_t Threads() { return EnvInt("ENCLAVE_BENCH_TREES_THREADS", 2); }

// splitmix64: a fixed data set, the same on every machine.
uint64_t Next(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double Uniform(uint64_t& s) { return static_cast<double>(Next(s) >> 11) * 0x1.0p-53; }

struct Data {
  std::vector<float> x, y;
  std::string records;  // features then label per row, for the Python side
};

// Features uniform in [-1, 1]; the label a noisy nonlinear function of ten of them; 5% of
// the cells missing.
const Data& GetData() {
  static const Data d = [] {
    Data data;
    data.x.resize(kRows * kFeatures);
    data.y.resize(kRows);
    uint64_t s = 2026;
    for (size_t i = 0; i < kRows; ++i) {
      float* r = &data.x[i * kFeatures];
      for (size_t j = 0; j < kFeatures; ++j) r[j] = static_cast<float>(2 * Uniform(s) - 1);
      const double z = 2 * r[0] - 1.5 * r[1] + r[2] * r[3] * 3 + std::sin(3 * r[4]) + (r[5] > 0.3f ? 1 : -0.5) +
                       r[6] * r[6] - 0.5 * r[7] + 0.8 * r[8] * r[9] + 0.5 * (Uniform(s) - 0.5);
      data.y[i] = z > 0.2 ? 1.0f : 0.0f;
      for (size_t j = 0; j < kFeatures; ++j) {
        if (Uniform(s) < 0.05) r[j] = dataset::MissingValue();
      }
    }
    const char* dir = std::getenv("ENCLAVE_BENCH_DIR");
    const fs::path root = dir != nullptr ? fs::path(dir) : fs::path("/tmp/enclave-bench-trees");
    fs::create_directories(root);
    data.records = (root / "trees-100k-30.f32").string();
    std::vector<float> rec;
    rec.reserve(kRows * (kFeatures + 1));
    for (size_t i = 0; i < kRows; ++i) {
      rec.insert(rec.end(), data.x.begin() + static_cast<std::ptrdiff_t>(i * kFeatures),
                 data.x.begin() + static_cast<std::ptrdiff_t>((i + 1) * kFeatures));
      rec.push_back(data.y[i]);
    }
    std::ofstream out(data.records, std::ios::binary | std::ios::trunc);
    if (!out.write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size() * 4))) {
      Die("cannot write " + data.records);
    }
    return data;
  }();
  return d;
}

std::map<std::string, std::vector<double>> g_seconds;  // per side (and side + "/cpu"), per iteration

double ProcessSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Record(benchmark::State& state, const std::string& side, double wall, double cpu) {
  state.SetIterationTime(wall);
  g_seconds[side].push_back(wall);
  g_seconds[side + "/cpu"].push_back(cpu);
}

void BM_Ours(benchmark::State& state) {
  const Data& d = GetData();
  TreeSpec spec;
  spec.rounds = kRounds;
  spec.threads = Threads();
  TreeTrainInput in;
  in.x = d.x.data();
  in.y = d.y.data();
  in.rows = kRows;
  in.features = kFeatures;
  for (auto _ : state) {
    const double c0 = ProcessSeconds();
    const auto w0 = std::chrono::steady_clock::now();
    auto m = TrainTrees(spec, TreeTask::kBinary, 2, in, kSeed);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const double cpu = ProcessSeconds() - c0;
    if (!m.ok()) Die("TrainTrees: " + m.status().ToString());
    benchmark::DoNotOptimize(m->booster.size());
    Record(state, "trees/ours", wall, cpu);
  }
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(kRows), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Python(benchmark::State& state) {
  const Data& d = GetData();
  const fs::path script = fs::path(ENCLAVE_BENCH_SOURCE_DIR) / "xgboost_train.py";
  const std::string cmd = "/usr/bin/python3 '" + script.string() + "' '" + d.records + "' " +
                          std::to_string(kFeatures) + " " + std::to_string(kRounds) + " " +
                          std::to_string(Threads()) + " " + std::to_string(kSeed);
  for (auto _ : state) {
    const std::optional<std::string> line = PythonBaselineLine(cmd);
    if (!line) Die("XGBoost Python baseline failed (python3-xgboost installed?): " + cmd);
    const std::optional<double> wall = JsonNumberAfter(*line, "seconds"), cpu = JsonNumberAfter(*line, "cpu_seconds");
    if (!wall || !cpu) Die("unexpected output: " + *line);
    Record(state, "trees/python", *wall, *cpu);
  }
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(kRows), benchmark::Counter::kIsIterationInvariantRate);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PrintRatios() {
  auto ratio = [](const char* what, const std::string& ours, const std::string& base) {
    auto a = g_seconds.find(ours), b = g_seconds.find(base);
    if (a == g_seconds.end() || b == g_seconds.end()) return;
    const double ma = Median(a->second), mb = Median(b->second);
    const double na = *std::min_element(a->second.begin(), a->second.end());
    const double nb = *std::min_element(b->second.begin(), b->second.end());
    std::fprintf(stderr, "%-46s median %8.1f vs %8.1f ms: ours/python speed = %.3f (best: %.3f)\n", what, ma * 1e3,
                 mb * 1e3, mb / ma, nb / na);
  };
  std::fprintf(stderr, "\n%zu rows x %zu features, %u rounds, %u threads; per iteration (median and best):\n", kRows,
               kFeatures, kRounds, Threads());
  ratio("trees, wall time: TrainTrees vs xgboost.train", "trees/ours", "trees/python");
  ratio("trees, process CPU time: the same", "trees/ours/cpu", "trees/python/cpu");
}

}  // namespace

int main(int argc, char** argv) {
  // Interleaved: ours, python, ours, python, ... one iteration each.
  const uint32_t pairs = std::max<uint32_t>(1, EnvInt("ENCLAVE_BENCH_TREES_PAIRS", 5));
  for (uint32_t i = 0; i < pairs; ++i) {
    benchmark::RegisterBenchmark("trees/ours", BM_Ours)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
    benchmark::RegisterBenchmark("trees/python", BM_Python)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // ENCLAVE_BENCH_TREES_UNLOCKED=1 leaves the process unlocked: what locking costs.
  if (std::getenv("ENCLAVE_BENCH_TREES_UNLOCKED") == nullptr) {
    if (Status s = LockAllMemory(); !s.ok()) Die(s.ToString());
  }
  GetData();  // made before the first timing
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintRatios();
  return 0;
}
