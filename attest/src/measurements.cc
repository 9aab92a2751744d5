#include "enclave/attest/measurements.h"

#include <algorithm>
#include <cstring>

#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {

const std::array<uint8_t, 16> kEfiGlobalVariableGuid = {0x61, 0xDF, 0xE4, 0x8B, 0xCA, 0x93, 0xD2, 0x11,
                                                        0xAA, 0x0D, 0x00, 0xE0, 0x98, 0x03, 0x2B, 0x8C};
const std::array<uint8_t, 16> kEfiImageSecurityDatabaseGuid = {0xCB, 0xB2, 0x19, 0xD7, 0x3A, 0x3D, 0x96, 0x45,
                                                               0xA3, 0xBC, 0xDA, 0xD0, 0x0E, 0x67, 0x65, 0x6F};

namespace {

constexpr char kGrubKernelCmdline[] = "kernel_cmdline: ";

// Digest k of an event and its bank (EventLog keeps ids with digests, a view uses banks).
size_t DigestCount(const EventLog&, const Event& e) { return e.digests.size(); }
std::pair<uint16_t, ByteSpan> DigestAt(const EventLog&, const Event& e, size_t k) {
  return {e.digests[k].alg, e.digests[k].digest};
}
size_t DigestCount(const EventLogView& log, const EventView&) { return log.banks.size(); }
std::pair<uint16_t, ByteSpan> DigestAt(const EventLogView& log, const EventView& e, size_t k) {
  return {log.banks[k], e.digests[k]};
}

// Every digest of `e` equals H_bank(data); the first bank that differs, or "".
template <typename Log, typename Ev>
std::string DigestsCover(const Log& log, const Ev& e, ByteSpan data) {
  for (size_t k = 0; k < DigestCount(log, e); ++k) {
    auto [alg_id, digest] = DigestAt(log, e, k);
    auto h = Hash(alg_id, {data});
    if (!h.ok()) return AlgName(alg_id) + ": " + h.status().message();
    if (!std::equal(h->begin(), h->end(), digest.begin(), digest.end())) {
      return AlgName(alg_id) + " digest " + HexEncode(digest) + " is not H(data) " + HexEncode(*h);
    }
  }
  return "";
}

template <typename Ev>
std::string EventWhereT(const Ev& e) {
  return "event " + std::to_string(e.index) + " (" + EventTypeName(e.type) + ", PCR " + std::to_string(e.pcr) + ")";
}

uint64_t Le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool IsKnownEventType(uint32_t type) {
  // The ev:: list of event_log.h (PFP table 9), plus EV_UNUSED (0x2), as EventTypeName
  // names them; a switch, not a name look-up, because it runs once per event.
  if (type <= ev::kOmitBootDeviceEvents) return true;
  if (type >= ev::kEfiEventBase && type <= ev::kEfiVariableBoot2) return true;
  return type == ev::kEfiHcrtmEvent || type == ev::kEfiVariableAuthority || type == ev::kEfiSpdmFirmwareBlob ||
         type == ev::kEfiSpdmFirmwareConfig;
}

Result<UefiVariable> ParseUefiVariable(ByteSpan data) {
  if (data.size() < 32) {
    return InvalidInput("UEFI_VARIABLE_DATA is " + std::to_string(data.size()) + " bytes, the header needs 32");
  }
  UefiVariable v;
  std::copy(data.begin(), data.begin() + 16, v.guid.begin());
  uint64_t name_len = Le64(data.data() + 16);
  uint64_t data_len = Le64(data.data() + 24);
  const size_t rest = data.size() - 32;
  if (name_len > rest / 2 || data_len > rest - 2 * name_len || 2 * name_len + data_len != rest) {
    return InvalidInput("UEFI_VARIABLE_DATA UnicodeNameLength " + std::to_string(name_len) +
                        " and VariableDataLength " + std::to_string(data_len) + " do not fill the " +
                        std::to_string(rest) + " bytes after the header");
  }
  const uint8_t* name = data.data() + 32;
  for (uint64_t i = 0; i < name_len; ++i) {
    uint16_t c = static_cast<uint16_t>(name[2 * i] | (name[2 * i + 1] << 8));
    if (c < 0x20 || c > 0x7E)
      return InvalidInput("UEFI_VARIABLE_DATA UnicodeName has a non-printable or non-ASCII character");
    v.name.push_back(static_cast<char>(c));
  }
  const uint8_t* vd = name + 2 * name_len;
  v.data.assign(vd, vd + data_len);
  return v;
}

namespace {

template <typename Log>
Measurements ReadMeasurementsImpl(const Log& log) {
  Measurements m;
  auto problem = [&m](const auto& e, std::string check, std::string expected, std::string got) {
    m.problems.push_back({e.pcr, {std::move(check), EventWhereT(e), std::move(expected), std::move(got)}});
  };
  bool pcr7_separated = false;
  for (const auto& e : log.events) {
    if (e.index == 0 && log.format == LogFormat::kCryptoAgile) continue;  // the Spec ID header
    if (!IsKnownEventType(e.type)) {
      problem(e, "eventlog.event_type.unknown", "an event type of the TCG PC Client PFP", EventTypeName(e.type));
      continue;
    }
    switch (e.type) {
      case ev::kSeparator: {
        std::string bad = DigestsCover(log, e, e.data);
        if (e.data.size() != 4) {
          problem(e, "eventlog.separator.malformed", "4 bytes of data", std::to_string(e.data.size()) + " bytes");
          break;
        }
        if (!bad.empty()) {
          problem(e, "eventlog.separator.digest_mismatch", "digest = H(separator value)", bad);
          break;
        }
        uint32_t value = static_cast<uint32_t>(e.data[0] | (e.data[1] << 8) | (e.data[2] << 16)) |
                         (static_cast<uint32_t>(e.data[3]) << 24);
        m.separators[e.pcr].push_back(value);
        if (e.pcr == 7) {
          m.secure_boot.separators.push_back(value);
          pcr7_separated = true;
        }
        break;
      }
      case ev::kEfiVariableDriverConfig: {
        if (e.pcr != 7) break;  // PCR 1 configuration is judged by digests only
        if (pcr7_separated) {
          m.secure_boot.config_after_separator.push_back(e.index);
          break;
        }
        auto var = ParseUefiVariable(e.data);
        if (!var.ok()) {
          problem(e, "eventlog.variable.malformed", "a UEFI_VARIABLE_DATA", var.status().message());
          break;
        }
        std::string bad = DigestsCover(log, e, e.data);
        if (!bad.empty()) {
          problem(e, "eventlog.variable.digest_mismatch", "digest = H(UEFI_VARIABLE_DATA)", bad);
          break;
        }
        m.secure_boot.config.push_back({e.index, std::move(*var)});
        break;
      }
      case ev::kEfiBootServicesApplication: {
        if (e.pcr != 4) break;
        BootApplication app;
        app.event = e.index;
        for (size_t k = 0; k < DigestCount(log, e); ++k) {
          auto [alg_id, digest] = DigestAt(log, e, k);
          app.digests[alg_id].assign(digest.begin(), digest.end());
        }
        m.boot_applications.push_back(std::move(app));
        break;
      }
      case ev::kIpl: {
        if (e.pcr != 8) break;
        constexpr size_t kPrefix = sizeof(kGrubKernelCmdline) - 1;
        if (e.data.size() < kPrefix || std::memcmp(e.data.data(), kGrubKernelCmdline, kPrefix) != 0) break;
        std::string text(e.data.begin() + kPrefix, e.data.end());
        if (!text.empty() && text.back() == '\0') text.pop_back();
        if (text.find('\0') != std::string::npos) {
          problem(e, "eventlog.cmdline.malformed", "one NUL-terminated string", "an embedded NUL");
          break;
        }
        std::string bad = DigestsCover(log, e, AsBytes(text));
        if (!bad.empty()) {
          problem(e, "eventlog.cmdline.digest_mismatch", "digest = H(command line)", bad);
          break;
        }
        m.kernel_cmdlines.push_back({e.index, e.pcr, std::move(text)});
        break;
      }
      default:
        break;
    }
  }
  return m;
}

}  // namespace

Measurements ReadMeasurements(const EventLog& log) { return ReadMeasurementsImpl(log); }
Measurements ReadMeasurements(const EventLogView& log) { return ReadMeasurementsImpl(log); }

Appraisal CheckSecureBoot(const Measurements& m) {
  Appraisal a;
  const SecureBootReading& sb = m.secure_boot;
  if (sb.separators.empty()) {
    a.Fail("secureboot.separator.missing", "PCR 7", "one EV_SEPARATOR", "none");
  } else if (sb.separators.size() > 1) {
    a.Fail("secureboot.separator.repeated", "PCR 7", "one EV_SEPARATOR", std::to_string(sb.separators.size()));
  } else if (sb.separators[0] != 0) {
    a.Fail("secureboot.separator.error", "PCR 7", "separator value 00000000",
           sb.separators[0] == 0xFFFFFFFFu ? "ffffffff (firmware error)" : std::to_string(sb.separators[0]));
  }
  for (size_t idx : sb.config_after_separator) {
    a.Fail("secureboot.config.after_separator", "event " + std::to_string(idx),
           "no EV_EFI_VARIABLE_DRIVER_CONFIG after the PCR 7 separator", "EV_EFI_VARIABLE_DRIVER_CONFIG");
  }
  struct Required {
    const char* name;
    const std::array<uint8_t, 16>* guid;
  };
  static const Required kOrder[] = {{"SecureBoot", &kEfiGlobalVariableGuid},
                                    {"PK", &kEfiGlobalVariableGuid},
                                    {"KEK", &kEfiGlobalVariableGuid},
                                    {"db", &kEfiImageSecurityDatabaseGuid},
                                    {"dbx", &kEfiImageSecurityDatabaseGuid}};
  size_t last_pos = 0;
  bool order_ok = true;
  for (const Required& r : kOrder) {
    std::vector<size_t> at;
    for (size_t i = 0; i < sb.config.size(); ++i) {
      if (sb.config[i].var.name == r.name && sb.config[i].var.guid == *r.guid) at.push_back(i);
    }
    if (at.empty()) {
      a.Fail("secureboot.config.missing", std::string("PCR 7 ") + r.name,
             std::string("EV_EFI_VARIABLE_DRIVER_CONFIG ") + r.name + " before the separator", "not measured");
      order_ok = false;
      continue;
    }
    if (at.size() > 1) {
      a.Fail("secureboot.config.repeated", std::string("PCR 7 ") + r.name, "measured once",
             std::to_string(at.size()) + " times");
    }
    if (at[0] < last_pos) order_ok = false;
    last_pos = at[0];
    if (std::string(r.name) == "SecureBoot") {
      const auto& d = sb.config[at[0]].var.data;
      if (d.size() != 1 || d[0] != 1) {
        a.Fail("secureboot.disabled", "event " + std::to_string(sb.config[at[0]].event) + " SecureBoot", "01",
               d.empty() ? "(empty)" : HexEncode(d));
      }
    }
  }
  if (!order_ok && !a.Failed("secureboot.config.missing")) {
    a.Fail("secureboot.config.order", "PCR 7", "SecureBoot, PK, KEK, db, dbx in this order", "another order");
  }
  if (a.failures().empty()) a.Pass("secureboot.enabled");
  return a;
}

}  // namespace enclave::attest
