#include "enclave/trainer/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace enclave::trainer {
namespace {

constexpr double kWidth = 760, kPanelHeight = 260, kLeft = 70, kRight = 170, kTop = 50, kGap = 60;
constexpr double kInfoLine = 16, kInfoHeight = 4 * kInfoLine + 8;  // the PlotInfo header
constexpr size_t kInfoDatasets = 3;  // named in the header; the others are counted

std::string Fmt(double v, const char* f = "%.2f") {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

// The length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 when it is not one
// (overlong, surrogate, above U+10FFFF, truncated).
size_t Utf8Length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else return 0;
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// XML text: the five specials escaped, control characters dropped (not allowed in XML
// 1.0), and bytes that are not UTF-8 (a job name, a file name) as U+FFFD, so that the
// SVG stays well-formed.
std::string Escape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: {
        const size_t n = Utf8Length(s, i);
        if (n == 0) {
          o += "\xEF\xBF\xBD";
        } else if (n > 1 || static_cast<unsigned char>(c) >= 0x20 || c == '\t') {
          o.append(s, i, n);
        }
        i += n == 0 ? 1 : n;
        continue;
      }
    }
    ++i;
  }
  return o;
}

struct Series {
  const char* name;
  const char* label;
  const char* color;
  const char* dash;
  std::function<double(const EpochMetrics&)> get;
};

