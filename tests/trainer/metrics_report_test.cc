// The validation board's metrics (metrics_report.h) on hand-computed examples: ties,
// one class only, threshold edges, reliability bins at float edges, refused inputs; the
// bootstrap (seeded, contains the estimate, narrower with more rows); threshold choice;
// the JSON. sklearn_metrics_check.py compares the same numbers with scikit-learn.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "enclave/trainer/metrics.h"
#include "enclave/trainer/metrics_report.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {
namespace {

EvalOptions NoBootstrap(double threshold = 0.5) {
  EvalOptions o;
  o.threshold = threshold;
  o.bootstrap_resamples = 0;
  return o;
}

// Positives 0.9, 0.8 (tied with a negative), 0.6, 0.3 (tied with a negative);
// negatives 0.8, 0.4, 0.3, 0.1.
const float kP[] = {0.9f, 0.8f, 0.8f, 0.6f, 0.4f, 0.3f, 0.3f, 0.1f};
const float kY[] = {1, 1, 0, 1, 0, 1, 0, 0};

TEST(MetricsReport, BinaryAtThresholdWithTies) {
  auto r = EvaluateClassification(kP, kY, 8, 2, NoBootstrap());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->binary);
  const BinaryMetrics& m = r->binary_metrics;
  EXPECT_EQ(m.confusion.tp, 3u);  // 0.9, 0.8, 0.6
  EXPECT_EQ(m.confusion.fp, 1u);  // the negative 0.8
  EXPECT_EQ(m.confusion.tn, 3u);
  EXPECT_EQ(m.confusion.fn, 1u);  // the positive 0.3
  EXPECT_DOUBLE_EQ(m.sensitivity.value, 0.75);
  EXPECT_DOUBLE_EQ(m.specificity.value, 0.75);
  EXPECT_DOUBLE_EQ(m.ppv.value, 0.75);
  EXPECT_DOUBLE_EQ(m.npv.value, 0.75);
  EXPECT_DOUBLE_EQ(m.f1.value, 0.75);
  EXPECT_DOUBLE_EQ(m.accuracy.value, 0.75);
  // Pairs: 0.9 beats 4; 0.8 ties one and beats 3 (3.5); 0.6 beats 3; 0.3 ties one, beats 1 (1.5).
  EXPECT_DOUBLE_EQ(m.roc_auc.value, 12.0 / 16.0);
  EXPECT_NEAR(m.roc_auc.value, RocAuc(kP, kY, 8, 2), 1e-12);
  // Thresholds 0.9: P 1, R 1/4; 0.8 (1 pos + 1 neg): P 2/3; 0.6: P 3/4; 0.4: no recall
  // step; 0.3 (1 + 1): P 4/7.
  EXPECT_NEAR(m.average_precision.value, 0.25 * (1.0 + 2.0 / 3.0 + 0.75 + 4.0 / 7.0), 1e-15);
  double brier = 0;
  for (int i = 0; i < 8; ++i) brier += (kP[i] - static_cast<double>(kY[i])) * (kP[i] - static_cast<double>(kY[i]));
  EXPECT_NEAR(m.brier.value, brier / 8, 1e-15);
  // No bootstrap asked: no intervals.
  EXPECT_TRUE(std::isnan(m.sensitivity.ci_low));
  EXPECT_EQ(m.sensitivity.resamples_used + m.sensitivity.resamples_skipped, 0u);
}

