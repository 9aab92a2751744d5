// An attestation policy made from a known-good host's evidence bundle (a "golden host",
// `enclave-attest policy create`): the quoted PCR values, every PCR 7 event (Secure Boot
// state, db and dbx), the boot applications, the kernel command lines and, on request, an
// IMA allowlist, each entry with a comment naming the event or line it came from.
// docs/formats/attestation-policy.md, "Policies from a golden host".
//
// Only evidence that verifies against itself is used: the AK it names signed the quote over
// its own nonce, the reported PCRs are the quoted ones, the boot log (and the IMA log) replay
// to them, and the policy made from it accepts it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/attest/bundle.h"
#include "enclave/attest/verifier.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

struct GoldenPolicyOptions {
  std::string name;          // the policy's name (required)
  std::string source;        // how the comments name the evidence (its file, its digest)
  std::string ek_roots_dir;  // ek_roots.dir as written (relative to the policy file's folder); required
  int64_t max_evidence_age_s = 300;
  bool ima = false;                               // derive an IMA allowlist from the evidence's IMA log
  std::vector<std::string> ima_exclude_prefixes;  // not listed, and not judged (ima.exclude_path_prefixes)
};

struct GoldenPolicy {
  std::string text;                // the policy file, JSON
  std::vector<std::string> notes;  // what was not derived, and why (also in the policy's comment)
  Verdict self_check;              // the policy applied to the evidence it came from: passed
};

// `ak_tpmt`: the golden host's AK (TPMT_PUBLIC, from its enrolment). Errors:
// AuthFailed when the evidence does not verify against itself, naming every failed check
// (evidence.ak_name.mismatch, quote.signature.invalid, quote.extra_data.mismatch,
// quote.pcr_digest.mismatch, eventlog.pcr.mismatch, ima.pcr.mismatch, ...), also when the
// policy made from it would refuse it; FailedPrecondition for an IMA log with violations
// (no allowlist can speak for them); InvalidInput for options, or evidence a policy cannot
// be made from (no boot log, a log that does not parse, ima without an IMA log or PCR 10).
Result<GoldenPolicy> MakeGoldenPolicy(const EvidenceBundle& evidence, ByteSpan ak_tpmt,
                                      const GoldenPolicyOptions& options);

}  // namespace enclave::attest
