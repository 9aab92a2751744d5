#include "enclave/dataset/schema.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <set>

namespace enclave::dataset {
namespace {

// "ESCH": a v1 schema starts with column_count (u32 LE, 2 .. 2^20); these four bytes read
// as a u32 are 0x48435345, far above 2^20, so no v1 schema starts with them.
constexpr uint8_t kSchemaMagic[4] = {'E', 'S', 'C', 'H'};
constexpr uint16_t kSchemaV2 = 2;
constexpr uint8_t kFlagMissingAllowed = 0x01;

std::string Quoted(const std::string& s) { return "'" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "'"; }

Status ValidateNames(const std::vector<std::string>& names, const char* what, size_t min, size_t max) {
  if (names.size() < min || names.size() > max) {
    return InvalidInput(std::string(what) + " count " + std::to_string(names.size()) + " outside " +
                        std::to_string(min) + ".." + std::to_string(max));
  }
  std::set<std::string> seen;
  for (const std::string& n : names) {
    if (n.empty() || n.size() > kMaxNameBytes) return InvalidInput(std::string(what) + " name must be 1..1024 bytes");
    if (!seen.insert(n).second) return InvalidInput(std::string("duplicate ") + what + " " + Quoted(n));
  }
  return OkStatus();
}

Status ValidateColumn(const Column& c) {
  if (c.name.empty() || c.name.size() > kMaxNameBytes) return InvalidInput("column name must be 1..1024 bytes");
  if (static_cast<uint8_t>(c.kind) > 3) return InvalidInput("unknown column kind");
  if (c.kind == ColumnKind::kLabel && c.missing_allowed) {
    return InvalidInput("the label column cannot allow missing values");
  }
  if (c.kind != ColumnKind::kCategorical) {
    if (!c.categories.empty()) {
      return InvalidInput("column " + Quoted(c.name) + " has categories but is not categorical");
    }
    return OkStatus();
  }
  RETURN_IF_ERROR(ValidateNames(c.categories, "category", 1, kMaxCategories).Annotate("column " + Quoted(c.name)));
  for (size_t i = 1; i < c.categories.size(); ++i) {
    // std::string's < compares as unsigned bytes (char_traits<char>), i.e. byte order.
    if (!(c.categories[i - 1] < c.categories[i])) {
      return InvalidInput("column " + Quoted(c.name) + ": categories not in byte order");
    }
  }
  return OkStatus();
}

void PutName(ByteWriter& w, const std::string& s) {
  w.U16(static_cast<uint16_t>(s.size()));
  w.Bytes(s);
}

Status GetName(ByteReader& r, const char* field, std::string* out) {
  uint16_t len = 0;
  RETURN_IF_ERROR(r.U16(std::string(field) + "_length", &len));
  return r.String(field, len, out);
}

// `count` names (u16 length, bytes each); the count is bounded by the bytes left first.
Status GetNames(ByteReader& r, const char* field, uint32_t count, std::vector<std::string>* out) {
  if (count > r.remaining() / 2) return InvalidInput(std::string(field) + " count exceeds metadata size");
  out->resize(count);
  for (std::string& s : *out) RETURN_IF_ERROR(GetName(r, field, &s));
  return OkStatus();
}

std::vector<uint8_t> EncodeV1(const DatasetSchema& schema) {
  ByteWriter w;
  w.U32(static_cast<uint32_t>(schema.columns.size()));
  for (const Column& c : schema.columns) {
    w.U8(static_cast<uint8_t>(c.kind));
    PutName(w, c.name);
  }
  w.U32(static_cast<uint32_t>(schema.classes.size()));
  for (const std::string& c : schema.classes) PutName(w, c);
  return std::move(w.bytes());
}

std::vector<uint8_t> EncodeV2(const DatasetSchema& schema) {
  ByteWriter w;
  w.Bytes(ByteSpan(kSchemaMagic, 4));
  w.U16(kSchemaV2);
  w.U8(static_cast<uint8_t>(schema.task));
  w.U32(static_cast<uint32_t>(schema.columns.size()));
  for (const Column& c : schema.columns) {
    w.U8(static_cast<uint8_t>(c.kind));
    w.U8(c.missing_allowed ? kFlagMissingAllowed : 0);
    PutName(w, c.name);
    if (c.kind != ColumnKind::kCategorical) continue;
    w.U32(static_cast<uint32_t>(c.categories.size()));
    for (const std::string& k : c.categories) PutName(w, k);
  }
  if (schema.task == Task::kClassification) {
    w.U32(static_cast<uint32_t>(schema.classes.size()));
    for (const std::string& c : schema.classes) PutName(w, c);
  }
  return std::move(w.bytes());
}

Result<DatasetSchema> DecodeV1(ByteReader& r) {
  DatasetSchema s;
  uint32_t n = 0;
  RETURN_IF_ERROR(r.U32("schema.column_count", &n));
  if (n < 2 || n > kMaxColumns) return InvalidInput("schema column count " + std::to_string(n) + " out of range");
  // Each column needs at least 4 bytes: bound the allocation by the input size.
  if (n > r.remaining() / 4) return InvalidInput("schema column count exceeds metadata size");
  s.columns.resize(n);
  for (Column& c : s.columns) {
    uint8_t kind = 0;
    RETURN_IF_ERROR(r.U8("schema.column.kind", &kind));
    if (kind > 2) return InvalidInput("unknown column kind " + std::to_string(kind) + " in schema");
    c.kind = static_cast<ColumnKind>(kind);
    RETURN_IF_ERROR(GetName(r, "schema.column.name", &c.name));
  }
  uint32_t k = 0;
  RETURN_IF_ERROR(r.U32("schema.class_count", &k));
  if (k > kMaxClasses) return InvalidInput("schema class count out of range");
  RETURN_IF_ERROR(GetNames(r, "schema.class", k, &s.classes));
  return s;
}

Status DecodeV2Column(ByteReader& r, Column* c) {
  uint8_t kind = 0, flags = 0;
  RETURN_IF_ERROR(r.U8("schema.column.kind", &kind));
  if (kind > 3) return Unsupported("unknown column kind " + std::to_string(kind) + " in schema v2");
  c->kind = static_cast<ColumnKind>(kind);
  RETURN_IF_ERROR(r.U8("schema.column.flags", &flags));
  if (flags & ~kFlagMissingAllowed) {
    return Unsupported("unknown column flags " + std::to_string(flags) + " in schema v2");
  }
  c->missing_allowed = (flags & kFlagMissingAllowed) != 0;
  RETURN_IF_ERROR(GetName(r, "schema.column.name", &c->name));
  if (c->kind != ColumnKind::kCategorical) return OkStatus();
  uint32_t k = 0;
  RETURN_IF_ERROR(r.U32("schema.column.category_count", &k));
  if (k < 1 || k > kMaxCategories) return InvalidInput("schema category count " + std::to_string(k) + " out of range");
  return GetNames(r, "schema.column.category", k, &c->categories);
}

Result<DatasetSchema> DecodeV2(ByteReader& r) {
  ByteSpan magic;
  RETURN_IF_ERROR(r.Bytes("schema.magic", 4, &magic));
  uint16_t version = 0;
  RETURN_IF_ERROR(r.U16("schema.version", &version));
  if (version != kSchemaV2) {
    return Unsupported("schema version " + std::to_string(version) + " (this reader knows 1 and 2)");
  }
  DatasetSchema s;
  uint8_t task = 0;
  RETURN_IF_ERROR(r.U8("schema.task", &task));
  if (task > 1) return Unsupported("unknown task " + std::to_string(task) + " in schema v2");
  s.task = static_cast<Task>(task);
  uint32_t n = 0;
  RETURN_IF_ERROR(r.U32("schema.column_count", &n));
  if (n < 2 || n > kMaxColumns) return InvalidInput("schema column count " + std::to_string(n) + " out of range");
  // Each column needs at least 5 bytes: bound the allocation by the input size.
  if (n > r.remaining() / 5) return InvalidInput("schema column count exceeds metadata size");
  s.columns.resize(n);
  for (Column& c : s.columns) RETURN_IF_ERROR(DecodeV2Column(r, &c));
  if (s.task == Task::kClassification) {
    uint32_t k = 0;
    RETURN_IF_ERROR(r.U32("schema.class_count", &k));
    if (k > kMaxClasses) return InvalidInput("schema class count out of range");
    RETURN_IF_ERROR(GetNames(r, "schema.class", k, &s.classes));
  }
  return s;
}

bool StartsWithMagic(ByteSpan b) { return b.size() >= 4 && std::memcmp(b.data(), kSchemaMagic, 4) == 0; }

std::string Row(uint64_t row) { return "record " + std::to_string(row); }

bool ValidValue(const Column& col, float v) {
  if (col.missing_allowed && IsMissing(v)) return true;
  switch (col.kind) {
    case ColumnKind::kYesNo:
      return v == 0.0f || v == 1.0f;
    case ColumnKind::kCategorical:
      return v >= 0.0f && v < static_cast<float>(col.categories.size()) && v == std::floor(v);
    default:
      return std::isfinite(v);
  }
}

// What is wrong with a value ValidValue refused.
const char* WhyInvalid(const Column& col, float v) {
  if (IsMissing(v)) return "a missing value in a column that does not allow them";
  if (std::isnan(v)) return col.missing_allowed ? "a NaN other than the missing value 0x7fc00000" : "a NaN";
  if (col.kind == ColumnKind::kCategorical) return "not a category index";
  if (col.kind == ColumnKind::kYesNo) return "not 0 or 1";
  return "not finite";
}

}  // namespace

float MissingValue() { return std::bit_cast<float>(kMissingBits); }
bool IsMissing(float v) { return std::bit_cast<uint32_t>(v) == kMissingBits; }

size_t DatasetSchema::label_column() const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].kind == ColumnKind::kLabel) return i;
  }
  return columns.size();
}