// Bins are on the float's exact value: 0.9f = 0.89999998 falls in bin 8 with the two
// 0.8f = 0.80000001; 0.7f would be in bin 6, but 0.6f = 0.60000002 is.
TEST(MetricsReport, ReliabilityCurveAndEce) {
  auto r = EvaluateClassification(kP, kY, 8, 2, NoBootstrap());
  ASSERT_TRUE(r.ok());
  const std::vector<ReliabilityBin>& c = r->binary_metrics.reliability;
  ASSERT_EQ(c.size(), 10u);
  const uint64_t counts[10] = {0, 1, 0, 2, 1, 0, 1, 0, 3, 0};
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(c[k].count, counts[k]) << k;
    EXPECT_DOUBLE_EQ(c[k].lower, k / 10.0);
    EXPECT_DOUBLE_EQ(c[k].upper, (k + 1) / 10.0);
    EXPECT_EQ(std::isnan(c[k].mean_predicted), counts[k] == 0) << k;
  }
  EXPECT_NEAR(c[3].mean_predicted, 0.3, 1e-7);
  EXPECT_DOUBLE_EQ(c[3].observed_fraction, 0.5);
  EXPECT_NEAR(c[8].mean_predicted, (0.9 + 0.8 + 0.8) / 3, 1e-7);
  EXPECT_DOUBLE_EQ(c[8].observed_fraction, 2.0 / 3.0);
  // |obs - mean| * count: 0.1, 0.2 * 2, 0.4, 0.4, (2.5/3 - 2/3) * 3 = 0.5; over 8 rows.
  EXPECT_NEAR(r->binary_metrics.ece.value, 1.8 / 8, 1e-7);

  // Exact edges: 0 in the first bin, 0.5 opens bin 5, 1 in the last.
  const float edges[] = {0.0f, 0.5f, 1.0f, 0.25f};
  const float y[] = {0, 1, 1, 0};
  EvalOptions o = NoBootstrap();
  o.calibration_bins = 4;
  auto e = EvaluateClassification(edges, y, 4, 2, o);
  ASSERT_TRUE(e.ok());
  const std::vector<ReliabilityBin>& b = e->binary_metrics.reliability;
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].count, 1u);
  EXPECT_EQ(b[1].count, 1u);  // 0.25
  EXPECT_EQ(b[2].count, 1u);  // 0.5
  EXPECT_EQ(b[3].count, 1u);  // 1.0
  EXPECT_DOUBLE_EQ(e->binary_metrics.ece.value, (0.0 + 0.25 + 0.5 + 0.0) / 4);
}

TEST(MetricsReport, ThresholdEdges) {
  // p >= t: a threshold equal to a score makes that row positive.
  auto at = EvaluateClassification(kP, kY, 8, 2, NoBootstrap(static_cast<double>(0.8f)));
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->binary_metrics.confusion.tp, 2u);
  EXPECT_EQ(at->binary_metrics.confusion.fp, 1u);
  auto above = EvaluateClassification(kP, kY, 8, 2, NoBootstrap(std::nextafter(static_cast<double>(0.8f), 1.0)));
  ASSERT_TRUE(above.ok());
  EXPECT_EQ(above->binary_metrics.confusion.tp, 1u);
  EXPECT_EQ(above->binary_metrics.confusion.fp, 0u);
  // 0: everything positive; NPV has no predicted negatives.
  auto zero = EvaluateClassification(kP, kY, 8, 2, NoBootstrap(0.0));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->binary_metrics.confusion.tp, 4u);
  EXPECT_EQ(zero->binary_metrics.confusion.fp, 4u);
  EXPECT_DOUBLE_EQ(zero->binary_metrics.sensitivity.value, 1.0);
  EXPECT_DOUBLE_EQ(zero->binary_metrics.specificity.value, 0.0);
  EXPECT_TRUE(std::isnan(zero->binary_metrics.npv.value));
  // 1: nothing reaches it; PPV undefined, F1 = 0 (no true positives, some false negatives).
  auto one = EvaluateClassification(kP, kY, 8, 2, NoBootstrap(1.0));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->binary_metrics.confusion.tp + one->binary_metrics.confusion.fp, 0u);
  EXPECT_TRUE(std::isnan(one->binary_metrics.ppv.value));
  EXPECT_DOUBLE_EQ(one->binary_metrics.f1.value, 0.0);
  EXPECT_DOUBLE_EQ(one->binary_metrics.specificity.value, 1.0);
}

