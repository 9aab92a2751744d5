// The trainer's per-element math, written once: the CPU backend (trainer/src/cpu_backend.cc)
// calls these in loops, the CUDA kernels (trainer/src/gpu_backend.cu) call them per thread.
// Plain C++17 (nvcc compiles it); float in, float out; no allocation, no branches on data
// beyond what the formula needs. Every formula here also has an independent double
// reference in tests/trainer/nn_math_test.cc, because shared code cannot catch a wrong one.
#pragma once

#include <math.h>

#include "enclave/kernels/hd.h"

namespace enclave::kernels {

// Hidden-layer activations. Wire values in nothing; the order is only for switch tables.
enum Activation : int {
  kActIdentity = 0,
  kActRelu = 1,
  kActTanh = 2,
  kActSigmoid = 3,
};

// --- activations ---------------------------------------------------------------------

// Stable for any x: exp of a non-positive number only, so it never overflows.
ENCLAVE_HD float Sigmoid(float x) {
  if (x >= 0.0f) {
    const float e = expf(-x);
    return 1.0f / (1.0f + e);
  }
  const float e = expf(x);
  return e / (1.0f + e);
}

ENCLAVE_HD float Relu(float x) { return x > 0.0f ? x : 0.0f; }

// tanhf saturates to +-1 without overflow.
ENCLAVE_HD float Tanh(float x) { return tanhf(x); }

ENCLAVE_HD float ActivationForward(int act, float x) {
  switch (act) {
    case kActRelu: return Relu(x);
    case kActTanh: return Tanh(x);
    case kActSigmoid: return Sigmoid(x);
    default: return x;
  }
}

// The derivative written in terms of the activation's OUTPUT y = f(x), so the backward
// pass needs only the stored outputs: relu' = [y > 0], tanh' = 1 - y^2, sigmoid' = y(1-y).
ENCLAVE_HD float ActivationDerivFromOutput(int act, float y) {
  switch (act) {
    case kActRelu: return y > 0.0f ? 1.0f : 0.0f;
    case kActTanh: return 1.0f - y * y;
    case kActSigmoid: return y * (1.0f - y);
    default: return 1.0f;
  }
}

// --- binary cross-entropy with logits ------------------------------------------------

// log(sigmoid(x)) without overflow or log(0): -log1p(exp(-|x|)) + min(x, 0).
ENCLAVE_HD float LogSigmoid(float x) {
  const float m = x < 0.0f ? x : 0.0f;
  return m - log1pf(expf(-fabsf(x)));
}

// -[y log s(z) + (1-y) log(1 - s(z))] = max(z,0) - z*y + log1p(exp(-|z|)); y in [0,1].
ENCLAVE_HD float BceWithLogits(float z, float y) {
  const float pos = z > 0.0f ? z : 0.0f;
  return pos - z * y + log1pf(expf(-fabsf(z)));
}

// d/dz of BceWithLogits.
ENCLAVE_HD float BceWithLogitsGrad(float z, float y) { return Sigmoid(z) - y; }

// --- squared error (regression: one output, the standardized target) ------------------
// loss = (z - y)^2 / 2, so dloss/dz = z - y (scikit-learn's MLPRegressor halves it too).
ENCLAVE_HD float HalfSquaredError(float z, float y) { return 0.5f * (z - y) * (z - y); }
ENCLAVE_HD float HalfSquaredErrorGrad(float z, float y) { return z - y; }

// --- softmax cross-entropy, in pieces so a kernel can reduce a row between them --------
// For a row z[0..C): m = max_j z[j]; s = sum_j exp(z[j] - m); loss = m + log(s) - z[label];
// p[j] = exp(z[j] - m) / s; dloss/dz[j] = p[j] - [j == label].

ENCLAVE_HD float SoftmaxShiftedExp(float z, float row_max) { return expf(z - row_max); }

ENCLAVE_HD float SoftmaxCrossEntropy(float z_label, float row_max, float sum_exp) {
  return row_max + logf(sum_exp) - z_label;
}

ENCLAVE_HD float SoftmaxProbability(float z, float row_max, float inv_sum_exp) {
  return expf(z - row_max) * inv_sum_exp;
}

ENCLAVE_HD float SoftmaxCrossEntropyGrad(float z, float row_max, float inv_sum_exp, bool is_label) {
  return SoftmaxProbability(z, row_max, inv_sum_exp) - (is_label ? 1.0f : 0.0f);
}

// --- standardization -----------------------------------------------------------------

ENCLAVE_HD float Standardize(float x, float mean, float inv_std) { return (x - mean) * inv_std; }

// 1/std from a population variance; a constant column (var == 0) is left unscaled, as
// scikit-learn's StandardScaler does.
ENCLAVE_HD float InverseStd(double variance) {
  return variance > 0.0 ? static_cast<float>(1.0 / sqrt(variance)) : 1.0f;
}

// --- optimizer updates, one parameter at a time ----------------------------------------
// l2 is the coupled penalty (added to the gradient: g + l2 * p, i.e. the gradient of
// 0.5 * l2 * |p|^2); weight_decay is decoupled (p -= lr * wd * p, Loshchilov & Hutter).

// SGD with (heavy-ball) momentum, PyTorch's form: v = mu * v + g; p -= lr * v.
ENCLAVE_HD void SgdMomentumUpdate(float* p, float g, float* v, float lr, float momentum, float weight_decay,
                                  float l2) {
  const float grad = g + l2 * *p;
  const float vel = momentum * *v + grad;
  *v = vel;
  *p = *p - lr * weight_decay * *p - lr * vel;
}

// AdamW with bias correction. bias_corr1 = 1 - beta1^t, bias_corr2 = 1 - beta2^t for the
// 1-based step t, computed once per step on the host (in double, then rounded).
ENCLAVE_HD void AdamWUpdate(float* p, float g, float* m, float* v, float lr, float beta1, float beta2, float eps,
                            float weight_decay, float l2, float bias_corr1, float bias_corr2) {
  const float grad = g + l2 * *p;
  const float m1 = beta1 * *m + (1.0f - beta1) * grad;
  const float v1 = beta2 * *v + (1.0f - beta2) * grad * grad;
  *m = m1;
  *v = v1;
  const float m_hat = m1 / bias_corr1;
  const float v_hat = v1 / bias_corr2;
  *p = *p - lr * weight_decay * *p - lr * m_hat / (sqrtf(v_hat) + eps);
}

// --- learning-rate schedules ---------------------------------------------------------

enum LrScheduleKind : int {
  kLrConstant = 0,
  kLrStep = 1,    // lr * gamma^floor(step / step_size)
  kLrCosine = 2,  // min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2 over the steps after warmup
};

struct LrSchedule {
  int kind;
  float base_lr;
  float min_lr;        // cosine floor
  float gamma;         // step decay factor
  long step_size;      // steps between step decays (>= 1)
  long warmup_steps;   // linear warmup from base_lr / warmup_steps to base_lr; 0 = none
  long total_steps;    // all optimizer steps of the run (cosine horizon)
};

// Learning rate for the 0-based optimizer step `step`. Warmup applies to every kind:
// during warmup lr = base_lr * (step + 1) / warmup_steps; the schedule then runs on
// t = step - warmup_steps.
ENCLAVE_HD float ScheduledLr(const LrSchedule& s, long step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) {
    return s.base_lr * static_cast<float>(static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps));
  }
  const long t = step - (s.warmup_steps > 0 ? s.warmup_steps : 0);
  switch (s.kind) {
    case kLrStep: {
      const long k = s.step_size > 0 ? t / s.step_size : 0;
      return static_cast<float>(static_cast<double>(s.base_lr) * pow(static_cast<double>(s.gamma), static_cast<double>(k)));
    }
    case kLrCosine: {
      const long horizon = s.total_steps - (s.warmup_steps > 0 ? s.warmup_steps : 0);
      if (horizon <= 0) return s.base_lr;
      const double frac = t >= horizon ? 1.0 : static_cast<double>(t) / static_cast<double>(horizon);
      const double pi = 3.14159265358979323846;
      const double c = 0.5 * (1.0 + cos(pi * frac));
      return static_cast<float>(static_cast<double>(s.min_lr) + (static_cast<double>(s.base_lr) - s.min_lr) * c);
    }
    default: return s.base_lr;
  }
}

}  // namespace enclave::kernels
