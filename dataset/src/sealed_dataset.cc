#include "enclave/dataset/sealed_dataset.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <unistd.h>

#include "enclave/common/files.h"
#include "enclave/dataset/csv.h"

namespace enclave::dataset {
namespace {

static_assert(std::endian::native == std::endian::little, "records are little-endian float32");

constexpr uint32_t kTargetChunkBytes = 64 * 1024;
constexpr size_t kMaxAutoClasses = 1000;

std::string Where(const CsvReader& csv) { return csv.path() + ":" + std::to_string(csv.record_line()); }

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// -1 when the cell is not yes/no.
int YesNo(const std::string& cell) {
  std::string v = Lower(Trim(cell));
  if (v == "yes") return 1;
  if (v == "no") return 0;
  return -1;
}

bool ParseFloat(const std::string& cell, float* out) { return ParseCsvNumber(cell, out); }

std::string CellError(const CsvReader& csv, const std::string& column, const std::string& what,
                      const std::string& cell) {
  std::string shown = cell.size() > 40 ? cell.substr(0, 40) + "..." : cell;
  return Where(csv) + ": column '" + column + "': " + what + " '" + shown + "'";
}

// A cell that is not a number but reads as one once its leading signs are dropped
// (1e39, 1e-50, +-1, inf, nan(1)): an error in a column not named --categorical, rather
// than a reason to make the column categorical.
bool LooksNumeric(std::string_view t) {
  const size_t b = t.find_first_not_of("+-");
  if (b == std::string_view::npos) return false;
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data() + b, t.data() + t.size(), v);
  return ptr == t.data() + t.size() && (ec == std::errc() || ec == std::errc::result_out_of_range);
}

// Which trimmed cells are missing: the default tokens (unless turned off) and the owner's.
class CellRules {
 public:
  explicit CellRules(const CellSpec& spec) : default_missing_(spec.default_missing), tokens_(spec.missing) {}
  bool IsMissing(const std::string& trimmed) const {
    if (default_missing_) {
      if (trimmed.empty()) return true;
      const std::string l = Lower(trimmed);
      if (l == "na" || l == "nan" || l == "null") return true;
    }
    return std::find(tokens_.begin(), tokens_.end(), trimmed) != tokens_.end();
  }

