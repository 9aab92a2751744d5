// Finite-difference gradient check of the MLP's backward pass on the CPU backend: for
// every parameter, (L(p + h) - L(p - h)) / 2h against the analytic gradient, for binary
// and softmax outputs, each activation, with and without hidden layers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "enclave/trainer/model.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {
namespace {

struct Case {
  std::vector<uint32_t> hidden;
  uint32_t classes;
  Activation act;
};

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, AnalyticMatchesCentralDifferences) {
  const Case c = GetParam();
  auto be = MakeCpuBackend();
  const size_t rows = 6, inputs = 4;
  ModelShape shape;
  shape.inputs = inputs;
  shape.hidden = c.hidden;
  shape.classes = c.classes;
  shape.activation = c.act;
  auto model_or = Mlp::Create(*be, shape, rows, 99);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  Mlp model = std::move(model_or).value();

  Rng rng(5);
  std::vector<float> x(rows * inputs), y(rows);
  for (float& v : x) v = rng.Uniform(-1.5f, 1.5f);
  for (size_t r = 0; r < rows; ++r) y[r] = static_cast<float>(r % c.classes);
  auto X = AllocOwned(*be, x.size()), Y = AllocOwned(*be, y.size());
  ASSERT_TRUE(be->Upload(*X, x.data(), x.size()).ok() && be->Upload(*Y, y.data(), y.size()).ok());

  // Biases start at zero; move them off it (relu's kink) and off symmetry.
  const size_t n = shape.parameter_count();
  std::vector<float> p(n);
  ASSERT_TRUE(be->Download(p.data(), model.params(), n).ok());
  for (float& v : p) v += rng.Uniform(-0.3f, 0.3f);
  ASSERT_TRUE(be->Upload(model.params(), p.data(), n).ok());

  auto mean_loss = [&]() {
    auto logits = model.Forward(*X, rows);
    EXPECT_TRUE(logits.ok());
    double sum = 0;
    EXPECT_TRUE(be->LossAndGrad(shape.loss(), *logits, *Y, rows, shape.classes, 1.0f, Buffer{}, &sum, Buffer{}).ok());
    return sum / rows;
  };
  ASSERT_TRUE(model.Forward(*X, rows).ok());
  double unused = 0;
  ASSERT_TRUE(model.Backward(*X, *Y, rows, &unused).ok());
  std::vector<float> g(n);
  ASSERT_TRUE(be->Download(g.data(), model.grads(), n).ok());

  const float h = 1e-2f;
  size_t checked = 0;
  for (size_t i = 0; i < n; ++i) {
    std::vector<float> q = p;
    q[i] = p[i] + h;
    ASSERT_TRUE(be->Upload(model.params(), q.data(), n).ok());
    const double up = mean_loss();
    q[i] = p[i] - h;
    ASSERT_TRUE(be->Upload(model.params(), q.data(), n).ok());
    const double down = mean_loss();
    const double fd = (up - down) / (2.0 * h);
    // Float forward passes and a step of 1e-2: second-order error ~h^2, rounding ~1e-7/h.
    EXPECT_NEAR(g[i], fd, 2e-4 + 2e-2 * std::fabs(fd)) << "parameter " << i;
    ++checked;
  }
  ASSERT_TRUE(be->Upload(model.params(), p.data(), n).ok());
  EXPECT_EQ(checked, n);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GradCheck,
    ::testing::Values(Case{{}, 2, kernels::kActRelu}, Case{{}, 3, kernels::kActRelu},
                      Case{{5}, 2, kernels::kActRelu}, Case{{5}, 2, kernels::kActTanh},
                      Case{{5}, 2, kernels::kActSigmoid}, Case{{5, 3}, 4, kernels::kActTanh},
                      Case{{6, 4}, 3, kernels::kActRelu}, Case{{3}, 3, kernels::kActSigmoid}));

}  // namespace
}  // namespace enclave::trainer
