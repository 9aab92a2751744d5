// Fuzz target: the plaintext model file reader (trainer::ParseModelFile,
// docs/formats/model.md). `enclave-train predict` reads model files a tenant may have got
// from anywhere. Each input is parsed twice: as given, and with its last 32 bytes replaced
// by the SHA-256 of the rest, so the fuzzer gets past the digest to the field checks. An
// accepted file must be canonical: encoding what was parsed gives back the same bytes.
// (A trees model's booster is XGBoost's own bytes, opaque to this reader and not fuzzed
// here; predict hands them to XGBoost, whose parser is not hardened: SECURITY.md.)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "enclave/crypto/hash.h"
#include "enclave/trainer/model_file.h"

namespace {

void Check(const uint8_t* data, size_t size) {
  using namespace enclave::trainer;
  auto m = ParseModelFile({data, size});
  if (!m.ok()) {
    if (m.status().message().empty()) __builtin_trap();  // every refusal says why
    return;
  }
  const bool trees = m->family == ModelFamily::kXgboost;
  // The inputs are the preprocessed row; a network has its numbers, trees their booster.
  if (m->preprocessing.inputs() != m->shape.inputs || m->schema.feature_count() != m->preprocessing.raw_features() ||
      m->schema.classes.size() != m->shape.classes ||
      (trees ? (!m->params.empty() || m->trees.booster.empty() || m->trees.features != m->shape.inputs)
             : (m->params.size() != m->shape.parameter_count() || m->mean.size() != m->shape.inputs))) {
    __builtin_trap();
  }
  // A threshold is in [0, 1], and other than 0.5 only for a binary model (version 3).
  if (!(m->threshold >= 0.0f && m->threshold <= 1.0f) || (m->threshold != kDefaultThreshold && m->shape.classes != 2)) {
    __builtin_trap();
  }
  auto again = EncodeModelFile(*m);
  if (!again.ok() || again->size() != size || std::memcmp(again->ExposeSecret().data(), data, size) != 0) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  Check(data, size);
  if (size >= 32) {
    std::vector<uint8_t> fixed(data, data + size);
    const enclave::crypto::Digest256 d = enclave::crypto::Sha256({fixed.data(), size - 32});
    std::memcpy(fixed.data() + size - 32, d.data(), 32);
    Check(fixed.data(), fixed.size());
  }
  return 0;
}
