#include "enclave/attest/measurements.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

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

bool IsSignatureListSequence(ByteSpan data) {
  size_t off = 0;
  while (off < data.size()) {
    const size_t rest = data.size() - off;
    if (rest < 28) return false;
    const uint8_t* p = data.data() + off + 16;
    auto le32 = [](const uint8_t* q) {
      return static_cast<uint32_t>(q[0] | (q[1] << 8) | (q[2] << 16)) | (static_cast<uint32_t>(q[3]) << 24);
    };
    const uint64_t list_size = le32(p), header_size = le32(p + 4), sig_size = le32(p + 8);
    if (list_size > rest || list_size < 28 + header_size || sig_size < 16) return false;
    const uint64_t body = list_size - 28 - header_size;
    if (body == 0 || body % sig_size != 0) return false;
    off += static_cast<size_t>(list_size);
  }
  return true;
}

bool IsSignatureDataEntry(ByteSpan data) {
  if (data.size() <= 16) return false;
  ByteSpan sig = data.subspan(16);  // after the SignatureOwner GUID
  switch (sig.size()) {
    case 20: case 32: case 48: case 64:
      return true;  // an EFI_CERT_SHA1/256/384/512 image digest
    default:
      break;
  }
  // One DER SEQUENCE (an X.509 certificate) with a definite length that fills it exactly.
  if (sig.size() < 2 || sig[0] != 0x30) return false;
  size_t header = 2, length = sig[1];
  if (sig[1] & 0x80) {
    const size_t n = sig[1] & 0x7F;
    if (n == 0 || n > 4 || sig.size() < 2 + n) return false;
    length = 0;
    for (size_t i = 0; i < n; ++i) length = (length << 8) | sig[2 + i];
    header += n;
  }
  return header + length == sig.size();
}

bool IsSecureBootPolicyVariable(const UefiVariable& var) {
  if (var.guid == kEfiGlobalVariableGuid) return true;
  if (var.guid == kEfiImageSecurityDatabaseGuid) {
    if (var.name != "db") return true;
    return var.data.empty() || IsSignatureListSequence(var.data) || !IsSignatureDataEntry(var.data);
  }
  return false;
}

