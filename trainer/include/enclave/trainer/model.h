// A multilayer perceptron on a Backend: dense layers with one hidden activation, a linear
// output (one logit for two classes, else one per class; one value for regression). No
// hidden layer is logistic (or multinomial, or linear) regression. Parameters and gradients each live in one buffer, layer by
// layer (W_l row-major fan_in x fan_out, then b_l), so an optimizer step is one call.
#pragma once

#include <cstdint>
#include <vector>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/locked.h"

namespace enclave::trainer {

struct ModelShape {
  uint32_t inputs = 0;
  std::vector<uint32_t> hidden;
  uint32_t classes = 2;  // >= 2; 0: regression (one output, half squared error)
  Activation activation = kernels::kActRelu;

  bool regression() const { return classes == 0; }
  uint32_t outputs() const { return classes <= 2 ? 1u : classes; }
  LossKind loss() const {
    return classes == 0 ? LossKind::kSquaredError : classes == 2 ? LossKind::kBinaryLogistic : LossKind::kSoftmax;
  }
  size_t layers() const { return hidden.size() + 1; }
  uint32_t fan_in(size_t l) const { return l == 0 ? inputs : hidden[l - 1]; }
  uint32_t fan_out(size_t l) const { return l == hidden.size() ? outputs() : hidden[l]; }
  size_t weight_offset(size_t l) const;
  size_t bias_offset(size_t l) const { return weight_offset(l) + size_t{fan_in(l)} * fan_out(l); }
  size_t parameter_count() const { return weight_offset(layers()); }
};

class Mlp {
 public:
  // Allocates parameters, gradients and activations for batches of up to max_batch rows
  // and initializes the weights (Glorot uniform, scaled as scikit-learn's MLP does for the
  // activation; biases zero) from Rng(seed, kStreamInit).
  static Result<Mlp> Create(Backend& backend, const ModelShape& shape, size_t max_batch, uint64_t seed);

  const ModelShape& shape() const { return shape_; }
  Buffer params() const { return params_; }
  Buffer grads() const { return grads_; }

  // Logits of `rows` rows of x (rows x inputs); the returned view is valid until the next call.
  Result<Buffer> Forward(Buffer x, size_t rows);
  // After Forward on the same x: grads = d(sum of row losses / mean_over)/d(params), where
  // mean_over is `rows` unless given (a rank's share of a larger global batch: the ranks'
  // gradients then sum to the global batch's); *loss_sum = summed row losses. With
  // `weights` (rows), each row's loss counts weights[r] times (Backend::LossAndGrad).
  Status Backward(Buffer x, Buffer labels, size_t rows, double* loss_sum, size_t mean_over = 0, Buffer weights = {});

  // Parameters to the host, in the layout above.
  Result<LockedArray<float>> DownloadParams() const;
  // Replaces the parameters (a checkpoint, an exported model); n must be parameter_count().
  Status UploadParams(const float* host, size_t n);
  // The same from backend memory (a model that stays there: model_seal.h).
  Status CopyParams(Buffer src);

 private:
  Mlp() = default;
  Backend* backend_ = nullptr;
  ModelShape shape_;
  size_t max_batch_ = 0;
  OwnedBuffer params_, grads_;
  std::vector<OwnedBuffer> acts_;   // output of layer l (rows x fan_out), one per layer
  std::vector<OwnedBuffer> deltas_; // d loss / d (pre-activation) of layer l
};

}  // namespace enclave::trainer
