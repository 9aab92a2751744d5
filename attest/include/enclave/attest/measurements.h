// What a replayed boot event log says, read semantically for the policy: Secure Boot state
// (PCR 7), EFI boot applications (PCR 4), kernel command lines (GRUB, PCR 8) and
// separators. Sources: TCG PC Client Platform Firmware Profile (PFP) sections 3.3.4 and
// 10.4 (event types, UEFI_VARIABLE_DATA, separators); GRUB grub-core/commands/tpm.c
// (verify_string: EV_IPL in PCR 8, digest over the string, data "kernel_cmdline: " + string
// + NUL); Keylime's measured-boot policy reads the same events.
//
// The event type and event data are not covered by the digest that was extended. So data
// is believed only where the digest is defined over it, and is checked to be: for
// EV_EFI_VARIABLE_DRIVER_CONFIG digest = H(UEFI_VARIABLE_DATA), for EV_SEPARATOR
// digest = H(4-byte value), for GRUB command lines digest = H(command line), in every bank
// of the log. An event whose data contradicts its digest is a problem finding, and so is
// an event type this verifier does not know.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/event_log.h"

namespace enclave::attest {

// UEFI_VARIABLE_DATA (PFP 10.4.4 / UEFI spec): VariableName GUID (16 bytes, the first three
// fields little-endian), UnicodeNameLength u64 (CHAR16 count), VariableDataLength u64,
// UnicodeName (UTF-16LE, no NUL), VariableData. All little-endian.
struct UefiVariable {
  std::array<uint8_t, 16> guid{};
  std::string name;  // the UnicodeName as ASCII (non-ASCII names are a problem finding)
  std::vector<uint8_t> data;
};

struct VariableEvent {
  size_t event = 0;  // index in the log
  UefiVariable var;
};

struct SecureBootReading {
  // EV_EFI_VARIABLE_DRIVER_CONFIG events in PCR 7 before the first PCR 7 separator.
  std::vector<VariableEvent> config;
  // The same type in PCR 7 after the separator (the PFP does not allow them).
  std::vector<size_t> config_after_separator;
  // Separators in PCR 7: the 4-byte values in log order (0 = normal, 0xFFFFFFFF = error).
  std::vector<uint32_t> separators;
};

struct BootApplication {
  size_t event = 0;
  std::map<uint16_t, std::vector<uint8_t>> digests;  // bank -> digest (Authenticode hash)
};

struct KernelCmdline {
  size_t event = 0;
  uint32_t pcr = 0;
  std::string text;  // without the "kernel_cmdline: " prefix and the NUL
};

struct Measurements {
  SecureBootReading secure_boot;
  std::vector<BootApplication> boot_applications;  // PCR 4, log order
  std::vector<KernelCmdline> kernel_cmdlines;      // PCR 8, log order
  std::map<uint32_t, std::vector<uint32_t>> separators;  // PCR -> separator values, log order
  // Events of a type this verifier does not know, or whose data contradicts their digest,
  // as findings with the PCR they sit in (the caller keeps those in PCRs it judges).
  struct Problem {
    uint32_t pcr = 0;
    Finding finding;
  };
  std::vector<Problem> problems;
};

// True for the event types named in event_log.h's ev:: list.
bool IsKnownEventType(uint32_t type);

// Parses UEFI_VARIABLE_DATA exactly (no trailing bytes). InvalidInput names the field.
Result<UefiVariable> ParseUefiVariable(ByteSpan data);

// Reads the measurements of a parsed log. Never fails: what cannot be read is a problem.
Measurements ReadMeasurements(const EventLog& log);
Measurements ReadMeasurements(const EventLogView& log);

// The EFI_GLOBAL_VARIABLE GUID (SecureBoot, PK, KEK) and EFI_IMAGE_SECURITY_DATABASE_GUID
// (db, dbx), in their byte order in UEFI_VARIABLE_DATA.
extern const std::array<uint8_t, 16> kEfiGlobalVariableGuid;
extern const std::array<uint8_t, 16> kEfiImageSecurityDatabaseGuid;

// Secure Boot on, per the PFP's PCR 7 rules: exactly one separator in PCR 7 with value 0;
// before it, EV_EFI_VARIABLE_DRIVER_CONFIG for SecureBoot, PK, KEK, db and dbx (each once,
// with its GUID), SecureBoot's data the single byte 1; no driver-config event after the
// separator. Findings "secureboot.*"; one pass "secureboot.enabled".
Appraisal CheckSecureBoot(const Measurements& m);

}  // namespace enclave::attest
