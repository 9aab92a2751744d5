// The CPU backend, op by op, against naive double-precision references written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "enclave/trainer/backend.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = MakeCpuBackend();
  Rng rng{12345};

  std::vector<float> Random(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (float& x : v) x = rng.Uniform(lo, hi);
    return v;
  }
  OwnedBuffer Up(const std::vector<float>& v) {
    auto b = AllocOwned(*be, v.size());
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(be->Upload(*b, v.data(), v.size()).ok());
    return std::move(b).value();
  }
  std::vector<float> Down(const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(be->Download(v.data(), b, n).ok());
    return v;
  }
};

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST_F(CpuBackendTest, AllocIsZeroedAndAligned) {
  auto b = AllocOwned(*be, 1001);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->get().data) % 64, 0u);
  for (float v : Down(*b, 1001)) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(be->Fill(*b, 2.5f).ok());
  EXPECT_EQ(Down(*b, 1001)[1000], 2.5f);
}

TEST_F(CpuBackendTest, GemmAllTransposes) {
  const size_t m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = Random(m * k), b = Random(k * n), c0 = Random(m * n);
      auto A = Up(a), B = Up(b), C = Up(c0);
      ASSERT_TRUE(be->Gemm(ta, tb, m, n, k, 0.5f, A, B, 2.0f, C).ok());
      std::vector<double> want(m * n);
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < n; ++j) {
          double s = 0;
          for (size_t p = 0; p < k; ++p) {
            const double av = ta ? a[p * m + i] : a[i * k + p];
            const double bv = tb ? b[j * k + p] : b[p * n + j];
            s += av * bv;
          }
          want[i * n + j] = 0.5 * s + 2.0 * c0[i * n + j];
        }
      }
      ExpectNear(Down(C, m * n), want, 1e-5);
    }
  }
}

// An inner dimension of 1 with alpha 1 and beta 0 (the backward pass through a one-output
// layer) is a plain outer product: each element the one rounded product, in every layout,
// with a long row that crosses the vector widths.
TEST_F(CpuBackendTest, GemmWithInnerDimensionOneIsTheOuterProduct) {
  const size_t m = 13, n = 67;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = Random(m), b = Random(n);
      a[3] = 0.0f;
      auto A = Up(a), B = Up(b), C = Up(Random(m * n));
      ASSERT_TRUE(be->Gemm(ta, tb, m, n, 1, 1.0f, A, B, 0.0f, C).ok());
      const std::vector<float> got = Down(C, m * n);
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < n; ++j) ASSERT_EQ(got[i * n + j], a[i] * b[j]) << i << "," << j;
      }
    }
  }
  // Overlapping operands are a caller's bug, refused.
  auto X = Up(Random(8 * 8));
  EXPECT_FALSE(be->Gemm(false, false, 8, 8, 1, 1.0f, X.get().Slice(0, 8), X.get().Slice(8, 8), 0.0f, X).ok());
}

TEST_F(CpuBackendTest, GemmRejectsShortBuffers) {
  auto A = Up(Random(6)), B = Up(Random(6)), C = Up(Random(3));
  EXPECT_FALSE(be->Gemm(false, false, 2, 2, 3, 1, A, B, 0, C).ok());
}

TEST_F(CpuBackendTest, BiasActivationAndBackward) {
  const size_t rows = 4, cols = 3;
  for (int act : {kernels::kActIdentity, kernels::kActRelu, kernels::kActTanh, kernels::kActSigmoid}) {
    auto z = Random(rows * cols, -3, 3), bias = Random(cols);
    auto Z = Up(z), Bi = Up(bias);
    ASSERT_TRUE(be->BiasActivation(Z, rows, cols, Bi, static_cast<Activation>(act)).ok());
    std::vector<double> want(rows * cols), deriv(rows * cols);
    for (size_t i = 0; i < rows * cols; ++i) {
      const double x = static_cast<double>(z[i]) + bias[i % cols];
      switch (act) {
        case kernels::kActRelu: want[i] = x > 0 ? x : 0; deriv[i] = x > 0 ? 1 : 0; break;
        case kernels::kActTanh: want[i] = std::tanh(x); deriv[i] = 1 - std::tanh(x) * std::tanh(x); break;
        case kernels::kActSigmoid: {
          const double s = 1 / (1 + std::exp(-x));
          want[i] = s;
          deriv[i] = s * (1 - s);
          break;
        }
        default: want[i] = x; deriv[i] = 1;
      }
    }
    ExpectNear(Down(Z, rows * cols), want, 1e-6);
    auto g = Random(rows * cols);
    auto G = Up(g);
    ASSERT_TRUE(be->ActivationBackward(G, Z, rows * cols, static_cast<Activation>(act)).ok());
    std::vector<double> gw(rows * cols);
    for (size_t i = 0; i < gw.size(); ++i) gw[i] = g[i] * deriv[i];
    ExpectNear(Down(G, rows * cols), gw, 1e-5);
  }
}

