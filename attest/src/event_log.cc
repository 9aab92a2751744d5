#include "enclave/attest/event_log.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>

#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

constexpr size_t kMaxHeaderAlgorithms = 8;
constexpr size_t kSha1Size = 20;
constexpr uint32_t kMaxLogPcrs = 24;  // the parser refuses pcrIndex above 23

std::string At(size_t index, size_t offset) {
  return "event " + std::to_string(index) + " (offset " + std::to_string(offset) + ")";
}

Status EventError(size_t index, size_t offset, const std::string& what) {
  return InvalidInput(At(index, offset) + ": " + what);
}

// pcrIndex must name a PCR (0..23), except for EV_NO_ACTION, which is never extended: real
// firmware logs it with any index (Windows boot logs carry 0xFFFFFFFF), so the type decides
// first (PFP section 10.4.5: EV_NO_ACTION events are informational, never extended).
Status CheckPcrIndex(const EventView& e) {
  if (e.type == ev::kNoAction || e.pcr < kMaxLogPcrs) return OkStatus();
  return EventError(e.index, e.offset, "pcrIndex " + std::to_string(e.pcr) + " is above 23 (" +
                                           EventTypeName(e.type) + ", only EV_NO_ACTION may name no PCR)");
}

// Reads u32 eventSize and the data, bounded. Field names are short and constant; the
// caller adds which event on failure, so the hot path builds no strings.
Status ReadEventData(ByteReader& r, ByteSpan* out) {
  uint32_t size = 0;
  RETURN_IF_ERROR(r.U32("eventSize", &size));
  if (size > kMaxEventDataBytes) {
    return InvalidInput("field 'eventSize' is " + std::to_string(size) + ", more than the limit " +
                        std::to_string(kMaxEventDataBytes));
  }
  return r.Bytes("event", size, out);
}

// TCG_PCR_EVENT (the SHA-1 layout).
Status ReadLegacyEventFields(ByteReader& r, EventView* e) {
  RETURN_IF_ERROR(r.U32("pcrIndex", &e->pcr));
  RETURN_IF_ERROR(r.U32("eventType", &e->type));
  RETURN_IF_ERROR(r.Bytes("digest", kSha1Size, &e->digests[0]));
  return ReadEventData(r, &e->data);
}

Status ReadLegacyEvent(ByteReader& r, size_t index, EventView* e) {
  e->index = index;
  e->offset = r.offset();
  Status s = ReadLegacyEventFields(r, e);
  if (!s.ok()) return s.Annotate("TCG_PCR_EVENT[" + std::to_string(index) + "]");
  return CheckPcrIndex(*e);
}

