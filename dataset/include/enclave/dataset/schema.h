// The typed payload of a sealed tabular dataset (docs/formats/sealed-dataset.md):
// the schema travels in the sealed header's metadata; each record is the feature values
// as float32 in column order (label column skipped), then the class index as float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::dataset {

// Wire values (u8); append-only.
enum class ColumnKind : uint8_t {
  kNumeric = 0,  // decimal number -> float32
  kYesNo = 1,    // "no" -> 0, "yes" -> 1 (case-insensitive)
  kLabel = 2,    // class name -> class index
};

struct Column {
  std::string name;
  ColumnKind kind = ColumnKind::kNumeric;
};

inline constexpr uint32_t kMaxColumns = 1u << 20;
inline constexpr uint32_t kMaxClasses = 1u << 16;
inline constexpr size_t kMaxNameBytes = 1024;

struct DatasetSchema {
  std::vector<Column> columns;       // in CSV order, exactly one kLabel
  std::vector<std::string> classes;  // class index -> original label value

  uint32_t feature_count() const { return static_cast<uint32_t>(columns.size() - 1); }
  uint32_t record_bytes() const { return static_cast<uint32_t>(columns.size() * 4); }
  size_t label_column() const;
  Status Validate() const;
};

std::vector<uint8_t> EncodeSchema(const DatasetSchema& schema);
Result<DatasetSchema> DecodeSchema(ByteSpan metadata);

}  // namespace enclave::dataset
