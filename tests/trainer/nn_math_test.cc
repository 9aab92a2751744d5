// kernels/nn_math.h against independent double-precision formulas (written out here, not
// shared with the header), including the extremes where a naive formula overflows.
#include "enclave/kernels/nn_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace enclave::kernels {
namespace {

double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// |got - want| <= abs + rel * |want|: float math against a double reference.
void Near(float got, double want, double abs = 1e-6, double rel = 1e-5) {
  EXPECT_LE(std::fabs(static_cast<double>(got) - want), abs + rel * std::fabs(want)) << "got " << got << " want " << want;
}

const std::vector<float> kXs = {-100.f, -30.f, -10.f, -2.5f, -1.f, -1e-3f, 0.f, 1e-3f, 0.5f, 1.f, 3.f, 10.f, 30.f, 100.f};

TEST(NnMath, ActivationsMatchReference) {
  for (float x : kXs) {
    Near(Sigmoid(x), RefSigmoid(x));
    Near(Tanh(x), std::tanh(static_cast<double>(x)));
    Near(Relu(x), x > 0 ? x : 0.0);
    EXPECT_EQ(ActivationForward(kActIdentity, x), x);
    EXPECT_EQ(ActivationForward(kActSigmoid, x), Sigmoid(x));
    EXPECT_FALSE(std::isnan(Sigmoid(x)));
  }
  EXPECT_EQ(Sigmoid(-1000.f), 0.0f);
  EXPECT_EQ(Sigmoid(1000.f), 1.0f);
}

TEST(NnMath, DerivativesFromOutputMatchFiniteDifferences) {
  for (int act : {kActRelu, kActTanh, kActSigmoid, kActIdentity}) {
    for (float x : {-2.0f, -0.7f, 0.3f, 1.9f}) {
      const double h = 1e-4;
      auto f = [&](double v) {
        switch (act) {
          case kActRelu: return v > 0 ? v : 0.0;
          case kActTanh: return std::tanh(v);
          case kActSigmoid: return RefSigmoid(v);
          default: return v;
        }
      };
      const double fd = (f(x + h) - f(x - h)) / (2 * h);
      Near(ActivationDerivFromOutput(act, ActivationForward(act, x)), fd, 1e-5, 1e-4);
    }
  }
}

TEST(NnMath, HalfSquaredError) {
  for (float z : kXs) {
    for (float y : {-3.5f, 0.0f, 2.25f}) {
      const double d = static_cast<double>(z) - y;
      Near(HalfSquaredError(z, y), 0.5 * d * d, 1e-7, 1e-6);
      Near(HalfSquaredErrorGrad(z, y), d, 1e-7, 1e-6);
    }
  }
}

TEST(NnMath, BinaryCrossEntropyIsStable) {
  for (float z : kXs) {
    for (float y : {0.0f, 1.0f}) {
      // log(1 + e^-|z|) form in double, fine for |z| <= 100.
      const double s = RefSigmoid(z);
      const double want = z > 0 ? (1 - y) * z + std::log1p(std::exp(-static_cast<double>(z)))
                                : -y * z + std::log1p(std::exp(static_cast<double>(z)));
      Near(BceWithLogits(z, y), want, 1e-6, 1e-5);
      Near(BceWithLogitsGrad(z, y), s - y, 1e-7, 1e-5);
      EXPECT_TRUE(std::isfinite(BceWithLogits(z, y)));
    }
    Near(LogSigmoid(z), -std::log1p(std::exp(-static_cast<double>(z))), 1e-6, 1e-5);
  }
  // A confident wrong answer costs |z|, not inf.
  Near(BceWithLogits(-200.f, 1.f), 200.0);
  Near(BceWithLogits(200.f, 0.f), 200.0);
}

TEST(NnMath, SoftmaxPiecesMatchReference) {
  const std::vector<float> z = {1000.f, 999.f, 990.f, -5.f};  // naive exp overflows
  float mx = z[0];
  for (float v : z) mx = std::max(mx, v);
  float s = 0;
  for (float v : z) s += SoftmaxShiftedExp(v, mx);
  double ds = 0;
  for (float v : z) ds += std::exp(static_cast<double>(v) - 1000.0);
  for (size_t label = 0; label < z.size(); ++label) {
    const double want = 1000.0 + std::log(ds) - z[label];
    Near(SoftmaxCrossEntropy(z[label], mx, s), want, 1e-4, 1e-5);
    double sum_grad = 0;
    for (size_t j = 0; j < z.size(); ++j) {
      const double p = std::exp(static_cast<double>(z[j]) - 1000.0) / ds;
      const float g = SoftmaxCrossEntropyGrad(z[j], mx, 1.0f / s, j == label);
      Near(g, p - (j == label ? 1.0 : 0.0), 1e-6, 1e-5);
      sum_grad += g;
    }
    EXPECT_NEAR(sum_grad, 0.0, 1e-6);
  }
}

TEST(NnMath, Standardization) {
  Near(Standardize(5.0f, 3.0f, 0.5f), 1.0);
  EXPECT_EQ(InverseStd(0.0), 1.0f);
  Near(InverseStd(4.0), 0.5);
}

TEST(NnMath, SgdMomentumMatchesPyTorchForm) {
  float p = 1.0f, v = 0.0f;
  double rp = 1.0, rv = 0.0;
  const double lr = 0.1, mu = 0.9, wd = 0.01, l2 = 0.001;
  for (int t = 0; t < 20; ++t) {
    const double g = 0.5 * rp - 0.2;  // a quadratic's gradient
    SgdMomentumUpdate(&p, static_cast<float>(0.5 * p - 0.2), &v, 0.1f, 0.9f, 0.01f, 0.001f);
    const double grad = g + l2 * rp;
    rv = mu * rv + grad;
    rp = rp - lr * wd * rp - lr * rv;
    Near(p, rp, 1e-5, 1e-4);
    Near(v, rv, 1e-5, 1e-4);
  }
}

TEST(NnMath, AdamWMatchesReference) {
  float p = 0.8f, m = 0.0f, v = 0.0f;
  double rp = 0.8, rm = 0.0, rv = 0.0;
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05, l2 = 0.0;
  for (int t = 1; t <= 50; ++t) {
    const double g = 2 * rp + 0.3;
    AdamWUpdate(&p, static_cast<float>(2 * p + 0.3), &m, &v, 0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, 0.0f,
                static_cast<float>(1 - std::pow(b1, t)), static_cast<float>(1 - std::pow(b2, t)));
    rm = b1 * rm + (1 - b1) * g;
    rv = b2 * rv + (1 - b2) * g * g;
    const double mh = rm / (1 - std::pow(b1, t)), vh = rv / (1 - std::pow(b2, t));
    rp = rp - lr * wd * rp - lr * mh / (std::sqrt(vh) + eps);
    (void)l2;
    Near(p, rp, 1e-5, 1e-4);
  }
  // The first step moves each parameter by about lr, whatever the gradient's scale.
  float q = 0.0f, qm = 0.0f, qv = 0.0f;
  AdamWUpdate(&q, 1234.5f, &qm, &qv, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, 0.1f, 0.001f);
  Near(q, -0.01, 1e-6, 1e-4);
}

TEST(NnMath, Schedules) {
  LrSchedule s{kLrConstant, 0.1f, 0.0f, 0.5f, 10, 0, 100};
  EXPECT_EQ(ScheduledLr(s, 0), 0.1f);
  EXPECT_EQ(ScheduledLr(s, 99), 0.1f);
  s.kind = kLrStep;
  Near(ScheduledLr(s, 9), 0.1);
  Near(ScheduledLr(s, 10), 0.05);
  Near(ScheduledLr(s, 25), 0.025);
  s.kind = kLrCosine;
  s.min_lr = 0.01f;
  Near(ScheduledLr(s, 0), 0.1);
  Near(ScheduledLr(s, 50), 0.01 + 0.09 * 0.5);
  Near(ScheduledLr(s, 100), 0.01);
  Near(ScheduledLr(s, 1000), 0.01);
  s.warmup_steps = 10;  // linear to base, then cosine over the remaining 90 steps
  Near(ScheduledLr(s, 0), 0.01);
  Near(ScheduledLr(s, 4), 0.05);
  Near(ScheduledLr(s, 10), 0.1);
  Near(ScheduledLr(s, 55), 0.01 + 0.09 * 0.5);
  s.kind = kLrConstant;
  Near(ScheduledLr(s, 9), 0.1);
  Near(ScheduledLr(s, 50), 0.1);
}

}  // namespace
}  // namespace enclave::kernels