TEST_F(CpuBackendTest, ColumnSumsMomentsStandardize) {
  const size_t rows = 50, cols = 4;
  auto x = Random(rows * cols, -5, 20);
  for (size_t r = 0; r < rows; ++r) x[r * cols + 3] = 7.0f;  // a constant column
  auto X = Up(x);
  auto S = AllocOwned(*be, cols), M = AllocOwned(*be, cols), I = AllocOwned(*be, cols);
  ASSERT_TRUE(S.ok() && M.ok() && I.ok());
  ASSERT_TRUE(be->ColumnSums(X, rows, cols, *S).ok());
  ASSERT_TRUE(be->ColumnMoments(X, rows, cols, *M, *I).ok());
  std::vector<double> sum(cols, 0), mean(cols), inv(cols);
  for (size_t r = 0; r < rows; ++r) for (size_t c = 0; c < cols; ++c) sum[c] += x[r * cols + c];
  for (size_t c = 0; c < cols; ++c) {
    mean[c] = sum[c] / rows;
    double v = 0;
    for (size_t r = 0; r < rows; ++r) v += (x[r * cols + c] - mean[c]) * (x[r * cols + c] - mean[c]);
    v /= rows;
    inv[c] = v > 0 ? 1 / std::sqrt(v) : 1.0;
  }
  ExpectNear(Down(*S, cols), sum, 1e-5);
  ExpectNear(Down(*M, cols), mean, 1e-6);
  ExpectNear(Down(*I, cols), inv, 1e-6);
  ASSERT_TRUE(be->Standardize(X, rows, cols, *M, *I).ok());
  auto z = Down(X, rows * cols);
  for (size_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (size_t r = 0; r < rows; ++r) m += z[r * cols + c];
    m /= rows;
    for (size_t r = 0; r < rows; ++r) v += (z[r * cols + c] - m) * (z[r * cols + c] - m);
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v / rows, 1.0, 1e-4);
  }
  EXPECT_EQ(z[3], 0.0f);  // constant column: centred, not scaled
}

TEST_F(CpuBackendTest, SplitAndGather) {
  const size_t rows = 5, f = 3;
  std::vector<float> rec(rows * (f + 1));
  for (size_t i = 0; i < rec.size(); ++i) rec[i] = static_cast<float>(i);
  auto R = Up(rec);
  auto X = AllocOwned(*be, rows * f), Y = AllocOwned(*be, rows);
  ASSERT_TRUE(be->SplitRecords(R, rows, f, *X, *Y).ok());
  auto y = Down(*Y, rows);
  EXPECT_EQ(y, (std::vector<float>{3, 7, 11, 15, 19}));
  EXPECT_EQ(Down(*X, 6), (std::vector<float>{0, 1, 2, 4, 5, 6}));
  const uint32_t idx[] = {4, 0, 4};
  auto D = AllocOwned(*be, 3 * f);
  ASSERT_TRUE(be->GatherRows(*X, f, idx, 3, *D).ok());
  EXPECT_EQ(Down(*D, 9), (std::vector<float>{16, 17, 18, 0, 1, 2, 16, 17, 18}));
  const uint32_t bad[] = {5};
  EXPECT_FALSE(be->GatherRows(*X, f, bad, 1, *D).ok());
}

TEST_F(CpuBackendTest, CheckRecords) {
  // 4 rows x (numeric, yes/no) + label, 2 classes.
  const uint8_t yes_no[] = {0, 1};
  std::vector<float> rec = {-2.5f, 0, 0, 1e30f, 1, 1, 0, 0, 1, 7, 1, 0};
  uint64_t first_bad = 99;
  ASSERT_TRUE(be->CheckRecords(Up(rec), 4, 2, yes_no, 2, &first_bad).ok());
  EXPECT_EQ(first_bad, 4u);
  auto with = [&](size_t i, float v) {
    auto r = rec;
    r[i] = v;
    EXPECT_TRUE(be->CheckRecords(Up(r), 4, 2, yes_no, 2, &first_bad).ok());
    return first_bad;
  };
  EXPECT_EQ(with(6, NAN), 2u);        // numeric not finite
  EXPECT_EQ(with(4, 0.5f), 1u);       // yes/no not 0 or 1
  EXPECT_EQ(with(11, 2.0f), 3u);      // label out of range
  EXPECT_EQ(with(2, 0.5f), 0u);       // label not an integer
  EXPECT_EQ(with(8, -1.0f), 2u);      // negative label
  EXPECT_FALSE(be->CheckRecords(Up(rec), 5, 2, yes_no, 2, &first_bad).ok());  // buffer too short
}

