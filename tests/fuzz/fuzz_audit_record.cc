// libFuzzer target: the audit log's untrusted-input parsers. The input is treated as the
// record area of a log file (a sequence of framed records); every record that frames
// correctly is handed to the tree-head or entry parser, and the whole input is also tried
// as a file header and as a raw entry. Invariants checked: no crash, no read outside the
// input, a record that parses re-encodes to exactly its own bytes, and CheckEntry (the
// verifier's fast path) agrees with ParseEntry.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "enclave/audit/event.h"
#include "enclave/audit/record.h"
#include "enclave/audit/tree_head.h"

using namespace enclave;
using namespace enclave::audit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan all(data, size);
  (void)ParseFileHeader(all);
  {
    // The fast check (verification) and the full parse (show, prove) accept the same set;
    // an Internal error means the strict parser accepted what nlohmann::json cannot read.
    auto checked = CheckEntry(all);
    auto parsed = ParseEntry(all);
    if (checked.ok() != parsed.ok()) std::abort();
    if (!parsed.ok() && parsed.status().code() == Code::kInternal) std::abort();
  }
  size_t pos = 0;
  while (pos < size) {
    RecordParse r = ParseRecord(all.subspan(pos));
    if (r.outcome != ParseOutcome::kOk) break;
    if (r.record.size == 0 || r.record.size > size - pos) std::abort();
    std::vector<uint8_t> again;
    AppendRecord(r.record.type, r.record.payload, &again);
    if (again.size() != r.record.size || std::memcmp(again.data(), data + pos, again.size()) != 0) std::abort();
    if (IsTreeHead(r.record.type)) {
      auto sth = ParseTreeHead(r.record.payload);
      if (sth.ok() && EncodeTreeHead(*sth) != std::vector<uint8_t>(r.record.payload.begin(), r.record.payload.end())) {
        std::abort();
      }
    } else {
      auto entry = ParseEntry(r.record.payload);
      if (entry.ok()) {
        // A parsed entry must serialize again (validation is the same both ways).
        if (!SerializeEntry(entry->event, entry->seq).ok()) std::abort();
      }
    }
    pos += r.record.size;
  }
  return 0;
}