Result<SpecIdHeader> ParseSpecId(const EventView& first) {
  ByteReader r(first.data);
  SpecIdHeader h;
  ByteSpan sig;
  const std::string f = "TCG_EfiSpecIdEvent";
  RETURN_IF_ERROR(r.Bytes(f + ".signature", 16, &sig));
  RETURN_IF_ERROR(r.U32(f + ".platformClass", &h.platform_class));
  RETURN_IF_ERROR(r.U8(f + ".specVersionMinor", &h.version_minor));
  RETURN_IF_ERROR(r.U8(f + ".specVersionMajor", &h.version_major));
  RETURN_IF_ERROR(r.U8(f + ".specErrata", &h.errata));
  RETURN_IF_ERROR(r.U8(f + ".uintnSize", &h.uintn_size));
  uint32_t n = 0;
  RETURN_IF_ERROR(r.U32(f + ".numberOfAlgorithms", &n));
  if (n == 0 || n > kMaxHeaderAlgorithms) {
    return InvalidInput(f + ".numberOfAlgorithms is " + std::to_string(n) + ", expected 1.." +
                        std::to_string(kMaxHeaderAlgorithms));
  }
  for (uint32_t i = 0; i < n; ++i) {
    std::string fi = f + ".digestSizes[" + std::to_string(i) + "]";
    uint16_t id = 0, size = 0;
    RETURN_IF_ERROR(r.U16(fi + ".algorithmId", &id));
    RETURN_IF_ERROR(r.U16(fi + ".digestSize", &size));
    if (!IsSupportedHash(id)) return InvalidInput(fi + ".algorithmId: unknown algorithm " + AlgName(id));
    if (size != HashSize(id)) {
      return InvalidInput(fi + ".digestSize: " + std::to_string(size) + " for " + AlgName(id) + ", expected " +
                          std::to_string(HashSize(id)));
    }
    for (auto [seen, unused] : h.algorithms) {
      if (seen == id) return InvalidInput(fi + ".algorithmId: " + AlgName(id) + " listed twice");
    }
    h.algorithms.emplace_back(id, size);
  }
  uint8_t vendor_size = 0;
  RETURN_IF_ERROR(r.U8(f + ".vendorInfoSize", &vendor_size));
  ByteSpan vendor;
  RETURN_IF_ERROR(r.Bytes(f + ".vendorInfo", vendor_size, &vendor));
  h.vendor_info.assign(vendor.begin(), vendor.end());
  if (r.remaining() != 0) {
    return InvalidInput(f + ": eventSize is " + std::to_string(first.data.size()) + " but the header ends at " +
                        std::to_string(r.offset()) + " (size must be exact)");
  }
  if (h.version_major != 2) {
    return InvalidInput(f + ".specVersionMajor is " + std::to_string(h.version_major) + ", expected 2");
  }
  if (h.uintn_size != 1 && h.uintn_size != 2) {
    return InvalidInput(f + ".uintnSize is " + std::to_string(h.uintn_size) + ", expected 1 or 2");
  }
  return h;
}

}  // namespace

std::string EventTypeName(uint32_t type) {
  static const std::map<uint32_t, const char*> kNames = {
      {ev::kPrebootCert, "EV_PREBOOT_CERT"},
      {ev::kPostCode, "EV_POST_CODE"},
      {0x2, "EV_UNUSED"},
      {ev::kNoAction, "EV_NO_ACTION"},
      {ev::kSeparator, "EV_SEPARATOR"},
      {ev::kAction, "EV_ACTION"},
      {ev::kEventTag, "EV_EVENT_TAG"},
      {ev::kSCrtmContents, "EV_S_CRTM_CONTENTS"},
      {ev::kSCrtmVersion, "EV_S_CRTM_VERSION"},
      {ev::kCpuMicrocode, "EV_CPU_MICROCODE"},
      {ev::kPlatformConfigFlags, "EV_PLATFORM_CONFIG_FLAGS"},
      {ev::kTableOfDevices, "EV_TABLE_OF_DEVICES"},
      {ev::kCompactHash, "EV_COMPACT_HASH"},
      {ev::kIpl, "EV_IPL"},
      {ev::kIplPartitionData, "EV_IPL_PARTITION_DATA"},
      {ev::kNonhostCode, "EV_NONHOST_CODE"},
      {ev::kNonhostConfig, "EV_NONHOST_CONFIG"},
      {ev::kNonhostInfo, "EV_NONHOST_INFO"},
      {ev::kOmitBootDeviceEvents, "EV_OMIT_BOOT_DEVICE_EVENTS"},
      {ev::kEfiEventBase, "EV_EFI_EVENT_BASE"},
      {ev::kEfiVariableDriverConfig, "EV_EFI_VARIABLE_DRIVER_CONFIG"},
      {ev::kEfiVariableBoot, "EV_EFI_VARIABLE_BOOT"},
      {ev::kEfiBootServicesApplication, "EV_EFI_BOOT_SERVICES_APPLICATION"},
      {ev::kEfiBootServicesDriver, "EV_EFI_BOOT_SERVICES_DRIVER"},
      {ev::kEfiRuntimeServicesDriver, "EV_EFI_RUNTIME_SERVICES_DRIVER"},
      {ev::kEfiGptEvent, "EV_EFI_GPT_EVENT"},
      {ev::kEfiAction, "EV_EFI_ACTION"},
      {ev::kEfiPlatformFirmwareBlob, "EV_EFI_PLATFORM_FIRMWARE_BLOB"},
      {ev::kEfiHandoffTables, "EV_EFI_HANDOFF_TABLES"},
      {ev::kEfiPlatformFirmwareBlob2, "EV_EFI_PLATFORM_FIRMWARE_BLOB2"},
      {ev::kEfiHandoffTables2, "EV_EFI_HANDOFF_TABLES2"},
      {ev::kEfiVariableBoot2, "EV_EFI_VARIABLE_BOOT2"},
      {ev::kEfiHcrtmEvent, "EV_EFI_HCRTM_EVENT"},
      {ev::kEfiVariableAuthority, "EV_EFI_VARIABLE_AUTHORITY"},
      {ev::kEfiSpdmFirmwareBlob, "EV_EFI_SPDM_FIRMWARE_BLOB"},
      {ev::kEfiSpdmFirmwareConfig, "EV_EFI_SPDM_FIRMWARE_CONFIG"},
  };
  auto it = kNames.find(type);
  if (it != kNames.end()) return it->second;
  char buf[40];
  std::snprintf(buf, sizeof buf, "EV_UNKNOWN_0x%08x", type);
  return buf;
}