TEST_F(CpuBackendTest, LossAndProbabilities) {
  // Binary.
  std::vector<float> z = {-3.0f, 0.0f, 2.0f, 40.0f}, y = {0, 1, 1, 0};
  auto Z = Up(z), Y = Up(y);
  auto G = AllocOwned(*be, 4), P = AllocOwned(*be, 4);
  double loss = 0;
  ASSERT_TRUE(be->LossAndGrad(LossKind::kBinaryLogistic, Z, Y, 4, 2, 0.25f, *G, &loss, Buffer{}).ok());
  double want = 0;
  std::vector<double> gw(4), pw(4);
  for (size_t i = 0; i < 4; ++i) {
    const double p = 1 / (1 + std::exp(-static_cast<double>(z[i])));
    const double zd = z[i];  // log p and log(1 - p) without rounding p to 1
    want += y[i] * std::log1p(std::exp(-zd)) + (1 - y[i]) * std::log1p(std::exp(zd));
    gw[i] = (p - y[i]) * 0.25;
    pw[i] = p;
  }
  EXPECT_NEAR(loss, want, 1e-5);
  ExpectNear(Down(*G, 4), gw, 1e-6);
  ASSERT_TRUE(be->Probabilities(LossKind::kBinaryLogistic, Z, 4, 2, *P).ok());
  ExpectNear(Down(*P, 4), pw, 1e-6);

  // Softmax, 3 classes.
  std::vector<float> zs = {1, 2, 3, 100, -100, 0}, ys = {2, 1};
  auto ZS = Up(zs), YS = Up(ys);
  auto GS = AllocOwned(*be, 6), PS = AllocOwned(*be, 6);
  ASSERT_TRUE(be->LossAndGrad(LossKind::kSoftmax, ZS, YS, 2, 3, 1.0f, *GS, &loss, Buffer{}).ok());
  want = 0;
  std::vector<double> gs(6), ps(6);
  for (size_t r = 0; r < 2; ++r) {
    double mx = std::max({zs[r * 3], zs[r * 3 + 1], zs[r * 3 + 2]}), s = 0;
    for (size_t c = 0; c < 3; ++c) s += std::exp(zs[r * 3 + c] - mx);
    const size_t lab = static_cast<size_t>(ys[r]);
    want += mx + std::log(s) - zs[r * 3 + lab];
    for (size_t c = 0; c < 3; ++c) {
      ps[r * 3 + c] = std::exp(zs[r * 3 + c] - mx) / s;
      gs[r * 3 + c] = ps[r * 3 + c] - (c == lab ? 1 : 0);
    }
  }
  EXPECT_NEAR(loss, want, 1e-4);
  ExpectNear(Down(*GS, 6), gs, 1e-6);
  ASSERT_TRUE(be->Probabilities(LossKind::kSoftmax, ZS, 2, 3, *PS).ok());
  ExpectNear(Down(*PS, 6), ps, 1e-6);
  // A label outside the classes is a bug caught, not an out-of-bounds read.
  std::vector<float> bad = {3, 0};
  auto YB = Up(bad);
  EXPECT_FALSE(be->LossAndGrad(LossKind::kSoftmax, ZS, YB, 2, 3, 1.0f, Buffer{}, nullptr, Buffer{}).ok());
}

