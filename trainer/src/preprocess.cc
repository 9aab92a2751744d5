#include "enclave/trainer/preprocess.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "enclave/trainer/locked.h"

namespace enclave::trainer {
namespace {

using dataset::ColumnKind;

size_t ValueColumns(const ColumnPlan& c) {
  return c.kind == ColumnKind::kCategorical ? size_t{c.categories} + 1 : 1;
}

// The most frequent value of `v` (sorted ascending): the smallest on ties.
float MostFrequent(const float* v, size_t n) {
  float best = v[0];
  size_t best_run = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && v[j] == v[i]) ++j;
    if (j - i > best_run) {
      best_run = j - i;
      best = v[i];
    }
    i = j;
  }
  return best;
}

}  // namespace

size_t Preprocessing::inputs() const {
  size_t n = 0;
  for (const ColumnPlan& c : columns) n += ValueColumns(c) + (c.indicator ? 1 : 0);
  return n;
}

bool Preprocessing::identity() const {
  return std::all_of(columns.begin(), columns.end(), [](const ColumnPlan& c) {
    return c.kind != ColumnKind::kCategorical && !c.missing_allowed;
  });
}

Preprocessing PlanPreprocessing(const dataset::DatasetSchema& schema, const PreprocessSpec& spec) {
  Preprocessing p;
  p.impute = spec.impute;
  for (const dataset::Column& col : schema.columns) {
    if (col.kind == ColumnKind::kLabel) continue;
    ColumnPlan c;
    c.kind = col.kind;
    c.missing_allowed = col.missing_allowed;
    c.categories = col.kind == ColumnKind::kCategorical ? static_cast<uint32_t>(col.categories.size()) : 0;
    c.indicator = col.missing_allowed && spec.indicators && spec.impute != Impute::kKeepMissing;
    p.columns.push_back(c);
  }
  return p;
}

Status FitPreprocessing(Preprocessing* p, const float* x, size_t features, const uint32_t* rows, size_t n) {
  if (features != p->raw_features()) return Internal("preprocessing: feature count differs from the plan");
  ASSIGN_OR_RETURN(LockedArray<float> values, LockedArray<float>::Create(n));
  for (size_t j = 0; j < features; ++j) {
    ColumnPlan& c = p->columns[j];
    size_t present = 0;
    for (size_t i = 0; i < n; ++i) {
      const float v = x[size_t{rows[i]} * features + j];
      if (!dataset::IsMissing(v)) values[present++] = v;
    }
    c.fill = 0;
    if (present == 0 || p->impute == Impute::kKeepMissing) continue;
    if (c.kind == ColumnKind::kCategorical || p->impute == Impute::kMostFrequent) {
      std::sort(values.begin(), values.begin() + present);
      c.fill = MostFrequent(values.data(), present);
    } else if (p->impute == Impute::kMean) {
      double sum = 0;
      for (size_t i = 0; i < present; ++i) sum += values[i];
      c.fill = static_cast<float>(sum / static_cast<double>(present));
    } else {  // median
      float* v = values.data();
      const size_t mid = present / 2;
      std::nth_element(v, v + mid, v + present);
      const double upper = v[mid];
      if (present % 2 == 1) {
        c.fill = static_cast<float>(upper);
      } else {
        const double lower = *std::max_element(v, v + mid);
        c.fill = static_cast<float>((lower + upper) / 2.0);
      }
    }
  }
  return OkStatus();
}

std::vector<std::string> InputNames(const Preprocessing& p, const dataset::DatasetSchema& schema) {
  std::vector<std::string> names;
  size_t j = 0;
  for (const dataset::Column& col : schema.columns) {
    if (col.kind == ColumnKind::kLabel || j >= p.columns.size()) continue;
    const ColumnPlan& c = p.columns[j++];
    if (c.kind == ColumnKind::kCategorical) {
      for (const std::string& cat : col.categories) names.push_back(col.name + "=" + cat);
      names.push_back(col.name + "=(unseen)");
    } else {
      names.push_back(col.name);
    }
    if (c.indicator) names.push_back(col.name + " (missing)");
  }
  return names;
}

Status ApplyPreprocessing(const Preprocessing& p, const float* x, size_t rows, float* out) {
  const size_t F = p.raw_features(), W = p.inputs();
  for (size_t r = 0; r < rows; ++r) {
    const float* in = x + r * F;
    float* o = out + r * W;
    for (size_t j = 0; j < F; ++j) {
      const ColumnPlan& c = p.columns[j];
      const bool missing = dataset::IsMissing(in[j]);
      float v = missing ? c.fill : in[j];
      if (missing && p.impute == Impute::kKeepMissing && c.kind != ColumnKind::kCategorical) v = in[j];
      if (c.kind == ColumnKind::kCategorical) {
        const size_t width = size_t{c.categories} + 1;
        std::fill(o, o + width, 0.0f);
        if (missing && p.impute == Impute::kKeepMissing) {
          std::fill(o, o + width, dataset::MissingValue());  // the trees route it as missing
        } else if (v >= 0.0f && v <= static_cast<float>(c.categories) && v == std::floor(v)) {
          o[static_cast<size_t>(v)] = 1.0f;  // index k: the unseen-category column
        } else {
          return InvalidInput("row " + std::to_string(r) + ", feature " + std::to_string(j) +
                              ": not a category index");
        }
        o += width;
      } else {
        *o++ = v;
      }
      if (c.indicator) *o++ = missing ? 1.0f : 0.0f;
    }
  }
  return OkStatus();
}

}  // namespace enclave::trainer
