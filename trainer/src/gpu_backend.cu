// The GPU backend (gpu_backend.h). Kernels are one thread per element for element-wise
// work, one thread per row for the loss and softmax, one thread per column for the column
// reductions (rows added in order, as on the CPU). Every per-element formula is a call
// into kernels/nn_math.h, the same code the CPU backend runs.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "enclave/kernels/cuda_status.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "enclave/kernels/nn_math.h"
#include "gpu_backend.h"
#include "record_check.h"

namespace enclave::trainer {
namespace {

namespace k = ::enclave::kernels;

constexpr unsigned kThreads = 256;

unsigned BlocksFor(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b > 0x7fffffffu ? 0x7fffffffu : b));
}

#define GRID_STRIDE(i, n)                                                         \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(blockDim.x) * gridDim.x)

__global__ void FillKernel(float* p, size_t n, float v) {
  GRID_STRIDE(i, n) { p[i] = v; }
}

__global__ void SplitRecordsKernel(const float* rec, size_t rows, size_t features, float* x, float* y) {
  const size_t width = features + 1;
  GRID_STRIDE(i, rows * width) {
    const size_t r = i / width, c = i % width;
    if (c < features) {
      x[r * features + c] = rec[i];
    } else {
      y[r] = rec[i];
    }
  }
}

// One thread per row; the lowest failing row wins (atomicMin), so the result does not
// depend on scheduling.
__global__ void CheckRecordsKernel(const float* rec, size_t rows, size_t features, const uint8_t* yes_no,
                                   uint32_t classes, unsigned long long* first_bad) {
  GRID_STRIDE(r, rows) {
    if (!RecordValid(rec + r * (features + 1), features, yes_no, classes)) {
      atomicMin(first_bad, static_cast<unsigned long long>(r));
    }
  }
}

__global__ void GatherRowsKernel(const float* src, size_t cols, const uint32_t* idx, size_t n, float* dst) {
  GRID_STRIDE(i, n * cols) {
    const size_t r = i / cols, c = i % cols;
    dst[i] = src[static_cast<size_t>(idx[r]) * cols + c];
  }
}

// One thread per column, rows in order, in double with explicit rounding (no fused
// multiply-add), exactly the CPU backend's two passes.
__global__ void ColumnMomentsKernel(const float* x, size_t rows, size_t cols, float* mean, float* inv_std) {
  GRID_STRIDE(c, cols) {
    double s = 0.0;
    for (size_t r = 0; r < rows; ++r) s = __dadd_rn(s, static_cast<double>(x[r * cols + c]));
    const double m = __ddiv_rn(s, static_cast<double>(rows));
    double q = 0.0;
    for (size_t r = 0; r < rows; ++r) {
      const double d = __dsub_rn(static_cast<double>(x[r * cols + c]), m);
      q = __dadd_rn(q, __dmul_rn(d, d));
    }
    mean[c] = static_cast<float>(m);
    inv_std[c] = k::InverseStd(__ddiv_rn(q, static_cast<double>(rows)));
  }
}

// The streamed moments: one thread per column, rows in order, explicit rounding (the CPU
// backend's loop, operation for operation).
__global__ void ShiftedColumnSumsKernel(const float* x, size_t rows, size_t cols, const float* shift, double* s1,
                                        double* s2) {
  GRID_STRIDE(c, cols) {
    const double sh = static_cast<double>(shift[c]);
    double a = s1[c], b = s2[c];
    for (size_t r = 0; r < rows; ++r) {
      const double d = __dsub_rn(static_cast<double>(x[r * cols + c]), sh);
      a = __dadd_rn(a, d);
      b = __dadd_rn(b, __dmul_rn(d, d));
    }
    s1[c] = a;
    s2[c] = b;
  }
}

__global__ void MomentsFromShiftedSumsKernel(const double* s1, const double* s2, const float* shift, size_t cols,
                                             double n, float* mean, float* inv_std) {
  GRID_STRIDE(c, cols) {
    const double m = __ddiv_rn(s1[c], n);
    mean[c] = static_cast<float>(__dadd_rn(static_cast<double>(shift[c]), m));
    const double var = __dsub_rn(__ddiv_rn(s2[c], n), __dmul_rn(m, m));
    inv_std[c] = k::InverseStd(var > 0.0 ? var : 0.0);
  }
}

