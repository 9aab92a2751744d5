// TCG PC Client measured-boot event logs (TCG PC Client Platform Firmware Profile,
// section 10): the crypto-agile format (first event a TCG_PCR_EVENT carrying the
// "Spec ID Event03" header, then TCG_PCR_EVENT2 events, little-endian) and the legacy
// SHA-1-only format (every event a TCG_PCR_EVENT). Parsing is exact: the header's size
// and every event's digests must match the header's algorithm list, and an algorithm id
// this verifier does not know is an error.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/tpm_alg.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

namespace ev {
inline constexpr uint32_t kPrebootCert = 0x0;
inline constexpr uint32_t kPostCode = 0x1;
inline constexpr uint32_t kNoAction = 0x3;
inline constexpr uint32_t kSeparator = 0x4;
inline constexpr uint32_t kAction = 0x5;
inline constexpr uint32_t kEventTag = 0x6;
inline constexpr uint32_t kSCrtmContents = 0x7;
inline constexpr uint32_t kSCrtmVersion = 0x8;
inline constexpr uint32_t kCpuMicrocode = 0x9;
inline constexpr uint32_t kPlatformConfigFlags = 0xA;
inline constexpr uint32_t kTableOfDevices = 0xB;
inline constexpr uint32_t kCompactHash = 0xC;
inline constexpr uint32_t kIpl = 0xD;
inline constexpr uint32_t kIplPartitionData = 0xE;
inline constexpr uint32_t kNonhostCode = 0xF;
inline constexpr uint32_t kNonhostConfig = 0x10;
inline constexpr uint32_t kNonhostInfo = 0x11;
inline constexpr uint32_t kOmitBootDeviceEvents = 0x12;
inline constexpr uint32_t kEfiEventBase = 0x80000000;
inline constexpr uint32_t kEfiVariableDriverConfig = 0x80000001;
inline constexpr uint32_t kEfiVariableBoot = 0x80000002;
inline constexpr uint32_t kEfiBootServicesApplication = 0x80000003;
inline constexpr uint32_t kEfiBootServicesDriver = 0x80000004;
inline constexpr uint32_t kEfiRuntimeServicesDriver = 0x80000005;
inline constexpr uint32_t kEfiGptEvent = 0x80000006;
inline constexpr uint32_t kEfiAction = 0x80000007;
inline constexpr uint32_t kEfiPlatformFirmwareBlob = 0x80000008;
inline constexpr uint32_t kEfiHandoffTables = 0x80000009;
inline constexpr uint32_t kEfiPlatformFirmwareBlob2 = 0x8000000A;
inline constexpr uint32_t kEfiHandoffTables2 = 0x8000000B;
inline constexpr uint32_t kEfiVariableBoot2 = 0x8000000C;
inline constexpr uint32_t kEfiHcrtmEvent = 0x80000010;
inline constexpr uint32_t kEfiVariableAuthority = 0x800000E0;
inline constexpr uint32_t kEfiSpdmFirmwareBlob = 0x800000E1;
inline constexpr uint32_t kEfiSpdmFirmwareConfig = 0x800000E2;
}  // namespace ev
// "EV_SEPARATOR", "EV_EFI_ACTION", ...; unknown types as "EV_UNKNOWN_0x%08x". Naming a
// type is for display only: the event type is not covered by the digest.
std::string EventTypeName(uint32_t type);

inline constexpr char kSpecIdSignature[] = "Spec ID Event03";           // 16 bytes with the NUL
inline constexpr char kStartupLocalitySignature[] = "StartupLocality";  // 16 with NUL

struct EventDigest {
  uint16_t alg = 0;
  std::vector<uint8_t> digest;
};

struct Event {
  size_t index = 0;   // position in the log, 0-based (the header event is 0)
  size_t offset = 0;  // byte offset of the event in the log
  uint32_t pcr = 0;
  uint32_t type = 0;
  std::vector<EventDigest> digests;  // crypto-agile: one per header bank, header order
  std::vector<uint8_t> data;
};

