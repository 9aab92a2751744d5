// The C++ side of trees_crosscheck.py: trains with trainer::TrainTrees on float32 files
// the script wrote and writes the predictions (float32) and the booster bytes (UBJ).
//
//   trees_crosscheck TASK CLASSES ROWS FEATURES X Y TEST_X TEST_ROWS PRED_OUT MODEL_OUT SEED [KEY=VALUE...]
//
// TASK: binary, multiclass or regression; X, Y, TEST_X: little-endian float32, row-major;
// KEY=VALUE: TreeSpec fields (rounds, max_depth, eta, min_child_weight, subsample,
// colsample_bytree, lambda, alpha, gamma, max_bin, threads). Exit 0 on success, 1 with a
// message on stderr otherwise.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "enclave/trainer/trees.h"

namespace {

using namespace enclave;
using namespace enclave::trainer;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "trees_crosscheck: %s\n", what.c_str());
  std::exit(1);
}

std::vector<float> ReadFloats(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(n);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float))) ||
      in.peek() != std::char_traits<char>::eof()) {
    Die("cannot read " + std::to_string(n) + " floats (exactly) from " + path);
  }
  return v;
}

void Write(const std::string& path, const void* p, size_t n) {
  std::ofstream out(path, std::ios::binary);
  if (!out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n))) Die("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 12) Die("usage: TASK CLASSES ROWS FEATURES X Y TEST_X TEST_ROWS PRED_OUT MODEL_OUT SEED [KEY=VALUE...]");
  const std::map<std::string, TreeTask> tasks = {
      {"binary", TreeTask::kBinary}, {"multiclass", TreeTask::kMulticlass}, {"regression", TreeTask::kRegression}};
  if (!tasks.count(argv[1])) Die(std::string("unknown task ") + argv[1]);
  const TreeTask task = tasks.at(argv[1]);
  const auto classes = static_cast<uint32_t>(std::stoul(argv[2]));
  const size_t rows = std::stoull(argv[3]), features = std::stoull(argv[4]), test_rows = std::stoull(argv[8]);
  const uint64_t seed = std::stoull(argv[11]);
  TreeSpec spec;
  for (int i = 12; i < argc; ++i) {
    const std::string kv = argv[i];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) Die("expected KEY=VALUE, got " + kv);
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    std::map<std::string, uint32_t*> ints = {{"rounds", &spec.rounds},   {"max_depth", &spec.max_depth},
                                             {"max_bin", &spec.max_bin}, {"threads", &spec.threads}};
    std::map<std::string, double*> reals = {{"eta", &spec.eta},
                                            {"min_child_weight", &spec.min_child_weight},
                                            {"subsample", &spec.subsample},
                                            {"colsample_bytree", &spec.colsample_bytree},
                                            {"lambda", &spec.lambda},
                                            {"alpha", &spec.alpha},
                                            {"gamma", &spec.gamma}};
    if (ints.count(k)) {
      *ints[k] = static_cast<uint32_t>(std::stoul(v));
    } else if (reals.count(k)) {
      *reals[k] = std::stod(v);
    } else {
      Die("unknown parameter " + k);
    }
  }
  const std::vector<float> x = ReadFloats(argv[5], rows * features), y = ReadFloats(argv[6], rows);
  const std::vector<float> tx = ReadFloats(argv[7], test_rows * features);
  TreeTrainInput in;
  in.x = x.data();
  in.y = y.data();
  in.rows = rows;
  in.features = features;
  auto model = TrainTrees(spec, task, classes, in, seed);
  if (!model.ok()) Die("TrainTrees: " + model.status().ToString());
  auto pred = PredictTrees(*model, tx.data(), test_rows, spec.threads);
  if (!pred.ok()) Die("PredictTrees: " + pred.status().ToString());
  Write(argv[9], pred->data(), pred->size() * sizeof(float));
  const auto bytes = model->booster.ExposeSecret();
  Write(argv[10], bytes.data(), bytes.size());
  return 0;
}