__global__ void StandardizeKernel(float* x, size_t rows, size_t cols, const float* mean, const float* inv_std) {
  GRID_STRIDE(i, rows * cols) {
    const size_t c = i % cols;
    x[i] = k::Standardize(x[i], mean[c], inv_std[c]);
  }
}

__global__ void BiasActivationKernel(float* z, size_t rows, size_t cols, const float* bias, int act) {
  GRID_STRIDE(i, rows * cols) { z[i] = k::ActivationForward(act, z[i] + bias[i % cols]); }
}

__global__ void ActivationBackwardKernel(float* grad, const float* y, size_t n, int act) {
  GRID_STRIDE(i, n) { grad[i] *= k::ActivationDerivFromOutput(act, y[i]); }
}

__global__ void ColumnSumsKernel(const float* m, size_t rows, size_t cols, float* out) {
  GRID_STRIDE(c, cols) {
    float s = 0.0f;
    for (size_t r = 0; r < rows; ++r) s += m[r * cols + c];
    out[c] = s;
  }
}

// One thread per row: the row's loss into row_loss[r], its gradient into grad (if any).
// A label outside [0, classes) sets *bad.
__global__ void LossKernel(int kind, const float* logits, const float* labels, size_t rows, size_t classes,
                           float grad_scale, float* grad, float* row_loss, int* bad) {
  GRID_STRIDE(r, rows) {
    const float y = labels[r];
    if (kind == static_cast<int>(LossKind::kBinaryLogistic)) {
      const float z = logits[r];
      row_loss[r] = k::BceWithLogits(z, y);
      if (grad != nullptr) grad[r] = k::BceWithLogitsGrad(z, y) * grad_scale;
      continue;
    }
    if (kind == static_cast<int>(LossKind::kSquaredError)) {
      const float z = logits[r];
      row_loss[r] = k::HalfSquaredError(z, y);
      if (grad != nullptr) grad[r] = k::HalfSquaredErrorGrad(z, y) * grad_scale;
      continue;
    }
    const float* z = logits + r * classes;
    if (!(y >= 0.0f) || static_cast<size_t>(y) >= classes) {
      atomicExch(bad, 1);
      row_loss[r] = 0.0f;
      continue;
    }
    const size_t label = static_cast<size_t>(y);
    float mx = z[0];
    for (size_t c = 1; c < classes; ++c) mx = z[c] > mx ? z[c] : mx;
    float s = 0.0f;
    for (size_t c = 0; c < classes; ++c) s += k::SoftmaxShiftedExp(z[c], mx);
    row_loss[r] = k::SoftmaxCrossEntropy(z[label], mx, s);
    if (grad != nullptr) {
      const float inv = 1.0f / s;
      float* g = grad + r * classes;
      for (size_t c = 0; c < classes; ++c) g[c] = k::SoftmaxCrossEntropyGrad(z[c], mx, inv, c == label) * grad_scale;
    }
  }
}

__global__ void ProbabilitiesKernel(int kind, const float* logits, size_t rows, size_t classes, float* probs) {
  GRID_STRIDE(r, rows) {
    if (kind == static_cast<int>(LossKind::kBinaryLogistic)) {
      probs[r] = k::Sigmoid(logits[r]);
      continue;
    }
    if (kind == static_cast<int>(LossKind::kSquaredError)) {
      probs[r] = logits[r];
      continue;
    }
    const float* z = logits + r * classes;
    float* p = probs + r * classes;
    float mx = z[0];
    for (size_t c = 1; c < classes; ++c) mx = z[c] > mx ? z[c] : mx;
    float s = 0.0f;
    for (size_t c = 0; c < classes; ++c) s += k::SoftmaxShiftedExp(z[c], mx);
    const float inv = 1.0f / s;
    for (size_t c = 0; c < classes; ++c) p[c] = k::SoftmaxProbability(z[c], mx, inv);
  }
}

