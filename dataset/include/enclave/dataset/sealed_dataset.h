// The data owner's operations on sealed tabular datasets: CSV -> sealed file (two
// streaming passes, constant memory), inspect (no key), verify, and open back to CSV.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/schema.h"

namespace enclave::dataset {

// Called with (bytes done, bytes total) as a long operation advances.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;

struct LabelSpec {
  std::string column;
  std::optional<std::string> positive;  // binary: this value -> 1, the only other -> 0
  std::vector<std::string> classes;     // or a fixed class list, in index order
  Task task = Task::kClassification;    // kRegression: a numeric label, stored as its value
};

// How feature cells are read (docs/formats/sealed-dataset.md, "Missing values",
// "Column kinds").
struct CellSpec {
  bool default_missing = true;           // empty, NA, NaN, null (ASCII case-insensitive) are missing
  std::vector<std::string> missing;      // more missing tokens, matched exactly (after trimming)
  std::vector<std::string> categorical;  // columns sealed as categorical whatever their values
};

struct CsvScan {
  DatasetSchema schema;
  uint64_t rows = 0;
  crypto::Digest256 csv_digest{};  // SHA-256 of the CSV file's bytes as pass one read them
  uint64_t csv_bytes = 0;
};

// Pass one: checks every row and infers the schema. Rules (docs/formats/sealed-dataset.md):
// a column is numeric when all its present cells are numbers, yes/no when all are yes/no,
// categorical otherwise (or when named in cells.categorical); missing cells make a column
// allow missing values. Labels map by --positive, by a fixed class list, or to their
// sorted distinct values; a label that looks continuous is refused unless the task is
// regression. When there are categorical columns, a second read of the CSV collects their
// dictionaries (and must see the same bytes).
Result<CsvScan> ScanCsv(const std::string& csv_path, const LabelSpec& label, const CellSpec& cells = {},
                        const ProgressFn& progress = {});

class CsvReader;

// Encodes CSV rows under a known schema into records exactly as SealCsv does (cells read by
// `cells`, categories by the schema's dictionaries, the label by its classes), so that a
// CSV and the file sealed from it give the same records bit for bit: the trainer's
// clear-CSV path. Errors name the file, line and column.
class CsvRowEncoder {
 public:
  CsvRowEncoder(DatasetSchema schema, CellSpec cells);
  ~CsvRowEncoder();
  CsvRowEncoder(CsvRowEncoder&&) noexcept;
  // `row` as CsvReader::Next gave it, `record` schema.columns.size() floats.
  Status Encode(const CsvReader& csv, const std::vector<std::string>& row, float* record) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct SealOptions {
  std::string csv_path;
  std::string out_path;
  LabelSpec label;
  CellSpec cells;
  crypto::Suite suite = crypto::Suite::kAes256Gcm;
  std::string dataset_id;
  uint32_t chunk_records = 0;  // 0: as many records as fit in 64 KiB
  bool overwrite = false;
  ProgressFn progress;
};

struct DatasetInfo {
  crypto::SealedHeader header;
  DatasetSchema schema;
  uint64_t rows = 0;
  crypto::Digest256 file_digest{};  // SHA-256 of the whole sealed file
};

// Seals `csv_path` under a fresh DEK that is stored in `keystore`. Output appears only
// when complete. Pass two must read exactly the bytes pass one read (same header, same row
// count, same SHA-256 of the whole file), else nothing is written and no key is added.
// The file is committed first and the key added after; should adding the key fail, the
// committed file is removed again, so a failed seal leaves neither a file nor an orphan key.
Result<DatasetInfo> SealCsv(const SealOptions& options, crypto::Keystore& keystore);

// Header, schema and digest; needs no key.
Result<DatasetInfo> InspectSealed(const std::string& path);

// Reads a sealed dataset chunk by chunk into locked memory. Every record a caller sees has
// been authenticated.
class SealedDatasetReader {
 public:
  static Result<SealedDatasetReader> Open(const std::string& path, const crypto::Keystore& keystore);
  const DatasetSchema& schema() const { return schema_; }
  const crypto::SealedHeader& header() const { return reader_->header(); }
  uint64_t rows() const { return rows_; }
  // Calls fn(records, first_row, row_count) for every chunk, in order; records holds
  // row_count * (features + 1) floats. Stops at the first error.
  Status ForEachChunk(const std::function<Status(std::span<const float>, uint64_t, uint64_t)>& fn,
                      const ProgressFn& progress = {});
  // Random access: authenticates and decrypts the chunks that hold records
  // [first_row, first_row + count) and copies those records (count * (features + 1)
  // floats) to `out`, which the caller keeps in locked memory. Unchecked records.
  Status ReadRows(uint64_t first_row, uint64_t count, float* out);

 private:
  SealedDatasetReader() = default;
  std::unique_ptr<crypto::SealedFileReader> reader_;
  DatasetSchema schema_;
  uint64_t rows_ = 0;
  crypto::SecretBytes plain_;
};

// Authenticates every chunk and checks every record against the schema.
Result<DatasetInfo> VerifySealed(const std::string& path, const crypto::Keystore& keystore,
                                 const ProgressFn& progress = {});

// Owner-side round trip back to CSV, columns in their original order.
Status OpenSealedToCsv(const std::string& path, const crypto::Keystore& keystore, const std::string& out_path,
                       bool overwrite, const ProgressFn& progress = {});

// Synthetic tabular data for benchmarks: `features` numeric columns and a binary label
// `y` from a fixed random linear rule plus noise, deterministic for a seed.
Status WriteSyntheticCsv(const std::string& out_path, uint64_t rows, uint32_t features, uint64_t seed,
                         bool overwrite, const ProgressFn& progress = {});

}  // namespace enclave::dataset
