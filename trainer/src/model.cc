#include "enclave/trainer/model.h"

#include <cmath>
#include <string>

#include "enclave/trainer/rng.h"

namespace enclave::trainer {

size_t ModelShape::weight_offset(size_t l) const {
  size_t off = 0;
  for (size_t i = 0; i < l; ++i) off += size_t{fan_in(i)} * fan_out(i) + fan_out(i);
  return off;
}

Result<Mlp> Mlp::Create(Backend& backend, const ModelShape& shape, size_t max_batch, uint64_t seed) {
  if (shape.inputs == 0 || shape.classes == 1 || max_batch == 0) return Internal("Mlp::Create: empty shape");
  for (uint32_t h : shape.hidden) {
    if (h == 0) return Internal("Mlp::Create: empty hidden layer");
  }
  Mlp m;
  m.backend_ = &backend;
  m.shape_ = shape;
  m.max_batch_ = max_batch;
  const size_t n = shape.parameter_count();
  ASSIGN_OR_RETURN(m.params_, AllocOwned(backend, n));
  ASSIGN_OR_RETURN(m.grads_, AllocOwned(backend, n));
  for (size_t l = 0; l < shape.layers(); ++l) {
    ASSIGN_OR_RETURN(OwnedBuffer a, AllocOwned(backend, max_batch * shape.fan_out(l)));
    ASSIGN_OR_RETURN(OwnedBuffer d, AllocOwned(backend, max_batch * shape.fan_out(l)));
    m.acts_.push_back(std::move(a));
    m.deltas_.push_back(std::move(d));
  }
  // scikit-learn: bound = sqrt(factor / (fan_in + fan_out)), factor 2 for logistic, else 6.
  ASSIGN_OR_RETURN(LockedArray<float> host, LockedArray<float>::Create(n));
  Rng rng(seed, kStreamInit);
  for (size_t l = 0; l < shape.layers(); ++l) {
    const bool sigmoid_like = l + 1 < shape.layers() ? shape.activation == kernels::kActSigmoid : false;
    const double factor = sigmoid_like ? 2.0 : 6.0;
    const float bound =
        static_cast<float>(std::sqrt(factor / static_cast<double>(shape.fan_in(l) + shape.fan_out(l))));
    const size_t w = shape.weight_offset(l), count = size_t{shape.fan_in(l)} * shape.fan_out(l);
    for (size_t i = 0; i < count; ++i) host[w + i] = rng.Uniform(-bound, bound);
  }
  RETURN_IF_ERROR(backend.Upload(m.params_, host.data(), n));
  return m;
}

Result<Buffer> Mlp::Forward(Buffer x, size_t rows) {
  if (rows > max_batch_) return Internal("Mlp::Forward: batch of " + std::to_string(rows) + " rows");
  Buffer in = x;
  const Buffer p = params_;
  for (size_t l = 0; l < shape_.layers(); ++l) {
    const size_t fi = shape_.fan_in(l), fo = shape_.fan_out(l);
    Buffer out = acts_[l].get().Slice(0, rows * fo);
    RETURN_IF_ERROR(backend_->Gemm(false, false, rows, fo, fi, 1.0f, in.Slice(0, rows * fi),
                                   p.Slice(shape_.weight_offset(l), fi * fo), 0.0f, out));
    const bool last = l + 1 == shape_.layers();
    RETURN_IF_ERROR(backend_->BiasActivation(out, rows, fo, p.Slice(shape_.bias_offset(l), fo),
                                             last ? kernels::kActIdentity : shape_.activation));
    in = out;
  }
  return in;
}

Status Mlp::Backward(Buffer x, Buffer labels, size_t rows, double* loss_sum, size_t mean_over, Buffer weights) {
  if (mean_over == 0) mean_over = rows;
  const size_t L = shape_.layers();
  const Buffer p = params_, g = grads_;
  const size_t out = shape_.outputs();
  RETURN_IF_ERROR(backend_->LossAndGrad(shape_.loss(), acts_[L - 1].get().Slice(0, rows * out), labels, rows,
                                        shape_.classes, 1.0f / static_cast<float>(mean_over),
                                        deltas_[L - 1].get().Slice(0, rows * out), loss_sum, weights));
  for (size_t l = L; l-- > 0;) {
    const size_t fi = shape_.fan_in(l), fo = shape_.fan_out(l);
    const Buffer delta = deltas_[l].get().Slice(0, rows * fo);
    const Buffer in = l == 0 ? x.Slice(0, rows * fi) : acts_[l - 1].get().Slice(0, rows * fi);
    // dW = in^T * delta; db = column sums of delta.
    RETURN_IF_ERROR(backend_->Gemm(true, false, fi, fo, rows, 1.0f, in, delta, 0.0f,
                                   g.Slice(shape_.weight_offset(l), fi * fo)));
    RETURN_IF_ERROR(backend_->ColumnSums(delta, rows, fo, g.Slice(shape_.bias_offset(l), fo)));
    if (l == 0) break;
    // delta_{l-1} = (delta * W^T) .* act'(a_{l-1}).
    const Buffer prev = deltas_[l - 1].get().Slice(0, rows * fi);
    RETURN_IF_ERROR(
        backend_->Gemm(false, true, rows, fi, fo, 1.0f, delta, p.Slice(shape_.weight_offset(l), fi * fo), 0.0f, prev));
    RETURN_IF_ERROR(backend_->ActivationBackward(prev, in, rows * fi, shape_.activation));
  }
  return OkStatus();
}

Result<LockedArray<float>> Mlp::DownloadParams() const {
  ASSIGN_OR_RETURN(LockedArray<float> host, LockedArray<float>::Create(shape_.parameter_count()));
  RETURN_IF_ERROR(backend_->Download(host.data(), params_, host.size()));
  return host;
}

Status Mlp::UploadParams(const float* host, size_t n) {
  if (n != shape_.parameter_count()) {
    return Internal("Mlp::UploadParams: " + std::to_string(n) + " values for " +
                    std::to_string(shape_.parameter_count()) + " parameters");
  }
  return backend_->Upload(params_, host, n);
}

Status Mlp::CopyParams(Buffer src) {
  const size_t n = shape_.parameter_count();
  if (src.size < n) return Internal("Mlp::CopyParams: a buffer of " + std::to_string(src.size) + " floats");
  return backend_->CopyToBytes(params_, 0, src, n);
}

}  // namespace enclave::trainer
