// The per-record check of a sealed dataset's records (finite features, yes/no 0 or 1, the
// class index an integer in [0, classes)), one function for the CPU and the GPU backends
// (CheckRecords in backend.h). Plain C++17: .cu files include it.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "enclave/kernels/hd.h"

namespace enclave::trainer {

// rec: `features` floats, then the class index.
ENCLAVE_HD bool RecordValid(const float* rec, size_t features, const uint8_t* yes_no, uint32_t classes) {
  for (size_t c = 0; c < features; ++c) {
    const float v = rec[c];
    const bool ok = yes_no[c] != 0 ? (v == 0.0f || v == 1.0f) : isfinite(v);
    if (!ok) return false;
  }
  const float label = rec[features];
  return label >= 0.0f && label < static_cast<float>(classes) && label == floorf(label);
}

}  // namespace enclave::trainer
