#include "cpu_backend.h"
#include "record_check.h"

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "enclave/trainer/locked.h"

namespace enclave::trainer {
namespace {

// Every check here guards the loop's own arithmetic: a failure is a bug, not bad input.
Status Fits(const char* op, const Buffer& b, size_t need) {
  if (need > 0 && (b.data == nullptr || b.size < need)) {
    return Internal(std::string(op) + ": buffer of " + std::to_string(b.size) + " floats, need " +
                    std::to_string(need));
  }
  return OkStatus();
}

blasint BlasInt(size_t v) { return static_cast<blasint>(v); }

// The vector loops below take their arrays as __restrict: two that overlap would be a bug
// of the caller (the training loop never passes any), refused here rather than computed
// with whatever the compiler assumed.
Status Disjoint(const char* op, const float* a, size_t na, const float* b, size_t nb) {
  const auto lo_a = reinterpret_cast<uintptr_t>(a), lo_b = reinterpret_cast<uintptr_t>(b);
  if (na == 0 || nb == 0 || lo_a + na * sizeof(float) <= lo_b || lo_b + nb * sizeof(float) <= lo_a) return OkStatus();
  return Internal(std::string(op) + ": overlapping buffers");
}

// The hot loops of a training step, each compiled for several instruction sets
// (target_clones: AVX-512, AVX2 and the x86-64 baseline; the dynamic loader picks one
// for the CPU once). The vector width differs between the clones, the arithmetic does
// not: every element gets the same IEEE operations in the same order as the scalar
// formula of kernels/nn_math.h (this file is built with -ffp-contract=off, so no clone
// fuses a multiply and an add, and add, multiply, divide and square root are correctly
// rounded at any width), and no loop reduces across the elements of a vector (column
// sums add row after row, per column, as the scalar loop did). So every clone gives the
// bits of the plain loop, on any CPU. The activation is chosen once per call, not per
// element: a switch per element kept the ReLU as a branch on the sign of the data, which
// mispredicts about every other element.
// (-DENCLAVE_CPU_CLONES=... builds one chosen variant: how each clone is checked alone.)
#if defined(ENCLAVE_CPU_CLONES)
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ENCLAVE_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ENCLAVE_CPU_CLONES
#endif

ENCLAVE_CPU_CLONES void BiasActivationRows(float* __restrict z, const float* __restrict bias, size_t rows,
                                           size_t cols, int act) {
  switch (act) {
    case kernels::kActRelu:
      for (size_t r = 0; r < rows; ++r) {
        float* __restrict row = z + r * cols;
        for (size_t c = 0; c < cols; ++c) row[c] = kernels::ActivationForward(kernels::kActRelu, row[c] + bias[c]);
      }
      return;
    case kernels::kActTanh:  // libm per element: nothing to vectorize but the switch
      for (size_t r = 0; r < rows; ++r) {
        float* __restrict row = z + r * cols;
        for (size_t c = 0; c < cols; ++c) row[c] = kernels::ActivationForward(kernels::kActTanh, row[c] + bias[c]);
      }
      return;
    case kernels::kActSigmoid:
      for (size_t r = 0; r < rows; ++r) {
        float* __restrict row = z + r * cols;
        for (size_t c = 0; c < cols; ++c) row[c] = kernels::ActivationForward(kernels::kActSigmoid, row[c] + bias[c]);
      }
      return;
    default:
      for (size_t r = 0; r < rows; ++r) {
        float* __restrict row = z + r * cols;
        for (size_t c = 0; c < cols; ++c) row[c] = kernels::ActivationForward(act, row[c] + bias[c]);
      }
      return;
  }
}

ENCLAVE_CPU_CLONES void ActivationBackwardLoop(float* __restrict g, const float* __restrict y, size_t n, int act) {
  switch (act) {
    case kernels::kActRelu:
      for (size_t i = 0; i < n; ++i) g[i] *= kernels::ActivationDerivFromOutput(kernels::kActRelu, y[i]);
      return;
    case kernels::kActTanh:
      for (size_t i = 0; i < n; ++i) g[i] *= kernels::ActivationDerivFromOutput(kernels::kActTanh, y[i]);
      return;
    case kernels::kActSigmoid:
      for (size_t i = 0; i < n; ++i) g[i] *= kernels::ActivationDerivFromOutput(kernels::kActSigmoid, y[i]);
      return;
    default:
      for (size_t i = 0; i < n; ++i) g[i] *= kernels::ActivationDerivFromOutput(act, y[i]);
      return;
  }
}

ENCLAVE_CPU_CLONES void ColumnSumsLoop(const float* __restrict m, size_t rows, size_t cols, float* __restrict out) {
  for (size_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict row = m + r * cols;
    for (size_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

// C = A B for an inner dimension of 1 (alpha 1, beta 0): c[i][j] = a[i] * b[j], one
// rounded product each, which is what a GEMM's sum of one product is (OpenBLAS adds it to
// a zero accumulator: the same value, at most the sign of an exact zero differs, and every
// consumer of these products adds them to sums that start at +0). The backward pass of a
// one-output layer (delta x W^T) is such a product; OpenBLAS's small-matrix kernel took
// about 20 times as long as this loop for it.
ENCLAVE_CPU_CLONES void OuterProduct(const float* __restrict a, const float* __restrict b, size_t m, size_t n,
                                     float* __restrict c) {
  for (size_t i = 0; i < m; ++i) {
    const float ai = a[i];
    float* __restrict row = c + i * n;
    for (size_t j = 0; j < n; ++j) row[j] = ai * b[j];
  }
}

// Moments and standardization of the training rows: per column, in row order, in double
// (the scalar loops' operations, vectorized across columns).
ENCLAVE_CPU_CLONES void ColumnSumsDouble(const float* __restrict x, size_t rows, size_t cols, double* __restrict sum) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    for (size_t c = 0; c < cols; ++c) sum[c] += row[c];
  }
}

ENCLAVE_CPU_CLONES void CentredSquares(const float* __restrict x, size_t rows, size_t cols,
                                       const double* __restrict mean, double* __restrict sq) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    for (size_t c = 0; c < cols; ++c) {
      const double d = row[c] - mean[c];
      sq[c] += d * d;
    }
  }
}

ENCLAVE_CPU_CLONES void StandardizeRows(float* __restrict x, size_t rows, size_t cols, const float* __restrict mean,
                                        const float* __restrict inv_std) {
  for (size_t r = 0; r < rows; ++r) {
    float* __restrict row = x + r * cols;
    for (size_t c = 0; c < cols; ++c) row[c] = kernels::Standardize(row[c], mean[c], inv_std[c]);
  }
}

ENCLAVE_CPU_CLONES void SgdLoop(float* __restrict p, const float* __restrict g, float* __restrict v, size_t n,
                                SgdStepArgs a) {
  for (size_t i = 0; i < n; ++i) kernels::SgdMomentumUpdate(&p[i], g[i], &v[i], a.lr, a.momentum, a.weight_decay, a.l2);
}

ENCLAVE_CPU_CLONES void AdamWLoop(float* __restrict p, const float* __restrict g, float* __restrict m,
                                  float* __restrict v, size_t n, AdamWStepArgs a) {
  for (size_t i = 0; i < n; ++i) {
    kernels::AdamWUpdate(&p[i], g[i], &m[i], &v[i], a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.l2, a.bias_corr1,
                         a.bias_corr2);
  }
}

}  // namespace

