#include "enclave/attest/event_log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

constexpr size_t kMaxHeaderAlgorithms = 8;
constexpr size_t kSha1Size = 20;

std::string At(size_t index, size_t offset) {
  return "event " + std::to_string(index) + " (offset " + std::to_string(offset) + ")";
}

Status EventError(size_t index, size_t offset, const std::string& what) {
  return InvalidInput(At(index, offset) + ": " + what);
}

// Reads u32 eventSize and the data, bounded. Field names are short and constant; the
// caller adds which event on failure, so the hot path builds no strings.
Status ReadEventData(ByteReader& r, std::vector<uint8_t>* out) {
  uint32_t size = 0;
  RETURN_IF_ERROR(r.U32("eventSize", &size));
  if (size > kMaxEventDataBytes) {
    return InvalidInput("field 'eventSize' is " + std::to_string(size) + ", more than the limit " +
                        std::to_string(kMaxEventDataBytes));
  }
  ByteSpan b;
  RETURN_IF_ERROR(r.Bytes("event", size, &b));
  out->assign(b.begin(), b.end());
  return OkStatus();
}

// TCG_PCR_EVENT (the SHA-1 layout).
Status ReadLegacyEventFields(ByteReader& r, Event* e) {
  RETURN_IF_ERROR(r.U32("pcrIndex", &e->pcr));
  RETURN_IF_ERROR(r.U32("eventType", &e->type));
  ByteSpan d;
  RETURN_IF_ERROR(r.Bytes("digest", kSha1Size, &d));
  e->digests = {{alg::kSha1, std::vector<uint8_t>(d.begin(), d.end())}};
  return ReadEventData(r, &e->data);
}

Status ReadLegacyEvent(ByteReader& r, size_t index, Event* e) {
  e->index = index;
  e->offset = r.offset();
  Status s = ReadLegacyEventFields(r, e);
  if (!s.ok()) return s.Annotate("TCG_PCR_EVENT[" + std::to_string(index) + "]");
  if (e->pcr >= 24) return EventError(index, e->offset, "pcrIndex " + std::to_string(e->pcr) + " is above 23");
  return OkStatus();
}

Result<SpecIdHeader> ParseSpecId(const Event& first) {
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
Status ReadEvent2(ByteReader& r, const SpecIdHeader& spec, Event* e) {
  RETURN_IF_ERROR(r.U32("pcrIndex", &e->pcr));
  RETURN_IF_ERROR(r.U32("eventType", &e->type));
  if (e->pcr >= 24) return EventError(e->index, e->offset, "pcrIndex " + std::to_string(e->pcr) + " is above 23");
  uint32_t count = 0;
  RETURN_IF_ERROR(r.U32("digests.count", &count));
  if (count != spec.algorithms.size()) {
    return EventError(e->index, e->offset,
                      "digests.count is " + std::to_string(count) + ", the header lists " +
                          std::to_string(spec.algorithms.size()) + " banks (every bank is required)");
  }
  std::vector<EventDigest> digests(spec.algorithms.size());
  std::vector<bool> seen(spec.algorithms.size(), false);
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t id = 0;
    size_t at = r.offset();
    RETURN_IF_ERROR(r.U16("digests.hashAlg", &id));
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
    if (seen[slot]) return EventError(e->index, e->offset, fi() + ".hashAlg: " + AlgName(id) + " appears twice");
    seen[slot] = true;
    ByteSpan dg;
    RETURN_IF_ERROR(r.Bytes("digests.digest", spec.algorithms[slot].second, &dg));
    digests[slot] = {id, std::vector<uint8_t>(dg.begin(), dg.end())};
  }
  e->digests = std::move(digests);
  return ReadEventData(r, &e->data);
}

}  // namespace

Result<EventLog> ParseEventLog(ByteSpan data) {
  if (data.size() > kMaxEventLogBytes) {
    return InvalidInput("event log is " + std::to_string(data.size()) + " bytes, more than the limit " +
                        std::to_string(kMaxEventLogBytes));
  }
  if (data.empty()) return InvalidInput("event log is empty");
  ByteReader r(data);
  EventLog log;
  Event first;
  RETURN_IF_ERROR(ReadLegacyEvent(r, 0, &first));
  bool has_spec03 = first.data.size() >= 16 && std::memcmp(first.data.data(), kSpecIdSignature, 16) == 0;
  if (!has_spec03) {
    // Legacy: every event in the SHA-1 layout.
    log.format = LogFormat::kLegacySha1;
    log.banks = {alg::kSha1};
    log.events.push_back(std::move(first));
    while (r.remaining() > 0) {
      Event e;
      RETURN_IF_ERROR(ReadLegacyEvent(r, log.events.size(), &e));
      log.events.push_back(std::move(e));
    }
    return log;
  }
  if (first.type != ev::kNoAction || first.pcr != 0) {
    return EventError(0, 0,
                      "the Spec ID Event03 header must be EV_NO_ACTION in PCR 0, got " + EventTypeName(first.type) +
                          " in PCR " + std::to_string(first.pcr));
  }
  const auto& d0 = first.digests[0].digest;
  if (std::any_of(d0.begin(), d0.end(), [](uint8_t b) { return b != 0; })) {
    return EventError(0, 0, "the Spec ID Event03 header's digest must be zero");
  }
  auto spec = ParseSpecId(first);
  if (!spec.ok()) return spec.status().Annotate(At(0, 0));
  log.format = LogFormat::kCryptoAgile;
  log.spec_id = *spec;
  for (auto [id, size] : spec->algorithms) log.banks.push_back(id);
  log.events.push_back(std::move(first));

  while (r.remaining() > 0) {
    Event e;
    e.index = log.events.size();
    e.offset = r.offset();
    Status st = ReadEvent2(r, *spec, &e);
    if (!st.ok()) return st.Annotate("TCG_PCR_EVENT2[" + std::to_string(e.index) + "]");
    log.events.push_back(std::move(e));
  }
  return log;
}

std::vector<uint8_t> InitialPcrValue(uint32_t index, size_t size, std::optional<uint8_t> locality) {
  std::vector<uint8_t> v(size, (index >= 17 && index <= 22) ? 0xFF : 0x00);
  if (index == 0 && locality && size > 0) v.back() = *locality;
  return v;
}

Result<ReplayResult> ReplayEventLog(const EventLog& log) {
  ReplayResult out;
  bool pcr0_extended = false;
  for (const Event& e : log.events) {
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
    if (e.pcr == 0) pcr0_extended = true;
    for (const EventDigest& d : e.digests) {
      auto& bank = out.pcrs[d.alg];
      auto it = bank.find(e.pcr);
      if (it == bank.end())
        it = bank.emplace(e.pcr, InitialPcrValue(e.pcr, HashSize(d.alg), out.startup_locality)).first;
      RETURN_IF_ERROR(ExtendInPlace(d.alg, it->second, d.digest));
    }
  }
  return out;
}

Appraisal CompareWithQuote(const EventLog& log, const ReplayResult& replay, const PcrValues& quoted,
                           const std::set<uint32_t>& exclude) {
  Appraisal a;
  size_t compared = 0;
  for (const auto& [bank, values] : quoted) {
    bool judged = false;
    for (const auto& [idx, unused] : values) judged |= !exclude.count(idx);
    if (!judged) continue;
    if (std::find(log.banks.begin(), log.banks.end(), bank) == log.banks.end()) {
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