 private:
  bool default_missing_;
  std::vector<std::string> tokens_;
};

Status CheckCellSpec(const CellSpec& spec) {
  for (const std::string& t : spec.missing) {
    if (t.size() > kMaxNameBytes) return InvalidInput("--missing token longer than 1024 bytes");
    if (Trim(t) != t) {
      return InvalidInput("--missing '" + t +
                          "': cells are trimmed, so a token with leading or trailing spaces or tabs never matches");
    }
  }
  return OkStatus();
}

Status CheckLabelSpec(const LabelSpec& spec) {
  if (spec.task == Task::kRegression && (spec.positive || !spec.classes.empty())) {
    return InvalidInput("--task regression takes no --positive or --classes (a regression label has no classes)");
  }
  return OkStatus();
}

struct Header {
  std::vector<std::string> names;
  size_t label = 0;
};

Result<Header> ReadHeader(CsvReader& csv, const LabelSpec& spec) {
  Header h;
  ASSIGN_OR_RETURN(bool have, csv.Next(&h.names));
  if (!have) return InvalidInput(csv.path() + ": empty CSV (no header line)");
  std::set<std::string> seen;
  for (std::string& n : h.names) {
    n = Trim(n);
    if (n.empty()) return InvalidInput(Where(csv) + ": empty column name in header");
    if (!seen.insert(n).second) return InvalidInput(Where(csv) + ": duplicate column name '" + n + "'");
  }
  auto it = std::find(h.names.begin(), h.names.end(), spec.column);
  if (it == h.names.end()) {
    return InvalidInput(csv.path() + ":1: label column '" + spec.column + "' not in header");
  }
  if (h.names.size() < 2) return InvalidInput(csv.path() + ":1: need at least one feature column besides the label");
  h.label = static_cast<size_t>(it - h.names.begin());
  return h;
}

// Class index of a label cell under a fixed class list.
Result<float> ClassIndex(const std::map<std::string, uint32_t>& index, const CsvReader& csv,
                         const std::string& column, const std::string& cell) {
  auto it = index.find(Trim(cell));
  if (it == index.end()) return InvalidInput(CellError(csv, column, "unknown label value", cell));
  return static_cast<float>(it->second);
}

std::map<std::string, uint32_t> IndexOf(const std::vector<std::string>& classes) {
  std::map<std::string, uint32_t> m;
  for (uint32_t i = 0; i < classes.size(); ++i) m[classes[i]] = i;
  return m;
}

// One feature cell into its float32 (pass two; pass one has checked the cell already).
Status EncodeCell(const CsvReader& csv, const Column& col, const CellRules& rules, const std::string& cell,
                  float* out) {
  const std::string t = Trim(cell);
  if (rules.IsMissing(t)) {
    if (!col.missing_allowed) return InvalidInput(CellError(csv, col.name, "missing value", cell));
    *out = MissingValue();
    return OkStatus();
  }
  switch (col.kind) {
    case ColumnKind::kYesNo: {
      const int v = YesNo(t);
      if (v < 0) return InvalidInput(CellError(csv, col.name, "expected yes or no, got", cell));
      *out = static_cast<float>(v);
      return OkStatus();
    }
    case ColumnKind::kCategorical: {
      auto it = std::lower_bound(col.categories.begin(), col.categories.end(), t);
      if (it == col.categories.end() || *it != t) {
        return InvalidInput(CellError(csv, col.name, "unknown category", cell));
      }
      *out = static_cast<float>(it - col.categories.begin());
      return OkStatus();
    }
    default:
      if (!ParseFloat(t, out)) return InvalidInput(CellError(csv, col.name, "not a valid float32 number", cell));
      return OkStatus();
  }
}

// Encodes one CSV row into a record: features in column order, then the label.
Status EncodeRow(const CsvReader& csv, const DatasetSchema& schema, const CellRules& rules,
                 const std::map<std::string, uint32_t>& classes, const std::vector<std::string>& row, float* record) {
  if (row.size() != schema.columns.size()) {
    return InvalidInput(Where(csv) + ": " + std::to_string(row.size()) + " fields, header has " +
                        std::to_string(schema.columns.size()));
  }
  size_t f = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const Column& col = schema.columns[i];
    if (col.kind != ColumnKind::kLabel) {
      RETURN_IF_ERROR(EncodeCell(csv, col, rules, row[i], &record[f++]));
    } else if (schema.task == Task::kRegression) {
      if (!ParseFloat(row[i], &record[schema.feature_count()])) {
        return InvalidInput(CellError(csv, col.name, "label is not a number", row[i]));
      }
    } else {
      ASSIGN_OR_RETURN(record[schema.feature_count()], ClassIndex(classes, csv, col.name, row[i]));
    }
  }
  return OkStatus();
}

// Pass one's view of a feature column: what its present cells were.
struct ColumnScan {
  bool categorical_flag = false;  // --categorical
  bool all_numbers = true, all_yes_no = true;
  uint64_t present = 0, missing = 0;

  ColumnKind Kind() const {
    if (categorical_flag) return ColumnKind::kCategorical;
    if (present == 0 || all_numbers) return ColumnKind::kNumeric;
    return all_yes_no ? ColumnKind::kYesNo : ColumnKind::kCategorical;
  }
};

Status ScanCell(const CsvReader& csv, const std::string& column, const CellRules& rules, const std::string& cell,
                ColumnScan* c) {
  const std::string t = Trim(cell);
  if (rules.IsMissing(t)) {
    ++c->missing;
    return OkStatus();
  }
  // Only with --no-default-missing: an empty cell is then neither missing nor a category.
  if (t.empty()) return InvalidInput(CellError(csv, column, "empty cell (not a missing value here)", cell));
  ++c->present;
  if (c->categorical_flag) return OkStatus();
  float x = 0;
  if (!ParseFloat(t, &x)) {
    if (LooksNumeric(t)) {
      return InvalidInput(
          CellError(csv, column, "not a valid float32 number (out of range, not finite or malformed)", cell));
    }
    c->all_numbers = false;
  }
  if (YesNo(t) < 0) c->all_yes_no = false;
  return OkStatus();
}

