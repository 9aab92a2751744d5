// What a replayed boot event log says, read semantically for the policy: Secure Boot state
// (PCR 7), EFI boot applications (PCR 4), kernel command lines (GRUB, PCR 8) and
// separators. Sources: TCG PC Client Platform Firmware Profile (PFP) sections 3.3.4 and
// 10.4 (event types, UEFI_VARIABLE_DATA, separators); GRUB grub-core/commands/tpm.c
// (verify_string: EV_IPL in PCR 8, digest over the string, data "kernel_cmdline: " + string
// + NUL); Keylime's measured-boot policy reads the same events.
//
// The event type and event data are not covered by the digest that was extended. So data
// is believed only where the digest is defined over it, and is checked to be: for
// EV_EFI_VARIABLE_DRIVER_CONFIG and EV_EFI_VARIABLE_AUTHORITY digest = H(UEFI_VARIABLE_DATA),
// for EV_SEPARATOR digest = H(4-byte value), for EV_EFI_ACTION digest = H(string), for GRUB
// strings digest = H(string without its prefix), in every bank of the log. An event whose
// data contradicts its digest is a problem finding, and so is an event type this verifier
// does not know.
//
// Because the type is not authenticated either, the PCRs that a semantic rule reads (4 for
// boot applications, 7 for Secure Boot, 8 for GRUB command lines) accept only the event
// types (and, for EV_EFI_ACTION, the strings) that the rule recognises there; any other
// event in them is a problem in that rule's scope, so relabelling an event cannot hide it
// from the rule. See docs/formats/attestation-policy.md, "Events".
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

struct LateConfig {
  size_t event = 0;  // index in the log
  std::string what;  // how it was logged, for the finding
};

