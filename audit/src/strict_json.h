// Internal to audit/: a strict, allocation-light JSON parser for log entries.
//
// Verification reads every entry of the log (a million and more), so entries are not
// turned into nlohmann::json there: this parser checks the bytes against RFC 8259 and the
// log's own rules (docs/formats/audit-log.md section 3) in one pass and leaves a flat list
// of nodes whose strings point into the input (or, only for strings with escapes, into
// the document's arena). Event schema checks (event.cc) run on these nodes; the same
// checks serve the writer, so there is one definition of a valid entry.
//
// Refused: anything not RFC 8259 (trailing commas, comments, leading zeros, NaN, single
// quotes, a byte-order mark, bytes after the value), invalid UTF-8 (overlong forms,
// surrogates, > U+10FFFF) in strings, unpaired \u surrogate escapes, raw control
// characters in strings, a duplicate key in any object, nesting deeper than 8.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/event.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::audit::internal {

inline constexpr int kMaxJsonDepth = 8;

class JsonDoc {
 public:
  enum class Kind : uint8_t { kNull, kFalse, kTrue, kNumber, kString, kArray, kObject };
  static constexpr uint32_t kNone = 0xffffffffu;

  struct Node {
    Kind kind = Kind::kNull;
    uint32_t next = kNone;   // next item of the enclosing array or object
    uint32_t child = kNone;  // first item (arrays, objects)
    uint32_t size = 0;       // items (arrays, objects)
    std::string_view key;    // decoded member name, for members of an object
    std::string_view text;   // decoded value of a string; the literal of a number
  };

  // Parses `text` (the root is node 0). The views stay valid while `text` and this
  // document live and until the next Parse. `where` prefixes error messages.
  Status Parse(std::string_view text, std::string_view where);

  const Node& node(uint32_t i) const { return nodes_[i]; }
  const Node& root() const { return nodes_[0]; }
  // The member `key` of object node `obj`, or kNone.
  uint32_t Find(uint32_t obj, std::string_view key) const;

 private:
  friend class JsonParser;
  std::vector<Node> nodes_;
  std::deque<std::string> arena_;  // decoded strings that had escapes
};

// Number classification with nlohmann::json's meaning, so a value has one reading.
// A non-negative integer literal (no sign, fraction or exponent) that fits in 64 bits.
bool JsonUnsigned(std::string_view literal, uint64_t* out);
// Any number literal as a double; false when it is not finite.
bool JsonFiniteNumber(std::string_view literal, double* out);
// RFC 3629 UTF-8.
bool ValidUtf8(std::string_view s);

// CheckEntry (event.h) with a caller-owned document, reused across entries so that
// verifying a log allocates nothing per entry.
Result<EntrySummary> CheckEntry(ByteSpan bytes, JsonDoc* doc);

}  // namespace enclave::audit::internal
