// The narrow interface through which the training loop does every tensor operation, so
// one loop drives two backends: the CPU (OpenBLAS + loops over kernels/nn_math.h, buffers
// in locked memory) and the GPU (cuBLAS + CUDA kernels over the same nn_math.h, buffers in
// device memory; trainer/src/gpu_backend.cu). Plain C++17: .cu files include it.
//
// Conventions for every call:
// - Matrices are row-major float32, densely packed (leading dimension = column count).
// - A Buffer is a view (pointer + element count) into the backend's own memory; the loop
//   never dereferences it. Slice() makes sub-views; only views returned by Alloc are freed.
// - Calls are ordered as issued (a GPU backend may queue them); Download and the calls
//   that return a host value (loss sums) synchronize.
// - Results must not depend on thread scheduling: every reduction runs in a fixed order,
//   so the same calls give bit-identical results on the same backend and machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "enclave/common/status.h"
#include "enclave/kernels/nn_math.h"

namespace enclave::trainer {

using kernels::Activation;

struct Buffer {
  float* data = nullptr;
  size_t size = 0;  // elements

  Buffer Slice(size_t offset, size_t count) const { return Buffer{data + offset, count}; }
  bool empty() const { return size == 0; }
};

enum class LossKind : int {
  kBinaryLogistic = 0,  // one logit per row, label 0 or 1, sigmoid + binary cross-entropy
  kSoftmax = 1,         // `classes` logits per row, label = class index, softmax cross-entropy
  kSquaredError = 2,    // one output per row, label = the (standardized) target, half squared error
};

// One optimizer step over n parameters (p, its gradient g, its state buffers).
struct SgdStepArgs {
  float lr, momentum, weight_decay, l2;
};
struct AdamWStepArgs {
  float lr, beta1, beta2, eps, weight_decay, l2;
  float bias_corr1, bias_corr2;  // 1 - beta^t for the 1-based step t (host-computed)
};

enum class Device : int { kCpu = 0, kGpu = 1, kAuto = 2 };

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "gpu", and a one-line description for reports (library, threads, device).
  virtual const char* kind() const = 0;
  virtual std::string Describe() const = 0;

  // --- memory ---
  // `count` zero-filled floats in the backend's memory (CPU: locked, non-swappable).
  virtual Result<Buffer> Alloc(size_t count) = 0;
  // Frees what Alloc returned (zeroizing it first: it may hold plaintext); a null Buffer is a no-op.
  virtual void Free(Buffer buffer) = 0;
  virtual Status Upload(Buffer dst, const float* src, size_t count) = 0;
  virtual Status Download(float* dst, Buffer src, size_t count) = 0;
  virtual Status Fill(Buffer dst, float value) = 0;
  // Byte-level writes, for assembling an output in backend memory (the model file, which
  // model_seal.h seals there): `n` host bytes to byte offset `at` of `dst`; the bytes of
  // `count` floats of `src` (as stored: little-endian) to byte offset `at` of `dst`.
  virtual Status UploadBytes(Buffer dst, size_t at, const void* src, size_t n) = 0;
  virtual Status CopyToBytes(Buffer dst, size_t at, Buffer src, size_t count) = 0;
  // Blocks until every queued operation has finished.
  virtual Status Synchronize() = 0;

  // --- data ---
  // records: rows x (features + 1) (features in column order, then the class index, as in
  // the sealed format) -> x: rows x features, y: rows.
  virtual Status SplitRecords(Buffer records, size_t rows, size_t features, Buffer x, Buffer y) = 0;
  // The record check of data.h's CheckRecords, where the records are: every feature c
  // finite, and 0 or 1 where yes_no[c] (a host array of `features` flags); the class index
  // an integer in [0, classes). *first_bad = the lowest failing row, or `rows` if none.
  virtual Status CheckRecords(Buffer records, size_t rows, size_t features, const uint8_t* yes_no, uint32_t classes,
                              uint64_t* first_bad) = 0;
  // dst row i = src row idx[i] (src has `cols` columns); idx is a host array of n row
  // numbers, each checked < src rows by the caller.
  virtual Status GatherRows(Buffer src, size_t cols, const uint32_t* idx, size_t n, Buffer dst) = 0;
  // Per column over all `rows` rows: mean and 1/std (population variance, double
  // accumulation in row order; InverseStd() for a constant column).
  virtual Status ColumnMoments(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) = 0;
  // The streamed standardization (data too large to hold): moments over pieces of rows.
  // sums (4 * cols floats holding 2 * cols doubles: S1, then S2) += per column c, over the
  // rows in order, d = double(x[r][c]) - double(shift[c]): S1 += d, S2 += d * d (double,
  // rounded at every operation: no fused multiply-add).
  virtual Status ShiftedColumnSums(Buffer x, size_t rows, size_t cols, Buffer shift, Buffer sums) = 0;
  // From those sums over `count` rows: m = S1 / count, mean = float(shift + m), inv_std =
  // InverseStd(max(0, S2 / count - m * m)) (population variance).
  virtual Status MomentsFromShiftedSums(Buffer sums, Buffer shift, size_t cols, uint64_t count, Buffer mean,
                                        Buffer inv_std) = 0;
  // x = (x - mean) * inv_std per column, in place.
  virtual Status Standardize(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) = 0;

