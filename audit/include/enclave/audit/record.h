// The storage format of an audit log file (docs/formats/audit-log.md, "Storage").
//
//   file    = header record*
//   header  = "EAUDITLG" || u32le version (2; 1 before chained heads) || u32le flags (0)
//             || log_id[32]                                                         48 bytes
//   record  = "EAR1" || u8 type || 3 zero bytes || u32le payload_length || payload || check[8]
//   check   = first 8 bytes of SHA-256(every record byte before the check)
//   type 1  = entry (payload: the entry's JSON bytes, 1..65536 bytes)
//   type 2  = legacy signed tree head (payload: 112 bytes, see tree_head.h; version 1 logs only)
//   type 3  = chained signed tree head (payload: 216 bytes, see tree_head.h)
//
// The check catches torn writes and bit rot; tamper evidence comes from the Merkle tree and
// the signed tree heads, not from it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "enclave/audit/merkle.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr char kLogFileName[] = "audit.log";
inline constexpr size_t kFileHeaderSize = 48;
inline constexpr size_t kRecordOverhead = 4 + 4 + 4 + 8;
inline constexpr uint32_t kMaxEntryBytes = 65536;   // what a reader accepts in a record
// What the writer emits: one byte less, so that every entry fits a tlog-tiles entry bundle
// (u16 lengths). Logs written before the limit may hold a 65536-byte entry; they verify but
// cannot be tiled.
inline constexpr uint32_t kMaxWrittenEntryBytes = 65535;

enum class RecordType : uint8_t { kEntry = 1, kTreeHead = 2, kChainedTreeHead = 3 };

inline constexpr size_t kTreeHeadRecordSize = kRecordOverhead + 112;  // legacy: the shortest head record
inline constexpr size_t kChainedTreeHeadRecordSize = kRecordOverhead + 216;
inline constexpr uint32_t kLogVersionLegacy = 1;  // type-2 heads, then (once a writer upgraded it) type-3 heads
inline constexpr uint32_t kLogVersion = 2;        // type-3 heads only
inline bool IsTreeHead(RecordType t) { return t == RecordType::kTreeHead || t == RecordType::kChainedTreeHead; }

// A lower bound on the size of any log that verifies with a latest tree head of size >= m:
// the header, m entry records of at least 1 payload byte each, and at least one tree head.
// Saturates instead of overflowing.
constexpr uint64_t MinLogBytesForTreeSize(uint64_t m) {
  constexpr uint64_t base = kFileHeaderSize + kTreeHeadRecordSize;
  constexpr uint64_t per_entry = kRecordOverhead + 1;
  if (m > (UINT64_MAX - base) / per_entry) return UINT64_MAX;
  return base + m * per_entry;
}

std::vector<uint8_t> EncodeFileHeader(const Hash& log_id, uint32_t version = kLogVersion);
// Checks magic, version (1 or 2) and flags; returns the log id (and the version).
Result<Hash> ParseFileHeader(ByteSpan header, uint32_t* version = nullptr);

void AppendRecord(RecordType type, ByteSpan payload, std::vector<uint8_t>* out);

struct RecordView {
  RecordType type = RecordType::kEntry;
  ByteSpan payload;
  size_t size = 0;  // bytes the whole record occupies
};

enum class ParseOutcome {
  kOk,
  kIncomplete,  // the data ends inside the record: a torn tail if this is the end of the file
  kCorrupt,     // bad magic, type, length or check
};

struct RecordParse {
  ParseOutcome outcome = ParseOutcome::kCorrupt;
  RecordView record;
  std::string error;  // for kIncomplete and kCorrupt
};

// Parses the record that starts at data[0]. Never reads outside `data`.
RecordParse ParseRecord(ByteSpan data);

// How a scan of a log file ended.
struct ScanEnd {
  bool clean = true;       // the file ended exactly after a record
  uint64_t bad_offset = 0;  // when !clean: where the unreadable bytes start
  bool incomplete = false;  // when !clean: the last record is cut short (vs. corrupt)
  std::string error;        // when !clean
  // When !clean: the offset of the first valid record found after bad_offset, or 0 if
  // none follows (then the damage is confined to the tail).
  uint64_t next_valid_offset = 0;
  uint64_t file_size = 0;
  uint32_t header_version = 0;  // once the header parsed
};

// Reads `path` sequentially (never all at once): checks the header, then calls
// `on_record(record, offset)` for every readable record in order; stops at the first
// unreadable byte and describes it in *end. A non-OK status from on_record stops the scan
// and is returned.
Status ScanLogFile(const std::string& path, Hash* log_id,
                   const std::function<Status(const RecordView&, uint64_t offset)>& on_record, ScanEnd* end);

}  // namespace enclave::audit