namespace {

// One TCG_PCR_EVENT2 after the header; errors name the field, the caller adds the event.
// Reads straight from the bytes with one bounds check per field (no Status per read: this
// runs once per event of logs with thousands); a short field gets ByteReader's message.
Status ReadEvent2(ByteSpan data, size_t* pos, const SpecIdHeader& spec, EventView* e) {
  size_t p = *pos;
  auto short_field = [&](const char* field, size_t n) {
    return InvalidInput("field '" + std::string(field) + "' at offset " + std::to_string(p) + " needs " +
                        std::to_string(n) + " bytes, " + std::to_string(data.size() - p) + " left");
  };
  auto u32 = [&]() {
    uint32_t v = static_cast<uint32_t>(data[p]) | static_cast<uint32_t>(data[p + 1]) << 8 |
                 static_cast<uint32_t>(data[p + 2]) << 16 | static_cast<uint32_t>(data[p + 3]) << 24;
    p += 4;
    return v;
  };
  if (data.size() - p < 4) return short_field("pcrIndex", 4);
  e->pcr = u32();
  if (data.size() - p < 4) return short_field("eventType", 4);
  e->type = u32();
  RETURN_IF_ERROR(CheckPcrIndex(*e));
  if (data.size() - p < 4) return short_field("digests.count", 4);
  uint32_t count = u32();
  if (count != spec.algorithms.size()) {
    return EventError(e->index, e->offset,
                      "digests.count is " + std::to_string(count) + ", the header lists " +
                          std::to_string(spec.algorithms.size()) + " banks (every bank is required)");
  }
  uint32_t seen = 0;  // bit k: header bank k read (at most 8 banks)
  for (uint32_t i = 0; i < count; ++i) {
    size_t at = p;
    if (data.size() - p < 2) return short_field("digests.hashAlg", 2);
    uint16_t id = static_cast<uint16_t>(data[p] | data[p + 1] << 8);
    p += 2;
    size_t slot = spec.algorithms.size();
    for (size_t k = 0; k < spec.algorithms.size(); ++k) {
      if (spec.algorithms[k].first == id) slot = k;
    }
    auto fi = [i] { return "digests[" + std::to_string(i) + "]"; };  // built only for an error
    if (slot == spec.algorithms.size()) {
      return EventError(e->index, e->offset,
                        fi() + ".hashAlg at offset " + std::to_string(at) + ": algorithm " + AlgName(id) +
                            " is not in the Spec ID header");
    }
    if (seen & (1u << slot))
      return EventError(e->index, e->offset, fi() + ".hashAlg: " + AlgName(id) + " appears twice");
    seen |= 1u << slot;
    const size_t size = spec.algorithms[slot].second;
    if (data.size() - p < size) return short_field("digests.digest", size);
    e->digests[slot] = data.subspan(p, size);
    p += size;
  }
  if (data.size() - p < 4) return short_field("eventSize", 4);
  uint32_t size = u32();
  if (size > kMaxEventDataBytes) {
    return InvalidInput("field 'eventSize' is " + std::to_string(size) + ", more than the limit " +
                        std::to_string(kMaxEventDataBytes));
  }
  if (data.size() - p < size) return short_field("event", size);
  e->data = data.subspan(p, size);
  *pos = p + size;
  return OkStatus();
}

}  // namespace

