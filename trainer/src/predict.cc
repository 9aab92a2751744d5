#include "enclave/trainer/predict.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "cells.h"
#include "enclave/dataset/csv.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

namespace {

// The missing-cell tokens `enclave-data seal` knows by default (trimmed, ASCII
// case-insensitive): empty, NA, NaN, null.
bool IsMissingCell(const std::string& trimmed) {
  std::string l;
  for (char c : trimmed) l += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return l.empty() || l == "na" || l == "nan" || l == "null";
}

}  // namespace

Result<FeatureTable> ReadFeatureCsv(const std::string& path, const dataset::DatasetSchema& schema,
                                    const Preprocessing* prep) {
  // Imputed (a network whose preprocessing is not the identity) or routed by the trees.
  const bool accept_missing = prep != nullptr && (!prep->identity() || prep->impute == Impute::kKeepMissing);
  ASSIGN_OR_RETURN(dataset::CsvReader csv, dataset::CsvReader::Open(path));
  std::vector<std::string> row;
  ASSIGN_OR_RETURN(bool have_header, csv.Next(&row));
  if (!have_header) return InvalidInput(path + ": empty file (a header row is needed)");
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < row.size(); ++i) {
    const std::string name = Trim(row[i]);
    if (!at.emplace(name, i).second) return InvalidInput(path + ":1: column '" + name + "' appears twice");
  }
  // Where each feature of the schema is, in schema order; and the label, if present.
  struct Source {
    size_t index;
    const dataset::Column* column;
  };
  std::vector<Source> features;
  long label_at = -1;
  for (const dataset::Column& c : schema.columns) {
    auto it = at.find(c.name);
    if (c.kind == dataset::ColumnKind::kLabel) {
      if (it != at.end()) label_at = static_cast<long>(it->second);
      continue;
    }
    if (it == at.end()) return InvalidInput(path + ":1: missing feature column '" + c.name + "' (the model needs it)");
    features.push_back({it->second, &c});
  }
  std::map<std::string, uint32_t> classes;
  for (uint32_t i = 0; i < schema.classes.size(); ++i) classes[schema.classes[i]] = i;

  // Rows are collected in locked chunks, then joined: the row count is not known up front.
  const size_t F = features.size();
  constexpr size_t kChunkRows = 4096;
  std::vector<LockedArray<float>> xs, ys;
  size_t rows = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    const std::string where = path + ":" + std::to_string(csv.record_line());
    if (row.size() != at.size()) {
      return InvalidInput(where + ": " + std::to_string(row.size()) + " fields, the header has " +
                          std::to_string(at.size()));
    }
    if (rows % kChunkRows == 0) {
      ASSIGN_OR_RETURN(LockedArray<float> x, LockedArray<float>::Create(kChunkRows * F));
      ASSIGN_OR_RETURN(LockedArray<float> y, LockedArray<float>::Create(kChunkRows));
      xs.push_back(std::move(x));
      ys.push_back(std::move(y));
    }
    float* out = xs.back().data() + (rows % kChunkRows) * F;
    for (size_t f = 0; f < F; ++f) {
      const std::string cell = Trim(row[features[f].index]);
      const dataset::Column& col = *features[f].column;
      if (IsMissingCell(cell)) {
        if (!accept_missing) {
          return InvalidInput(where + ": column '" + col.name +
                              "': missing value (this model was trained on data without missing values and cannot impute)");
        }
        out[f] = dataset::MissingValue();
      } else if (col.kind == dataset::ColumnKind::kCategorical) {
        // A category the dictionary lacks gets index k: the model's unseen-category input.
        auto it = std::lower_bound(col.categories.begin(), col.categories.end(), cell);
        out[f] = static_cast<float>(it != col.categories.end() && *it == cell ? it - col.categories.begin()
                                                                                : col.categories.size());
      } else if (col.kind == dataset::ColumnKind::kYesNo) {
        const int v = YesNo(cell);
        if (v < 0) return InvalidInput(where + ": column '" + col.name + "': expected yes or no");
        out[f] = static_cast<float>(v);
      } else if (!ParseFloat(cell, &out[f])) {
        return InvalidInput(where + ": column '" + col.name + "': bad number");
      }
    }
    if (label_at >= 0 && schema.task == dataset::Task::kRegression) {
      if (!ParseFloat(Trim(row[static_cast<size_t>(label_at)]), &ys.back()[rows % kChunkRows])) {
        return InvalidInput(where + ": label value is not a number (a regression target)");
      }
    } else if (label_at >= 0) {
      auto it = classes.find(Trim(row[static_cast<size_t>(label_at)]));
      if (it == classes.end()) return InvalidInput(where + ": label value is not one of the model's classes");
      ys.back()[rows % kChunkRows] = static_cast<float>(it->second);
    }
    ++rows;
    if (rows >= (size_t{1} << 31)) return InvalidInput(path + ": too many rows (2^31 at most)");
  }
  if (rows == 0) return InvalidInput(path + ": no data rows");
  FeatureTable t;
  t.rows = rows;
  t.has_labels = label_at >= 0;
  ASSIGN_OR_RETURN(t.x, LockedArray<float>::Create(rows * F));
  ASSIGN_OR_RETURN(t.labels, LockedArray<float>::Create(rows));
  for (size_t c = 0; c < xs.size(); ++c) {
    const size_t n = std::min(kChunkRows, rows - c * kChunkRows);
    std::copy(xs[c].data(), xs[c].data() + n * F, t.x.data() + c * kChunkRows * F);
    std::copy(ys[c].data(), ys[c].data() + n, t.labels.data() + c * kChunkRows);
  }
  return t;
}

