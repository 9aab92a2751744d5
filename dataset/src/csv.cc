#include "enclave/dataset/csv.h"

#include <charconv>
#include <cmath>

namespace enclave::dataset {

bool ParseCsvNumber(std::string_view cell, float* out) {
  const size_t b = cell.find_first_not_of(" \t");
  if (b == std::string_view::npos) return false;
  const size_t e = cell.find_last_not_of(" \t");
  const char* begin = cell.data() + b;
  const char* end = cell.data() + e + 1;
  if (*begin == '+') {  // from_chars rejects a leading plus; accept one, not "+-1"
    ++begin;
    if (begin == end || *begin == '-' || *begin == '+') return false;
  }
  float value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ptr != end) return false;
  if (ec == std::errc::result_out_of_range) {
    // Below float32's range: a subnormal is kept, a value that would round to zero is not
    // (nor is an overflow, or anything beyond double's range).
    double wide = 0;
    auto [wptr, wec] = std::from_chars(begin, end, wide);
    if (wec != std::errc() || wptr != end || !(std::fabs(wide) < 1.0) || wide == 0.0) return false;
    value = static_cast<float>(wide);
    if (value == 0.0f) return false;
    *out = value;
    return true;
  }
  if (ec != std::errc() || !std::isfinite(value)) return false;
  // An implementation may also round an underflow to zero without reporting it.
  if (value == 0.0f) {
    double wide = 0;
    auto [wptr, wec] = std::from_chars(begin, end, wide);
    if (wec != std::errc() || wptr != end || wide != 0.0) return false;
  }
  *out = value;
  return true;
}

Result<CsvReader> CsvReader::Open(const std::string& path) {
  ASSIGN_OR_RETURN(FileReader file, FileReader::Open(path));
  CsvReader r(std::move(file));
  r.buf_.resize(1 << 20);
  return r;
}

Status CsvReader::Fill() {
  size_t got = 0;
  RETURN_IF_ERROR(file_.Read(buf_.data(), buf_.size(), &got));
  if (hasher_ && got > 0) hasher_->Update({reinterpret_cast<const uint8_t*>(buf_.data()), got});
  pos_ = 0;
  end_ = got;
  if (got == 0) eof_ = true;
  return OkStatus();
}

Result<int> CsvReader::Get() {
  if (pos_ == end_) {
    if (eof_) return -1;
    RETURN_IF_ERROR(Fill());
    if (eof_) return -1;
  }
  ++consumed_;
  return static_cast<unsigned char>(buf_[pos_++]);
}

Result<bool> CsvReader::Next(std::vector<std::string>* fields) {
  fields->clear();
  if (!started_) {
    started_ = true;
    // Skip a UTF-8 byte-order mark, and only that: other text may start with 0xEF too.
    RETURN_IF_ERROR(Fill());
    if (end_ >= 3 && static_cast<unsigned char>(buf_[0]) == 0xEF && static_cast<unsigned char>(buf_[1]) == 0xBB &&
        static_cast<unsigned char>(buf_[2]) == 0xBF) {
      pos_ = 3;
      consumed_ = 3;
    }
  }
  std::string field;
  size_t record_bytes = 0;
  bool in_quotes = false, quoted = false, any = false;
  record_line_ = line_;
  while (true) {
    ASSIGN_OR_RETURN(int c, Get());
    if (c < 0) {
      if (in_quotes) return InvalidInput(path() + ":" + std::to_string(record_line_) + ": unterminated quoted field");
      if (!any && field.empty()) return false;
      fields->push_back(std::move(field));
      return true;
    }
    if (++record_bytes > kMaxCsvRecordBytes) {
      return InvalidInput(path() + ":" + std::to_string(record_line_) + ": record longer than 16 MiB");
    }
    if (in_quotes) {
      if (c == '"') {
        ASSIGN_OR_RETURN(int next, Get());
        if (next == '"') {
          field.push_back('"');
          continue;
        }
        in_quotes = false;
        if (next < 0) continue;
        c = next;  // fall through to handle the byte after the closing quote
      } else {
        if (c == '\n') ++line_;
        field.push_back(static_cast<char>(c));
        continue;
      }
    }
    if (c == '"') {
      if (!field.empty() || quoted) {
        return InvalidInput(path() + ":" + std::to_string(line_) + ": stray quote inside an unquoted field");
      }
      in_quotes = quoted = true;
      any = true;
      continue;
    }
    if (c == ',') {
      if (fields->size() >= kMaxCsvFields) {
        return InvalidInput(path() + ":" + std::to_string(record_line_) + ": more than " +
                            std::to_string(kMaxCsvFields) + " fields");
      }
      fields->push_back(std::move(field));
      field.clear();
      quoted = false;
      any = true;
      continue;
    }
    if (c == '\r') {
      ASSIGN_OR_RETURN(int next, Get());
      if (next != '\n') return InvalidInput(path() + ":" + std::to_string(line_) + ": bare carriage return");
      c = '\n';
    }
    if (c == '\n') {
      ++line_;
      if (!any && field.empty()) {  // blank line
        record_line_ = line_;
        record_bytes = 0;
        continue;
      }
      fields->push_back(std::move(field));
      return true;
    }
    if (quoted) {
      return InvalidInput(path() + ":" + std::to_string(line_) + ": text after a closing quote");
    }
    field.push_back(static_cast<char>(c));
    any = true;
  }
}

std::string CsvEscape(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos && !cell.empty()) return cell;
  std::string out = "\"";
  for (char c : cell) {
    if (c == '"') out += "\"\"";
    else out.push_back(c);
  }
  out += "\"";
  return out;
}

}  // namespace enclave::dataset
