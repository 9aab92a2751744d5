// What the trainer does to a raw record before a model sees it (docs/training.md,
// "Preprocessing"): a missing cell is imputed (median, mean or most frequent of the
// training rows) and flagged in an indicator column; a categorical column becomes one-hot
// columns, one per category of its dictionary plus one for a category the dictionary does
// not hold (seen only by `predict`). Fitted on the training split only and stored in the
// model file, so `predict` applies exactly what training applied. (Standardization follows,
// over the expanded columns, as before: trainer.h.)
//
// The layout of the expanded row depends on the schema alone, never on the data: for each
// raw feature column in order, its value columns (one, or categories + 1 one-hot), then its
// indicator when it has one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/dataset/schema.h"

namespace enclave::trainer {

// Wire values (u8, the model file's `impute`); append-only.
enum class Impute : uint8_t {
  kMedian = 0,
  kMean = 1,
  kMostFrequent = 2,
  kKeepMissing = 3,  // trees: missing stays missing (kMissingBits), the trees route it
};

// The job's [preprocess] table.
struct PreprocessSpec {
  Impute impute = Impute::kMedian;
  bool indicators = true;  // an indicator column for every column that allows missing values
};

struct ColumnPlan {
  dataset::ColumnKind kind = dataset::ColumnKind::kNumeric;  // numeric, yes/no or categorical
  bool missing_allowed = false;
  uint32_t categories = 0;  // categorical: the dictionary's size k (k + 1 one-hot columns)
  bool indicator = false;   // emits 1 where the cell was missing, else 0
  float fill = 0;           // what a missing cell becomes (categorical: a category index)
};

struct Preprocessing {
  Impute impute = Impute::kMedian;
  std::vector<ColumnPlan> columns;  // one per raw feature column, in feature order

  size_t raw_features() const { return columns.size(); }
  // Columns of the expanded row.
  size_t inputs() const;
  // Nothing to do: no categorical column, none that allows missing values (every v1
  // schema): the expanded row is the raw row.
  bool identity() const;
};

// The plan of a schema (fills still 0). A categorical column is imputed with its most
// frequent category whatever `impute` says (a median of categories means nothing).
Preprocessing PlanPreprocessing(const dataset::DatasetSchema& schema, const PreprocessSpec& spec);

// The fills from the rows `rows` (n row numbers) of x (raw records' features, `features`
// per row): median (of an even count: the mean of the middle two, in double, rounded to
// float32), mean (double sums in row order), or the most frequent value (the smallest on
// ties); a column with no value present in those rows is filled with 0 (its indicator is
// then 1 on every row).
Status FitPreprocessing(Preprocessing* p, const float* x, size_t features, const uint32_t* rows, size_t n);

// A name per column of the expanded row: the feature's name; "name=category" per one-hot
// column and "name=(unseen)" for the last; "name (missing)" for an indicator.
std::vector<std::string> InputNames(const Preprocessing& p, const dataset::DatasetSchema& schema);

// out (rows x p.inputs()) from x (rows x p.raw_features()). A categorical cell must be an
// index below k, or k itself (an unseen category, from ReadFeatureCsv), or missing where
// allowed; anything else is invalid input naming the row and column.
Status ApplyPreprocessing(const Preprocessing& p, const float* x, size_t rows, float* out);

}  // namespace enclave::trainer