// A "nice" tick step for a range, 1/2/5 x 10^k, about `n` ticks.
double NiceStep(double range, int n) {
  const double raw = range / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

// `note`: instead of a frame with axes and series, the panel is its title and this text
// (no validation split).
void Panel(std::string& out, const std::vector<EpochMetrics>& epochs, const std::vector<Series>& series,
           double top, const char* title, bool unit_range, const std::string& note = "") {
  const double w = kWidth - kLeft - kRight, h = kPanelHeight;
  if (!note.empty()) {
    out += "<g class=\"panel\">\n";
    out += "<text x=\"" + Fmt(kLeft) + "\" y=\"" + Fmt(top - 10) + "\" font-size=\"14\" font-weight=\"bold\">" +
           std::string(title) + "</text>\n";
    out += "<text id=\"panel-note\" x=\"" + Fmt(kLeft + w / 2) + "\" y=\"" + Fmt(top + 30) +
           "\" font-size=\"14\" fill=\"#666\" text-anchor=\"middle\">" + Escape(note) + "</text>\n";
    out += "</g>\n";
    return;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : series) {
    for (const EpochMetrics& m : epochs) {
      const double v = s.get(m);
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (unit_range) {
    hi = 1.0;
    lo = std::min(std::floor(lo * 10.0) / 10.0, 0.9);
  } else {
    lo = 0.0;
    hi = hi > 0 ? hi * 1.05 : 1.0;
  }
  const double step = NiceStep(hi - lo, 5);
  const size_t n = epochs.size();
  const double x0 = epochs.empty() ? 1 : epochs.front().epoch, x1 = epochs.empty() ? 1 : epochs.back().epoch;
  auto X = [&](double e) { return kLeft + (x1 > x0 ? (e - x0) / (x1 - x0) : 0.5) * w; };
  auto Y = [&](double v) { return top + h - (v - lo) / (hi - lo) * h; };
  out += "<g class=\"panel\">\n";
  out += "<text x=\"" + Fmt(kLeft) + "\" y=\"" + Fmt(top - 10) + "\" font-size=\"14\" font-weight=\"bold\">" +
         std::string(title) + "</text>\n";
  out += "<rect x=\"" + Fmt(kLeft) + "\" y=\"" + Fmt(top) + "\" width=\"" + Fmt(w) + "\" height=\"" + Fmt(h) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-12; v += step) {
    const std::string y = Fmt(Y(v));
    out += "<line x1=\"" + Fmt(kLeft) + "\" y1=\"" + y + "\" x2=\"" + Fmt(kLeft + w) + "\" y2=\"" + y +
           "\" stroke=\"#ddd\"/>\n";
    out += "<text x=\"" + Fmt(kLeft - 6) + "\" y=\"" + Fmt(Y(v) + 4) + "\" font-size=\"11\" text-anchor=\"end\">" +
           Fmt(v, step < 0.1 ? "%.2f" : "%.1f") + "</text>\n";
  }
  const double estep = std::max(1.0, std::round(NiceStep(std::max(1.0, x1 - x0), 8)));
  for (double e = x0; e <= x1 + 1e-9; e += estep) {
    out += "<text x=\"" + Fmt(X(e)) + "\" y=\"" + Fmt(top + h + 16) + "\" font-size=\"11\" text-anchor=\"middle\">" +
           Fmt(e, "%.0f") + "</text>\n";
  }
  out += "<text x=\"" + Fmt(kLeft + w / 2) + "\" y=\"" + Fmt(top + h + 34) +
         "\" font-size=\"12\" text-anchor=\"middle\">epoch</text>\n";
  double ly = top + 14;
  for (const Series& s : series) {
    // Undefined points (NaN) break the line rather than being drawn as zero.
    std::vector<std::string> runs(1);
    size_t points = 0;
    for (size_t i = 0; i < n; ++i) {
      const double v = s.get(epochs[i]);
      if (!std::isfinite(v)) {
        if (!runs.back().empty()) runs.emplace_back();
        continue;
      }
      runs.back() += (runs.back().empty() ? "" : " ") + Fmt(X(epochs[i].epoch)) + "," + Fmt(Y(v));
      ++points;
    }
    if (points == 0) continue;
    out += "<g id=\"series-" + std::string(s.name) + "\" class=\"series\" data-series=\"" + s.name + "\" data-points=\"" +
           std::to_string(points) + "\">\n";
    for (const std::string& r : runs) {
      if (r.empty()) continue;
      out += "<polyline fill=\"none\" stroke=\"" + std::string(s.color) + "\" stroke-width=\"2\"" +
             (s.dash[0] ? std::string(" stroke-dasharray=\"") + s.dash + "\"" : std::string()) + " points=\"" + r +
             "\"/>\n";
    }
    if (n <= 60) {  // markers, so that short runs (one epoch) are visible too
      for (size_t i = 0; i < n; ++i) {
        const double v = s.get(epochs[i]);
        if (!std::isfinite(v)) continue;
        out += "<circle cx=\"" + Fmt(X(epochs[i].epoch)) + "\" cy=\"" + Fmt(Y(v)) + "\" r=\"2.5\" fill=\"" +
               std::string(s.color) + "\"/>\n";
      }
    }
    out += "</g>\n";
    out += "<line x1=\"" + Fmt(kLeft + w + 12) + "\" y1=\"" + Fmt(ly) + "\" x2=\"" + Fmt(kLeft + w + 36) + "\" y2=\"" +
           Fmt(ly) + "\" stroke=\"" + s.color + "\" stroke-width=\"2\"" +
           (s.dash[0] ? std::string(" stroke-dasharray=\"") + s.dash + "\"" : std::string()) + "/>\n";
    out += "<text x=\"" + Fmt(kLeft + w + 42) + "\" y=\"" + Fmt(ly + 4) + "\" font-size=\"12\">" + s.label + "</text>\n";
    ly += 18;
  }
  out += "</g>\n";
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string o;
  for (const std::string& p : parts) o += (o.empty() ? "" : sep) + p;
  return o;
}

std::string Svg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const std::string& title,
                const PlotInfo* info) {
  const bool no_validation = info != nullptr && info->val_rows == 0;
  const double top0 = kTop + (info != nullptr ? kInfoHeight : 0);
  const double height = top0 + 20 + 2 * kPanelHeight + kGap + 50;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt(kWidth, "%.0f") + "\" height=\"" +
         Fmt(height, "%.0f") + "\" viewBox=\"0 0 " + Fmt(kWidth, "%.0f") + " " + Fmt(height, "%.0f") +
         "\" font-family=\"sans-serif\">\n";
  out += "<title>" + Escape(title) + "</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + Fmt(kWidth / 2) + "\" y=\"22\" font-size=\"16\" text-anchor=\"middle\">" + Escape(title) +
         "</text>\n";
  if (info != nullptr) {
    std::vector<std::string> names;
    for (size_t i = 0; i < info->datasets.size() && i < kInfoDatasets; ++i) {
      const PlotDataset& d = info->datasets[i];
      names.push_back(d.id + " (" + d.file + ", " + std::to_string(d.rows) + " rows)");
    }
    if (info->datasets.size() > kInfoDatasets) {
      names.push_back("and " + std::to_string(info->datasets.size() - kInfoDatasets) + " more");
    }
    std::string rows = std::to_string(info->train_rows) + " training rows, ";
    if (!no_validation) {
      rows += std::to_string(info->val_rows) + " validation rows (validation_fraction " +
              Fmt(info->validation_fraction, "%g") + ")";
    } else if (info->validation_fraction == 0) {
      rows += "no validation split (validation_fraction = 0)";
    } else {
      rows += "no validation split (validation_fraction " + Fmt(info->validation_fraction, "%g") +
              " leaves no validation rows)";
    }
    std::string final_line = "no epochs";
    if (!epochs.empty()) {
      const bool kept = info->kept_epoch > 0 && info->kept_epoch <= epochs.size();
      const EpochMetrics& f = kept ? epochs[info->kept_epoch - 1] : epochs.back();
      std::vector<std::string> m;
      if (metrics & kMetricLoss) m.push_back("training loss " + HumanMetric(f.train_loss));
      if (no_validation) {
        m.push_back("no validation split");
      } else if (info->regression) {
        if (metrics & kMetricLoss) m.push_back("validation loss " + HumanMetric(f.val_loss));
        if (metrics & kMetricRmse) m.push_back("validation RMSE " + HumanMetric(f.val_rmse));
        if (metrics & kMetricMae) m.push_back("MAE " + HumanMetric(f.val_mae));
        if (metrics & kMetricR2) m.push_back("R^2 " + HumanMetric(f.val_r2));
      } else {
        if (metrics & kMetricLoss) m.push_back("validation loss " + HumanMetric(f.val_loss));
        if (metrics & kMetricAccuracy) m.push_back("validation accuracy " + HumanMetric(f.val_accuracy));
        if (metrics & kMetricRocAuc) m.push_back("ROC AUC " + HumanMetric(f.val_auc));
      }
      final_line = (kept ? "kept (best epoch " : "final (epoch ") + std::to_string(f.epoch) + "): " + Join(m, ", ");
    }
    double y = kTop - 10;
    auto line = [&](const char* id, const std::string& text, const char* extra) {
      out += std::string("<text id=\"") + id + "\" x=\"" + Fmt(kLeft) + "\" y=\"" + Fmt(y) + "\" font-size=\"12\"" +
             extra + ">" + Escape(text) + "</text>\n";
      y += kInfoLine;
    };
    out += "<g id=\"info\">\n";
    line("info-datasets", (info->datasets.size() == 1 ? "dataset: " : "datasets: ") + Join(names, ", "), "");
    line("info-rows", rows, "");
    line("info-final", final_line, "");
    if (info->development_mode) {
      line("info-mode", "development mode: no key broker, no attestation (local keystore or clear data); not signed",
           " fill=\"#b00\" font-weight=\"bold\"");
    }
    out += "</g>\n";
  }
  std::vector<Series> loss, quality;
  if (metrics & kMetricLoss) {
    loss.push_back({"train_loss", "training loss", "#1f77b4", "", [](const EpochMetrics& m) { return m.train_loss; }});
    loss.push_back({"val_loss", "validation loss", "#ff7f0e", "6 3", [](const EpochMetrics& m) { return m.val_loss; }});
  }
  const bool regression = info != nullptr && info->regression;
  if ((metrics & kMetricRmse) && regression) {
    quality.push_back({"val_rmse", "val. RMSE", "#2ca02c", "", [](const EpochMetrics& m) { return m.val_rmse; }});
  }
  if ((metrics & kMetricAccuracy) && !regression) {
    quality.push_back({"val_accuracy", "val. accuracy", "#2ca02c", "", [](const EpochMetrics& m) { return m.val_accuracy; }});
  }
  if ((metrics & kMetricRocAuc) && !regression) {
    quality.push_back({"val_roc_auc", "val. ROC AUC", "#d62728", "6 3", [](const EpochMetrics& m) { return m.val_auc; }});
  }
  // A panel whose every series the job leaves out of its clear outputs says so.
  const std::string hidden = "not shown in clear (the job's training.metrics)";
  Panel(out, epochs, loss, top0 + 20, no_validation ? "training loss (mean cross-entropy)" : "loss (mean cross-entropy)",
        false, loss.empty() ? hidden : "");
  Panel(out, epochs, quality, top0 + 20 + kPanelHeight + kGap,
        regression ? "validation RMSE (target units)" : "validation accuracy and ROC AUC", !regression,
        no_validation && regression ? "no validation split: no validation RMSE"
        : no_validation             ? "no validation split: no validation accuracy or ROC AUC"
        : quality.empty()           ? hidden
                                    : "");
  out += "</svg>\n";
  return out;
}

}  // namespace

std::string HumanMetric(double v) { return std::isfinite(v) ? Fmt(v, "%#.4g") : "n/a"; }

std::string TrainingCurveSvg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const std::string& title) {
  return Svg(epochs, metrics, title, nullptr);
}

std::string TrainingCurveSvg(const std::vector<EpochMetrics>& epochs, uint32_t metrics, const PlotInfo& info) {
  return Svg(epochs, metrics, info.title, &info);
}

std::string EscapeXml(const std::string& s) { return Escape(s); }

}  // namespace enclave::trainer