bool DatasetSchema::NeedsV2() const {
  if (task != Task::kClassification) return true;
  for (const Column& c : columns) {
    if (c.missing_allowed || c.kind == ColumnKind::kCategorical) return true;
  }
  return false;
}

Status DatasetSchema::Validate() const {
  if (columns.size() < 2 || columns.size() > kMaxColumns) {
    return InvalidInput("schema needs 2.." + std::to_string(kMaxColumns) + " columns (features and a label)");
  }
  if (static_cast<uint8_t>(task) > 1) return InvalidInput("unknown task");
  size_t labels = 0;
  std::set<std::string> names;
  for (const Column& c : columns) {
    RETURN_IF_ERROR(ValidateColumn(c));
    if (!names.insert(c.name).second) return InvalidInput("duplicate column name " + Quoted(c.name));
    if (c.kind == ColumnKind::kLabel) ++labels;
  }
  if (labels != 1) return InvalidInput("schema must have exactly one label column");
  if (task == Task::kRegression) {
    if (!classes.empty()) return InvalidInput("a regression schema has no classes");
    return OkStatus();
  }
  if (classes.size() < 2 || classes.size() > kMaxClasses) {
    return InvalidInput("label needs 2.." + std::to_string(kMaxClasses) + " classes, has " +
                        std::to_string(classes.size()));
  }
  return ValidateNames(classes, "class", 2, kMaxClasses);
}