std::string GrubUnquoteCmdline(std::string_view cmdline) {
  std::string out;
  out.reserve(cmdline.size());
  for (size_t i = 0; i < cmdline.size(); ++i) {
    const char c = cmdline[i];
    if (c == '\\' && i + 1 < cmdline.size() &&
        (cmdline[i + 1] == '\\' || cmdline[i + 1] == '\'' || cmdline[i + 1] == '"')) {
      out.push_back(cmdline[++i]);
    } else if (c != '"') {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

// The GRUB string prefixes (grub-core/commands/tpm.c, grub_tpm_verify_string): the event
// data is prefix + string + NUL, the digest is over the string alone.
constexpr std::string_view kGrubPrefixes[] = {"grub_cmd: ", kGrubKernelCmdline, "module_cmdline: "};
// GRUB commands that load a Linux kernel and build its command line from their arguments.
constexpr std::string_view kLinuxLoaderCommands[] = {"linux", "linux16", "linuxefi"};
// Other GRUB commands that load a kernel with a command line; the kernel_cmdlines rule does
// not know how they build it, so it refuses them.
constexpr std::string_view kOtherLoaderCommands[] = {"multiboot", "multiboot2", "xen_hypervisor"};
// EV_EFI_ACTION strings (PFP 1.05 section 10.4.4) the rules recognise, per PCR.
constexpr std::string_view kPcr4Actions[] = {"Calling EFI Application from Boot Option",
                                             "Returning from EFI Application from Boot Option"};
constexpr std::string_view kUefiDebugMode = "UEFI Debug Mode";

std::string_view AsText(ByteSpan data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

// Unauthenticated data for a finding: quoted when printable ASCII, else hex (at most 64 bytes).
std::string Shown(ByteSpan data) {
  const bool nul = !data.empty() && data.back() == 0;  // GRUB strings end with one
  ByteSpan body = nul ? data.first(data.size() - 1) : data;
  ByteSpan head = body.first(std::min<size_t>(body.size(), 64));
  bool printable = std::all_of(head.begin(), head.end(), [](uint8_t c) { return c >= 0x20 && c < 0x7F; });
  if (!printable) return HexEncode(data.first(std::min<size_t>(data.size(), 64))) + (data.size() > 64 ? "..." : "");
  return "\"" + std::string(AsText(head)) + (head.size() < body.size() ? "...\"" : nul ? "\\0\"" : "\"");
}

template <typename Log>
Measurements ReadMeasurementsImpl(const Log& log) {
  using Scope = Measurements::Scope;
  Measurements m;
  auto problem = [&m](const auto& e, Scope scope, std::string check, std::string expected, std::string got) {
    m.problems.push_back({e.pcr, {std::move(check), EventWhereT(e), std::move(expected), std::move(got)}, scope});
  };
  auto unexpected_type = [&](const auto& e, Scope scope, const char* accepted) {
    problem(e, scope, "eventlog.event_type.unexpected", std::string(accepted) + " in PCR " + std::to_string(e.pcr),
            EventTypeName(e.type));
  };
  // EV_EFI_ACTION: the digest is H(string); the string must be one the rule knows. Returns
  // the verified string, or nullopt after a problem.
  auto read_action = [&](const auto& e, Scope scope, std::span<const std::string_view> known,
                         const std::string& expected) -> std::optional<std::string_view> {
    std::string bad = DigestsCover(log, e, e.data);
    if (!bad.empty()) {
      problem(e, scope, "eventlog.action.digest_mismatch", "digest = H(action string)", bad);
      return std::nullopt;
    }
    std::string_view text = AsText(e.data);
    for (std::string_view k : known) {
      if (text == k) return text;
    }
    problem(e, scope, "eventlog.action.unexpected", expected, Shown(e.data));
    return std::nullopt;
  };
  // A UEFI_VARIABLE_DATA whose digest is H(data), or nullopt after a problem.
  auto read_variable = [&](const auto& e, Scope scope, const char* what) -> std::optional<UefiVariable> {
    auto var = ParseUefiVariable(e.data);
    if (!var.ok()) {
      problem(e, scope, std::string("eventlog.") + what + ".malformed", "a UEFI_VARIABLE_DATA", var.status().message());
      return std::nullopt;
    }
    std::string bad = DigestsCover(log, e, e.data);
    if (!bad.empty()) {
      problem(e, scope, std::string("eventlog.") + what + ".digest_mismatch", "digest = H(UEFI_VARIABLE_DATA)", bad);
      return std::nullopt;
    }
    return std::move(*var);
  };

  // EV_EFI_VARIABLE_AUTHORITY in one of two forms, and nothing in between: the PFP's (the
  // data is exactly one UEFI_VARIABLE_DATA and digest = H(data)), or shim's before commit
  // 8a27a48 (go-attestation issue 157: one erroneous byte after the UEFI_VARIABLE_DATA, and
  // the digest over the data without it). The two cannot both fit one event (the header's
  // lengths fix the size), and only the bytes the digest covers are read.
  auto read_authority = [&](const auto& e) -> std::optional<UefiVariable> {
    auto var = ParseUefiVariable(e.data);
    if (var.ok()) return read_variable(e, Scope::kSecureBoot, "authority");
    if (!e.data.empty()) {
      const ByteSpan covered = ByteSpan(e.data).first(e.data.size() - 1);
      auto shim = ParseUefiVariable(covered);
      if (shim.ok()) {
        std::string bad = DigestsCover(log, e, covered);
        if (!bad.empty()) {
          problem(e, Scope::kSecureBoot, "eventlog.authority.digest_mismatch",
                  "digest = H(UEFI_VARIABLE_DATA) (shim form: the data without its one extra last byte)", bad);
          return std::nullopt;
        }
        m.quirks.push_back({e.index, e.pcr, "eventlog.quirk.shim_authority_extra_byte"});
        return std::move(*shim);
      }
    }
    problem(e, Scope::kSecureBoot, "eventlog.authority.malformed",
            "a UEFI_VARIABLE_DATA (or one and a single extra byte, shim's form)", var.status().message());
    return std::nullopt;
  };

  bool pcr7_separated = false;
  for (const auto& e : log.events) {
    if (e.index == 0 && log.format == LogFormat::kCryptoAgile) continue;  // the Spec ID header
    if (!IsKnownEventType(e.type)) {
      problem(e, Scope::kJudgedPcr, "eventlog.event_type.unknown", "an event type of the TCG PC Client PFP",
              EventTypeName(e.type));
      continue;
    }
    if (e.type == ev::kNoAction) continue;  // never extended: no rule reads it
    if (e.type == ev::kSeparator) {
      std::string bad = DigestsCover(log, e, e.data);
      if (e.data.size() != 4) {
        problem(e, Scope::kJudgedPcr, "eventlog.separator.malformed", "4 bytes of data",
                std::to_string(e.data.size()) + " bytes");
        continue;
      }
      if (!bad.empty()) {
        problem(e, Scope::kJudgedPcr, "eventlog.separator.digest_mismatch", "digest = H(separator value)", bad);
        continue;
      }
      uint32_t value = static_cast<uint32_t>(e.data[0] | (e.data[1] << 8) | (e.data[2] << 16)) |
                       (static_cast<uint32_t>(e.data[3]) << 24);
      m.separators[e.pcr].push_back(value);
      if (e.pcr == 7) {
        m.secure_boot.separators.push_back(value);
        pcr7_separated = true;
      }
      // The PFP puts separators in PCRs 0-7 only, and GRUB puts none in PCR 8: there, 4
      // bytes whose hash is the digest could as well be a relabelled 4-character string.
      if (e.pcr == 8) unexpected_type(e, Scope::kKernelCmdlines, "EV_IPL (GRUB strings) or EV_NO_ACTION");
      continue;
    }
    switch (e.pcr) {
      case 7: {  // Secure Boot policy (PFP 3.3.4.8)
        constexpr const char* kAccepted =
            "EV_EFI_VARIABLE_DRIVER_CONFIG, EV_EFI_VARIABLE_AUTHORITY, EV_EFI_ACTION, EV_SEPARATOR or EV_NO_ACTION";
        if (e.type == ev::kEfiVariableDriverConfig) {
          if (pcr7_separated) {
            m.secure_boot.config_after_separator.push_back({e.index, "EV_EFI_VARIABLE_DRIVER_CONFIG"});
            break;
          }
          auto var = read_variable(e, Scope::kJudgedPcr, "variable");
          if (var) m.secure_boot.config.push_back({e.index, std::move(*var)});
        } else if (e.type == ev::kEfiVariableAuthority) {
          auto var = read_authority(e);
          if (!var) break;
          if (IsSecureBootPolicyVariable(*var)) {
            // The type is not covered by the digest: a policy variable is configuration,
            // whatever the log calls it.
            if (pcr7_separated) {
              m.secure_boot.config_after_separator.push_back(
                  {e.index, "Secure Boot variable " + var->name + " logged as EV_EFI_VARIABLE_AUTHORITY"});
            } else {
              m.secure_boot.config.push_back({e.index, std::move(*var)});
            }
          } else {
            m.secure_boot.authorities.push_back({e.index, std::move(*var)});
          }
        } else if (e.type == ev::kEfiAction) {
          const std::string_view known[] = {kUefiDebugMode};
          if (read_action(e, Scope::kSecureBoot, known, "\"UEFI Debug Mode\" (the only EV_EFI_ACTION read in PCR 7)")) {
            m.secure_boot.debug_mode.push_back(e.index);
          }
        } else {
          unexpected_type(e, Scope::kSecureBoot, kAccepted);
        }
        break;
      }
      case 4: {  // boot manager code and boot attempts (PFP 3.3.4.5)
        if (e.type == ev::kEfiBootServicesApplication) {
          BootApplication app;
          app.event = e.index;
          for (size_t k = 0; k < DigestCount(log, e); ++k) {
            auto [alg_id, digest] = DigestAt(log, e, k);
            app.digests[alg_id].assign(digest.begin(), digest.end());
          }
          m.boot_applications.push_back(std::move(app));
        } else if (e.type == ev::kEfiAction) {
          (void)read_action(e, Scope::kBootApplications, kPcr4Actions,
                            "\"Calling EFI Application from Boot Option\" or "
                            "\"Returning from EFI Application from Boot Option\"");
        } else {
          unexpected_type(e, Scope::kBootApplications,
                          "EV_EFI_BOOT_SERVICES_APPLICATION, EV_EFI_ACTION, EV_SEPARATOR or EV_NO_ACTION");
        }
        break;
      }
      case 8: {  // GRUB strings (grub-core/commands/tpm.c)
        if (e.type != ev::kIpl) {
          unexpected_type(e, Scope::kKernelCmdlines, "EV_IPL (GRUB strings) or EV_NO_ACTION");
          break;
        }
        std::string_view data = AsText(e.data);
        std::string_view prefix;
        for (std::string_view p : kGrubPrefixes) {
          if (data.substr(0, p.size()) == p) prefix = p;
        }
        if (prefix.empty()) {
          problem(e, Scope::kKernelCmdlines, "eventlog.grub_string.malformed",
                  "\"grub_cmd: \", \"kernel_cmdline: \" or \"module_cmdline: \", a string and a NUL",
                  Shown(e.data));
          break;
        }
        const bool is_cmdline = prefix == kGrubKernelCmdline;
        // Command lines keep their historic codes (and scope); the other strings are new.
        const Scope scope = is_cmdline ? Scope::kJudgedPcr : Scope::kKernelCmdlines;
        const std::string code = is_cmdline ? "eventlog.cmdline" : "eventlog.grub_string";
        std::string text(data.substr(prefix.size()));
        if (!text.empty() && text.back() == '\0') text.pop_back();
        if (text.find('\0') != std::string::npos) {
          problem(e, scope, code + ".malformed", "one NUL-terminated string", "an embedded NUL");
          break;
        }
        std::string bad = DigestsCover(log, e, AsBytes(text));
        if (!bad.empty()) {
          problem(e, scope, code + ".digest_mismatch", "digest = H(string without its prefix)", bad);
          break;
        }
        // The prefix is not covered by the digest either, so the text decides what a string
        // is. A loader command is read as one whatever its prefix.
        std::string_view word = std::string_view(text).substr(0, text.find(' '));
        for (std::string_view c : kLinuxLoaderCommands) {
          if (word == c) {
            m.kernel_load_commands.push_back(
                {e.index, std::string(c), word.size() < text.size() ? text.substr(word.size() + 1) : ""});
          }
        }
        for (std::string_view c : kOtherLoaderCommands) {
          if (word == c) {
            problem(e, Scope::kKernelCmdlines, "cmdline.loader.unsupported",
                    "a Linux boot (GRUB linux, linux16 or linuxefi)", "GRUB command " + std::string(c));
          }
        }
        if (prefix == "module_cmdline: ") {
          // Only multiboot and Xen modules have command lines; a Linux boot has none.
          problem(e, Scope::kKernelCmdlines, "cmdline.loader.unsupported",
                  "a Linux boot (no module command lines)", "module_cmdline " + Shown(AsBytes(text)));
          break;
        }
        // A kernel command line starts with the kernel's file name, which GRUB only opens when
        // it starts with '/' or '(' (a device); a GRUB command never does. So such a text is a
        // kernel command line even when the log calls it a command.
        const bool looks_like_cmdline = !text.empty() && (text[0] == '/' || text[0] == '(');
        if (is_cmdline || looks_like_cmdline) m.kernel_cmdlines.push_back({e.index, e.pcr, std::move(text)});
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
    // The event data as logged (little-endian u32), in hex like `expected`. Both error values
    // are named: 00000001 (PFP 1.05 and later) and ffffffff (TCG EFI Platform 1.22).
    const uint32_t v = sb.separators[0];
    char hex[9];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, v >> 24);
    std::string got = hex;
    if (v == 1 || v == 0xFFFFFFFFu) got += " (firmware error)";
    a.Fail("secureboot.separator.error", "PCR 7", "separator value 00000000", got);
  }
  for (const LateConfig& late : sb.config_after_separator) {
    a.Fail("secureboot.config.after_separator", "event " + std::to_string(late.event),
           "no Secure Boot configuration after the PCR 7 separator", late.what);
  }
  for (size_t idx : sb.debug_mode) {
    a.Fail("secureboot.debug_mode", "event " + std::to_string(idx), "no EV_EFI_ACTION \"UEFI Debug Mode\" in PCR 7",
           "UEFI Debug Mode");
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