TEST(MetricsReport, OneClassOnly) {
  const float p[] = {0.9f, 0.2f, 0.6f, 0.4f};
  const float ones[] = {1, 1, 1, 1};
  EvalOptions o;
  o.bootstrap_resamples = 50;
  auto r = EvaluateClassification(p, ones, 4, 2, o);
  ASSERT_TRUE(r.ok());
  const BinaryMetrics& m = r->binary_metrics;
  EXPECT_TRUE(std::isnan(m.roc_auc.value));
  EXPECT_TRUE(std::isnan(m.specificity.value));
  EXPECT_DOUBLE_EQ(m.average_precision.value, 1.0);  // every threshold has precision 1
  EXPECT_DOUBLE_EQ(m.sensitivity.value, 0.5);
  EXPECT_DOUBLE_EQ(m.npv.value, 0.0);
  // Undefined in every resample: all skipped, no interval.
  EXPECT_EQ(m.roc_auc.resamples_skipped, 50u);
  EXPECT_EQ(m.roc_auc.resamples_used, 0u);
  EXPECT_TRUE(std::isnan(m.roc_auc.ci_low));
  EXPECT_EQ(m.brier.resamples_used, 50u);

  const float zeros[] = {0, 0, 0, 0};
  auto z = EvaluateClassification(p, zeros, 4, 2, NoBootstrap());
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(std::isnan(z->binary_metrics.sensitivity.value));
  EXPECT_TRUE(std::isnan(z->binary_metrics.average_precision.value));
  EXPECT_TRUE(std::isnan(z->binary_metrics.f1.value) == false);  // 2*0 / (0 + 2 + 0) = 0
  EXPECT_DOUBLE_EQ(z->binary_metrics.f1.value, 0.0);
}