Result<LockedArray<float>> PredictResident(Backend& backend, const ResidentModel& model, Buffer x, size_t rows) {
  const ModelShape& shape = model.shape;
  const size_t F = shape.inputs, width = shape.outputs();
  const Preprocessing* prep = model.preprocessing != nullptr && !model.preprocessing->identity() ? model.preprocessing : nullptr;
  const size_t raw = prep != nullptr ? prep->raw_features() : F;
  if (rows == 0) return InvalidInput("no rows to predict");
  if (x.size < rows * raw) return Internal("PredictResident: fewer rows in x than asked for");
  if (prep != nullptr && (prep->inputs() != F || std::string_view(backend.kind()) != "cpu")) {
    return Unsupported("PredictResident: preprocessing runs on the CPU backend only");
  }
  ASSIGN_OR_RETURN(Mlp mlp, Mlp::Create(backend, shape, kEvalBatch, 0));
  RETURN_IF_ERROR(mlp.CopyParams(model.params));
  ASSIGN_OR_RETURN(OwnedBuffer batch, AllocOwned(backend, kEvalBatch * F));
  ASSIGN_OR_RETURN(OwnedBuffer probs, AllocOwned(backend, rows * width));
  for (size_t off = 0; off < rows; off += kEvalBatch) {
    const size_t n = std::min(kEvalBatch, rows - off);
    // Standardized per element: the same bits as standardizing every row first.
    if (prep != nullptr) {  // CPU backend: its buffers are host memory
      RETURN_IF_ERROR(ApplyPreprocessing(*prep, x.data + off * raw, n, batch.get().data));
    } else {
      RETURN_IF_ERROR(backend.CopyToBytes(batch, 0, x.Slice(off * F, n * F), n * F));
    }
    RETURN_IF_ERROR(backend.Standardize(batch, n, F, model.mean, model.inv_std));
    ASSIGN_OR_RETURN(Buffer logits, mlp.Forward(batch, n));
    RETURN_IF_ERROR(backend.Probabilities(shape.loss(), logits, n, shape.classes, probs.get().Slice(off * width, n * width)));
  }
  ASSIGN_OR_RETURN(LockedArray<float> host, LockedArray<float>::Create(rows * width));
  RETURN_IF_ERROR(backend.Download(host.data(), probs, rows * width));
  if (shape.regression()) {
    for (float& v : host) v = v * model.label_scale + model.label_mean;  // the target's units
  }
  return host;
}

