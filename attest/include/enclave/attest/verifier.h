// The verifier's single entry point: one host's evidence appraised against an
// attestation policy. Used by `enclave-attest verify` and `check`, by the broker before it
// releases a key, and by `enclave-audit evidence verify` to re-check a past verdict
// offline (so everything it needs is an argument, including "now").
//
// "Could not evaluate" (a policy or argument the verifier cannot use) is a Status error;
// "policy says no" is a Verdict whose appraisal has failures. Never the other way round.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "enclave/attest/ak_key.h"
#include "enclave/attest/appraisal.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest {

// What the host sent, already taken out of its evidence bundle (docs/formats/evidence.md).
struct EvidenceParts {
  QuoteEvidence quote;              // TPMS_ATTEST bytes, TPMT_SIGNATURE bytes, reported PCR values
  std::vector<uint8_t> event_log;   // binary TCG event log; empty when the host has none
  std::string ima_log;              // IMA ASCII runtime measurement list; empty when none
};

// What the quote's extraData must be: this project's formula (QualifyingData), or the
// verifier's nonce itself, as tpm2_quote -q and Keylime make it (1..64 bytes; nothing can be
// bound then). Always chosen by the verifier, never read from the evidence.
enum class QualifyingDataForm { kEnclaveV1, kRawNonce };

// What the verifier knows independently of the evidence.
struct AppraisalContext {
  std::vector<uint8_t> ak_public;                 // TPM2B_PUBLIC contents, from the host's enrolment
  // How the verifier knows the AK; the policy must accept the form (ak_forms). kEnrolment and
  // kTpmPublic: `ak_public` (a TPMT_PUBLIC). kPublicKey: `ak_key` is a DER SubjectPublicKeyInfo;
  // kCertificate: `ak_key` is the DER AK certificate, judged against the policy's ak_roots.
  AkForm ak_form = AkForm::kEnrolment;
  std::vector<uint8_t> ak_key;
  QualifyingDataForm qualifying_data = QualifyingDataForm::kEnclaveV1;
  std::vector<uint8_t> nonce;                     // the verifier's challenge (1..32 bytes; raw: 1..64)
  std::optional<crypto::Digest256> bound_digest;  // SHA-256 of the data bound into the quote, if any
  std::optional<ClockInfo> last_clock;            // last clock info accepted for this host
  int64_t nonce_issued_at = 0;                    // unix seconds, start of the evidence-age window
  int64_t now = 0;                                // unix seconds, when the appraisal happens
};

// The quote's qualifying data (TPMS_ATTEST.extraData):
//   SHA-256("enclave-attest quote v1" || 0x00 || u8 nonce length || nonce ||
//           bound digest, or 32 zero bytes when nothing is bound)
// InvalidInput when the nonce is empty or longer than 32 bytes.
Result<crypto::Digest256> QualifyingData(std::span<const uint8_t> nonce,
                                         const std::optional<crypto::Digest256>& bound_digest);

struct Verdict {
  Appraisal appraisal;            // every check that ran; failures with {check, where, expected, got}
  std::optional<ClockInfo> clock; // the quote's clock info, to store as last_clock after a pass
  bool passed() const { return appraisal.ok(); }
};

// Quote (AK attributes, signature, qualifying data, PCR selection and digest, clock),
// evidence age, event-log replay against the quoted PCRs, the policy's reference values
// on the measurements read from the logs (PCR values, Secure Boot, boot applications,
// kernel command line, IMA file digests).
Result<Verdict> AppraiseEvidence(const Policy& policy, const EvidenceParts& evidence, const AppraisalContext& context);

// Whether the AK (`ak_public`, a marshalled TPM2B_PUBLIC as enrolled) signed this quote for this nonce and
// bound digest: the checks that tie evidence to a host and to a request (a TPM-generated
// quote: magic and type; the AK's signature; the qualifying data), and nothing else (no
// policy, no logs). For callers that must not act on, log or archive evidence
// before they know who made it. PermissionDenied naming the first failed check.
Status VerifyQuoteOrigin(ByteSpan ak_public, const QuoteEvidence& quote, std::span<const uint8_t> nonce,
                         const std::optional<crypto::Digest256>& bound_digest);

// The path of the first IMA measurement of a file whose SHA-256 is `sha256` (a workload's
// executable, docs/protocol.md "Workload"), in an IMA log that replays to a PCR 10 of the
// quote. The quote's signature is not checked here: call this only on evidence that
// AppraiseEvidence passed. FailedPrecondition saying what is missing otherwise.
Result<std::string> FindImaMeasurement(const EvidenceParts& evidence, const crypto::Digest256& sha256);

// {"verdict":"pass"|"fail","passed":[check...],"failures":[{check,where,expected,got}...]}
// with keys in that order; the form `enclave-attest verify` prints and the audit log stores.
// A verdict with checks the evidence could not support ends with
// "not_evaluated":[{check,why}...] (absent otherwise, so enrolled hosts' verdicts keep their form).
std::string VerdictJson(const Verdict& verdict);

}  // namespace enclave::attest
