#include "enclave/audit/record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

constexpr char kFileMagic[8] = {'E', 'A', 'U', 'D', 'I', 'T', 'L', 'G'};
constexpr char kRecordMagic[4] = {'E', 'A', 'R', '1'};
constexpr size_t kMaxRecord = kRecordOverhead + kMaxEntryBytes;
constexpr size_t kReadBuffer = 8u << 20;

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

Status PreadAll(int fd, uint64_t offset, uint8_t* out, size_t n, size_t* got, const std::string& path) {
  *got = 0;
  while (*got < n) {
    ssize_t r = ::pread(fd, out + *got, n - *got, static_cast<off_t>(offset + *got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading " + path, errno);
    }
    if (r == 0) break;
    *got += static_cast<size_t>(r);
  }
  return OkStatus();
}

// The first offset > `from` where a complete, valid record starts, or 0.
Result<uint64_t> FindNextValidRecord(int fd, uint64_t from, uint64_t file_size, const std::string& path) {
  std::vector<uint8_t> window(std::min<uint64_t>(file_size - from, 4u << 20) + kMaxRecord);
  uint64_t start = from + 1;
  while (start + kRecordOverhead <= file_size) {
    size_t got = 0;
    RETURN_IF_ERROR(PreadAll(fd, start, window.data(), window.size(), &got, path));
    const bool at_eof = start + got >= file_size;
    // Positions whose longest possible record still fits in the window (all, at EOF).
    const size_t limit = at_eof ? got : (got > kMaxRecord ? got - kMaxRecord : 0);
    for (size_t p = 0; p + 4 <= got && p < std::max<size_t>(limit, 1); ++p) {
      if (std::memcmp(window.data() + p, kRecordMagic, 4) != 0) continue;
      RecordParse r = ParseRecord(ByteSpan(window.data() + p, got - p));
      if (r.outcome == ParseOutcome::kOk) return start + p;
    }
    if (at_eof || limit == 0) break;
    start += limit;
  }
  return uint64_t{0};
}

}  // namespace

std::vector<uint8_t> EncodeFileHeader(const Hash& log_id, uint32_t version) {
  ByteWriter w;
  w.Bytes(std::string_view(kFileMagic, 8));
  w.U32(version);
  w.U32(0);
  w.Bytes(log_id);
  return std::move(w.bytes());
}

Result<Hash> ParseFileHeader(ByteSpan header, uint32_t* version_out) {
  if (header.size() < kFileHeaderSize) {
    return InvalidInput("file header is " + std::to_string(header.size()) + " bytes, expected " +
                        std::to_string(kFileHeaderSize) + " (not an audit log, or truncated)");
  }
  if (std::memcmp(header.data(), kFileMagic, 8) != 0) return InvalidInput("not an audit log (bad magic at offset 0)");
  const uint32_t version = Le32(header.data() + 8);
  if (version != kLogVersionLegacy && version != kLogVersion) {
    return Unsupported("audit log format version " + std::to_string(version) + " (know 1 and 2)");
  }
  if (version_out != nullptr) *version_out = version;
  if (Le32(header.data() + 12) != 0) return Unsupported("audit log header flags at offset 12 are not zero");
  Hash id{};
  std::copy(header.begin() + 16, header.begin() + 48, id.begin());
  return id;
}

void AppendRecord(RecordType type, ByteSpan payload, std::vector<uint8_t>* out) {
  const size_t start = out->size();
  out->insert(out->end(), kRecordMagic, kRecordMagic + 4);
  out->push_back(static_cast<uint8_t>(type));
  out->insert(out->end(), 3, 0);
  const uint32_t len = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(len >> (8 * i)));
  out->insert(out->end(), payload.begin(), payload.end());
  const Hash check = crypto::Sha256(ByteSpan(out->data() + start, out->size() - start));
  out->insert(out->end(), check.begin(), check.begin() + 8);
}

