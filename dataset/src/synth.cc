#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/dataset/sealed_dataset.h"

namespace enclave::dataset {
namespace {

// splitmix64: tiny, and the same sequence on every platform (std distributions are not).
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {  // Box-Muller
    double u = Uniform(), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

}  // namespace

Status WriteSyntheticCsv(const std::string& out_path, uint64_t rows, uint32_t features, uint64_t seed,
                         bool overwrite, const ProgressFn& progress) {
  if (rows == 0 || features == 0 || features > 100000) {
    return InvalidInput("synthetic data needs rows >= 1 and 1..100000 features");
  }
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  Rng rng{seed};
  std::vector<double> weights(features);
  for (double& w : weights) w = rng.Normal();
  std::string line;
  for (uint32_t j = 0; j < features; ++j) line += "f" + std::to_string(j) + ",";
  line += "y\n";
  RETURN_IF_ERROR(out.Write(line.data(), line.size()));
  char buf[32];
  for (uint64_t i = 0; i < rows; ++i) {
    line.clear();
    double score = 0;
    for (uint32_t j = 0; j < features; ++j) {
      float x = static_cast<float>(rng.Normal());
      score += weights[j] * x;
      auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, x);
      line.append(buf, ptr);
      line += ',';
    }
    score += 0.5 * std::sqrt(static_cast<double>(features)) * rng.Normal();  // label noise
    line += score > 0 ? "1\n" : "0\n";
    RETURN_IF_ERROR(out.Write(line.data(), line.size()));
    if (progress && i % 4096 == 0) progress(i, rows);
  }
  if (progress) progress(rows, rows);
  return out.Commit();
}

}  // namespace enclave::dataset
