// For sklearn_metrics_check.py: reads raw little-endian float32 arrays, prints the metrics
// report with exact doubles (and, for binary, the chosen thresholds) as one JSON object.
//   metrics_report_check binary|multiclass ROWS CLASSES PROBS.f32 LABELS.f32 THRESHOLD BINS [RESAMPLES SEED]
//   metrics_report_check regression ROWS 0 PREDICTIONS.f32 TARGETS.f32 [RESAMPLES SEED]
// Without RESAMPLES, no bootstrap.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "enclave/trainer/metrics_report.h"

namespace {

std::vector<float> ReadFloats(const char* path, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!f || f.peek() != EOF) {
    std::fprintf(stderr, "%s: expected exactly %zu float32 values\n", path, n);
    std::exit(2);
  }
  return v;
}

int Fail(const enclave::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace enclave::trainer;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s binary|multiclass|regression ROWS CLASSES A.f32 B.f32 [THRESHOLD BINS] [RESAMPLES SEED]\n", argv[0]);
    return 2;
  }
  const std::string task = argv[1];
  const size_t rows = std::strtoull(argv[2], nullptr, 10);
  const uint32_t classes = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));
  EvalOptions opt;
  opt.bootstrap_resamples = 0;
  const int boot_arg = task == "regression" ? 6 : 8;
  if (argc >= boot_arg + 2) {
    opt.bootstrap_resamples = static_cast<uint32_t>(std::strtoul(argv[boot_arg], nullptr, 10));
    opt.seed = std::strtoull(argv[boot_arg + 1], nullptr, 10);
  }
  nlohmann::json out;
  if (task == "regression") {
    const std::vector<float> pred = ReadFloats(argv[4], rows), y = ReadFloats(argv[5], rows);
    auto r = EvaluateRegression(pred.data(), y.data(), rows, opt);
    if (!r.ok()) return Fail(r.status());
    out["report"] = ToJson(*r, JsonNumbers::kExact);
  } else {
    if (argc < 8) return 2;
    opt.threshold = std::strtod(argv[6], nullptr);
    opt.calibration_bins = static_cast<uint32_t>(std::strtoul(argv[7], nullptr, 10));
    const size_t cols = classes == 2 ? 1 : classes;
    const std::vector<float> p = ReadFloats(argv[4], rows * cols), y = ReadFloats(argv[5], rows);
    auto r = EvaluateClassification(p.data(), y.data(), rows, classes, opt);
    if (!r.ok()) return Fail(r.status());
    out["report"] = ToJson(*r, JsonNumbers::kExact);
    if (classes == 2) {
      auto youden = ChooseThresholdYouden(p.data(), y.data(), rows);
      if (!youden.ok()) return Fail(youden.status());
      auto sens = ChooseThresholdForSensitivity(p.data(), y.data(), rows, 0.9);
      if (!sens.ok()) return Fail(sens.status());
      out["youden"] = ToJson(*youden, JsonNumbers::kExact);
      out["sensitivity_0.9"] = ToJson(*sens, JsonNumbers::kExact);
    }
  }
  // 17 significant digits: the doubles round-trip exactly into Python.
  std::cout << out.dump() << "\n";
  return 0;
}