// --categorical names feature columns of the header.
Status MarkCategorical(const std::string& path, const Header& header, const CellSpec& cells,
                       std::vector<ColumnScan>* cols) {
  for (const std::string& name : cells.categorical) {
    auto it = std::find(header.names.begin(), header.names.end(), name);
    if (it == header.names.end()) return InvalidInput(path + ":1: --categorical column '" + name + "' not in header");
    const size_t i = static_cast<size_t>(it - header.names.begin());
    if (i == header.label) return InvalidInput(path + ":1: --categorical '" + name + "' is the label column");
    (*cols)[i].categorical_flag = true;
  }
  return OkStatus();
}

std::vector<std::string> SortedClasses(const std::set<std::string>& values) {
  std::vector<std::string> v(values.begin(), values.end());
  bool numeric = std::all_of(v.begin(), v.end(), [](const std::string& s) {
    float x;
    return ParseFloat(s, &x);
  });
  if (numeric) {
    std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      float x = 0, y = 0;
      ParseFloat(a, &x);
      ParseFloat(b, &y);
      return x < y;
    });
  }
  return v;
}

// Hashes everything written, so the file digest costs no second read.
class HashingSink final : public crypto::ByteSink {
 public:
  explicit HashingSink(crypto::ByteSink* next) : next_(next) {}
  Status Write(ByteSpan bytes) override {
    hasher_.Update(bytes);
    return next_->Write(bytes);
  }
  crypto::Digest256 Final() { return hasher_.Final(); }

 private:
  crypto::ByteSink* next_;
  crypto::Sha256Hasher hasher_;
};

std::string FormatFloat(float v) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, ptr);
}

// A checked record's value as `open` writes it (sealed-dataset.md, "Back to CSV").
std::string CellText(const Column& col, float v) {
  if (col.missing_allowed && IsMissing(v)) return "";  // an empty field, not quoted
  switch (col.kind) {
    case ColumnKind::kYesNo:
      return v != 0.0f ? "yes" : "no";
    case ColumnKind::kCategorical:
      return CsvEscape(col.categories[static_cast<size_t>(v)]);
    default:
      return FormatFloat(v);
  }
}

std::string LabelText(const DatasetSchema& schema, float v) {
  if (schema.task == Task::kRegression) return FormatFloat(v);
  return CsvEscape(schema.classes[static_cast<size_t>(v)]);
}

// Pass one's view of the label column, and the class list it implies.
class LabelScan {
 public:
  LabelScan(const LabelSpec& spec, const CellRules& rules) : spec_(spec), rules_(rules) {
    if (!spec.classes.empty()) fixed_ = IndexOf(spec.classes);
  }

  Status Add(const CsvReader& csv, const std::string& cell) {
    const std::string value = Trim(cell);
    if (rules_.IsMissing(value)) {
      return InvalidInput(CellError(csv, spec_.column, "missing label (labels may not be missing)", cell));
    }
    if (value.empty()) return InvalidInput(CellError(csv, spec_.column, "empty label", cell));
    if (spec_.task == Task::kRegression) {
      float x = 0;
      if (!ParseFloat(value, &x)) {
        return InvalidInput(CellError(csv, spec_.column, "label is not a number (--task regression)", cell));
      }
      return OkStatus();
    }
    if (!spec_.classes.empty()) {
      if (!fixed_.count(value)) return InvalidInput(CellError(csv, spec_.column, "unknown label value", cell));
      return OkStatus();
    }
    if (!values_.insert(value).second) return OkStatus();
    NoteNumber(csv, value);
    if (spec_.positive && values_.size() > 2) {
      return InvalidInput(CellError(csv, spec_.column,
                                    "unknown label value (a binary label with --positive has two values)", cell));
    }
    if (values_.size() > kMaxAutoClasses) {
      if (all_numbers_) return Continuous(csv.path(), "more than 1000 distinct numbers");
      return InvalidInput(CellError(csv, spec_.column, "more than 1000 distinct label values; wrong column?", cell));
    }
    return OkStatus();
  }

