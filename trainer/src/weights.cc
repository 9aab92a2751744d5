#include "enclave/trainer/weights.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace enclave::trainer {

Status ExtractSampleWeights(const std::string& column, LoadedData* data) {
  dataset::DatasetSchema& schema = data->schema;
  // The column's position among the features (the record's order without the label).
  size_t feature = 0, at = schema.columns.size();
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const dataset::Column& c = schema.columns[i];
    if (c.name == column) {
      at = i;
      break;
    }
    if (c.kind != dataset::ColumnKind::kLabel) ++feature;
  }
  const std::string where = "training.sample_weight_column '" + column + "'";
  if (at == schema.columns.size()) return InvalidInput(where + ": the data has no such column");
  const dataset::Column& c = schema.columns[at];
  if (c.kind == dataset::ColumnKind::kLabel) return InvalidInput(where + " is the label column");
  if (c.kind != dataset::ColumnKind::kNumeric) return InvalidInput(where + " must be a numeric column");
  if (c.missing_allowed) return InvalidInput(where + " allows missing values (a weight must be given for every row)");
  if (data->features < 2) return InvalidInput(where + " is the only feature column");
  if (data->table != nullptr) return Unsupported(where + ": weights train on loaded data, not [streaming]");

  const size_t F = data->features, n = data->rows;
  ASSIGN_OR_RETURN(data->sample_weights, LockedArray<float>::Create(n));
  const float* x = data->x.get().data;
  for (size_t r = 0; r < n; ++r) {
    const float w = x[r * F + feature];
    if (!std::isfinite(w) || w < 0) {
      std::ostringstream v;
      v << w;
      return InvalidInput(where + ": data row " + std::to_string(r + 1) + " has weight " + v.str() +
                          " (weights must be finite and >= 0)");
    }
    data->sample_weights[r] = w;
  }
  // The features without the column, compacted in place (a row never moves forward; the
  // freed tail is zeroed, and the buffer is wiped when freed).
  float* xm = data->x.get().data;
  for (size_t r = 0; r < n; ++r) {
    float* dst = xm + r * (F - 1);
    const float* src = xm + r * F;
    std::memmove(dst, src, feature * sizeof(float));
    std::memmove(dst + feature, src + feature + 1, (F - 1 - feature) * sizeof(float));
  }
  std::memset(xm + n * (F - 1), 0, n * sizeof(float));
  data->features = F - 1;
  schema.columns.erase(schema.columns.begin() + static_cast<long>(at));
  return OkStatus();
}

Result<std::vector<double>> ClassWeightsFor(const WeightSpec& spec, const LoadedData& data,
                                            const LockedArray<uint32_t>& rows) {
  if (spec.rule == ClassWeightRule::kNone) return std::vector<double>{};
  const uint32_t C = data.classes;
  if (C == 0) return InvalidInput("training.class_weight: a regression label has no classes (use sample_weight_column)");
  std::vector<double> w(C, 0.0);
  if (spec.rule == ClassWeightRule::kBalanced) {
    std::vector<uint64_t> count(C, 0);
    for (uint32_t r : rows) ++count[static_cast<uint32_t>(data.labels[r])];
    for (uint32_t c = 0; c < C; ++c) {
      if (count[c] > 0) w[c] = static_cast<double>(rows.size()) / (static_cast<double>(C) * static_cast<double>(count[c]));
    }
    return w;
  }
  std::vector<bool> named(C, false);
  for (const auto& [name, value] : spec.given) {
    size_t c = 0;
    while (c < C && data.schema.classes[c] != name) ++c;
    if (c == C) return InvalidInput("training.class_weight names class '" + name + "', which the data does not have");
    named[c] = true;
    w[c] = value;
  }
  for (uint32_t c = 0; c < C; ++c) {
    if (!named[c]) return InvalidInput("training.class_weight gives no weight for class '" + data.schema.classes[c] + "'");
  }
  return w;
}

Result<LockedArray<float>> RowWeights(const std::vector<double>& class_weights, const LoadedData& data,
                                      const LockedArray<uint32_t>& rows) {
  ASSIGN_OR_RETURN(LockedArray<float> w, LockedArray<float>::Create(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    double v = 1;
    if (!class_weights.empty()) v *= class_weights[static_cast<uint32_t>(data.labels[rows[i]])];
    if (!data.sample_weights.empty()) v *= data.sample_weights[rows[i]];
    w[i] = static_cast<float>(v);
  }
  return w;
}

}  // namespace enclave::trainer