TEST(MetricsReport, RefusesBadInput) {
  const EvalOptions o = NoBootstrap();
  EXPECT_EQ(EvaluateClassification(kP, kY, 0, 2, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateClassification(kP, kY, 8, 1, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateClassification(nullptr, kY, 8, 2, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateClassification(kP, kY, 8, 2, NoBootstrap(1.5)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateClassification(kP, kY, 8, 2, NoBootstrap(std::nan(""))).status().code(), Code::kInvalidInput);
  EvalOptions no_bins = o;
  no_bins.calibration_bins = 0;
  EXPECT_EQ(EvaluateClassification(kP, kY, 8, 2, no_bins).status().code(), Code::kInvalidInput);
  const float nan_p[] = {0.5f, std::nanf("")};
  const float big_p[] = {0.5f, 1.5f};
  const float y2[] = {0, 1};
  auto nan_r = EvaluateClassification(nan_p, y2, 2, 2, o);
  EXPECT_EQ(nan_r.status().code(), Code::kInvalidInput);
  EXPECT_NE(nan_r.status().message().find("row 1"), std::string::npos) << nan_r.status().message();
  EXPECT_EQ(EvaluateClassification(big_p, y2, 2, 2, o).status().code(), Code::kInvalidInput);
  const float p2[] = {0.5f, 0.5f};
  const float bad_labels[][2] = {{0, 2}, {0, 0.5f}, {-1, 0}, {0, std::nanf("")}};
  for (const auto& y : bad_labels) {
    EXPECT_EQ(EvaluateClassification(p2, y, 2, 2, o).status().code(), Code::kInvalidInput);
  }
  const float v[] = {1, 2};
  const float inf[] = {1, INFINITY};
  EXPECT_EQ(EvaluateRegression(v, v, 0, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateRegression(inf, v, 2, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(EvaluateRegression(v, inf, 2, o).status().code(), Code::kInvalidInput);
  EXPECT_EQ(ChooseThresholdYouden(kP, kY, 0).status().code(), Code::kInvalidInput);
  EXPECT_EQ(ChooseThresholdForSensitivity(kP, kY, 8, 0.0).status().code(), Code::kInvalidInput);
  EXPECT_EQ(ChooseThresholdForSensitivity(kP, kY, 8, 1.1).status().code(), Code::kInvalidInput);
}

TEST(MetricsReport, Multiclass) {
  // Predictions (argmax, first on ties): 0, 1, 2, 1, 0 (row 4 ties 0 and 1).
  const float p[] = {0.8f, 0.1f, 0.1f,   //
                     0.2f, 0.5f, 0.3f,   //
                     0.1f, 0.1f, 0.8f,   //
                     0.2f, 0.6f, 0.2f,   //
                     0.4f, 0.4f, 0.2f};  //
  const float y[] = {0, 1, 2, 0, 1};
  auto r = EvaluateClassification(p, y, 5, 3, NoBootstrap());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->binary);
  const MulticlassMetrics& m = r->multiclass_metrics;
  const std::vector<uint64_t> cm = {1, 1, 0,  //
                                    1, 1, 0,  //
                                    0, 0, 1};
  EXPECT_EQ(m.confusion, cm);
  ASSERT_EQ(m.per_class.size(), 3u);
  EXPECT_EQ(m.per_class[0].support, 2u);
  EXPECT_DOUBLE_EQ(m.per_class[0].sensitivity.value, 0.5);
  EXPECT_DOUBLE_EQ(m.per_class[0].ppv.value, 0.5);
  EXPECT_DOUBLE_EQ(m.per_class[0].f1.value, 0.5);
  EXPECT_DOUBLE_EQ(m.per_class[1].f1.value, 0.5);
  EXPECT_DOUBLE_EQ(m.per_class[2].f1.value, 1.0);
  EXPECT_DOUBLE_EQ(m.macro_f1.value, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.accuracy.value, 3.0 / 5.0);
  EXPECT_NEAR(m.accuracy.value, Accuracy(p, y, 5, 3), 1e-15);
  EXPECT_NEAR(m.roc_auc_ovr.value, RocAuc(p, y, 5, 3), 1e-12);
  // Sum over classes of (p - onehot)^2 per row: 0.06, 0.38, 0.06, 1.04, 0.16 + 0.36 + 0.04.
  EXPECT_NEAR(m.brier.value, (0.06 + 0.38 + 0.06 + 1.04 + 0.56) / 5, 1e-7);
  // Top-label calibration, 10 bins of the predicted class's probability: 0.8, 0.5, 0.8,
  // 0.6, 0.4 (predicted 0, 1, 2, 1, 0; right, right, right, wrong, wrong).
  ASSERT_EQ(m.reliability.size(), 10u);
  EXPECT_EQ(m.reliability[8].count, 2u);
  EXPECT_NEAR(m.reliability[8].mean_predicted, 0.8, 1e-7);
  EXPECT_DOUBLE_EQ(m.reliability[8].observed_fraction, 1.0);
  EXPECT_EQ(m.reliability[5].count, 1u);
  EXPECT_DOUBLE_EQ(m.reliability[5].observed_fraction, 1.0);
  EXPECT_EQ(m.reliability[6].count, 1u);
  EXPECT_DOUBLE_EQ(m.reliability[6].observed_fraction, 0.0);
  EXPECT_EQ(m.reliability[4].count, 1u);
  EXPECT_EQ(m.reliability[0].count + m.reliability[9].count, 0u);
  // |1 - 0.8| * 2/5 + |1 - 0.5| / 5 + |0 - 0.6| / 5 + |0 - 0.4| / 5
  EXPECT_NEAR(m.ece.value, (0.2 * 2 + 0.5 + 0.6 + 0.4) / 5, 1e-7);

  // A class absent from the labels and never predicted: no F1, left out of the macro mean
  // and of the AUC mean.
  const float p4[] = {0.7f, 0.1f, 0.1f, 0.1f,  //
                      0.1f, 0.7f, 0.1f, 0.1f,  //
                      0.1f, 0.1f, 0.7f, 0.1f};
  const float y4[] = {0, 1, 1};
  auto a = EvaluateClassification(p4, y4, 3, 4, NoBootstrap());
  ASSERT_TRUE(a.ok());
  const MulticlassMetrics& am = a->multiclass_metrics;
  EXPECT_TRUE(std::isnan(am.per_class[3].f1.value));
  EXPECT_TRUE(std::isnan(am.per_class[2].sensitivity.value));
  EXPECT_DOUBLE_EQ(am.per_class[2].f1.value, 0.0);  // predicted once, never true
  EXPECT_DOUBLE_EQ(am.macro_f1.value, (1.0 + 2.0 / 3.0 + 0.0) / 3.0);
}

TEST(MetricsReport, Regression) {
  const float pred[] = {1, 2, 3, 4};
  const float y[] = {1, 3, 2, 5};
  auto r = EvaluateRegression(pred, y, 4, NoBootstrap());
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->rmse.value, std::sqrt(0.75));
  EXPECT_DOUBLE_EQ(r->mae.value, 0.75);
  // mean 2.75; SS_tot = 1.75^2 + 0.25^2 + 0.75^2 + 2.25^2 = 8.75; SS_res = 3.
  EXPECT_DOUBLE_EQ(r->r2.value, 1.0 - 3.0 / 8.75);
  const float flat[] = {0.1f, 0.1f, 0.1f, 0.1f};
  auto c = EvaluateRegression(pred, flat, 4, NoBootstrap());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(std::isnan(c->r2.value));  // constant targets
  EXPECT_GT(c->rmse.value, 0.0);
  auto perfect = EvaluateRegression(y, y, 4, NoBootstrap());
  ASSERT_TRUE(perfect.ok());
  EXPECT_DOUBLE_EQ(perfect->r2.value, 1.0);
  EXPECT_DOUBLE_EQ(perfect->rmse.value, 0.0);
}

TEST(MetricsReport, ThresholdChoice) {
  // J over thresholds 0.9 .. 0.1: 1/4, 1/4, 1/2 (at 0.6), 1/4, 1/4, 0.
  auto y = ChooseThresholdYouden(kP, kY, 8);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->threshold, static_cast<double>(0.6f));
  EXPECT_DOUBLE_EQ(y->youden_j, 0.5);
  EXPECT_DOUBLE_EQ(y->sensitivity, 0.75);
  EXPECT_DOUBLE_EQ(y->specificity, 0.75);
  // Ties: J = 1/2 at 0.9 and at 0.5; the larger threshold wins.
  const float tp[] = {0.9f, 0.7f, 0.5f, 0.2f};
  const float ty[] = {1, 0, 1, 0};
  auto t = ChooseThresholdYouden(tp, ty, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->threshold, static_cast<double>(0.9f));
  // Sensitivity targets: 0.75 first reached at 0.6; 0.76 and 1.0 only at 0.3.
  auto s = ChooseThresholdForSensitivity(kP, kY, 8, 0.75);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->threshold, static_cast<double>(0.6f));
  EXPECT_EQ(ChooseThresholdForSensitivity(kP, kY, 8, 0.76)->threshold, static_cast<double>(0.3f));
  EXPECT_EQ(ChooseThresholdForSensitivity(kP, kY, 8, 1.0)->threshold, static_cast<double>(0.3f));
  EXPECT_DOUBLE_EQ(ChooseThresholdForSensitivity(kP, kY, 8, 1.0)->specificity, 0.25);
  // The chosen threshold, used in the report, gives the same sensitivity.
  auto at = EvaluateClassification(kP, kY, 8, 2, NoBootstrap(s->threshold));
  ASSERT_TRUE(at.ok());
  EXPECT_DOUBLE_EQ(at->binary_metrics.sensitivity.value, s->sensitivity);
  // One class: Youden needs both; a sensitivity target needs positives.
  const float ones[] = {1, 1, 1, 1, 1, 1, 1, 1};
  const float zeros[] = {0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(ChooseThresholdYouden(kP, ones, 8).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(ChooseThresholdForSensitivity(kP, zeros, 8, 0.9).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(ChooseThresholdForSensitivity(kP, ones, 8, 0.9).ok());
}

TEST(MetricsReport, QuantileRule) {
  const double v[] = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 4, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 4, 0.025), 1.075);  // h = 0.075
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 4, 0.975), 3.925);  // h = 2.925
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 4, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 4, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(QuantileOfSorted(v, 1, 0.975), 1.0);
  EXPECT_TRUE(std::isnan(QuantileOfSorted(v, 0, 0.5)));
}

// A binary sample with signal: y ~ Bernoulli(0.4), p a noisy squashed score.
void MakeBinary(size_t n, uint64_t seed, std::vector<float>* p, std::vector<float>* y) {
  Rng rng(seed, 99);
  p->resize(n);
  y->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*y)[i] = rng.UniformFloat() < 0.4f ? 1.0f : 0.0f;
    const float s = ((*y)[i] == 1.0f ? 0.8f : -0.8f) + rng.Uniform(-2.0f, 2.0f);
    (*p)[i] = 1.0f / (1.0f + std::exp(-s));
  }
}