  // The class list (classification), after every row was added.
  Result<std::vector<std::string>> Classes(const std::string& path) {
    if (spec_.task == Task::kRegression) return std::vector<std::string>{};
    if (!spec_.classes.empty()) return spec_.classes;
    if (spec_.positive) {
      if (!values_.count(*spec_.positive)) {
        return InvalidInput(path + ": positive label value '" + *spec_.positive + "' never occurs in column '" +
                            spec_.column + "'");
      }
      if (values_.size() != 2) {
        return InvalidInput(path + ": column '" + spec_.column + "' has only the value '" + *spec_.positive +
                            "'; a binary label needs two");
      }
      values_.erase(*spec_.positive);
      return std::vector<std::string>{*values_.begin(), *spec_.positive};
    }
    // The looks-continuous rule (sealed-dataset.md, "Labels"): all values numbers, and more
    // than 100 distinct ones or any that is not an integer.
    if (all_numbers_ && !non_integer_.empty()) {
      return Continuous(path,
                        "the non-integer value '" + non_integer_ + "' on line " + std::to_string(non_integer_line_));
    }
    if (all_numbers_ && values_.size() > kMaxNumericClasses) {
      return Continuous(path, std::to_string(values_.size()) + " distinct numbers, more than 100");
    }
    return SortedClasses(values_);
  }

 private:
  static constexpr size_t kMaxNumericClasses = 100;

  void NoteNumber(const CsvReader& csv, const std::string& value) {
    float x = 0;
    if (!ParseFloat(value, &x)) {
      all_numbers_ = false;
    } else if (x != std::floor(x) && non_integer_.empty()) {
      non_integer_ = value.size() > 40 ? value.substr(0, 40) + "..." : value;
      non_integer_line_ = csv.record_line();
    }
  }

  Status Continuous(const std::string& path, const std::string& why) const {
    return InvalidInput(path + ": label column '" + spec_.column + "' looks continuous (" + why +
                        "); seal it with --task regression, or name its classes with --classes");
  }

  const LabelSpec& spec_;
  const CellRules& rules_;
  std::map<std::string, uint32_t> fixed_;
  std::set<std::string> values_;
  bool all_numbers_ = true;
  std::string non_integer_;
  uint64_t non_integer_line_ = 0;
};

// The dictionaries of the categorical columns: one more read of the CSV, which must be
// the bytes pass one read. Bounded: 65 536 categories per column, names of 1..1024 bytes,
// and all names together within the 16 MiB of a header's metadata.
Status CollectCategories(const std::string& path, const CellRules& rules, const CsvScan& scan, DatasetSchema* schema) {
  const std::string changed = path + ": changed while sealing (";
  ASSIGN_OR_RETURN(CsvReader csv, CsvReader::Open(path));
  csv.HashContent();
  std::vector<std::string> row;
  ASSIGN_OR_RETURN(bool have_header, csv.Next(&row));
  if (!have_header || row.size() != schema->columns.size()) return InvalidInput(changed + "header)");
  std::vector<std::set<std::string>> dict(schema->columns.size());
  uint64_t rows = 0, bytes = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    if (++rows > scan.rows || row.size() != dict.size()) return InvalidInput(changed + "rows)");
    for (size_t i = 0; i < row.size(); ++i) {
      const Column& col = schema->columns[i];
      if (col.kind != ColumnKind::kCategorical) continue;
      std::string t = Trim(row[i]);
      if (rules.IsMissing(t)) continue;
      if (t.size() > kMaxNameBytes) {
        return InvalidInput(CellError(csv, col.name, "category name longer than 1024 bytes", row[i]));
      }
      const size_t len = t.size();
      if (!dict[i].insert(std::move(t)).second) continue;
      if (dict[i].size() > kMaxCategories) {
        return InvalidInput(CellError(csv, col.name, "more than 65536 categories", row[i]));
      }
      if ((bytes += len + 2) > crypto::kMaxMetadataBytes) {
        return InvalidInput(CellError(csv, col.name, "category names exceed the 16 MiB a schema may hold", row[i]));
      }
    }
  }
  if (rows != scan.rows) return InvalidInput(changed + "fewer rows)");
  if (csv.bytes_read() != scan.csv_bytes || csv.ContentDigest() != scan.csv_digest) {
    return InvalidInput(changed + "its SHA-256 differs from the first pass)");
  }
  for (size_t i = 0; i < dict.size(); ++i) {
    Column& col = schema->columns[i];
    if (col.kind != ColumnKind::kCategorical) continue;
    if (dict[i].empty()) {
      return InvalidInput(path + ": --categorical column '" + col.name + "' has no value that is not missing");
    }
    col.categories.assign(dict[i].begin(), dict[i].end());  // std::set<std::string>: byte order
  }
  return OkStatus();
}

}  // namespace

