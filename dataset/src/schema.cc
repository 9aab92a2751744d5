#include "enclave/dataset/schema.h"

#include <set>

namespace enclave::dataset {

size_t DatasetSchema::label_column() const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].kind == ColumnKind::kLabel) return i;
  }
  return columns.size();
}

Status DatasetSchema::Validate() const {
  if (columns.size() < 2 || columns.size() > kMaxColumns) {
    return InvalidInput("schema needs 2.." + std::to_string(kMaxColumns) + " columns (features and a label)");
  }
  size_t labels = 0;
  std::set<std::string> names;
  for (const Column& c : columns) {
    if (c.name.empty() || c.name.size() > kMaxNameBytes) return InvalidInput("column name must be 1..1024 bytes");
    if (!names.insert(c.name).second) return InvalidInput("duplicate column name '" + c.name + "'");
    if (c.kind == ColumnKind::kLabel) ++labels;
    if (static_cast<uint8_t>(c.kind) > 2) return InvalidInput("unknown column kind");
  }
  if (labels != 1) return InvalidInput("schema must have exactly one label column");
  if (classes.size() < 2 || classes.size() > kMaxClasses) {
    return InvalidInput("label needs 2.." + std::to_string(kMaxClasses) + " classes, has " +
                        std::to_string(classes.size()));
  }
  std::set<std::string> class_names;
  for (const std::string& c : classes) {
    if (c.empty() || c.size() > kMaxNameBytes) return InvalidInput("class name must be 1..1024 bytes");
    if (!class_names.insert(c).second) return InvalidInput("duplicate class '" + c + "'");
  }
  return OkStatus();
}

std::vector<uint8_t> EncodeSchema(const DatasetSchema& schema) {
  ByteWriter w;
  w.U32(static_cast<uint32_t>(schema.columns.size()));
  for (const Column& c : schema.columns) {
    w.U8(static_cast<uint8_t>(c.kind));
    w.U16(static_cast<uint16_t>(c.name.size()));
    w.Bytes(c.name);
  }
  w.U32(static_cast<uint32_t>(schema.classes.size()));
  for (const std::string& c : schema.classes) {
    w.U16(static_cast<uint16_t>(c.size()));
    w.Bytes(c);
  }
  return std::move(w.bytes());
}

Result<DatasetSchema> DecodeSchema(ByteSpan metadata) {
  ByteReader r(metadata);
  DatasetSchema s;
  uint32_t n = 0;
  RETURN_IF_ERROR(r.U32("schema.column_count", &n));
  if (n < 2 || n > kMaxColumns) return InvalidInput("schema column count " + std::to_string(n) + " out of range");
  // Each column needs at least 4 bytes: bound the allocation by the input size.
  if (n > r.remaining() / 4) return InvalidInput("schema column count exceeds metadata size");
  s.columns.resize(n);
  for (Column& c : s.columns) {
    uint8_t kind = 0;
    uint16_t len = 0;
    RETURN_IF_ERROR(r.U8("schema.column.kind", &kind));
    if (kind > 2) return InvalidInput("unknown column kind " + std::to_string(kind) + " in schema");
    c.kind = static_cast<ColumnKind>(kind);
    RETURN_IF_ERROR(r.U16("schema.column.name_length", &len));
    RETURN_IF_ERROR(r.String("schema.column.name", len, &c.name));
  }
  uint32_t k = 0;
  RETURN_IF_ERROR(r.U32("schema.class_count", &k));
  if (k > kMaxClasses || k > r.remaining() / 2) return InvalidInput("schema class count out of range");
  s.classes.resize(k);
  for (std::string& c : s.classes) {
    uint16_t len = 0;
    RETURN_IF_ERROR(r.U16("schema.class.length", &len));
    RETURN_IF_ERROR(r.String("schema.class.name", len, &c));
  }
  if (r.remaining() != 0) return InvalidInput("schema has " + std::to_string(r.remaining()) + " trailing bytes");
  RETURN_IF_ERROR(s.Validate().Annotate("schema"));
  return s;
}

}  // namespace enclave::dataset