std::vector<const Estimate*> BinaryEstimates(const BinaryMetrics& m) {
  return {&m.sensitivity, &m.specificity, &m.ppv, &m.npv, &m.f1, &m.accuracy,
          &m.roc_auc, &m.average_precision, &m.brier, &m.ece};
}

TEST(MetricsReport, BootstrapIsSeededAndContainsTheEstimate) {
  std::vector<float> p, y;
  MakeBinary(2000, 1, &p, &y);
  EvalOptions o;
  o.seed = 42;
  auto a = EvaluateClassification(p.data(), y.data(), p.size(), 2, o);
  auto b = EvaluateClassification(p.data(), y.data(), p.size(), 2, o);
  o.seed = 43;
  auto c = EvaluateClassification(p.data(), y.data(), p.size(), 2, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->bootstrap.resamples, 1000u);
  EXPECT_EQ(a->bootstrap.stream, kStreamBootstrap);
  const auto ea = BinaryEstimates(a->binary_metrics), eb = BinaryEstimates(b->binary_metrics),
             ec = BinaryEstimates(c->binary_metrics);
  bool any_differs = false;
  for (size_t j = 0; j < ea.size(); ++j) {
    EXPECT_EQ(ea[j]->ci_low, eb[j]->ci_low) << j;  // bit for bit
    EXPECT_EQ(ea[j]->ci_high, eb[j]->ci_high) << j;
    EXPECT_EQ(ea[j]->resamples_used, 1000u) << j;
    EXPECT_EQ(ea[j]->resamples_skipped, 0u) << j;
    EXPECT_LE(ea[j]->ci_low, ea[j]->value) << j;
    EXPECT_GE(ea[j]->ci_high, ea[j]->value) << j;
    EXPECT_LT(ea[j]->ci_low, ea[j]->ci_high) << j;
    any_differs |= ea[j]->ci_low != ec[j]->ci_low || ea[j]->ci_high != ec[j]->ci_high;
  }
  EXPECT_TRUE(any_differs);  // another seed, other resamples
  EXPECT_GT(a->binary_metrics.roc_auc.value, 0.7);  // the sample has signal
}