Result<EventLogView> ParseEventLogView(ByteSpan data) {
  if (data.size() > kMaxEventLogBytes) {
    return InvalidInput("event log is " + std::to_string(data.size()) + " bytes, more than the limit " +
                        std::to_string(kMaxEventLogBytes));
  }
  if (data.empty()) return InvalidInput("event log is empty");
  ByteReader r(data);
  EventLogView log;
  EventView first;
  RETURN_IF_ERROR(ReadLegacyEvent(r, 0, &first));
  bool has_spec03 = first.data.size() >= 16 && std::memcmp(first.data.data(), kSpecIdSignature, 16) == 0;
  if (!has_spec03) {
    // Legacy: every event in the SHA-1 layout.
    log.format = LogFormat::kLegacySha1;
    log.banks = {alg::kSha1};
    log.events.reserve(std::min<size_t>(data.size() / 32 + 1, size_t{1} << 16));
    log.events.push_back(first);
    while (r.remaining() > 0) {
      EventView e;
      RETURN_IF_ERROR(ReadLegacyEvent(r, log.events.size(), &e));
      log.events.push_back(e);
    }
    return log;
  }
  if (first.type != ev::kNoAction || first.pcr != 0) {
    return EventError(0, 0,
                      "the Spec ID Event03 header must be EV_NO_ACTION in PCR 0, got " + EventTypeName(first.type) +
                          " in PCR " + std::to_string(first.pcr));
  }
  const ByteSpan d0 = first.digests[0];
  if (std::any_of(d0.begin(), d0.end(), [](uint8_t b) { return b != 0; })) {
    return EventError(0, 0, "the Spec ID Event03 header's digest must be zero");
  }
  auto spec = ParseSpecId(first);
  if (!spec.ok()) return spec.status().Annotate(At(0, 0));
  log.format = LogFormat::kCryptoAgile;
  log.spec_id = *spec;
  for (auto [id, size] : spec->algorithms) log.banks.push_back(id);
  // The smallest TCG_PCR_EVENT2 with these banks bounds the event count; reserving (up to
  // 64Ki events) saves the re-allocations of a growing vector.
  size_t min_event = 16;
  for (auto [id, size] : spec->algorithms) min_event += 2u + size;
  log.events.reserve(std::min<size_t>(r.remaining() / min_event + 2, size_t{1} << 16));
  log.events.push_back(first);

  size_t pos = r.offset();
  while (pos < data.size()) {
    EventView e;
    e.index = log.events.size();
    e.offset = pos;
    Status st = ReadEvent2(data, &pos, *spec, &e);
    if (!st.ok()) return st.Annotate("TCG_PCR_EVENT2[" + std::to_string(e.index) + "]");
    log.events.push_back(e);
  }
  return log;
}