Result<CsvScan> ScanCsv(const std::string& csv_path, const LabelSpec& spec, const CellSpec& cells,
                        const ProgressFn& progress) {
  RETURN_IF_ERROR(CheckLabelSpec(spec));
  RETURN_IF_ERROR(CheckCellSpec(cells));
  const CellRules rules(cells);
  ASSIGN_OR_RETURN(CsvReader csv, CsvReader::Open(csv_path));
  csv.HashContent();
  ASSIGN_OR_RETURN(Header header, ReadHeader(csv, spec));
  const size_t n = header.names.size();
  std::vector<ColumnScan> cols(n);
  RETURN_IF_ERROR(MarkCategorical(csv_path, header, cells, &cols));
  LabelScan label(spec, rules);
  CsvScan scan;
  std::vector<std::string> row;
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    if (row.size() != n) {
      return InvalidInput(Where(csv) + ": " + std::to_string(row.size()) + " fields, header has " + std::to_string(n));
    }
    // Checks every cell now, so that sealing never starts on bad input.
    for (size_t i = 0; i < n; ++i) {
      if (i == header.label) RETURN_IF_ERROR(label.Add(csv, row[i]));
      else RETURN_IF_ERROR(ScanCell(csv, header.names[i], rules, row[i], &cols[i]));
    }
    ++scan.rows;
    if (progress && scan.rows % 4096 == 0) progress(csv.bytes_read(), csv.file_size());
  }
  if (scan.rows == 0) return InvalidInput(csv_path + ": no data rows after the header");
  scan.csv_digest = csv.ContentDigest();
  scan.csv_bytes = csv.bytes_read();
  DatasetSchema& schema = scan.schema;
  schema.task = spec.task;
  schema.columns.resize(n);
  bool any_categorical = false;
  for (size_t i = 0; i < n; ++i) {
    Column& c = schema.columns[i];
    c.name = header.names[i];
    c.kind = i == header.label ? ColumnKind::kLabel : cols[i].Kind();
    c.missing_allowed = cols[i].missing > 0;
    any_categorical |= c.kind == ColumnKind::kCategorical;
  }
  ASSIGN_OR_RETURN(schema.classes, label.Classes(csv_path));
  if (any_categorical) RETURN_IF_ERROR(CollectCategories(csv_path, rules, scan, &schema));
  RETURN_IF_ERROR(schema.Validate().Annotate(csv_path));
  const size_t schema_bytes = EncodeSchema(schema).size();
  if (schema_bytes > crypto::kMaxMetadataBytes) {
    return InvalidInput(csv_path + ": the schema takes " + std::to_string(schema_bytes) +
                        " bytes, more than the 16 MiB a sealed header's metadata may hold");
  }
  if (progress) progress(csv.file_size(), csv.file_size());
  return scan;
}

