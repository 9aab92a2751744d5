// The CPU backend: buffers in libsodium guarded memory (mlock'ed where RLIMIT_MEMLOCK
// allows, excluded from core dumps, zeroized on free), GEMM by OpenBLAS pinned to one
// thread (an inner dimension of 1 by a product loop), everything else loops over
// kernels/nn_math.h, vectorized per instruction set with the scalar formula's bits.
#pragma once

#include <map>
#include <memory>

#include "enclave/crypto/secret_bytes.h"
#include "enclave/trainer/backend.h"

namespace enclave::trainer {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  const char* kind() const override { return "cpu"; }
  std::string Describe() const override;

  Result<Buffer> Alloc(size_t count) override;
  void Free(Buffer buffer) override;
  Status Upload(Buffer dst, const float* src, size_t count) override;
  Status Download(float* dst, Buffer src, size_t count) override;
  Status Fill(Buffer dst, float value) override;
  Status UploadBytes(Buffer dst, size_t at, const void* src, size_t n) override;
  Status CopyToBytes(Buffer dst, size_t at, Buffer src, size_t count) override;
  Status Synchronize() override { return OkStatus(); }

  Status SplitRecords(Buffer records, size_t rows, size_t features, Buffer x, Buffer y) override;
  Status CheckRecords(Buffer records, size_t rows, size_t features, const uint8_t* yes_no, uint32_t classes,
                      uint64_t* first_bad) override;
  Status GatherRows(Buffer src, size_t cols, const uint32_t* idx, size_t n, Buffer dst) override;
  Status ColumnMoments(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) override;
  Status ShiftedColumnSums(Buffer x, size_t rows, size_t cols, Buffer shift, Buffer sums) override;
  Status MomentsFromShiftedSums(Buffer sums, Buffer shift, size_t cols, uint64_t count, Buffer mean,
                                Buffer inv_std) override;
  Status Standardize(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) override;

  Status Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, Buffer a, Buffer b, float beta,
              Buffer c) override;
  Status BiasActivation(Buffer z, size_t rows, size_t cols, Buffer bias, Activation act) override;
  Status ActivationBackward(Buffer grad, Buffer y, size_t count, Activation act) override;
  Status ColumnSums(Buffer m, size_t rows, size_t cols, Buffer out) override;
  Status LossAndGrad(LossKind kind, Buffer logits, Buffer labels, size_t rows, size_t classes, float grad_scale,
                     Buffer grad, double* loss_sum, Buffer weights) override;
  Status Probabilities(LossKind kind, Buffer logits, size_t rows, size_t classes, Buffer probs) override;

  Status SgdStep(Buffer param, Buffer grad, Buffer velocity, size_t n, const SgdStepArgs& args) override;
  Status AdamWStep(Buffer param, Buffer grad, Buffer m, Buffer v, size_t n, const AdamWStepArgs& args) override;

 private:
  std::map<float*, crypto::SecretBytes> allocations_;
};

}  // namespace enclave::trainer
