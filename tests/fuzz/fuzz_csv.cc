// Fuzz target: the streaming CSV reader (dataset::CsvReader), which reads the data
// owner's plaintext CSV before sealing. Reads every record of the input, then checks a
// round-trip property: writing the records back with CsvEscape and reading them again
// gives the same records.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "enclave/dataset/csv.h"
#include "fuzz_util.h"

namespace {

using Records = std::vector<std::vector<std::string>>;

// All records, or false if the reader reported an error.
bool ReadAll(const std::string& path, Records* records) {
  auto reader = enclave::dataset::CsvReader::Open(path);
  if (!reader.ok()) return false;
  std::vector<std::string> fields;
  uint64_t last_line = 0;
  while (true) {
    auto more = reader->Next(&fields);
    if (!more.ok()) return false;
    if (!*more) break;
    if (fields.empty()) __builtin_trap();  // a record has at least one field
    if (reader->record_line() < last_line) __builtin_trap();
    last_line = reader->record_line();
    records->push_back(fields);
  }
  if (reader->bytes_read() > reader->file_size()) __builtin_trap();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static enclave::fuzz::MemFile input, again;
  Records records;
  if (!ReadAll(input.Fill(data, size), &records)) return 0;

  // A leading blank line (which the reader skips): a file's first three bytes EF BB BF
  // are always a byte-order mark, so a first cell that itself begins with U+FEFF (a
  // second mark, say) cannot survive a round trip at offset 0, by design.
  std::string text = "\n";
  for (const auto& record : records) {
    for (size_t i = 0; i < record.size(); ++i) {
      if (i > 0) text += ',';
      text += enclave::dataset::CsvEscape(record[i]);
    }
    text += '\n';
  }
  Records reread;
  if (!ReadAll(again.Fill(reinterpret_cast<const uint8_t*>(text.data()), text.size()), &reread)) __builtin_trap();
  if (reread != records) __builtin_trap();
  return 0;
}