// Row weights scale each row's loss and gradient, for every loss kind; weights of 1 give
// the unweighted bits.
TEST_F(CpuBackendTest, WeightedLossScalesEachRow) {
  const std::vector<float> w = {0.0f, 1.0f, 2.5f, 0.25f};
  struct Case {
    LossKind kind;
    size_t classes, width;
    std::vector<float> z, y;
  };
  const std::vector<Case> cases = {
      {LossKind::kBinaryLogistic, 2, 1, {-3, 0, 2, 4}, {0, 1, 1, 0}},
      {LossKind::kSquaredError, 0, 1, {-1, 0.5f, 2, 3}, {0, 1, -1, 3}},
      {LossKind::kSoftmax, 3, 3, {1, 2, 3, 0, 0, 0, 5, -1, 2, 0.5f, 0.5f, 9}, {2, 1, 0, 1}},
  };
  for (const Case& c : cases) {
    auto Z = Up(c.z), Y = Up(c.y), W = Up(w), ones = Up(std::vector<float>(4, 1.0f));
    auto plain = AllocOwned(*be, 4 * c.width), weighted = AllocOwned(*be, 4 * c.width), unit = AllocOwned(*be, 4 * c.width);
    double loss_plain = 0, loss_weighted = 0, loss_unit = 0;
    ASSERT_TRUE(be->LossAndGrad(c.kind, Z, Y, 4, c.classes, 0.5f, *plain, &loss_plain, Buffer{}).ok());
    ASSERT_TRUE(be->LossAndGrad(c.kind, Z, Y, 4, c.classes, 0.5f, *weighted, &loss_weighted, W).ok());
    ASSERT_TRUE(be->LossAndGrad(c.kind, Z, Y, 4, c.classes, 0.5f, *unit, &loss_unit, ones).ok());
    const auto gp = Down(*plain, 4 * c.width), gw = Down(*weighted, 4 * c.width), gu = Down(*unit, 4 * c.width);
    EXPECT_EQ(gu, gp);
    EXPECT_EQ(loss_unit, loss_plain);
    double want = 0;
    for (size_t r = 0; r < 4; ++r) {
      double row = 0;  // the row's loss alone
      ASSERT_TRUE(be->LossAndGrad(c.kind, Up(std::vector<float>(c.z.begin() + r * c.width, c.z.begin() + (r + 1) * c.width)),
                                  Up(std::vector<float>{c.y[r]}), 1, c.classes, 1.0f, Buffer{}, &row, Buffer{}).ok());
      want += w[r] * row;
      for (size_t k = 0; k < c.width; ++k) EXPECT_FLOAT_EQ(gw[r * c.width + k], gp[r * c.width + k] * w[r]);
    }
    EXPECT_NEAR(loss_weighted, want, 1e-9 * (1 + std::abs(want)));
  }
  // Too few weights for the rows is refused, not read past.
  auto short_w = Up(std::vector<float>{1, 1});
  auto G = AllocOwned(*be, 4);
  EXPECT_FALSE(be->LossAndGrad(LossKind::kBinaryLogistic, Up(std::vector<float>{0, 0, 0, 0}),
                               Up(std::vector<float>{0, 1, 0, 1}), 4, 2, 1.0f, *G, nullptr, short_w).ok());
}

TEST_F(CpuBackendTest, OptimizerStepsMatchElementwise) {
  const size_t n = 33;
  auto p = Random(n), g = Random(n), v = Random(n), m = Random(n), s = Random(n, 0, 1);
  auto P = Up(p), Gr = Up(g), V = Up(v);
  ASSERT_TRUE(be->SgdStep(P, Gr, V, n, SgdStepArgs{0.1f, 0.9f, 0.01f, 0.001f}).ok());
  std::vector<double> wp(n);
  for (size_t i = 0; i < n; ++i) {
    const double grad = g[i] + 0.001 * p[i];
    const double vel = 0.9 * v[i] + grad;
    wp[i] = p[i] - 0.1 * 0.01 * p[i] - 0.1 * vel;
  }
  ExpectNear(Down(P, n), wp, 1e-6);

  auto P2 = Up(p), M = Up(m), S = Up(s);
  AdamWStepArgs a{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.0f, 0.1f, 0.001f};
  ASSERT_TRUE(be->AdamWStep(P2, Gr, M, S, n, a).ok());
  for (size_t i = 0; i < n; ++i) {
    const double m1 = 0.9 * m[i] + 0.1 * g[i], v1 = 0.999 * s[i] + 0.001 * g[i] * g[i];
    wp[i] = p[i] - 0.01 * 0.1 * p[i] - 0.01 * (m1 / 0.1) / (std::sqrt(v1 / 0.001) + 1e-8);
  }
  ExpectNear(Down(P2, n), wp, 1e-5);
}