struct SpecIdHeader {
  uint32_t platform_class = 0;
  uint8_t version_minor = 0, version_major = 0, errata = 0, uintn_size = 0;
  std::vector<std::pair<uint16_t, uint16_t>> algorithms;  // (algId, digestSize)
  std::vector<uint8_t> vendor_info;
};

enum class LogFormat { kCryptoAgile, kLegacySha1 };

struct EventLog {
  LogFormat format = LogFormat::kCryptoAgile;
  std::optional<SpecIdHeader> spec_id;  // crypto-agile only
  std::vector<Event> events;            // includes the header event (index 0)
  std::vector<uint16_t> banks;          // header order; {sha1} for legacy
};

// Limits: 64 MiB of log, 16 MiB per event's data, 8 algorithms in the header.
inline constexpr size_t kMaxEventLogBytes = 64u << 20;
inline constexpr size_t kMaxEventDataBytes = 16u << 20;

Result<EventLog> ParseEventLog(ByteSpan data);

// The same log read without copying: digests and data point into the parsed bytes, which
// must outlive the view. The verifier's hot path (no allocation per event); ParseEventLog
// is built on it, so both accept exactly the same logs.
inline constexpr size_t kMaxLogBanks = 8;
struct EventView {
  size_t index = 0;
  size_t offset = 0;
  uint32_t pcr = 0;
  uint32_t type = 0;
  // digests[k] belongs to bank banks[k] of the log (the header event and legacy events:
  // digests[0], SHA-1).
  std::array<ByteSpan, kMaxLogBanks> digests{};
  ByteSpan data;
};
struct EventLogView {
  LogFormat format = LogFormat::kCryptoAgile;
  std::optional<SpecIdHeader> spec_id;
  std::vector<EventView> events;  // includes the header event (index 0)
  std::vector<uint16_t> banks;
};
Result<EventLogView> ParseEventLogView(ByteSpan data);

struct ReplayResult {
  // Final value of every PCR the log extends, per bank. PCRs the log does not extend are
  // absent (their value is the initial one).
  PcrValues pcrs;
  // Locality from a StartupLocality event, if any (PCR 0 started with it as last byte).
  std::optional<uint8_t> startup_locality;
};

// Initial value of PCR `index` in a bank of `size` bytes: zero, 0xFF.. for DRTM PCRs
// 17-22, and for PCR 0 the startup locality as last byte when given.
std::vector<uint8_t> InitialPcrValue(uint32_t index, size_t size, std::optional<uint8_t> locality);

// Replays every bank: extend = H(pcr || digest) for every event except EV_NO_ACTION,
// whatever its type. A StartupLocality EV_NO_ACTION in PCR 0 (locality 0, 3 or 4, at
// most once, before any extend of PCR 0) sets PCR 0's initial last byte. Errors
// (InvalidInput) for a malformed StartupLocality event.
Result<ReplayResult> ReplayEventLog(const EventLog& log);
// The same for the banks in `only_banks` (all banks when empty): a verifier replays only
// the banks it compares with a quote.
Result<ReplayResult> ReplayEventLog(const EventLog& log, std::span<const uint16_t> only_banks);
Result<ReplayResult> ReplayEventLog(const EventLogView& log, std::span<const uint16_t> only_banks = {});

// Compares the replayed values with quoted ones for every quoted (bank, PCR) that is not
// in `exclude`: a PCR the log extends must match ("eventlog.pcr.mismatch"); one it never
// extends must still hold its initial value ("eventlog.pcr.unlogged_extend"). A quoted
// bank the log does not carry fails ("eventlog.bank.missing").
Appraisal CompareWithQuote(const EventLog& log, const ReplayResult& replay, const PcrValues& quoted,
                           const std::set<uint32_t>& exclude);
// The same, given the log's banks (EventLog::banks or EventLogView::banks).
Appraisal CompareWithQuote(const std::vector<uint16_t>& log_banks, const ReplayResult& replay, const PcrValues& quoted,
                           const std::set<uint32_t>& exclude);

}  // namespace enclave::attest