CpuBackend::CpuBackend() {
  // Determinism: one BLAS thread. OpenBLAS splits a GEMM across threads by blocks of the
  // output, and with more threads its choice of blocking (and so the summation order of
  // the K dimension inside the micro-kernel) may change with the thread count; with one
  // thread the order is fixed by the shapes alone, whatever the scheduler does.
  openblas_set_num_threads(1);
}

std::string CpuBackend::Describe() const {
  const char* core = openblas_get_corename();
  return std::string("cpu: OpenBLAS ") + (core != nullptr ? core : "?") + ", 1 thread, locked memory";
}

Result<Buffer> CpuBackend::Alloc(size_t count) {
  if (count == 0) return Buffer{};
  if (count > (SIZE_MAX / 4) - 64) return Internal("allocation too large");
  // A multiple of 64 bytes, so the guarded allocation (which ends at a page boundary)
  // starts 64-byte aligned for the BLAS kernels.
  const size_t bytes = (count * 4 + 63) / 64 * 64;
  ASSIGN_OR_RETURN(crypto::SecretBytes mem, crypto::SecretBytes::Create(bytes));
  float* p = reinterpret_cast<float*>(mem.ExposeSecretMutable().data());
  allocations_.emplace(p, std::move(mem));
  return Buffer{p, count};
}