RecordParse ParseRecord(ByteSpan data) {
  RecordParse r;
  if (data.empty()) {
    r.outcome = ParseOutcome::kIncomplete;
    r.error = "no bytes left for a record";
    return r;
  }
  // Judge every header byte that is present before calling a short record "incomplete",
  // so garbage is reported as corrupt as early as possible.
  const size_t magic_have = std::min<size_t>(data.size(), 4);
  if (std::memcmp(data.data(), kRecordMagic, magic_have) != 0) {
    r.outcome = ParseOutcome::kCorrupt;
    r.error = "bad record magic (expected \"EAR1\")";
    return r;
  }
  if (data.size() > 4 && data[4] != static_cast<uint8_t>(RecordType::kEntry) &&
      data[4] != static_cast<uint8_t>(RecordType::kTreeHead) &&
      data[4] != static_cast<uint8_t>(RecordType::kChainedTreeHead)) {
    r.outcome = ParseOutcome::kCorrupt;
    r.error = "unknown record type " + std::to_string(data[4]);
    return r;
  }
  for (size_t i = 5; i < 8 && i < data.size(); ++i) {
    if (data[i] != 0) {
      r.outcome = ParseOutcome::kCorrupt;
      r.error = "reserved record byte " + std::to_string(i) + " is not zero";
      return r;
    }
  }
  if (data.size() < 12) {
    r.outcome = ParseOutcome::kIncomplete;
    r.error = "record header cut short (" + std::to_string(data.size()) + " of 12 bytes)";
    return r;
  }
  const auto type = static_cast<RecordType>(data[4]);
  const uint32_t len = Le32(data.data() + 8);
  const bool len_ok = type == RecordType::kEntry      ? (len >= 1 && len <= kMaxEntryBytes)
                      : type == RecordType::kTreeHead ? len == 112
                                                      : len == 216;
  if (!len_ok) {
    r.outcome = ParseOutcome::kCorrupt;
    r.error = "record payload length " + std::to_string(len) + " is invalid for a " +
              (type == RecordType::kEntry      ? "entry (1..65536)"
               : type == RecordType::kTreeHead ? "legacy tree head (112)"
                                               : "chained tree head (216)");
    return r;
  }
  const size_t total = kRecordOverhead + len;
  if (data.size() < total) {
    r.outcome = ParseOutcome::kIncomplete;
    r.error = "record cut short (" + std::to_string(data.size()) + " of " + std::to_string(total) + " bytes)";
    return r;
  }
  const Hash check = crypto::Sha256(data.first(12 + len));
  if (std::memcmp(check.data(), data.data() + 12 + len, 8) != 0) {
    r.outcome = ParseOutcome::kCorrupt;
    r.error = "record check (SHA-256 prefix) mismatch";
    return r;
  }
  r.outcome = ParseOutcome::kOk;
  r.record.type = type;
  r.record.payload = data.subspan(12, len);
  r.record.size = total;
  return r;
}

Status ScanLogFile(const std::string& path, Hash* log_id,
                   const std::function<Status(const RecordView&, uint64_t offset)>& on_record, ScanEnd* end) {
  *end = ScanEnd{};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening " + path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus(path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidInput(path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  end->file_size = file_size;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  uint8_t header[kFileHeaderSize];
  size_t got = 0;
  RETURN_IF_ERROR(PreadAll(fd, 0, header, sizeof header, &got, path));
  auto id = ParseFileHeader(ByteSpan(header, got), &end->header_version);
  if (!id.ok()) return id.status().Annotate(path);
  *log_id = *id;

  // Big enough for the longest record; no bigger than the file needs.
  std::vector<uint8_t> buf(std::max<uint64_t>(std::min<uint64_t>(file_size, kReadBuffer), kMaxRecord));
  size_t have = 0;                     // valid bytes in buf
  size_t pos = 0;                      // parse position in buf
  uint64_t buf_offset = kFileHeaderSize;  // file offset of buf[0]
  bool eof = false;
  while (true) {
    if (pos == have && eof) break;
    RecordParse r;
    if (pos < have) r = ParseRecord(ByteSpan(buf.data() + pos, have - pos));
    if (pos == have || (r.outcome == ParseOutcome::kIncomplete && !eof)) {
      // Refill: keep the unparsed bytes, read more after them.
      if (pos > 0) {
        std::memmove(buf.data(), buf.data() + pos, have - pos);
        buf_offset += pos;
        have -= pos;
        pos = 0;
      }
      size_t n = 0;
      RETURN_IF_ERROR(PreadAll(fd, buf_offset + have, buf.data() + have, buf.size() - have, &n, path));
      if (n == 0) eof = true;
      have += n;
      continue;
    }
    const uint64_t offset = buf_offset + pos;
    if (r.outcome != ParseOutcome::kOk) {
      end->clean = false;
      end->bad_offset = offset;
      end->incomplete = r.outcome == ParseOutcome::kIncomplete;
      end->error = r.error;
      ASSIGN_OR_RETURN(end->next_valid_offset, FindNextValidRecord(fd, offset, file_size, path));
      return OkStatus();
    }
    RETURN_IF_ERROR(on_record(r.record, offset));
    pos += r.record.size;
  }
  return OkStatus();
}

}  // namespace enclave::audit
