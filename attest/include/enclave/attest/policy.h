// Attestation policy: what a host must prove before it is trusted. A JSON document in
// policies/, schema in docs/formats/attestation-policy.md. Parsing is strict: unknown keys,
// wrong types and out-of-range values are errors naming the JSON path.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/attest/ak_key.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest {

// Allowed digests, per bank (hash alg id). A bank absent from the map is not judged;
// a rule with no bank at all is refused by the parser.
using AllowedDigests = std::map<uint16_t, std::set<std::vector<uint8_t>>>;

// One file the IMA log must show with an allowed digest ("the trainer binary").
struct ImaFileRule {
  std::string path;                                        // absolute path as IMA logs it
  std::set<std::pair<uint16_t, std::vector<uint8_t>>> digests;  // (file digest alg, digest)
  bool required = true;  // the file must appear in the log at least once
};

struct Policy {
  std::string name;
  PcrSelection quote_selection;   // the PCRs a host must quote, per bank
  EkTrustStore ek_trust;          // trusted TPM-vendor roots (and intermediates)
  AkPolicy ak;                    // AK attribute and key-size rules
  int64_t max_evidence_age_s = 0; // nonce issued -> appraisal; 0 is refused by the parser
  crypto::Digest256 digest{};     // SHA-256 of the policy file's bytes, for the audit log
  // Where ek_trust was loaded from (resolved paths): a directory, or root and
  // intermediate files.
  std::string ek_roots_dir;
  std::vector<std::string> ek_root_files, ek_intermediate_files;

  // The forms in which the verifier may know a host's AK (ak_forms; default enrolment and
  // tpm2b_public). ek_roots are given exactly when kEnrolment is accepted, ak_roots exactly
  // when kCertificate is: no policy drops the EK chain without saying so.
  std::vector<AkForm> ak_forms = {AkForm::kEnrolment, AkForm::kTpmPublic};
  bool Accepts(AkForm form) const;
  EkTrustStore ak_trust;  // trusted AK certificate issuers (ak_roots)
  std::string ak_roots_dir;
  std::vector<std::string> ak_root_files, ak_intermediate_files;

  // Boot event log. When required, evidence without one fails ("eventlog.missing").
  bool require_event_log = true;
  // Quoted PCRs the boot event log need not extend (e.g. 10, extended by IMA): they are
  // left out of the log-vs-quote comparison. Every other quoted PCR must be extended by
  // the log and match its replay.
  std::set<uint32_t> log_exempt_pcrs;

  // Reference values. Each is judged only when present in the policy.
  std::map<uint32_t, AllowedDigests> pcr_values;     // PCR -> quoted value in one of the allowed
  std::map<uint32_t, AllowedDigests> event_digests;  // PCR -> every event extending it allowed
  bool require_secure_boot = false;                  // PCR 7 says Secure Boot was on
  AllowedDigests boot_applications;                  // EV_EFI_BOOT_SERVICES_APPLICATION in PCR 4
  std::vector<std::string> kernel_cmdlines;          // exact strings; empty: not judged
  bool judge_kernel_cmdlines = false;                // "kernel_cmdlines" key present

  // IMA runtime log (PCR 10).
  bool require_ima_log = false;
  bool ima_allow_violations = false;
  std::vector<ImaFileRule> ima_files;
  // Allowlist mode ("ima.mode": "allowlist", as Keylime's runtime policies): every
  // measurement in the log must be of a listed path with one of its digests, or of a path
  // under one of the excluded prefixes; anything else fails the appraisal by name.
  bool ima_allowlist_mode = false;
  std::map<std::string, std::set<std::pair<uint16_t, std::vector<uint8_t>>>> ima_allowlist;  // path -> digests
  std::vector<std::string> ima_exclude_prefixes;  // absolute, each ending in '/'

  // PCRs whose events the policy reads or judges: an event type the verifier does not
  // know in one of them is a failure (the type is not covered by the digest).
  std::set<uint32_t> JudgedPcrs() const;
};

// Parses policy JSON. `base_dir` resolves relative paths in it (the EK root directory).
// The digest is SHA-256 of `json_text`.
Result<Policy> ParsePolicy(std::string_view json_text, const std::string& base_dir);
// ParsePolicy without loading the EK roots (ek_trust stays empty; the paths are set): every
// rule of the document checked, no file read. For tools that only inspect a policy, and the
// fuzz target.
Result<Policy> ParsePolicyText(std::string_view json_text, const std::string& base_dir);
// Loads ek_trust from the policy's EK root paths and ak_trust from its AK root paths (each
// when the policy has them).
Status LoadPolicyEkRoots(Policy* policy);
// Reads and parses a policy file; relative paths resolve against the file's directory.
Result<Policy> LoadPolicyFile(const std::string& path);

// Largest policy file accepted.
inline constexpr size_t kMaxPolicyBytes = 4u << 20;

}  // namespace enclave::attest
