// ROC and precision-recall points (curves.h) by hand, ties included.
#include <gtest/gtest.h>

#include <vector>

#include "enclave/trainer/curves.h"

namespace enclave::trainer {
namespace {

TEST(Curves, RocAndPrecisionRecallByHand) {
  // Scores 0.9 (pos), 0.8 (neg), 0.8 (pos), 0.3 (neg): the tie at 0.8 is one step.
  const std::vector<float> p = {0.9f, 0.8f, 0.8f, 0.3f}, y = {1, 0, 1, 0};
  auto roc = RocCurve(p.data(), y.data(), 4);
  ASSERT_TRUE(roc.ok());
  const std::vector<std::pair<double, double>> want_roc = {{0, 0}, {0, 0.5}, {0.5, 1}, {1, 1}};
  ASSERT_EQ(roc->size(), want_roc.size());
  for (size_t i = 0; i < want_roc.size(); ++i) {
    EXPECT_EQ((*roc)[i].x, want_roc[i].first) << i;
    EXPECT_EQ((*roc)[i].y, want_roc[i].second) << i;
  }
  auto pr = PrecisionRecallCurve(p.data(), y.data(), 4);
  ASSERT_TRUE(pr.ok());
  const std::vector<std::pair<double, double>> want_pr = {{0, 1}, {0.5, 1}, {1, 2.0 / 3}, {1, 0.5}};
  ASSERT_EQ(pr->size(), want_pr.size());
  for (size_t i = 0; i < want_pr.size(); ++i) {
    EXPECT_DOUBLE_EQ((*pr)[i].x, want_pr[i].first) << i;
    EXPECT_DOUBLE_EQ((*pr)[i].y, want_pr[i].second) << i;
  }
  const std::vector<float> one = {1, 1, 1, 1};
  EXPECT_FALSE(RocCurve(p.data(), one.data(), 4).ok());  // one class: no curve
}

}  // namespace
}  // namespace enclave::trainer