TEST(MetricsReport, BootstrapNarrowsWithMoreRows) {
  EvalOptions o;
  o.bootstrap_resamples = 400;
  std::vector<float> p, y;
  MakeBinary(400, 2, &p, &y);
  auto small = EvaluateClassification(p.data(), y.data(), p.size(), 2, o);
  MakeBinary(6400, 2, &p, &y);
  auto large = EvaluateClassification(p.data(), y.data(), p.size(), 2, o);
  ASSERT_TRUE(small.ok() && large.ok());
  const auto es = BinaryEstimates(small->binary_metrics), el = BinaryEstimates(large->binary_metrics);
  for (size_t j = 0; j < es.size(); ++j) {
    // 16x the rows: about a quarter of the width; half is a safe bound.
    EXPECT_LT(el[j]->ci_high - el[j]->ci_low, 0.5 * (es[j]->ci_high - es[j]->ci_low)) << j;
  }
  // Regression too.
  std::vector<float> t(6400), f(6400);
  Rng rng(5, 99);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = rng.Uniform(-3.0f, 3.0f);
    f[i] = t[i] + rng.Uniform(-1.0f, 1.0f);
  }
  auto rs = EvaluateRegression(f.data(), t.data(), 400, o);
  auto rl = EvaluateRegression(f.data(), t.data(), 6400, o);
  ASSERT_TRUE(rs.ok() && rl.ok());
  const std::pair<const Estimate*, const Estimate*> pairs[] = {
      {&rs->rmse, &rl->rmse}, {&rs->mae, &rl->mae}, {&rs->r2, &rl->r2}};
  for (auto [s, l] : pairs) {
    EXPECT_LE(s->ci_low, s->value);
    EXPECT_GE(s->ci_high, s->value);
    EXPECT_LT(l->ci_high - l->ci_low, 0.5 * (s->ci_high - s->ci_low));
  }
}

