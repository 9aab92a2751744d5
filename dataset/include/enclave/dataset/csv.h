// A streaming RFC 4180 CSV reader: constant memory whatever the file size, quoted fields
// (with "" escapes and embedded newlines), CRLF or LF, a UTF-8 byte-order mark skipped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::dataset {

inline constexpr size_t kMaxCsvRecordBytes = 16u << 20;
inline constexpr size_t kMaxCsvFields = 1u << 20;  // as many as a schema may have columns

class CsvReader {
 public:
  static Result<CsvReader> Open(const std::string& path);

  // Reads the next record into `fields`; false at end of file. Blank lines are skipped.
  Result<bool> Next(std::vector<std::string>* fields);
  // 1-based line on which the last record returned began.
  uint64_t record_line() const { return record_line_; }
  uint64_t bytes_read() const { return consumed_; }
  uint64_t file_size() const { return file_.size(); }
  const std::string& path() const { return file_.path(); }
  // Call before the first Next(): every byte read from the file is hashed; ContentDigest()
  // after Next() returned false is the SHA-256 of the whole file as read.
  void HashContent() { hasher_ = std::make_unique<crypto::Sha256Hasher>(); }
  crypto::Digest256 ContentDigest() { return hasher_ ? hasher_->Final() : crypto::Digest256{}; }

 private:
  explicit CsvReader(FileReader file) : file_(std::move(file)) {}
  // Next byte, or -1 at end of file.
  Result<int> Get();
  Status Fill();

  FileReader file_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  uint64_t consumed_ = 0;
  uint64_t line_ = 1, record_line_ = 0;
  bool eof_ = false, started_ = false;
  std::unique_ptr<crypto::Sha256Hasher> hasher_;
};

// A numeric cell (docs/formats/sealed-dataset.md, "Numbers"), trimmed of ASCII spaces and
// tabs: std::from_chars general format, one leading '+' allowed, rounded to the nearest
// float32. False for anything else, for a value that overflows float32 and for a non-zero
// value that rounds to zero (1e-50); subnormals are kept. The one parser of the sealer and
// of the trainer's CSV path, so that both encode a CSV to the same bits.
bool ParseCsvNumber(std::string_view cell, float* out);

// Quotes a cell for CSV output when it needs quoting.
std::string CsvEscape(const std::string& cell);

}  // namespace enclave::dataset