void CpuBackend::Free(Buffer buffer) {
  if (buffer.data == nullptr) return;
  allocations_.erase(buffer.data);  // SecretBytes zeroizes and unlocks
}

Status CpuBackend::Upload(Buffer dst, const float* src, size_t count) {
  RETURN_IF_ERROR(Fits("Upload", dst, count));
  if (count > 0) std::memcpy(dst.data, src, count * sizeof(float));
  return OkStatus();
}

Status CpuBackend::Download(float* dst, Buffer src, size_t count) {
  RETURN_IF_ERROR(Fits("Download", src, count));
  if (count > 0) std::memcpy(dst, src.data, count * sizeof(float));
  return OkStatus();
}

// Byte range [at, at + n) inside a buffer of dst.size floats.
static Status FitsBytes(const char* op, const Buffer& dst, size_t at, size_t n) {
  if (n > 0 && (dst.data == nullptr || at > dst.size * sizeof(float) || n > dst.size * sizeof(float) - at)) {
    return Internal(std::string(op) + ": bytes " + std::to_string(at) + "+" + std::to_string(n) +
                    " outside a buffer of " + std::to_string(dst.size) + " floats");
  }
  return OkStatus();
}

Status CpuBackend::UploadBytes(Buffer dst, size_t at, const void* src, size_t n) {
  RETURN_IF_ERROR(FitsBytes("UploadBytes", dst, at, n));
  if (n > 0) std::memcpy(reinterpret_cast<uint8_t*>(dst.data) + at, src, n);
  return OkStatus();
}

Status CpuBackend::CopyToBytes(Buffer dst, size_t at, Buffer src, size_t count) {
  RETURN_IF_ERROR(Fits("CopyToBytes", src, count));
  RETURN_IF_ERROR(FitsBytes("CopyToBytes", dst, at, count * sizeof(float)));
  if (count > 0) std::memcpy(reinterpret_cast<uint8_t*>(dst.data) + at, src.data, count * sizeof(float));
  return OkStatus();
}

Status CpuBackend::Fill(Buffer dst, float value) {
  for (size_t i = 0; i < dst.size; ++i) dst.data[i] = value;
  return OkStatus();
}

Status CpuBackend::SplitRecords(Buffer records, size_t rows, size_t features, Buffer x, Buffer y) {
  RETURN_IF_ERROR(Fits("SplitRecords", records, rows * (features + 1)));
  RETURN_IF_ERROR(Fits("SplitRecords", x, rows * features));
  RETURN_IF_ERROR(Fits("SplitRecords", y, rows));
  for (size_t r = 0; r < rows; ++r) {
    const float* rec = records.data + r * (features + 1);
    std::memcpy(x.data + r * features, rec, features * sizeof(float));
    y.data[r] = rec[features];
  }
  return OkStatus();
}

Status CpuBackend::CheckRecords(Buffer records, size_t rows, size_t features, const uint8_t* yes_no,
                                uint32_t classes, uint64_t* first_bad) {
  RETURN_IF_ERROR(Fits("CheckRecords", records, rows * (features + 1)));
  *first_bad = rows;
  for (size_t r = 0; r < rows; ++r) {
    if (!RecordValid(records.data + r * (features + 1), features, yes_no, classes)) {
      *first_bad = r;
      break;
    }
  }
  return OkStatus();
}