TEST(MetricsReport, BootstrapSkipsUndefinedResamples) {
  // One positive in 20 rows: about e^-1 of the resamples have no positive, so sensitivity
  // and AUC are undefined there; specificity always defined.
  std::vector<float> p(20), y(20, 0.0f);
  for (int i = 0; i < 20; ++i) p[i] = static_cast<float>(i) / 20.0f;
  y[19] = 1.0f;
  EvalOptions o;
  o.bootstrap_resamples = 500;
  auto r = EvaluateClassification(p.data(), y.data(), 20, 2, o);
  ASSERT_TRUE(r.ok());
  const BinaryMetrics& m = r->binary_metrics;
  EXPECT_EQ(m.roc_auc.resamples_skipped, m.sensitivity.resamples_skipped);
  EXPECT_GT(m.roc_auc.resamples_skipped, 120u);  // expected ~ 500 * 0.358 = 179
  EXPECT_LT(m.roc_auc.resamples_skipped, 240u);
  EXPECT_EQ(m.roc_auc.resamples_used + m.roc_auc.resamples_skipped, 500u);
  EXPECT_EQ(m.specificity.resamples_skipped, 0u);

  // Multiclass: a resample that loses a class of the full-sample AUC mean is skipped.
  std::vector<float> pm(3 * 20, 0.0f), ym(20, 0.0f);
  for (int i = 0; i < 20; ++i) {
    ym[i] = i == 19 ? 2.0f : static_cast<float>(i % 2);
    pm[3 * i + static_cast<int>(ym[i])] = 0.6f;
    pm[3 * i + (static_cast<int>(ym[i]) + 1) % 3] = 0.4f;
  }
  auto mr = EvaluateClassification(pm.data(), ym.data(), 20, 3, o);
  ASSERT_TRUE(mr.ok());
  EXPECT_GT(mr->multiclass_metrics.roc_auc_ovr.resamples_skipped, 120u);
  EXPECT_EQ(mr->multiclass_metrics.accuracy.resamples_skipped, 0u);
}