Result<LockedArray<float>> PredictProbabilities(Backend& backend, const ModelFile& model, const float* x,
                                                size_t rows) {
  if (model.family == ModelFamily::kXgboost) {  // on the CPU, as XGBoost is built here
    if (rows == 0) return InvalidInput("no rows to predict");
    const Preprocessing& p = model.preprocessing;
    ASSIGN_OR_RETURN(LockedArray<float> inputs, LockedArray<float>::Create(rows * p.inputs()));
    RETURN_IF_ERROR(ApplyPreprocessing(p, x, rows, inputs.data()));
    return PredictTrees(model.trees, inputs.data(), rows);
  }
  const size_t F = model.shape.inputs, P = model.shape.parameter_count();
  if (rows == 0) return InvalidInput("no rows to predict");
  if (model.mean.size() != F || model.inv_std.size() != F || model.params.size() != P) {
    return Internal("PredictProbabilities: the model's arrays do not match its shape");
  }
  ASSIGN_OR_RETURN(OwnedBuffer numbers, AllocOwned(backend, 2 * F + P));
  RETURN_IF_ERROR(backend.Upload(numbers.get().Slice(0, F), model.mean.data(), F));
  RETURN_IF_ERROR(backend.Upload(numbers.get().Slice(F, F), model.inv_std.data(), F));
  RETURN_IF_ERROR(backend.Upload(numbers.get().Slice(2 * F, P), model.params.data(), P));
  const size_t raw = model.preprocessing.raw_features();
  ASSIGN_OR_RETURN(OwnedBuffer xd, AllocOwned(backend, rows * raw));
  RETURN_IF_ERROR(backend.Upload(xd, x, rows * raw));
  const ResidentModel resident{model.shape, numbers.get().Slice(0, F), numbers.get().Slice(F, F),
                               numbers.get().Slice(2 * F, P), &model.preprocessing, model.label_mean,
                               model.label_scale};
  return PredictResident(backend, resident, xd, rows);
}

Result<LockedArray<float>> PredictLoaded(Backend& backend, const TrainResult& r, const LoadedData& data) {
  if (data.table != nullptr) return Internal("PredictLoaded: the data is streamed");
  if (r.family != ModelFamily::kXgboost) return PredictResident(backend, r.Resident(), data.x, data.rows);
  if (std::string_view(backend.kind()) != "cpu") return Unsupported("trees predict on the CPU backend");
  return PredictRawRows(backend, r, data.x.get().data, data.rows);  // CPU: host memory
}

Result<ResidentModel> NetworkOf(Backend& backend, const TrainResult& r, OwnedBuffer* scratch) {
  if (!r.resident.get().empty()) return r.Resident();
  const size_t F = r.shape.inputs, P = r.shape.parameter_count();
  if (r.mean.size() != F || r.inv_std.size() != F || r.params.size() != P) {
    return Internal("NetworkOf: the result holds neither resident nor host numbers");
  }
  ASSIGN_OR_RETURN(*scratch, AllocOwned(backend, 2 * F + P));
  RETURN_IF_ERROR(backend.Upload(scratch->get().Slice(0, F), r.mean.data(), F));
  RETURN_IF_ERROR(backend.Upload(scratch->get().Slice(F, F), r.inv_std.data(), F));
  RETURN_IF_ERROR(backend.Upload(scratch->get().Slice(2 * F, P), r.params.data(), P));
  return ResidentModel{r.shape, scratch->get().Slice(0, F), scratch->get().Slice(F, F), scratch->get().Slice(2 * F, P),
                       &r.preprocessing, r.label_mean, r.label_scale, r.threshold};
}

Result<LockedArray<float>> PredictRawRows(Backend& backend, const TrainResult& r, const float* x, size_t rows) {
  if (std::string_view(backend.kind()) != "cpu") return Unsupported("PredictRawRows: the CPU backend only");
  const Preprocessing& p = r.preprocessing;
  if (r.family != ModelFamily::kXgboost) {
    OwnedBuffer scratch;
    ASSIGN_OR_RETURN(const ResidentModel model, NetworkOf(backend, r, &scratch));
    // The CPU backend's buffers are host memory: the rows are read where they are.
    return PredictResident(backend, model, Buffer{const_cast<float*>(x), rows * p.raw_features()}, rows);
  }
  ASSIGN_OR_RETURN(LockedArray<float> inputs, LockedArray<float>::Create(rows * p.inputs()));
  RETURN_IF_ERROR(ApplyPreprocessing(p, x, rows, inputs.data()));
  return PredictTrees(r.trees, inputs.data(), rows);
}

uint32_t PredictedClass(const float* probs, size_t r, uint32_t classes, float threshold) {
  if (classes == 2) return probs[r] >= threshold ? 1u : 0u;
  const float* p = probs + r * classes;
  uint32_t best = 0;
  for (uint32_t c = 1; c < classes; ++c) {
    if (p[c] > p[best]) best = c;
  }
  return best;
}

}  // namespace enclave::trainer