Result<EventLog> ParseEventLog(ByteSpan data) {
  ASSIGN_OR_RETURN(EventLogView view, ParseEventLogView(data));
  EventLog log;
  log.format = view.format;
  log.spec_id = std::move(view.spec_id);
  log.banks = view.banks;
  log.events.reserve(view.events.size());
  for (const EventView& v : view.events) {
    Event e;
    e.index = v.index;
    e.offset = v.offset;
    e.pcr = v.pcr;
    e.type = v.type;
    // The header event and legacy events carry one SHA-1 digest; TCG_PCR_EVENT2 one per
    // header bank, in header order.
    bool sha1_layout = log.format == LogFormat::kLegacySha1 || v.index == 0;
    size_t n = sha1_layout ? 1 : log.banks.size();
    e.digests.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      e.digests.push_back({sha1_layout ? alg::kSha1 : log.banks[k],
                           std::vector<uint8_t>(v.digests[k].begin(), v.digests[k].end())});
    }
    e.data.assign(v.data.begin(), v.data.end());
    log.events.push_back(std::move(e));
  }
  return log;
}

std::vector<uint8_t> InitialPcrValue(uint32_t index, size_t size, std::optional<uint8_t> locality) {
  std::vector<uint8_t> v(size, (index >= 17 && index <= 22) ? 0xFF : 0x00);
  if (index == 0 && locality && size > 0) v.back() = *locality;
  return v;
}

namespace {

// Digest k of an event, and its bank: EventLog keeps them with their ids, a view in the
// order of log.banks.
size_t DigestCount(const EventLog&, const Event& e) { return e.digests.size(); }
std::pair<uint16_t, ByteSpan> DigestAt(const EventLog&, const Event& e, size_t k) {
  return {e.digests[k].alg, e.digests[k].digest};
}
size_t DigestCount(const EventLogView& log, const EventView&) { return log.banks.size(); }
std::pair<uint16_t, ByteSpan> DigestAt(const EventLogView& log, const EventView& e, size_t k) {
  return {log.banks[k], e.digests[k]};
}

template <typename Log>
Result<ReplayResult> ReplayImpl(const Log& log, std::span<const uint16_t> only_banks) {
  // PCR values live in fixed arrays while replaying (no map look-up or vector per extend)
  // and become the PcrValues map at the end.
  struct Bank {
    uint16_t alg = 0;
    size_t size = 0;
    uint32_t extended = 0;  // bit i: PCR i was extended
    std::array<std::array<uint8_t, 64>, kMaxLogPcrs> value{};
  };
  std::vector<Bank> banks;
  for (uint16_t b : log.banks) {
    if (!only_banks.empty() && std::find(only_banks.begin(), only_banks.end(), b) == only_banks.end()) continue;
    size_t size = HashSize(b);
    if (size == 0 || size > 64) return Unsupported("PCR bank " + AlgName(b));
    banks.push_back({b, size, 0, {}});
  }
  ReplayResult out;
  bool pcr0_extended = false;
  for (const auto& e : log.events) {
    if (e.type == ev::kNoAction) {
      // Never extended. The StartupLocality event sets PCR 0's initial value.
      constexpr size_t kSigLen = sizeof(kStartupLocalitySignature);  // 16 with the NUL
      if (e.data.size() >= kSigLen && std::memcmp(e.data.data(), kStartupLocalitySignature, kSigLen) == 0) {
        if (e.pcr != 0)
          return EventError(e.index, e.offset, "StartupLocality event in PCR " + std::to_string(e.pcr) + ", not 0");
        if (e.data.size() != kSigLen + 1) {
          return EventError(e.index, e.offset,
                            "StartupLocality event data is " + std::to_string(e.data.size()) + " bytes, expected 17");
        }
        if (out.startup_locality) return EventError(e.index, e.offset, "second StartupLocality event");
        if (pcr0_extended) return EventError(e.index, e.offset, "StartupLocality event after PCR 0 was extended");
        uint8_t loc = e.data[kSigLen];
        if (loc != 0 && loc != 3 && loc != 4) {
          return EventError(e.index, e.offset, "StartupLocality " + std::to_string(loc) + " (expected 0, 3 or 4)");
        }
        out.startup_locality = loc;
      }
      continue;
    }
    if (e.pcr >= kMaxLogPcrs)
      return EventError(e.index, e.offset, "pcrIndex " + std::to_string(e.pcr) + " is above 23");
    if (e.pcr == 0) pcr0_extended = true;
    for (size_t k = 0; k < DigestCount(log, e); ++k) {
      auto [alg_id, digest] = DigestAt(log, e, k);
      Bank* bank = nullptr;
      for (Bank& b : banks) {
        if (b.alg == alg_id) bank = &b;
      }
      if (bank == nullptr) continue;
      std::span<uint8_t> pcr(bank->value[e.pcr].data(), bank->size);
      if (!(bank->extended & (1u << e.pcr))) {
        auto init = InitialPcrValue(e.pcr, bank->size, out.startup_locality);
        std::copy(init.begin(), init.end(), pcr.begin());
        bank->extended |= 1u << e.pcr;
      }
      RETURN_IF_ERROR(ExtendInPlace(alg_id, pcr, digest));
    }
  }
  for (const Bank& b : banks) {
    if (b.extended == 0) continue;
    auto& m = out.pcrs[b.alg];
    for (uint32_t i = 0; i < kMaxLogPcrs; ++i) {
      if (b.extended & (1u << i)) m.emplace(i, std::vector<uint8_t>(b.value[i].begin(), b.value[i].begin() + b.size));
    }
  }
  return out;
}

}  // namespace