Status CpuBackend::GatherRows(Buffer src, size_t cols, const uint32_t* idx, size_t n, Buffer dst) {
  RETURN_IF_ERROR(Fits("GatherRows", dst, n * cols));
  const size_t src_rows = cols == 0 ? 0 : src.size / cols;
  for (size_t i = 0; i < n; ++i) {
    if (idx[i] >= src_rows) return Internal("GatherRows: row " + std::to_string(idx[i]) + " out of range");
  }
  if (cols == 1) {  // labels and weights: one float a row
    for (size_t i = 0; i < n; ++i) dst.data[i] = src.data[idx[i]];
    return OkStatus();
  }
  // A batch's rows are scattered over the whole training set (shuffled): ask for the row
  // a few ahead while this one is copied, so the cache misses overlap.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const float* next = src.data + static_cast<size_t>(idx[i + kAhead]) * cols;
      __builtin_prefetch(next);
      __builtin_prefetch(next + cols - 1);
    }
    std::memcpy(dst.data + i * cols, src.data + static_cast<size_t>(idx[i]) * cols, cols * sizeof(float));
  }
  return OkStatus();
}

Status CpuBackend::ColumnMoments(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) {
  RETURN_IF_ERROR(Fits("ColumnMoments", x, rows * cols));
  RETURN_IF_ERROR(Fits("ColumnMoments", mean, cols));
  RETURN_IF_ERROR(Fits("ColumnMoments", inv_std, cols));
  if (rows == 0) return Internal("ColumnMoments: no rows");
  // Two passes in double, rows in order: the mean, then the centred sum of squares (in
  // locked memory: derived from the plaintext rows).
  ASSIGN_OR_RETURN(LockedArray<double> sum, LockedArray<double>::Create(cols));
  ASSIGN_OR_RETURN(LockedArray<double> sq, LockedArray<double>::Create(cols));
  ColumnSumsDouble(x.data, rows, cols, sum.data());
  for (size_t c = 0; c < cols; ++c) sum[c] /= static_cast<double>(rows);
  CentredSquares(x.data, rows, cols, sum.data(), sq.data());
  for (size_t c = 0; c < cols; ++c) {
    mean.data[c] = static_cast<float>(sum[c]);
    inv_std.data[c] = kernels::InverseStd(sq[c] / static_cast<double>(rows));
  }
  return OkStatus();
}

Status CpuBackend::ShiftedColumnSums(Buffer x, size_t rows, size_t cols, Buffer shift, Buffer sums) {
  RETURN_IF_ERROR(Fits("ShiftedColumnSums", x, rows * cols));
  RETURN_IF_ERROR(Fits("ShiftedColumnSums", shift, cols));
  RETURN_IF_ERROR(Fits("ShiftedColumnSums", sums, 4 * cols));
  double* s1 = reinterpret_cast<double*>(sums.data);  // Alloc'd: aligned for double
  double* s2 = s1 + cols;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x.data + r * cols;
    for (size_t c = 0; c < cols; ++c) {
      const double d = static_cast<double>(row[c]) - static_cast<double>(shift.data[c]);
      s1[c] += d;
      s2[c] += d * d;
    }
  }
  return OkStatus();
}

Status CpuBackend::MomentsFromShiftedSums(Buffer sums, Buffer shift, size_t cols, uint64_t count, Buffer mean,
                                          Buffer inv_std) {
  RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", sums, 4 * cols));
  RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", shift, cols));
  RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", mean, cols));
  RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", inv_std, cols));
  if (count == 0) return Internal("MomentsFromShiftedSums: no rows");
  const double* s1 = reinterpret_cast<const double*>(sums.data);
  const double* s2 = s1 + cols;
  const double n = static_cast<double>(count);
  for (size_t c = 0; c < cols; ++c) {
    const double m = s1[c] / n;
    mean.data[c] = static_cast<float>(static_cast<double>(shift.data[c]) + m);
    inv_std.data[c] = kernels::InverseStd(std::max(0.0, s2[c] / n - m * m));
  }
  return OkStatus();
}

