// The trainer's own PRNG, so that initialization, shuffles and splits are the same on every
// standard library and platform (std::*_distribution is implementation-defined).
// xoshiro256** (Blackman & Vigna) seeded through SplitMix64; not for cryptography.
#pragma once

#include <cstdint>

namespace enclave::trainer {

class Rng {
 public:
  // `stream` separates independent uses of one job seed (init, split, shuffle, ...).
  explicit Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t Next();
  // Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject); bound > 0.
  uint64_t Below(uint64_t bound);
  // Uniform float in [0, 1) with 24 random bits.
  float UniformFloat();
  // Uniform float in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * UniformFloat(); }

  // The generator's state, for checkpoints: a restored generator continues the sequence.
  void GetState(uint64_t out[4]) const {
    for (int i = 0; i < 4; ++i) out[i] = s_[i];
  }
  void SetState(const uint64_t in[4]) {
    for (int i = 0; i < 4; ++i) s_[i] = in[i];
  }

 private:
  uint64_t s_[4];
};

// Streams used by the trainer; fixed forever, since they decide bit-exact results.
inline constexpr uint64_t kStreamInit = 1;
inline constexpr uint64_t kStreamSplit = 2;
inline constexpr uint64_t kStreamShuffle = 3;
inline constexpr uint64_t kStreamFolds = 4;
// Bootstrap resamples of the validation rows for metric intervals (metrics_report.h).
inline constexpr uint64_t kStreamBootstrap = 5;
inline constexpr uint64_t kStreamPermutation = 6;  // permutation importance (importance.h)

// Fisher-Yates with Rng::Below, from the last element down.
template <typename T>
void Shuffle(T* data, uint64_t n, Rng& rng) {
  for (uint64_t i = n; i > 1; --i) {
    uint64_t j = rng.Below(i);
    T tmp = data[i - 1];
    data[i - 1] = data[j];
    data[j] = tmp;
  }
}

}  // namespace enclave::trainer