  // --- math ---
  // C[m x n] = alpha * op(A) * op(B) + beta * C; op(A) is m x k (A is k x m when
  // trans_a), op(B) is k x n (B is n x k when trans_b).
  virtual Status Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, Buffer a, Buffer b,
                      float beta, Buffer c) = 0;
  // z[r][c] = act(z[r][c] + bias[c]), in place.
  virtual Status BiasActivation(Buffer z, size_t rows, size_t cols, Buffer bias, Activation act) = 0;
  // grad[i] *= ActivationDerivFromOutput(act, y[i]) for i < count.
  virtual Status ActivationBackward(Buffer grad, Buffer y, size_t count, Activation act) = 0;
  // out[c] = sum over rows of m[r][c], rows summed in order (bias gradients).
  virtual Status ColumnSums(Buffer m, size_t rows, size_t cols, Buffer out) = 0;
  // Loss of a batch of logits (rows x classes for kSoftmax, rows x 1 otherwise)
  // against labels (rows), each row weighted by weights[r] (rows; empty: every weight 1);
  // grad (same shape as logits) = dloss_row/dlogits * grad_scale * weight unless grad is
  // empty; *loss_sum (if non-null) = sum of weight * per-row loss, in double, summed in row
  // order. (The GPU backend takes no weights yet: unsupported.)
  virtual Status LossAndGrad(LossKind kind, Buffer logits, Buffer labels, size_t rows, size_t classes,
                             float grad_scale, Buffer grad, double* loss_sum, Buffer weights) = 0;
  // probs = sigmoid(logits) (binary: rows x 1) or the row softmax (rows x classes); for
  // kSquaredError the outputs themselves (rows x 1).
  virtual Status Probabilities(LossKind kind, Buffer logits, size_t rows, size_t classes, Buffer probs) = 0;

  // --- optimizer (n parameters; state buffers as the optimizer needs them) ---
  virtual Status SgdStep(Buffer param, Buffer grad, Buffer velocity, size_t n, const SgdStepArgs& args) = 0;
  virtual Status AdamWStep(Buffer param, Buffer grad, Buffer m, Buffer v, size_t n, const AdamWStepArgs& args) = 0;
};

// The backend for a device (trainer/src/backend.cc): kCpu always works; kGpu fails with kUnavailable unless the
// build has the GPU backend (ENCLAVE_TRAIN_GPU) and a GPU is present; kAuto picks the GPU
// when it can, else the CPU.
// With ENCLAVE_TRAIN_GPU, backend.cc includes "gpu_backend.h" (trainer/src/) and calls
//   Result<std::unique_ptr<Backend>> MakeGpuBackend();   // namespace enclave::trainer
// after kernels::GpuAvailable() said yes.
Result<std::unique_ptr<Backend>> MakeBackend(Device device);
std::unique_ptr<Backend> MakeCpuBackend();

// Owns one Alloc'd buffer; frees it (zeroized) on destruction.
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  OwnedBuffer(Backend* backend, Buffer buffer) : backend_(backend), buffer_(buffer) {}
  OwnedBuffer(OwnedBuffer&& o) noexcept : backend_(o.backend_), buffer_(o.buffer_) { o.buffer_ = Buffer{}; }
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      buffer_ = o.buffer_;
      o.buffer_ = Buffer{};
    }
    return *this;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  ~OwnedBuffer() { Reset(); }

  const Buffer& get() const { return buffer_; }
  operator Buffer() const { return buffer_; }  // NOLINT: a view, by design
  size_t size() const { return buffer_.size; }
  void Reset() {
    if (backend_ != nullptr && buffer_.data != nullptr) backend_->Free(buffer_);
    buffer_ = Buffer{};
  }

 private:
  Backend* backend_ = nullptr;
  Buffer buffer_;
};

// Alloc wrapped in an OwnedBuffer.
inline Result<OwnedBuffer> AllocOwned(Backend& backend, size_t count) {
  ASSIGN_OR_RETURN(Buffer b, backend.Alloc(count));
  return OwnedBuffer(&backend, b);
}

}  // namespace enclave::trainer