struct SecureBootReading {
  // Secure Boot configuration in PCR 7 before the first PCR 7 separator:
  // EV_EFI_VARIABLE_DRIVER_CONFIG events, and EV_EFI_VARIABLE_AUTHORITY events whose
  // variable is a Secure Boot policy variable (IsSecureBootPolicyVariable), whatever
  // their logged type says.
  std::vector<VariableEvent> config;
  // The same in PCR 7 after the separator (the PFP does not allow them).
  std::vector<LateConfig> config_after_separator;
  // Separators in PCR 7: the 4-byte values in log order (0 = normal, 0xFFFFFFFF = error).
  std::vector<uint32_t> separators;
  // EV_EFI_VARIABLE_AUTHORITY events (verified) that name a certificate or signature used.
  std::vector<VariableEvent> authorities;
  // EV_EFI_ACTION "UEFI Debug Mode" events (verified) in PCR 7.
  std::vector<size_t> debug_mode;
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

// A GRUB string in PCR 8 (any prefix: the prefix is not covered by the digest) whose text is
// a Linux loader command (`linux`, `linux16`, `linuxefi`): GRUB measures the command that
// loads a kernel as well as the command line it builds, so the command's arguments are a
// kernel command line too, however the event's prefix was relabelled.
struct KernelLoadCommand {
  size_t event = 0;
  std::string command;    // "linux"
  std::string arguments;  // the rest of the text after the command and one space
};

struct Measurements {
  SecureBootReading secure_boot;
  std::vector<BootApplication> boot_applications;  // PCR 4, log order
  std::vector<KernelCmdline> kernel_cmdlines;      // PCR 8, log order
  std::vector<KernelLoadCommand> kernel_load_commands;  // PCR 8, log order
  std::map<uint32_t, std::vector<uint32_t>> separators;  // PCR -> separator values, log order
  // Events of a type this verifier does not know, or whose data contradicts their digest,
  // or that the rule reading their PCR does not accept there, as findings with the PCR
  // they sit in and the scope that makes them count.
  enum class Scope {
    kJudgedPcr,         // counts when the policy judges the PCR at all (Policy::JudgedPcrs)
    kSecureBoot,        // counts when the policy has secure_boot (PCR 7)
    kBootApplications,  // counts when the policy has boot_applications (PCR 4)
    kKernelCmdlines,    // counts when the policy has kernel_cmdlines (PCR 8)
  };
  struct Problem {
    uint32_t pcr = 0;
    Finding finding;
    Scope scope = Scope::kJudgedPcr;
  };
  std::vector<Problem> problems;
  // Tolerated firmware quirks (docs/formats/evidence.md, "Tolerated firmware quirks"): each
  // an event that passed only in the quirk's exact form, named for the verdict.
  struct Quirk {
    size_t event = 0;
    uint32_t pcr = 0;
    std::string name;  // "eventlog.quirk.shim_authority_extra_byte"
  };
  std::vector<Quirk> quirks;
};

// True for the event types named in event_log.h's ev:: list.
bool IsKnownEventType(uint32_t type);

// Parses UEFI_VARIABLE_DATA exactly (no trailing bytes). InvalidInput names the field.
Result<UefiVariable> ParseUefiVariable(ByteSpan data);

// True when `data` is a sequence of EFI_SIGNATURE_LISTs (UEFI 2.10 section 32.4.1: each
// SignatureType GUID, SignatureListSize u32, SignatureHeaderSize u32, SignatureSize u32,
// header, then whole EFI_SIGNATURE_DATA entries of SignatureSize >= 16 bytes) that fills
// `data` exactly: the contents of PK, KEK, db, dbx.
bool IsSignatureListSequence(ByteSpan data);

// True when `data` is one EFI_SIGNATURE_DATA as an EV_EFI_VARIABLE_AUTHORITY for db
// carries it: a 16-byte SignatureOwner GUID, then either a SHA-1/256/384/512 digest (20,
// 32, 48 or 64 bytes) or one DER SEQUENCE (an X.509 certificate) whose definite length
// fills the rest exactly.
bool IsSignatureDataEntry(ByteSpan data);

// A Secure Boot policy variable, as opposed to the authority (one EFI_SIGNATURE_DATA, or a
// shim certificate or SBAT level) that an EV_EFI_VARIABLE_AUTHORITY names: any
// EFI_GLOBAL_VARIABLE (SecureBoot, PK, KEK, AuditMode, ...), any
// EFI_IMAGE_SECURITY_DATABASE_GUID variable other than "db" (dbx, dbt, dbr), and "db"
// unless its data is one EFI_SIGNATURE_DATA (IsSignatureDataEntry) and not an
// EFI_SIGNATURE_LIST sequence (the db itself, not an entry of it).
bool IsSecureBootPolicyVariable(const UefiVariable& var);

// GRUB's quoting of a kernel command line (grub-core/lib/cmdline.c): an argument with a
// space is wrapped in double quotes, and \, ' and " are escaped with a backslash. Returns
// the arguments joined by single spaces without that quoting, as GRUB measures the command
// that loads the kernel (grub-core/script/execute.c).
std::string GrubUnquoteCmdline(std::string_view cmdline);

// Reads the measurements of a parsed log. Never fails: what cannot be read is a problem.
Measurements ReadMeasurements(const EventLog& log);
Measurements ReadMeasurements(const EventLogView& log);

// The EFI_GLOBAL_VARIABLE GUID (SecureBoot, PK, KEK) and EFI_IMAGE_SECURITY_DATABASE_GUID
// (db, dbx), in their byte order in UEFI_VARIABLE_DATA.
extern const std::array<uint8_t, 16> kEfiGlobalVariableGuid;
extern const std::array<uint8_t, 16> kEfiImageSecurityDatabaseGuid;

// Secure Boot on, per the PFP's PCR 7 rules: exactly one separator in PCR 7 with value 0;
// before it, EV_EFI_VARIABLE_DRIVER_CONFIG for SecureBoot, PK, KEK, db and dbx (each once,
// with its GUID), SecureBoot's data the single byte 1; no Secure Boot configuration after
// the separator; no EV_EFI_ACTION "UEFI Debug Mode". Findings "secureboot.*"; one pass
// "secureboot.enabled". (The PCR 7 event-type problems are in Measurements::problems.)
Appraisal CheckSecureBoot(const Measurements& m);

}  // namespace enclave::attest