__global__ void SgdKernel(float* p, const float* g, float* v, size_t n, SgdStepArgs a) {
  GRID_STRIDE(i, n) { k::SgdMomentumUpdate(&p[i], g[i], &v[i], a.lr, a.momentum, a.weight_decay, a.l2); }
}

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, size_t n, AdamWStepArgs a) {
  GRID_STRIDE(i, n) {
    k::AdamWUpdate(&p[i], g[i], &m[i], &v[i], a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.l2, a.bias_corr1,
                   a.bias_corr2);
  }
}

using kernels::CudaStatus;

Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return Unavailable(std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// Every check here guards the loop's own arithmetic: a failure is a bug, not bad input.
Status Fits(const char* op, const Buffer& b, size_t need) {
  if (need > 0 && (b.data == nullptr || b.size < need)) {
    return Internal(std::string(op) + ": buffer of " + std::to_string(b.size) + " floats, need " +
                    std::to_string(need));
  }
  return OkStatus();
}

// Byte range [at, at + n) inside a buffer of dst.size floats.
Status FitsBytes(const char* op, const Buffer& dst, size_t at, size_t n) {
  if (n > 0 && (dst.data == nullptr || at > dst.size * sizeof(float) || n > dst.size * sizeof(float) - at)) {
    return Internal(std::string(op) + ": bytes " + std::to_string(at) + "+" + std::to_string(n) +
                    " outside a buffer of " + std::to_string(dst.size) + " floats");
  }
  return OkStatus();
}

class GpuBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> Create() {
    std::unique_ptr<GpuBackend> g(new GpuBackend());
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&g->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    RETURN_IF_ERROR(CublasStatus(cublasCreate(&g->blas_), "cublasCreate"));
    RETURN_IF_ERROR(CublasStatus(cublasSetStream(g->blas_, g->stream_), "cublasSetStream"));
    // Reproducible FP32: default math (never TF32 or reduced-precision reductions for
    // SGEMM), no atomics in cuBLAS, one stream.
    RETURN_IF_ERROR(CublasStatus(cublasSetMathMode(g->blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    RETURN_IF_ERROR(
        CublasStatus(cublasSetAtomicsMode(g->blas_, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode"));
    RETURN_IF_ERROR(CublasStatus(cublasSetPointerMode(g->blas_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&g->bad_, sizeof(int)), "cudaMalloc"));
    cudaDeviceProp prop{};
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
    int blas_version = 0;
    cublasGetVersion(g->blas_, &blas_version);
    g->describe_ = std::string("gpu: ") + prop.name + ", cuBLAS " + std::to_string(blas_version) +
                   " FP32 default math, device memory";
    return std::unique_ptr<Backend>(std::move(g));
  }

  ~GpuBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    // Buffers never freed are zeroized and released here.
    std::vector<float*> left;
    for (const auto& [p, n] : sizes_of_) left.push_back(p);
    for (float* p : left) Release(p);
    if (idx_ != nullptr) cudaFree(idx_);
    if (row_loss_ != nullptr) cudaFree(row_loss_);
    FreeHostLoss();
    if (bad_ != nullptr) cudaFree(bad_);
    if (check_scratch_ != nullptr) cudaFree(check_scratch_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* kind() const override { return "gpu"; }
  std::string Describe() const override { return describe_; }

  Result<Buffer> Alloc(size_t count) override {
    if (count == 0) return Buffer{};
    if (count > (SIZE_MAX / 4) - 64) return Internal("allocation too large");
    float* p = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, count * sizeof(float)), "cudaMalloc"));
    Status s = CudaStatus(cudaMemsetAsync(p, 0, count * sizeof(float), stream_), "cudaMemsetAsync");
    if (!s.ok()) {
      cudaFree(p);
      return s;
    }
    sizes_of_[p] = count;
    return Buffer{p, count};
  }

  void Free(Buffer buffer) override {
    if (buffer.data == nullptr || sizes_of_.count(buffer.data) == 0) return;
    Release(buffer.data);
  }

  Status Upload(Buffer dst, const float* src, size_t count) override {
    RETURN_IF_ERROR(Fits("Upload", dst, count));
    if (count == 0) return OkStatus();
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst.data, src, count * sizeof(float), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // src may go after we return
  }

  Status Download(float* dst, Buffer src, size_t count) override {
    RETURN_IF_ERROR(Fits("Download", src, count));
    if (count == 0) return OkStatus();
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst, src.data, count * sizeof(float), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  Status UploadBytes(Buffer dst, size_t at, const void* src, size_t n) override {
    RETURN_IF_ERROR(FitsBytes("UploadBytes", dst, at, n));
    if (n == 0) return OkStatus();
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(reinterpret_cast<uint8_t*>(dst.data) + at, src, n,
                                               cudaMemcpyHostToDevice, stream_),
                               "cudaMemcpyAsync"));
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // src may go after we return
  }

  Status CopyToBytes(Buffer dst, size_t at, Buffer src, size_t count) override {
    RETURN_IF_ERROR(Fits("CopyToBytes", src, count));
    RETURN_IF_ERROR(FitsBytes("CopyToBytes", dst, at, count * sizeof(float)));
    if (count == 0) return OkStatus();
    return CudaStatus(cudaMemcpyAsync(reinterpret_cast<uint8_t*>(dst.data) + at, src.data, count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_),
                      "cudaMemcpyAsync");
  }

  Status Fill(Buffer dst, float value) override {
    if (dst.size == 0) return OkStatus();
    FillKernel<<<BlocksFor(dst.size), kThreads, 0, stream_>>>(dst.data, dst.size, value);
    return Launched("Fill");
  }

  Status Synchronize() override { return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  Status SplitRecords(Buffer records, size_t rows, size_t features, Buffer x, Buffer y) override {
    RETURN_IF_ERROR(Fits("SplitRecords", records, rows * (features + 1)));
    RETURN_IF_ERROR(Fits("SplitRecords", x, rows * features));
    RETURN_IF_ERROR(Fits("SplitRecords", y, rows));
    if (rows == 0) return OkStatus();
    SplitRecordsKernel<<<BlocksFor(rows * (features + 1)), kThreads, 0, stream_>>>(records.data, rows, features,
                                                                                  x.data, y.data);
    return Launched("SplitRecords");
  }

  Status CheckRecords(Buffer records, size_t rows, size_t features, const uint8_t* yes_no, uint32_t classes,
                      uint64_t* first_bad) override {
    RETURN_IF_ERROR(Fits("CheckRecords", records, rows * (features + 1)));
    *first_bad = rows;
    if (rows == 0) return OkStatus();
    // Scratch: the row slot, then the column flags (host -> device, not secret). Kept and
    // only grown: a cudaFree per call would wait for the whole device (other threads'
    // backends too: a streaming reader checks every block).
    const size_t need = sizeof(unsigned long long) + features + 1;
    if (need > check_scratch_bytes_) {
      cudaStreamSynchronize(stream_);  // nothing may still use the old scratch
      if (check_scratch_ != nullptr) cudaFree(check_scratch_);
      check_scratch_ = nullptr;
      check_scratch_bytes_ = 0;
      RETURN_IF_ERROR(CudaStatus(cudaMalloc(&check_scratch_, need), "cudaMalloc(check)"));
      check_scratch_bytes_ = need;
    }
    uint8_t* scratch = check_scratch_;
    auto* slot = reinterpret_cast<unsigned long long*>(scratch);
    uint8_t* flags = scratch + sizeof(unsigned long long);
    const unsigned long long none = rows;
    unsigned long long found = rows;
    auto run = [&]() -> Status {
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(slot, &none, sizeof none, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
      if (features > 0) {
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(flags, yes_no, features, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
      }
      CheckRecordsKernel<<<BlocksFor(rows), kThreads, 0, stream_>>>(records.data, rows, features, flags, classes, slot);
      RETURN_IF_ERROR(Launched("CheckRecords"));
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(&found, slot, sizeof found, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
      return Synchronize();
    };
    const Status s = run();
    cudaStreamSynchronize(stream_);  // `none`, `found` and the flags are host locals
    RETURN_IF_ERROR(s);
    *first_bad = found;
    return OkStatus();
  }

  Status GatherRows(Buffer src, size_t cols, const uint32_t* idx, size_t n, Buffer dst) override {
    RETURN_IF_ERROR(Fits("GatherRows", dst, n * cols));
    if (n == 0 || cols == 0) return OkStatus();
    const size_t src_rows = src.size / cols;
    for (size_t i = 0; i < n; ++i) {
      if (idx[i] >= src_rows) return Internal("GatherRows: row " + std::to_string(idx[i]) + " out of range");
    }
    if (n > idx_capacity_) {
      RETURN_IF_ERROR(Synchronize());
      if (idx_ != nullptr) cudaFree(idx_);
      idx_ = nullptr;
      idx_capacity_ = 0;
      RETURN_IF_ERROR(CudaStatus(cudaMalloc(&idx_, n * sizeof(uint32_t)), "cudaMalloc(indices)"));
      idx_capacity_ = n;
    }
    // Pageable source: the call returns once the bytes are staged, so idx may go then;
    // the stream orders this copy after every kernel that still reads the old indices.
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(idx_, idx, n * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_),
                               "cudaMemcpyAsync(indices)"));
    GatherRowsKernel<<<BlocksFor(n * cols), kThreads, 0, stream_>>>(src.data, cols, idx_, n, dst.data);
    return Launched("GatherRows");
  }

  Status ShiftedColumnSums(Buffer x, size_t rows, size_t cols, Buffer shift, Buffer sums) override {
    RETURN_IF_ERROR(Fits("ShiftedColumnSums", x, rows * cols));
    RETURN_IF_ERROR(Fits("ShiftedColumnSums", shift, cols));
    RETURN_IF_ERROR(Fits("ShiftedColumnSums", sums, 4 * cols));
    if (rows == 0 || cols == 0) return OkStatus();
    double* s1 = reinterpret_cast<double*>(sums.data);  // cudaMalloc'd: aligned for double
    ShiftedColumnSumsKernel<<<BlocksFor(cols), kThreads, 0, stream_>>>(x.data, rows, cols, shift.data, s1, s1 + cols);
    return Launched("ShiftedColumnSums");
  }

  Status MomentsFromShiftedSums(Buffer sums, Buffer shift, size_t cols, uint64_t count, Buffer mean,
                                Buffer inv_std) override {
    RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", sums, 4 * cols));
    RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", shift, cols));
    RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", mean, cols));
    RETURN_IF_ERROR(Fits("MomentsFromShiftedSums", inv_std, cols));
    if (count == 0) return Internal("MomentsFromShiftedSums: no rows");
    if (cols == 0) return OkStatus();
    const double* s1 = reinterpret_cast<const double*>(sums.data);
    MomentsFromShiftedSumsKernel<<<BlocksFor(cols), kThreads, 0, stream_>>>(
        s1, s1 + cols, shift.data, cols, static_cast<double>(count), mean.data, inv_std.data);
    return Launched("MomentsFromShiftedSums");
  }

  Status ColumnMoments(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) override {
    RETURN_IF_ERROR(Fits("ColumnMoments", x, rows * cols));
    RETURN_IF_ERROR(Fits("ColumnMoments", mean, cols));
    RETURN_IF_ERROR(Fits("ColumnMoments", inv_std, cols));
    if (rows == 0) return Internal("ColumnMoments: no rows");
    if (cols == 0) return OkStatus();
    ColumnMomentsKernel<<<BlocksFor(cols), kThreads, 0, stream_>>>(x.data, rows, cols, mean.data, inv_std.data);
    return Launched("ColumnMoments");
  }

  Status Standardize(Buffer x, size_t rows, size_t cols, Buffer mean, Buffer inv_std) override {
    RETURN_IF_ERROR(Fits("Standardize", x, rows * cols));
    RETURN_IF_ERROR(Fits("Standardize", mean, cols));
    RETURN_IF_ERROR(Fits("Standardize", inv_std, cols));
    if (rows * cols == 0) return OkStatus();
    StandardizeKernel<<<BlocksFor(rows * cols), kThreads, 0, stream_>>>(x.data, rows, cols, mean.data,
                                                                       inv_std.data);
    return Launched("Standardize");
  }

  Status Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t kk, float alpha, Buffer a, Buffer b,
              float beta, Buffer c) override {
    RETURN_IF_ERROR(Fits("Gemm A", a, m * kk));
    RETURN_IF_ERROR(Fits("Gemm B", b, kk * n));
    RETURN_IF_ERROR(Fits("Gemm C", c, m * n));
    if (m == 0 || n == 0) return OkStatus();
    if (m > INT32_MAX || n > INT32_MAX || kk > INT32_MAX) return Internal("Gemm: dimension beyond cuBLAS int");
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    // Leading dimensions of at least 1 (cuBLAS rejects 0 even when K is 0).
    const int lda = static_cast<int>(std::max<size_t>(1, trans_a ? m : kk));
    const int ldb = static_cast<int>(std::max<size_t>(1, trans_b ? kk : n));
    return CublasStatus(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    static_cast<int>(n), static_cast<int>(m), static_cast<int>(kk), &alpha, b.data,
                                    ldb, a.data, lda, &beta, c.data, static_cast<int>(n)),
                        "cublasSgemm");
  }

  Status BiasActivation(Buffer z, size_t rows, size_t cols, Buffer bias, Activation act) override {
    RETURN_IF_ERROR(Fits("BiasActivation", z, rows * cols));
    RETURN_IF_ERROR(Fits("BiasActivation", bias, cols));
    if (rows * cols == 0) return OkStatus();
    BiasActivationKernel<<<BlocksFor(rows * cols), kThreads, 0, stream_>>>(z.data, rows, cols, bias.data,
                                                                          static_cast<int>(act));
    return Launched("BiasActivation");
  }

  Status ActivationBackward(Buffer grad, Buffer y, size_t count, Activation act) override {
    RETURN_IF_ERROR(Fits("ActivationBackward", grad, count));
    RETURN_IF_ERROR(Fits("ActivationBackward", y, count));
    if (count == 0) return OkStatus();
    ActivationBackwardKernel<<<BlocksFor(count), kThreads, 0, stream_>>>(grad.data, y.data, count,
                                                                        static_cast<int>(act));
    return Launched("ActivationBackward");
  }

  Status ColumnSums(Buffer m, size_t rows, size_t cols, Buffer out) override {
    RETURN_IF_ERROR(Fits("ColumnSums", m, rows * cols));
    RETURN_IF_ERROR(Fits("ColumnSums", out, cols));
    if (cols == 0) return OkStatus();
    ColumnSumsKernel<<<BlocksFor(cols), kThreads, 0, stream_>>>(m.data, rows, cols, out.data);
    return Launched("ColumnSums");
  }

  Status LossAndGrad(LossKind kind, Buffer logits, Buffer labels, size_t rows, size_t classes, float grad_scale,
                     Buffer grad, double* loss_sum, Buffer weights) override {
    const size_t width = kind == LossKind::kSoftmax ? classes : 1;
    if (!weights.empty()) return Unsupported("LossAndGrad: row weights train on the CPU backend only");
    RETURN_IF_ERROR(Fits("LossAndGrad logits", logits, rows * width));
    RETURN_IF_ERROR(Fits("LossAndGrad labels", labels, rows));
    const bool want_grad = !grad.empty();
    if (want_grad) RETURN_IF_ERROR(Fits("LossAndGrad grad", grad, rows * width));
    if (kind == LossKind::kSoftmax && classes == 0) return Internal("LossAndGrad: no classes");
    if (rows == 0) {
      if (loss_sum != nullptr) *loss_sum = 0.0;
      return OkStatus();
    }
    if (rows > row_loss_capacity_) {
      RETURN_IF_ERROR(Synchronize());
      if (row_loss_ != nullptr) cudaFree(row_loss_);
      FreeHostLoss();
      row_loss_ = nullptr;
      row_loss_capacity_ = 0;
      RETURN_IF_ERROR(CudaStatus(cudaMalloc(&row_loss_, rows * sizeof(float)), "cudaMalloc(row losses)"));
      // The per-row losses come back to the host (they reveal labels): pinned memory,
      // which the driver keeps locked in RAM, zeroized before it is freed.
      if (const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host_loss_), rows * sizeof(float),
                                              cudaHostAllocDefault);
          e != cudaSuccess) {
        host_loss_ = nullptr;
        return CudaStatus(e, "cudaHostAlloc(row losses)");
      }
      row_loss_capacity_ = rows;
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(bad_, 0, sizeof(int), stream_), "cudaMemsetAsync"));
    LossKernel<<<BlocksFor(rows), kThreads, 0, stream_>>>(static_cast<int>(kind), logits.data, labels.data, rows,
                                                          width, grad_scale, want_grad ? grad.data : nullptr,
                                                          row_loss_, bad_);
    RETURN_IF_ERROR(Launched("LossAndGrad"));
    int bad = 0;
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(&bad, bad_, sizeof bad, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    if (loss_sum != nullptr) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(host_loss_, row_loss_, rows * sizeof(float),
                                                 cudaMemcpyDeviceToHost, stream_),
                                 "cudaMemcpyAsync(row losses)"));
    }
    RETURN_IF_ERROR(Synchronize());
    if (bad != 0) return Internal("LossAndGrad: a label is out of range for " + std::to_string(width) + " classes");
    if (loss_sum != nullptr) {
      double total = 0.0;  // in row order, as the CPU backend sums
      for (size_t r = 0; r < rows; ++r) total += host_loss_[r];
      *loss_sum = total;
    }
    return OkStatus();
  }

  Status Probabilities(LossKind kind, Buffer logits, size_t rows, size_t classes, Buffer probs) override {
    const size_t width = kind == LossKind::kSoftmax ? classes : 1;
    RETURN_IF_ERROR(Fits("Probabilities logits", logits, rows * width));
    RETURN_IF_ERROR(Fits("Probabilities probs", probs, rows * width));
    if (rows == 0 || width == 0) return OkStatus();
    ProbabilitiesKernel<<<BlocksFor(rows), kThreads, 0, stream_>>>(static_cast<int>(kind), logits.data, rows, width,
                                                                   probs.data);
    return Launched("Probabilities");
  }

  Status SgdStep(Buffer param, Buffer grad, Buffer velocity, size_t n, const SgdStepArgs& args) override {
    RETURN_IF_ERROR(Fits("SgdStep", param, n));
    RETURN_IF_ERROR(Fits("SgdStep", grad, n));
    RETURN_IF_ERROR(Fits("SgdStep", velocity, n));
    if (n == 0) return OkStatus();
    SgdKernel<<<BlocksFor(n), kThreads, 0, stream_>>>(param.data, grad.data, velocity.data, n, args);
    return Launched("SgdStep");
  }

  Status AdamWStep(Buffer param, Buffer grad, Buffer m, Buffer v, size_t n, const AdamWStepArgs& args) override {
    RETURN_IF_ERROR(Fits("AdamWStep", param, n));
    RETURN_IF_ERROR(Fits("AdamWStep", grad, n));
    RETURN_IF_ERROR(Fits("AdamWStep", m, n));
    RETURN_IF_ERROR(Fits("AdamWStep", v, n));
    if (n == 0) return OkStatus();
    AdamWKernel<<<BlocksFor(n), kThreads, 0, stream_>>>(param.data, grad.data, m.data, v.data, n, args);
    return Launched("AdamWStep");
  }

 private:
  GpuBackend() = default;

  Status Launched(const char* op) { return CudaStatus(cudaGetLastError(), op); }

  // Zeroizes (the buffer may hold plaintext features) and frees.
  void Release(float* p) {
    auto it = sizes_of_.find(p);
    if (it == sizes_of_.end()) return;
    cudaMemsetAsync(p, 0, it->second * sizeof(float), stream_);
    cudaStreamSynchronize(stream_);
    sizes_of_.erase(it);
    cudaFree(p);
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::map<float*, size_t> sizes_of_;  // every live allocation and its size
  uint32_t* idx_ = nullptr;
  size_t idx_capacity_ = 0;
  float* row_loss_ = nullptr;
  size_t row_loss_capacity_ = 0;
  float* host_loss_ = nullptr;  // pinned, row_loss_capacity_ floats

  void FreeHostLoss() {
    if (host_loss_ == nullptr) return;
    volatile float* p = host_loss_;
    for (size_t i = 0; i < row_loss_capacity_; ++i) p[i] = 0.0f;
    cudaFreeHost(host_loss_);
    host_loss_ = nullptr;
  }
  int* bad_ = nullptr;
  uint8_t* check_scratch_ = nullptr;  // CheckRecords: its row slot and column flags
  size_t check_scratch_bytes_ = 0;
  std::string describe_;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeGpuBackend() { return GpuBackend::Create(); }

}  // namespace enclave::trainer