Result<DatasetInfo> SealCsv(const SealOptions& options, crypto::Keystore& keystore) {
  RETURN_IF_ERROR(crypto::ValidateObjectId(options.dataset_id));
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(options.out_path, options.overwrite));
  // Pass one reports progress for the first half, pass two for the second.
  ProgressFn half = [&](uint64_t done, uint64_t total) {
    if (options.progress) options.progress(done / 2, total);
  };
  ASSIGN_OR_RETURN(CsvScan scan, ScanCsv(options.csv_path, options.label, options.cells, half));
  const CellRules rules(options.cells);
  const DatasetSchema& schema = scan.schema;
  const uint32_t record_bytes = schema.record_bytes();
  uint32_t records_per_chunk = options.chunk_records;
  if (records_per_chunk == 0) records_per_chunk = std::max<uint32_t>(1, kTargetChunkBytes / record_bytes);
  if (static_cast<uint64_t>(records_per_chunk) * record_bytes > crypto::kMaxChunkBytes) {
    return InvalidInput("chunk of " + std::to_string(records_per_chunk) + " records exceeds 1 GiB");
  }

  crypto::SealParams params;
  params.suite = options.suite;
  params.content_type = crypto::ContentType::kTabularDataset;
  params.keystore_id = keystore.id();
  params.object_id = options.dataset_id;
  params.chunk_size = records_per_chunk * record_bytes;
  params.payload_length = scan.rows * record_bytes;
  params.metadata = EncodeSchema(schema);
  // The key enters the keystore only once the sealed file is complete and committed: a
  // failed seal leaves neither a file nor an orphan key.
  ASSIGN_OR_RETURN(crypto::PendingDataKey key, keystore.NewDataKey(options.dataset_id, options.suite));
  params.key_id = key.entry.key_id;
  const crypto::SecretBytes& dek = key.dek;

  crypto::FileSink file_sink(&out);
  HashingSink sink(&file_sink);
  ASSIGN_OR_RETURN(auto writer, crypto::SealedFileWriter::Create(params, dek, &sink));

  // Pass two: encode and seal. It must read the very bytes pass one checked: the same
  // header, the same number of rows and, at the end, the same SHA-256 of the whole file.
  const std::string changed = options.csv_path + ": changed while sealing (";
  ASSIGN_OR_RETURN(CsvReader csv, CsvReader::Open(options.csv_path));
  csv.HashContent();
  std::vector<std::string> row;
  ASSIGN_OR_RETURN(bool have_header, csv.Next(&row));
  if (!have_header) return InvalidInput(changed + "no header)");
  if (row.size() != schema.columns.size()) return InvalidInput(changed + "header)");
  for (size_t i = 0; i < row.size(); ++i) {
    if (Trim(row[i]) != schema.columns[i].name) return InvalidInput(changed + "header)");
  }
  auto classes = IndexOf(schema.classes);
  ASSIGN_OR_RETURN(crypto::SecretBytes record_buf, crypto::SecretBytes::Create(record_bytes));
  float* record = reinterpret_cast<float*>(record_buf.ExposeSecretMutable().data());
  uint64_t rows = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    if (++rows > scan.rows) return InvalidInput(changed + "more rows)");
    RETURN_IF_ERROR(EncodeRow(csv, schema, rules, classes, row, record));
    RETURN_IF_ERROR(writer->Append(record_buf.ExposeSecret()));
    if (options.progress && rows % 4096 == 0) {
      options.progress(csv.file_size() / 2 + csv.bytes_read() / 2, csv.file_size());
    }
  }
  if (rows != scan.rows) return InvalidInput(changed + "fewer rows)");
  if (csv.bytes_read() != scan.csv_bytes || csv.ContentDigest() != scan.csv_digest) {
    return InvalidInput(changed + "its SHA-256 differs from the first pass)");
  }
  RETURN_IF_ERROR(writer->Finish());
  // The file first: committing refuses a file that appeared meanwhile (no --force), and then
  // no key has been added. Should adding the key fail, the committed file goes again.
  RETURN_IF_ERROR(out.Commit());
  if (Status added = keystore.AddDataKey(key); !added.ok()) {
    ::unlink(options.out_path.c_str());
    return added;
  }
  if (options.progress) options.progress(csv.file_size(), csv.file_size());
  DatasetInfo info;
  info.header = writer->header();
  info.schema = schema;
  info.rows = rows;
  info.file_digest = sink.Final();
  return info;
}

