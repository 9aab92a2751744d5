#include "enclave/trainer/curves.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "enclave/trainer/locked.h"
#include "enclave/trainer/plot.h"

namespace enclave::trainer {
namespace {

// Cumulative (false, true) positive counts at each distinct probability, highest first.
struct Counts {
  std::vector<double> fp, tp;
  double negatives = 0, positives = 0;
};

Result<Counts> CountsByThreshold(const float* probs, const float* labels, size_t rows) {
  ASSIGN_OR_RETURN(LockedArray<uint32_t> order, LockedArray<uint32_t>::Create(rows));
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return probs[a] > probs[b]; });
  Counts c;
  double fp = 0, tp = 0;
  for (size_t i = 0; i < rows; ++i) {
    const uint32_t r = order[i];
    if (labels[r] == 1.0f) tp += 1; else fp += 1;
    if (i + 1 == rows || probs[order[i + 1]] != probs[r]) {  // the end of a group of ties
      c.fp.push_back(fp);
      c.tp.push_back(tp);
    }
  }
  c.negatives = fp;
  c.positives = tp;
  if (fp == 0 || tp == 0) return InvalidInput("curves need both classes among the validation rows");
  return c;
}

std::string F(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", v);
  return b;
}

constexpr double kPanel = 240, kMargin = 50, kTop = 60;

// One square panel at column `i`: axes 0..1, a title, the line, an optional diagonal.
std::string Panel(int i, const std::string& id, const std::string& title, const std::string& xlabel,
                  const std::string& ylabel, const std::vector<CurvePoint>& pts, bool diagonal) {
  const double x0 = kMargin + i * (kPanel + kMargin), y0 = kTop;
  auto X = [&](double x) { return F(x0 + x * kPanel); };
  auto Y = [&](double y) { return F(y0 + (1 - y) * kPanel); };
  std::string s = "<g id=\"" + id + "\">\n";
  s += "<rect x=\"" + F(x0) + "\" y=\"" + F(y0) + "\" width=\"" + F(kPanel) + "\" height=\"" + F(kPanel) +
       "\" fill=\"none\" stroke=\"#444\"/>\n";
  s += "<text x=\"" + F(x0) + "\" y=\"" + F(y0 - 8) + "\" font-size=\"13\">" + title + "</text>\n";
  s += "<text x=\"" + F(x0 + kPanel / 2) + "\" y=\"" + F(y0 + kPanel + 30) + "\" font-size=\"11\" text-anchor=\"middle\">" +
       xlabel + "</text>\n";
  s += "<text x=\"" + F(x0 - 34) + "\" y=\"" + F(y0 + kPanel / 2) + "\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 " +
       F(x0 - 34) + " " + F(y0 + kPanel / 2) + ")\">" + ylabel + "</text>\n";
  for (double t : {0.0, 0.5, 1.0}) {
    s += "<text x=\"" + X(t) + "\" y=\"" + F(y0 + kPanel + 14) + "\" font-size=\"10\" text-anchor=\"middle\">" +
         F(t) + "</text>\n";
    s += "<text x=\"" + F(x0 - 4) + "\" y=\"" + Y(t) + "\" font-size=\"10\" text-anchor=\"end\">" + F(t) + "</text>\n";
  }
  if (diagonal) {
    s += "<line x1=\"" + X(0) + "\" y1=\"" + Y(0) + "\" x2=\"" + X(1) + "\" y2=\"" + Y(1) +
         "\" stroke=\"#aaa\" stroke-dasharray=\"4 3\"/>\n";
  }
  std::string d;
  for (const CurvePoint& p : pts) d += (d.empty() ? "" : " ") + X(p.x) + "," + Y(p.y);
  s += "<polyline class=\"curve\" points=\"" + d + "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n";
  return s + "</g>\n";
}

}  // namespace

Result<std::vector<CurvePoint>> RocCurve(const float* probs, const float* labels, size_t rows) {
  ASSIGN_OR_RETURN(Counts c, CountsByThreshold(probs, labels, rows));
  std::vector<CurvePoint> out{{0, 0}};
  for (size_t i = 0; i < c.fp.size(); ++i) out.push_back({c.fp[i] / c.negatives, c.tp[i] / c.positives});
  return out;
}

Result<std::vector<CurvePoint>> PrecisionRecallCurve(const float* probs, const float* labels, size_t rows) {
  ASSIGN_OR_RETURN(Counts c, CountsByThreshold(probs, labels, rows));
  std::vector<CurvePoint> out{{0, 1}};
  for (size_t i = 0; i < c.fp.size(); ++i) out.push_back({c.tp[i] / c.positives, c.tp[i] / (c.tp[i] + c.fp[i])});
  return out;
}

Result<std::string> EvaluationCurvesSvg(const float* probs, const float* labels, size_t rows,
                                        const ClassificationReport& report, const std::string& title) {
  if (!report.binary) return InvalidInput("evaluation curves are drawn for binary models");
  ASSIGN_OR_RETURN(std::vector<CurvePoint> roc, RocCurve(probs, labels, rows));
  ASSIGN_OR_RETURN(std::vector<CurvePoint> pr, PrecisionRecallCurve(probs, labels, rows));
  std::vector<CurvePoint> rel;
  for (const ReliabilityBin& b : report.binary_metrics.reliability) {
    if (b.count > 0) rel.push_back({b.mean_predicted, b.observed_fraction});
  }
  const BinaryMetrics& m = report.binary_metrics;
  const double width = 3 * kPanel + 4 * kMargin, height = kTop + kPanel + 50;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + F(width) + "\" height=\"" + F(height) +
                  "\" viewBox=\"0 0 " + F(width) + " " + F(height) + "\" font-family=\"sans-serif\">\n";
  s += "<text id=\"title\" x=\"" + F(kMargin) + "\" y=\"22\" font-size=\"14\">" + EscapeXml(title) + " (" +
       std::to_string(rows) + " validation rows)</text>\n";
  s += Panel(0, "roc", "ROC, AUC " + HumanMetric(m.roc_auc.value), "false positive rate", "sensitivity", roc, true);
  s += Panel(1, "pr", "precision-recall, AP " + HumanMetric(m.average_precision.value), "recall (sensitivity)",
             "precision (PPV)", pr, false);
  s += Panel(2, "calibration", "calibration, ECE " + HumanMetric(m.ece.value), "mean predicted probability",
             "observed fraction", rel, true);
  return s + "</svg>\n";
}

}  // namespace enclave::trainer
