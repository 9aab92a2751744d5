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

// Encodes one CSV row into a record: features in column order, then the class index.
Status EncodeRow(const CsvReader& csv, const DatasetSchema& schema, const std::map<std::string, uint32_t>& classes,
                 const std::vector<std::string>& row, float* record) {
  if (row.size() != schema.columns.size()) {
    return InvalidInput(Where(csv) + ": " + std::to_string(row.size()) + " fields, header has " +
                        std::to_string(schema.columns.size()));
  }
  size_t f = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const Column& col = schema.columns[i];
    switch (col.kind) {
      case ColumnKind::kLabel: {
        ASSIGN_OR_RETURN(record[schema.feature_count()], ClassIndex(classes, csv, col.name, row[i]));
        break;
      }
      case ColumnKind::kYesNo: {
        int v = YesNo(row[i]);
        if (v < 0) return InvalidInput(CellError(csv, col.name, "expected yes or no, got", row[i]));
        record[f++] = static_cast<float>(v);
        break;
      }
      case ColumnKind::kNumeric:
        if (Trim(row[i]).empty()) return InvalidInput(CellError(csv, col.name, "empty cell (missing value)", row[i]));
        if (!ParseFloat(row[i], &record[f])) {
          return InvalidInput(CellError(csv, col.name, "non-numeric or out-of-range value", row[i]));
        }
        ++f;
        break;
    }
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

}  // namespace

Result<CsvScan> ScanCsv(const std::string& csv_path, const LabelSpec& spec, const ProgressFn& progress) {
  ASSIGN_OR_RETURN(CsvReader csv, CsvReader::Open(csv_path));
  csv.HashContent();
  ASSIGN_OR_RETURN(Header header, ReadHeader(csv, spec));
  const size_t n = header.names.size();
  CsvScan scan;
  scan.schema.columns.resize(n);
  for (size_t i = 0; i < n; ++i) {
    scan.schema.columns[i] = {header.names[i], i == header.label ? ColumnKind::kLabel : ColumnKind::kNumeric};
  }
  std::set<std::string> label_values;
  std::map<std::string, uint32_t> fixed;
  if (!spec.classes.empty()) fixed = IndexOf(spec.classes);
  std::vector<std::string> row;
  std::vector<float> record(n);
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    if (row.size() != n) {
      return InvalidInput(Where(csv) + ": " + std::to_string(row.size()) + " fields, header has " + std::to_string(n));
    }
    if (scan.rows == 0) {  // the first data row decides which columns are yes/no
      for (size_t i = 0; i < n; ++i) {
        if (i != header.label && YesNo(row[i]) >= 0) scan.schema.columns[i].kind = ColumnKind::kYesNo;
      }
    }
    const std::string& label = row[header.label];
    std::string value = Trim(label);
    if (value.empty()) return InvalidInput(CellError(csv, spec.column, "empty label", label));
    if (!spec.classes.empty()) {
      if (!fixed.count(value)) return InvalidInput(CellError(csv, spec.column, "unknown label value", label));
    } else if (label_values.insert(value).second) {
      if (spec.positive && label_values.size() > 2) {
        return InvalidInput(CellError(csv, spec.column,
                                      "unknown label value (a binary label with --positive has two values)", label));
      }
      if (label_values.size() > kMaxAutoClasses) {
        return InvalidInput(CellError(csv, spec.column, "more than 1000 distinct label values; wrong column?", label));
      }
    }
    // Checks every feature cell now, so that sealing never starts on bad input.
    std::map<std::string, uint32_t> any_label = {{value, 0}};
    RETURN_IF_ERROR(EncodeRow(csv, scan.schema, any_label, row, record.data()));
    ++scan.rows;
    if (progress && scan.rows % 4096 == 0) progress(csv.bytes_read(), csv.file_size());
  }
  if (scan.rows == 0) return InvalidInput(csv_path + ": no data rows after the header");
  scan.csv_digest = csv.ContentDigest();
  scan.csv_bytes = csv.bytes_read();
  if (!spec.classes.empty()) {
    scan.schema.classes = spec.classes;
  } else if (spec.positive) {
    if (!label_values.count(*spec.positive)) {
      return InvalidInput(csv_path + ": positive label value '" + *spec.positive + "' never occurs in column '" +
                          spec.column + "'");
    }
    if (label_values.size() != 2) {
      return InvalidInput(csv_path + ": column '" + spec.column + "' has only the value '" + *spec.positive +
                          "'; a binary label needs two");
    }
    label_values.erase(*spec.positive);
    scan.schema.classes = {*label_values.begin(), *spec.positive};
  } else {
    scan.schema.classes = SortedClasses(label_values);
  }
  RETURN_IF_ERROR(scan.schema.Validate().Annotate(csv_path));
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
  ASSIGN_OR_RETURN(CsvScan scan, ScanCsv(options.csv_path, options.label, half));
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
    RETURN_IF_ERROR(EncodeRow(csv, schema, classes, row, record));
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

namespace {

// Authenticated records can still be invalid if another implementation sealed them.
Status CheckRecord(const DatasetSchema& schema, const float* record, uint64_t row) {
  size_t f = 0;
  for (const Column& col : schema.columns) {
    if (col.kind == ColumnKind::kLabel) continue;
    float v = record[f++];
    bool ok = col.kind == ColumnKind::kYesNo ? (v == 0.0f || v == 1.0f) : std::isfinite(v);
    if (!ok) return InvalidInput("record " + std::to_string(row) + ": invalid value in column '" + col.name + "'");
  }
  float label = record[schema.feature_count()];
  if (!(label >= 0.0f && label < static_cast<float>(schema.classes.size()) && label == std::floor(label))) {
    return InvalidInput("record " + std::to_string(row) + ": label is not a class index");
  }
  return OkStatus();
}

}  // namespace

Result<DatasetInfo> VerifySealed(const std::string& path, const crypto::Keystore& keystore,
                                 const ProgressFn& progress) {
  ASSIGN_OR_RETURN(SealedDatasetReader reader, SealedDatasetReader::Open(path, keystore));
  const DatasetSchema& schema = reader.schema();
  const size_t width = schema.columns.size();
  RETURN_IF_ERROR(reader.ForEachChunk(
      [&](std::span<const float> records, uint64_t first_row, uint64_t count) -> Status {
        for (uint64_t r = 0; r < count; ++r) RETURN_IF_ERROR(CheckRecord(schema, &records[r * width], first_row + r));
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
          RETURN_IF_ERROR(CheckRecord(schema, rec, first_row + r));
          line.clear();
          size_t f = 0;
          for (size_t i = 0; i < width; ++i) {
            if (i) line += ',';
            const Column& col = schema.columns[i];
            if (col.kind == ColumnKind::kLabel) {
              line += CsvEscape(schema.classes[static_cast<size_t>(rec[width - 1])]);
            } else if (col.kind == ColumnKind::kYesNo) {
              line += rec[f++] != 0.0f ? "yes" : "no";
            } else {
              line += FormatFloat(rec[f++]);
            }
          }
          line += '\n';
          RETURN_IF_ERROR(out.Write(line.data(), line.size()));
        }
        return OkStatus();
      },
      progress));
  return out.Commit();
}

}  // namespace enclave::dataset
