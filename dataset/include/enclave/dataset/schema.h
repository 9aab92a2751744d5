// The typed payload of a sealed tabular dataset (docs/formats/sealed-dataset.md):
// the schema travels in the sealed header's metadata; each record is the feature values
// as float32 in column order (label column skipped), then the label as float32 (the class
// index, or the value itself for regression).
//
// Two wire versions: v1 (numeric, yes/no, classification, nothing missing: every file
// sealed before schema v2) and v2 (adds missing values, categorical columns, regression).
// EncodeSchema writes v1 whenever the schema needs nothing of v2, so such files keep
// their bytes and digests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::dataset {

// Wire values (u8); append-only.
enum class ColumnKind : uint8_t {
  kNumeric = 0,      // decimal number -> float32
  kYesNo = 1,        // "no" -> 0, "yes" -> 1 (case-insensitive)
  kLabel = 2,        // class name -> class index, or a number (regression)
  kCategorical = 3,  // category name -> its index in the column's dictionary (v2)
};

// Wire values (u8) of the v2 schema; append-only.
enum class Task : uint8_t {
  kClassification = 0,
  kRegression = 1,
};

struct Column {
  std::string name;
  ColumnKind kind = ColumnKind::kNumeric;
  bool missing_allowed = false;         // v2: records may hold kMissingBits here
  std::vector<std::string> categories;  // kCategorical: index -> name, sorted, unique
};

inline constexpr uint32_t kMaxColumns = 1u << 20;
inline constexpr uint32_t kMaxClasses = 1u << 16;
inline constexpr uint32_t kMaxCategories = 1u << 16;
inline constexpr size_t kMaxNameBytes = 1024;

// A missing value in a record: the float32 quiet NaN 0x7fc00000, and no other NaN.
inline constexpr uint32_t kMissingBits = 0x7fc00000u;
float MissingValue();
bool IsMissing(float v);  // exactly kMissingBits

struct DatasetSchema {
  Task task = Task::kClassification;
  std::vector<Column> columns;       // in CSV order, exactly one kLabel
  std::vector<std::string> classes;  // classification: class index -> label value; regression: empty

  uint32_t feature_count() const { return static_cast<uint32_t>(columns.size() - 1); }
  uint32_t record_bytes() const { return static_cast<uint32_t>(columns.size() * 4); }
  size_t label_column() const;
  // Whether the schema needs v2: regression, a categorical column, or missing values.
  bool NeedsV2() const;
  Status Validate() const;
};

// v1 when !schema.NeedsV2(), else v2.
std::vector<uint8_t> EncodeSchema(const DatasetSchema& schema);
// Either version. Invalid input for a malformed schema, also for a v2 schema that needs
// nothing of v2 (the one encoding of such a schema is v1); unsupported for a schema
// version after 2.
Result<DatasetSchema> DecodeSchema(ByteSpan metadata);

// One record (column_count floats, label last) against the schema: numeric finite,
// yes/no 0 or 1, categorical an integer index into its dictionary, missing only where the
// column allows it and only as kMissingBits; the label a class index (classification) or
// finite (regression). Invalid input naming the record and the column otherwise.
Status CheckRecord(const DatasetSchema& schema, const float* record, uint64_t row);

}  // namespace enclave::dataset