TEST(MetricsReport, Json) {
  EvalOptions o;
  o.bootstrap_resamples = 200;
  auto r = EvaluateClassification(kP, kY, 8, 2, o);
  ASSERT_TRUE(r.ok());
  const nlohmann::json d = ToJson(*r);
  const nlohmann::json x = ToJson(*r, JsonNumbers::kExact);
  EXPECT_EQ(d["task"], "binary");
  EXPECT_EQ(d["rows"], 8);
  EXPECT_EQ(d["threshold"], 0.5);
  EXPECT_EQ(d["confusion"]["tp"], 3);
  EXPECT_EQ(d["sensitivity"]["value"], 0.75);
  ASSERT_TRUE(d["sensitivity"]["ci95"].is_array());
  EXPECT_EQ(d["sensitivity"]["ci95"].size(), 2u);
  EXPECT_TRUE(d["sensitivity"].contains("resamples_skipped"));
  // AP = 0.74702380952...: 4 significant digits for display, all of them when exact.
  EXPECT_EQ(d["average_precision"]["value"].get<double>(), 0.747);
  EXPECT_EQ(x["average_precision"]["value"].get<double>(), r->binary_metrics.average_precision.value);
  EXPECT_EQ(d["bootstrap"]["resamples"], 200);
  EXPECT_EQ(d["bootstrap"]["stream"], kStreamBootstrap);
  ASSERT_EQ(d["reliability"].size(), 10u);
  EXPECT_TRUE(d["reliability"][0]["mean_predicted"].is_null());  // empty bin
  EXPECT_EQ(d["reliability"][8]["count"], 3);
  for (const char* k : {"sensitivity", "specificity", "ppv", "npv", "f1", "accuracy", "roc_auc",
                        "average_precision", "brier", "ece"}) {
    EXPECT_TRUE(d.contains(k)) << k;
  }
  // Undefined is null, and so is its interval.
  const float ones[] = {1, 1, 1, 1, 1, 1, 1, 1};
  auto one = EvaluateClassification(kP, ones, 8, 2, o);
  ASSERT_TRUE(one.ok());
  const nlohmann::json oj = ToJson(*one);
  EXPECT_TRUE(oj["roc_auc"]["value"].is_null());
  EXPECT_TRUE(oj["roc_auc"]["ci95"].is_null());
  EXPECT_EQ(oj["roc_auc"]["resamples_skipped"], 200);
  // Without a bootstrap: no ci95 key.
  auto nb = EvaluateClassification(kP, kY, 8, 2, NoBootstrap());
  ASSERT_TRUE(nb.ok());
  EXPECT_FALSE(ToJson(*nb)["sensitivity"].contains("ci95"));

  const float pred[] = {1, 2, 3, 4};
  const float y[] = {1, 3, 2, 5};
  auto reg = EvaluateRegression(pred, y, 4, NoBootstrap());
  ASSERT_TRUE(reg.ok());
  const nlohmann::json rj = ToJson(*reg);
  EXPECT_EQ(rj["task"], "regression");
  EXPECT_EQ(rj["rmse"]["value"].get<double>(), 0.866);  // sqrt(0.75) = 0.8660254
  EXPECT_EQ(rj["r2"]["value"].get<double>(), 0.6571);   // 1 - 3/8.75 = 0.657142857

  const float pm[] = {0.8f, 0.1f, 0.1f, 0.2f, 0.5f, 0.3f, 0.1f, 0.1f, 0.8f};
  const float ym[] = {0, 1, 2};
  auto mc = EvaluateClassification(pm, ym, 3, 3, NoBootstrap());
  ASSERT_TRUE(mc.ok());
  const nlohmann::json mj = ToJson(*mc);
  EXPECT_EQ(mj["task"], "multiclass");
  EXPECT_EQ(mj["confusion"]["counts"], nlohmann::json({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}));
  EXPECT_EQ(mj["per_class"].size(), 3u);
  EXPECT_EQ(mj["per_class"][1]["f1"]["value"], 1.0);
  EXPECT_EQ(mj["macro_f1"]["value"], 1.0);
  EXPECT_TRUE(mj.contains("roc_auc_ovr"));
}

}  // namespace
}  // namespace enclave::trainer
