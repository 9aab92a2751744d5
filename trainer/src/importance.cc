#include "enclave/trainer/importance.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "enclave/trainer/metrics.h"
#include "enclave/trainer/predict.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/rng.h"

namespace enclave::trainer {
namespace {

double Score(const LockedArray<float>& pred, const LockedArray<float>& labels, uint32_t classes) {
  if (classes == 0) return RegressionErrorsOf(pred.data(), labels.data(), labels.size()).r2;
  return Accuracy(pred.data(), labels.data(), labels.size(), classes);
}

}  // namespace

Result<std::vector<ColumnImportance>> PermutationImportance(Backend& backend, const TrainResult& r,
                                                            const LoadedData& data, const Split& split, uint64_t seed,
                                                            uint32_t repeats) {
  const size_t n = split.val.size(), F = data.features;
  if (n == 0) return InvalidInput("permutation importance needs validation rows");
  if (repeats == 0) return InvalidInput("permutation importance needs at least one repeat");
  if (data.table != nullptr || std::string_view(backend.kind()) != "cpu") {
    return Unsupported("permutation importance runs on loaded data on the CPU backend");
  }
  // The validation rows' raw features (CPU backend: host memory) and labels.
  ASSIGN_OR_RETURN(LockedArray<float> x, LockedArray<float>::Create(n * F));
  ASSIGN_OR_RETURN(LockedArray<float> shuffled, LockedArray<float>::Create(n * F));
  ASSIGN_OR_RETURN(LockedArray<float> labels, LockedArray<float>::Create(n));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(x.data() + i * F, data.x.get().data + size_t{split.val[i]} * F, F * sizeof(float));
    labels[i] = data.labels[split.val[i]];
  }
  ASSIGN_OR_RETURN(LockedArray<float> base_pred, PredictRawRows(backend, r, x.data(), n));
  const double base = Score(base_pred, labels, r.shape.classes);
  ASSIGN_OR_RETURN(LockedArray<uint32_t> order, LockedArray<uint32_t>::Create(n));
  Rng rng(seed, kStreamPermutation);
  std::vector<ColumnImportance> out;
  size_t j = 0;
  for (const dataset::Column& col : data.schema.columns) {
    if (col.kind == dataset::ColumnKind::kLabel) continue;
    std::vector<double> drops;
    for (uint32_t k = 0; k < repeats; ++k) {
      for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
      Shuffle(order.data(), n, rng);
      std::memcpy(shuffled.data(), x.data(), n * F * sizeof(float));
      for (size_t i = 0; i < n; ++i) shuffled[i * F + j] = x[size_t{order[i]} * F + j];
      ASSIGN_OR_RETURN(LockedArray<float> pred, PredictRawRows(backend, r, shuffled.data(), n));
      drops.push_back(base - Score(pred, labels, r.shape.classes));
    }
    double mean = 0, var = 0;
    for (double d : drops) mean += d / repeats;
    for (double d : drops) var += (d - mean) * (d - mean) / repeats;
    out.push_back({col.name, mean, std::sqrt(var)});
    ++j;
  }
  return out;
}

Result<nlohmann::json> LinearCoefficients(Backend& backend, const TrainResult& r, const dataset::DatasetSchema& schema) {
  if (r.family != ModelFamily::kMlp || !r.shape.hidden.empty()) {
    return InvalidInput("coefficients exist for a network without hidden layers only");
  }
  const std::vector<std::string> names = InputNames(r.preprocessing, schema);
  const size_t F = r.shape.inputs, O = r.shape.outputs(), P = r.shape.parameter_count();
  // The numbers to the host (locked): resident ones are downloaded.
  OwnedBuffer scratch;
  ASSIGN_OR_RETURN(const ResidentModel m, NetworkOf(backend, r, &scratch));
  ASSIGN_OR_RETURN(LockedArray<float> params, LockedArray<float>::Create(P));
  ASSIGN_OR_RETURN(LockedArray<float> mean, LockedArray<float>::Create(F));
  ASSIGN_OR_RETURN(LockedArray<float> inv_std, LockedArray<float>::Create(F));
  RETURN_IF_ERROR(backend.Download(params.data(), m.params, P));
  RETURN_IF_ERROR(backend.Download(mean.data(), m.mean, F));
  RETURN_IF_ERROR(backend.Download(inv_std.data(), m.inv_std, F));
  if (names.size() != F) return Internal("LinearCoefficients: input names do not match the inputs");
  const bool classification = !r.shape.regression();
  const double scale = classification ? 1.0 : r.label_scale;
  // Outputs: one logit (binary: of the schema's class 1), one per class, or the target.
  std::vector<std::string> outputs;
  if (!classification) {
    outputs.push_back(schema.columns[schema.label_column()].name);
  } else if (O == 1) {
    outputs.push_back(schema.classes[1]);
  } else {
    outputs = schema.classes;
  }
  nlohmann::json per_output = nlohmann::json::array();
  for (size_t o = 0; o < O; ++o) {
    nlohmann::json inputs = nlohmann::json::array();
    for (size_t i = 0; i < F; ++i) {
      const double w = static_cast<double>(params[i * O + o]) * scale;  // W is F x O, row-major
      const double per_unit = w * inv_std[i];
      nlohmann::json e = {{"input", names[i]}, {"per_sd", w}, {"per_unit", per_unit}};
      if (classification) {
        e["odds_ratio_per_sd"] = std::exp(w);
        e["odds_ratio_per_unit"] = std::exp(per_unit);
      }
      inputs.push_back(e);
    }
    // The intercept on the raw inputs: b - sum_i w_i * mean_i * inv_std_i (+ the target's mean).
    double intercept = static_cast<double>(params[F * O + o]) * scale;
    double raw = intercept;
    for (size_t i = 0; i < F; ++i) raw -= static_cast<double>(params[i * O + o]) * scale * inv_std[i] * mean[i];
    if (!classification) {
      intercept += r.label_mean;
      raw += r.label_mean;
    }
    per_output.push_back({{"output", outputs[o]},
                          {"intercept_standardized", intercept},
                          {"intercept_raw", raw},
                          {"coefficients", std::move(inputs)}});
  }
  return nlohmann::json{{"kind", classification ? (O == 1 ? "logistic" : "multinomial logistic") : "linear"},
                        {"note", classification ? "log-odds of the output class; odds ratios per standard deviation "
                                                  "and per unit of the input (training rows)"
                                                : "in the target's units, per standard deviation and per unit of the input"},
                        {"outputs", std::move(per_output)}};
}

}  // namespace enclave::trainer