Status CpuBackend::Standardize(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) {
  RETURN_IF_ERROR(Fits("Standardize", x, rows * cols));
  RETURN_IF_ERROR(Fits("Standardize", mean, cols));
  RETURN_IF_ERROR(Fits("Standardize", inv_std, cols));
  RETURN_IF_ERROR(Disjoint("Standardize", x.data, rows * cols, mean.data, cols));
  RETURN_IF_ERROR(Disjoint("Standardize", x.data, rows * cols, inv_std.data, cols));
  StandardizeRows(x.data, rows, cols, mean.data, inv_std.data);
  return OkStatus();
}

Status CpuBackend::Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, Buffer a, Buffer b,
                        float beta, Buffer c) {
  RETURN_IF_ERROR(Fits("Gemm A", a, m * k));
  RETURN_IF_ERROR(Fits("Gemm B", b, k * n));
  RETURN_IF_ERROR(Fits("Gemm C", c, m * n));
  if (m == 0 || n == 0) return OkStatus();
  if (k == 1 && alpha == 1.0f && beta == 0.0f) {
    // An inner dimension of 1: A is a column and B a row however they are stored.
    RETURN_IF_ERROR(Disjoint("Gemm", a.data, m, c.data, m * n));
    RETURN_IF_ERROR(Disjoint("Gemm", b.data, n, c.data, m * n));
    OuterProduct(a.data, b.data, m, n, c.data);
    return OkStatus();
  }
  const size_t lda = trans_a ? m : k;
  const size_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, BlasInt(m),
              BlasInt(n), BlasInt(k), alpha, a.data, BlasInt(lda), b.data, BlasInt(ldb), beta, c.data, BlasInt(n));
  return OkStatus();
}

Status CpuBackend::BiasActivation(Buffer z, size_t rows, size_t cols, Buffer bias, Activation act) {
  RETURN_IF_ERROR(Fits("BiasActivation", z, rows * cols));
  RETURN_IF_ERROR(Fits("BiasActivation", bias, cols));
  RETURN_IF_ERROR(Disjoint("BiasActivation", z.data, rows * cols, bias.data, cols));
  BiasActivationRows(z.data, bias.data, rows, cols, act);
  return OkStatus();
}

Status CpuBackend::ActivationBackward(Buffer grad, Buffer y, size_t count, Activation act) {
  RETURN_IF_ERROR(Fits("ActivationBackward", grad, count));
  RETURN_IF_ERROR(Fits("ActivationBackward", y, count));
  RETURN_IF_ERROR(Disjoint("ActivationBackward", grad.data, count, y.data, count));
  ActivationBackwardLoop(grad.data, y.data, count, act);
  return OkStatus();
}

Status CpuBackend::ColumnSums(Buffer m, size_t rows, size_t cols, Buffer out) {
  RETURN_IF_ERROR(Fits("ColumnSums", m, rows * cols));
  RETURN_IF_ERROR(Fits("ColumnSums", out, cols));
  RETURN_IF_ERROR(Disjoint("ColumnSums", m.data, rows * cols, out.data, cols));
  ColumnSumsLoop(m.data, rows, cols, out.data);
  return OkStatus();
}

