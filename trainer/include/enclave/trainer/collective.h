// How the training loop talks to the other ranks of a data-parallel job. The trainer
// library knows only this interface; enclave-train plugs in the encrypted ring of
// net/ring.h. Every rank ends a call with the same bits (the implementation sums in one
// fixed order and distributes the result).
#pragma once

#include <cstddef>

#include "enclave/common/status.h"

namespace enclave::trainer {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = the sum of data[i] over every rank.
  virtual Status AllReduceSum(float* data, size_t n) = 0;
  virtual Status AllReduceSum(double* data, size_t n) = 0;
};

// A global batch of `rows` rows cut among the ranks: rank r trains rows
// [ShardBegin(rows, r, world), ShardBegin(rows, r + 1, world)) of it.
inline size_t ShardBegin(size_t rows, size_t rank, size_t world) { return rows * rank / world; }

}  // namespace enclave::trainer