// The backend's vectorized loops (one clone per instruction set) against the scalar
// formulas of kernels/nn_math.h, element by element and bit for bit, on shapes whose rows
// end between vector widths; exact zeros and negatives included, so ReLU's both sides and
// its derivative at 0 are hit.
TEST_F(CpuBackendTest, VectorLoopsGiveTheScalarFormulasBits) {
  auto same = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << what << " element " << i << ": " << got[i]
                                                                    << " vs " << want[i];
    }
  };
  const size_t rows = 5, cols = 67, n = rows * cols;
  for (int act : {kernels::kActIdentity, kernels::kActRelu, kernels::kActTanh, kernels::kActSigmoid}) {
    auto z = Random(n, -3, 3), bias = Random(cols);
    z[7] = 0.0f;
    z[8] = -bias[8];
    auto Z = Up(z), Bi = Up(bias);
    ASSERT_TRUE(be->BiasActivation(Z, rows, cols, Bi, static_cast<Activation>(act)).ok());
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = kernels::ActivationForward(act, z[i] + bias[i % cols]);
    const std::vector<float> y = Down(Z, n);
    same(y, want, "BiasActivation");
    auto g = Random(n);
    auto G = Up(g);
    ASSERT_TRUE(be->ActivationBackward(G, Z, n, static_cast<Activation>(act)).ok());
    for (size_t i = 0; i < n; ++i) want[i] = g[i] * kernels::ActivationDerivFromOutput(act, y[i]);
    same(Down(G, n), want, "ActivationBackward");
  }
  auto m = Random(n), mean = Random(cols), inv = Random(cols, 0.5f, 2);
  auto M = Up(m), Mean = Up(mean), Inv = Up(inv);
  auto S = AllocOwned(*be, cols);
  ASSERT_TRUE(S.ok());
  ASSERT_TRUE(be->ColumnSums(M, rows, cols, *S).ok());
  std::vector<float> sums(cols, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) sums[c] += m[r * cols + c];
  }
  same(Down(*S, cols), sums, "ColumnSums");
  ASSERT_TRUE(be->Standardize(M, rows, cols, Mean, Inv).ok());
  std::vector<float> st(n);
  for (size_t i = 0; i < n; ++i) st[i] = kernels::Standardize(m[i], mean[i % cols], inv[i % cols]);
  same(Down(M, n), st, "Standardize");

  auto p = Random(n), g = Random(n), v = Random(n), s1 = Random(n), s2 = Random(n, 0, 1);
  auto P = Up(p), Gr = Up(g), V = Up(v);
  const SgdStepArgs sa{0.1f, 0.9f, 0.01f, 0.001f};
  ASSERT_TRUE(be->SgdStep(P, Gr, V, n, sa).ok());
  std::vector<float> wp = p, wv = v;
  for (size_t i = 0; i < n; ++i) kernels::SgdMomentumUpdate(&wp[i], g[i], &wv[i], sa.lr, sa.momentum, sa.weight_decay, sa.l2);
  same(Down(P, n), wp, "SgdStep p");
  same(Down(V, n), wv, "SgdStep v");
  auto P2 = Up(p), S1 = Up(s1), S2 = Up(s2);
  const AdamWStepArgs a{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.001f, 0.1f, 0.001f};
  ASSERT_TRUE(be->AdamWStep(P2, Gr, S1, S2, n, a).ok());
  std::vector<float> ap = p, am = s1, av = s2;
  for (size_t i = 0; i < n; ++i) {
    kernels::AdamWUpdate(&ap[i], g[i], &am[i], &av[i], a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.l2,
                         a.bias_corr1, a.bias_corr2);
  }
  same(Down(P2, n), ap, "AdamWStep p");
  same(Down(S1, n), am, "AdamWStep m");
  same(Down(S2, n), av, "AdamWStep v");
  // The loops take their arrays as non-overlapping: a step over aliased state is refused.
  EXPECT_FALSE(be->AdamWStep(P2, Gr, S1, S1, n, a).ok());
  EXPECT_FALSE(be->BiasActivation(M, rows, cols, M.get().Slice(cols, cols), static_cast<Activation>(kernels::kActRelu)).ok());
}

TEST(MakeBackend, CpuAlwaysAndGpuOnlyWhenPresent) {
  auto cpu = MakeBackend(Device::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_STREQ((*cpu)->kind(), "cpu");
  auto any = MakeBackend(Device::kAuto);
  ASSERT_TRUE(any.ok());
  auto gpu = MakeBackend(Device::kGpu);
  if (!gpu.ok()) {
    EXPECT_EQ(gpu.status().code(), Code::kUnavailable);
    EXPECT_STREQ((*any)->kind(), "cpu");
  } else {
    EXPECT_STREQ((*gpu)->kind(), "gpu");
  }
}

}  // namespace
}  // namespace enclave::trainer