Status CpuBackend::LossAndGrad(LossKind kind, Buffer logits, Buffer labels, size_t rows, size_t classes,
                               float grad_scale, Buffer grad, double* loss_sum, Buffer weights) {
  const size_t width = kind == LossKind::kSoftmax ? classes : 1;
  RETURN_IF_ERROR(Fits("LossAndGrad logits", logits, rows * width));
  RETURN_IF_ERROR(Fits("LossAndGrad labels", labels, rows));
  const bool want_grad = !grad.empty();
  if (want_grad) RETURN_IF_ERROR(Fits("LossAndGrad grad", grad, rows * width));
  const bool weighted = !weights.empty();
  if (weighted) RETURN_IF_ERROR(Fits("LossAndGrad weights", weights, rows));
  double total = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const float y = labels.data[r];
    // Unweighted rows keep their exact bits (no multiplication by 1.0f is skipped or added).
    const float scale = weighted ? grad_scale * weights.data[r] : grad_scale;
    const double w = weighted ? weights.data[r] : 1.0;
    if (kind == LossKind::kBinaryLogistic) {
      const float z = logits.data[r];
      total += w * kernels::BceWithLogits(z, y);
      if (want_grad) grad.data[r] = kernels::BceWithLogitsGrad(z, y) * scale;
      continue;
    }
    if (kind == LossKind::kSquaredError) {
      const float z = logits.data[r];
      total += w * kernels::HalfSquaredError(z, y);
      if (want_grad) grad.data[r] = kernels::HalfSquaredErrorGrad(z, y) * scale;
      continue;
    }
    const float* z = logits.data + r * width;
    const size_t label = static_cast<size_t>(y);
    if (label >= width) return Internal("LossAndGrad: label " + std::to_string(label) + " out of range");
    float mx = z[0];
    for (size_t c = 1; c < width; ++c) mx = z[c] > mx ? z[c] : mx;
    float s = 0.0f;
    for (size_t c = 0; c < width; ++c) s += kernels::SoftmaxShiftedExp(z[c], mx);
    total += w * kernels::SoftmaxCrossEntropy(z[label], mx, s);
    if (want_grad) {
      const float inv = 1.0f / s;
      float* g = grad.data + r * width;
      for (size_t c = 0; c < width; ++c) g[c] = kernels::SoftmaxCrossEntropyGrad(z[c], mx, inv, c == label) * scale;
    }
  }
  if (loss_sum != nullptr) *loss_sum = total;
  return OkStatus();
}

Status CpuBackend::Probabilities(LossKind kind, Buffer logits, size_t rows, size_t classes, Buffer probs) {
  const size_t width = kind == LossKind::kSoftmax ? classes : 1;
  RETURN_IF_ERROR(Fits("Probabilities logits", logits, rows * width));
  RETURN_IF_ERROR(Fits("Probabilities probs", probs, rows * width));
  for (size_t r = 0; r < rows; ++r) {
    const float* z = logits.data + r * width;
    float* p = probs.data + r * width;
    if (kind == LossKind::kBinaryLogistic) {
      p[0] = kernels::Sigmoid(z[0]);
      continue;
    }
    if (kind == LossKind::kSquaredError) {
      p[0] = z[0];
      continue;
    }
    float mx = z[0];
    for (size_t c = 1; c < width; ++c) mx = z[c] > mx ? z[c] : mx;
    float s = 0.0f;
    for (size_t c = 0; c < width; ++c) s += kernels::SoftmaxShiftedExp(z[c], mx);
    const float inv = 1.0f / s;
    for (size_t c = 0; c < width; ++c) p[c] = kernels::SoftmaxProbability(z[c], mx, inv);
  }
  return OkStatus();
}

Status CpuBackend::SgdStep(Buffer param, Buffer grad, Buffer velocity, size_t n, const SgdStepArgs& a) {
  RETURN_IF_ERROR(Fits("SgdStep", param, n));
  RETURN_IF_ERROR(Fits("SgdStep", grad, n));
  RETURN_IF_ERROR(Fits("SgdStep", velocity, n));
  RETURN_IF_ERROR(Disjoint("SgdStep", param.data, n, grad.data, n));
  RETURN_IF_ERROR(Disjoint("SgdStep", param.data, n, velocity.data, n));
  RETURN_IF_ERROR(Disjoint("SgdStep", grad.data, n, velocity.data, n));
  SgdLoop(param.data, grad.data, velocity.data, n, a);
  return OkStatus();
}

Status CpuBackend::AdamWStep(Buffer param, Buffer grad, Buffer m, Buffer v, size_t n, const AdamWStepArgs& a) {
  RETURN_IF_ERROR(Fits("AdamWStep", param, n));
  RETURN_IF_ERROR(Fits("AdamWStep", grad, n));
  RETURN_IF_ERROR(Fits("AdamWStep", m, n));
  RETURN_IF_ERROR(Fits("AdamWStep", v, n));
  const float* all[] = {param.data, grad.data, m.data, v.data};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) RETURN_IF_ERROR(Disjoint("AdamWStep", all[i], n, all[j], n));
  }
  AdamWLoop(param.data, grad.data, m.data, v.data, n, a);
  return OkStatus();
}

}  // namespace enclave::trainer