Result<DatasetInfo> InspectSealed(const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, crypto::SealedFileReader::Open(path));
  DatasetInfo info;
  info.header = reader->header();
  if (info.header.params.content_type != crypto::ContentType::kTabularDataset) {
    return InvalidInput(path + ": not a tabular dataset");
  }
  auto schema = DecodeSchema(info.header.params.metadata);
  if (!schema.ok()) return schema.status().Annotate(path);
  info.schema = std::move(schema).value();
  const uint32_t record_bytes = info.schema.record_bytes();
  if (info.header.params.chunk_size % record_bytes != 0 || info.header.params.payload_length % record_bytes != 0 ||
      info.header.params.payload_length == 0) {
    return InvalidInput(path + ": chunk size and payload length must be nonzero multiples of the record size " +
                        std::to_string(record_bytes));
  }
  info.rows = info.header.params.payload_length / record_bytes;
  ASSIGN_OR_RETURN(info.file_digest, crypto::SealedFileDigest(path));
  return info;
}

Result<SealedDatasetReader> SealedDatasetReader::Open(const std::string& path, const crypto::Keystore& keystore) {
  SealedDatasetReader r;
  ASSIGN_OR_RETURN(r.reader_, crypto::SealedFileReader::Open(path));
  const crypto::SealedHeader& h = r.reader_->header();
  if (h.params.content_type != crypto::ContentType::kTabularDataset) {
    return InvalidInput(path + ": not a tabular dataset");
  }
  if (h.params.keystore_id != keystore.id()) {
    return NotFound(path + ": sealed with keystore " + HexEncode(h.params.keystore_id) + ", not with this keystore (" +
                    HexEncode(keystore.id()) + ")");
  }
  ASSIGN_OR_RETURN(crypto::SecretBytes dek, keystore.GetDataKey(h.params.object_id, h.params.key_id));
  for (const crypto::DataKeyEntry& e : keystore.entries()) {
    if (e.dataset_id == h.params.object_id && e.key_id == h.params.key_id && e.suite != h.params.suite) {
      return AuthFailed(path + ": header says suite " + std::string(crypto::SuiteName(h.params.suite)) +
                        ", the keystore entry says " + std::string(crypto::SuiteName(e.suite)));
    }
  }
  RETURN_IF_ERROR(r.reader_->Unlock(dek));
  // The schema is trusted only now that the header is authenticated.
  auto schema = DecodeSchema(h.params.metadata);
  if (!schema.ok()) return schema.status().Annotate(path);
  r.schema_ = std::move(schema).value();
  const uint32_t record_bytes = r.schema_.record_bytes();
  if (h.params.chunk_size % record_bytes != 0 || h.params.payload_length % record_bytes != 0 ||
      h.params.payload_length == 0) {
    return InvalidInput(path + ": chunks do not hold whole records");
  }
  r.rows_ = h.params.payload_length / record_bytes;
  ASSIGN_OR_RETURN(r.plain_, crypto::SecretBytes::Create(h.params.chunk_size));
  return r;
}

Status SealedDatasetReader::ForEachChunk(const std::function<Status(std::span<const float>, uint64_t, uint64_t)>& fn,
                                         const ProgressFn& progress) {
  const crypto::SealedHeader& h = reader_->header();
  const uint32_t record_bytes = schema_.record_bytes();
  uint64_t first_row = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const size_t len = h.ChunkPlaintextSize(i);
    auto out = plain_.ExposeSecretMutable().first(len);
    RETURN_IF_ERROR(reader_->ReadChunk(i, out));
    const uint64_t count = len / record_bytes;
    std::span<const float> records(reinterpret_cast<const float*>(out.data()), len / 4);
    RETURN_IF_ERROR(fn(records, first_row, count));
    first_row += count;
    if (progress) progress(h.ChunkOffset(i + 1), h.FileSize());
  }
  return OkStatus();
}