Result<ReplayResult> ReplayEventLog(const EventLog& log) { return ReplayImpl(log, {}); }
Result<ReplayResult> ReplayEventLog(const EventLog& log, std::span<const uint16_t> only_banks) {
  return ReplayImpl(log, only_banks);
}
Result<ReplayResult> ReplayEventLog(const EventLogView& log, std::span<const uint16_t> only_banks) {
  return ReplayImpl(log, only_banks);
}

Appraisal CompareWithQuote(const EventLog& log, const ReplayResult& replay, const PcrValues& quoted,
                           const std::set<uint32_t>& exclude) {
  return CompareWithQuote(log.banks, replay, quoted, exclude);
}

Appraisal CompareWithQuote(const std::vector<uint16_t>& log_banks, const ReplayResult& replay, const PcrValues& quoted,
                           const std::set<uint32_t>& exclude) {
  Appraisal a;
  size_t compared = 0;
  for (const auto& [bank, values] : quoted) {
    bool judged = false;
    for (const auto& [idx, unused] : values) judged |= !exclude.count(idx);
    if (!judged) continue;
    if (std::find(log_banks.begin(), log_banks.end(), bank) == log_banks.end()) {
      a.Fail("eventlog.bank.missing", AlgName(bank), "the log to carry the quoted bank", "not in the log");
      continue;
    }
    auto rb = replay.pcrs.find(bank);
    for (const auto& [idx, value] : values) {
      if (exclude.count(idx)) continue;
      std::string where = AlgName(bank) + " PCR " + std::to_string(idx);
      ++compared;
      const std::vector<uint8_t>* replayed = nullptr;
      if (rb != replay.pcrs.end()) {
        auto it = rb->second.find(idx);
        if (it != rb->second.end()) replayed = &it->second;
      }
      if (replayed != nullptr) {
        if (*replayed != value) a.Fail("eventlog.pcr.mismatch", where, HexEncode(*replayed), HexEncode(value));
      } else {
        auto initial = InitialPcrValue(idx, HashSize(bank), replay.startup_locality);
        if (initial != value) a.Fail("eventlog.pcr.unlogged_extend", where, HexEncode(initial), HexEncode(value));
      }
    }
  }
  if (compared == 0) {
    a.Fail("eventlog.pcrs.none_compared", "", "at least one quoted PCR judged by the event log", "none");
  } else if (a.failures().empty()) {
    a.Pass("eventlog.pcrs");
  }
  return a;
}

}  // namespace enclave::attest