std::vector<uint8_t> EncodeSchema(const DatasetSchema& schema) {
  return schema.NeedsV2() ? EncodeV2(schema) : EncodeV1(schema);
}

Result<DatasetSchema> DecodeSchema(ByteSpan metadata) {
  ByteReader r(metadata);
  const bool v2 = StartsWithMagic(metadata);
  ASSIGN_OR_RETURN(DatasetSchema s, v2 ? DecodeV2(r) : DecodeV1(r));
  if (r.remaining() != 0) return InvalidInput("schema has " + std::to_string(r.remaining()) + " trailing bytes");
  RETURN_IF_ERROR(s.Validate().Annotate("schema"));
  if (v2 && !s.NeedsV2()) {
    return InvalidInput("schema: v2 schema that uses no v2 feature (its one encoding is v1)");
  }
  return s;
}

Status CheckRecord(const DatasetSchema& schema, const float* record, uint64_t row) {
  size_t f = 0;
  for (const Column& col : schema.columns) {
    if (col.kind == ColumnKind::kLabel) continue;
    const float v = record[f++];
    if (ValidValue(col, v)) continue;
    return InvalidInput(Row(row) + ": invalid value in column " + Quoted(col.name) + " (" + WhyInvalid(col, v) + ")");
  }
  const float label = record[schema.feature_count()];
  if (schema.task == Task::kRegression) {
    if (!std::isfinite(label)) return InvalidInput(Row(row) + ": regression label is not finite");
    return OkStatus();
  }
  if (!(label >= 0.0f && label < static_cast<float>(schema.classes.size()) && label == std::floor(label))) {
    return InvalidInput(Row(row) + ": label is not a class index");
  }
  return OkStatus();
}

}  // namespace enclave::dataset