Status SealedDatasetReader::ReadRows(uint64_t first_row, uint64_t count, float* out) {
  const crypto::SealedHeader& h = reader_->header();
  const uint64_t record_bytes = schema_.record_bytes();
  if (first_row > rows_ || count > rows_ - first_row) {
    return Internal(reader_->path() + ": records " + std::to_string(first_row) + "+" + std::to_string(count) +
                      " past the end (" + std::to_string(rows_) + " records)");
  }
  // Every chunk but the last holds chunk_size / record_bytes whole records (checked in Open).
  const uint64_t per_chunk = h.params.chunk_size / record_bytes;
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  for (uint64_t row = first_row, end = first_row + count; row < end;) {
    const uint64_t chunk = row / per_chunk, chunk_first = chunk * per_chunk;
    const size_t len = h.ChunkPlaintextSize(chunk);
    auto plain = plain_.ExposeSecretMutable().first(len);
    RETURN_IF_ERROR(reader_->ReadChunk(chunk, plain));
    const uint64_t n = std::min(end, chunk_first + len / record_bytes) - row;
    std::memcpy(dst, plain.data() + (row - chunk_first) * record_bytes, n * record_bytes);
    dst += n * record_bytes;
    row += n;
  }
  return OkStatus();
}

Result<DatasetInfo> VerifySealed(const std::string& path, const crypto::Keystore& keystore,
                                 const ProgressFn& progress) {
  ASSIGN_OR_RETURN(SealedDatasetReader reader, SealedDatasetReader::Open(path, keystore));
  const DatasetSchema& schema = reader.schema();
  const size_t width = schema.columns.size();
  RETURN_IF_ERROR(reader.ForEachChunk(
      [&](std::span<const float> records, uint64_t first_row, uint64_t count) -> Status {
        // Authenticated records can still be invalid if another implementation sealed them.
        for (uint64_t r = 0; r < count; ++r) {
          RETURN_IF_ERROR(CheckRecord(schema, &records[r * width], first_row + r).Annotate(path));
        }
        return OkStatus();
      },
      progress));
  DatasetInfo info;
  info.header = reader.header();
  info.schema = schema;
  info.rows = reader.rows();
  ASSIGN_OR_RETURN(info.file_digest, crypto::SealedFileDigest(path));
  return info;
}

Status OpenSealedToCsv(const std::string& path, const crypto::Keystore& keystore, const std::string& out_path,
                       bool overwrite, const ProgressFn& progress) {
  ASSIGN_OR_RETURN(SealedDatasetReader reader, SealedDatasetReader::Open(path, keystore));
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, overwrite));
  const DatasetSchema& schema = reader.schema();
  std::string line;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    if (i) line += ',';
    line += CsvEscape(schema.columns[i].name);
  }
  line += '\n';
  RETURN_IF_ERROR(out.Write(line.data(), line.size()));
  const size_t width = schema.columns.size();
  RETURN_IF_ERROR(reader.ForEachChunk(
      [&](std::span<const float> records, uint64_t first_row, uint64_t count) -> Status {
        for (uint64_t r = 0; r < count; ++r) {
          const float* rec = &records[r * width];
          RETURN_IF_ERROR(CheckRecord(schema, rec, first_row + r).Annotate(path));
          line.clear();
          size_t f = 0;
          for (size_t i = 0; i < width; ++i) {
            if (i) line += ',';
            const Column& col = schema.columns[i];
            line += col.kind == ColumnKind::kLabel ? LabelText(schema, rec[width - 1]) : CellText(col, rec[f++]);
          }
          line += '\n';
          RETURN_IF_ERROR(out.Write(line.data(), line.size()));
        }
        return OkStatus();
      },
      progress));
  return out.Commit();
}

struct CsvRowEncoder::Impl {
  DatasetSchema schema;
  CellRules rules;
  std::map<std::string, uint32_t> classes;
};

CsvRowEncoder::CsvRowEncoder(DatasetSchema schema, CellSpec cells)
    : impl_(std::make_unique<Impl>(Impl{std::move(schema), CellRules(cells), {}})) {
  impl_->classes = IndexOf(impl_->schema.classes);
}
CsvRowEncoder::~CsvRowEncoder() = default;
CsvRowEncoder::CsvRowEncoder(CsvRowEncoder&&) noexcept = default;

Status CsvRowEncoder::Encode(const CsvReader& csv, const std::vector<std::string>& row, float* record) const {
  return EncodeRow(csv, impl_->schema, impl_->rules, impl_->classes, row, record);
}

}  // namespace enclave::dataset
