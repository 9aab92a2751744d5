// The files that travel between a host and its verifier (docs/formats/evidence.md,
// "Bundles"): the enrolment bundle (host -> verifier, once), the credential challenge
// (verifier -> host) and the host's activation response, and the evidence bundle (host ->
// verifier, per quote).
//
// Encoding: one JSON object per file with a fixed set of keys, every key required
// (absent values are JSON null or an empty string, never a missing key); binary fields are
// lowercase or uppercase hex; TPM structures keep the TPM's own marshalling. Parsing is
// strict, because these bytes come from the other side: an unknown, missing or duplicated
// key, a wrong JSON type, bad hex, a wrong length or an inconsistent field is InvalidInput
// naming the field ("evidence bundle: field 'quote.attest': bad hex"). Parsing checks
// form, never trust: AppraiseEvidence and the challenge checks decide that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/attest/verifier.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest {

inline constexpr std::string_view kEnrolmentFormat = "enclave-attest enrolment v1";
inline constexpr std::string_view kChallengeFormat = "enclave-attest challenge v1";
inline constexpr std::string_view kActivationFormat = "enclave-attest activation v1";
inline constexpr std::string_view kEvidenceFormat = "enclave-attest evidence v1";

// Largest bundle file accepted (a 64 MiB event log and a large IMA log, hex-encoded).
inline constexpr size_t kMaxBundleBytes = 256u << 20;

// One EK certificate as read from an NV index (bytes unchanged: vendors pad some).
struct EkCertificateEntry {
  uint32_t nv_index = 0;
  std::vector<uint8_t> der;
  bool operator==(const EkCertificateEntry&) const = default;
};

struct EnrolmentBundle {
  std::vector<uint8_t> ek_public;                   // TPM2B_PUBLIC of the default-template EK
  std::vector<EkCertificateEntry> ek_certificates;  // every EK certificate index the TPM has
  std::vector<uint8_t> ak_public;                   // TPM2B_PUBLIC
  std::vector<uint8_t> ak_name;                     // TPM2B_NAME contents: nameAlg || digest
  int64_t created_at = 0;                           // host's clock, unix seconds (informational)
  bool operator==(const EnrolmentBundle&) const = default;
};

// The NV index whose certificate must certify an EK of this public area's type (TCG EK
// Credential Profile: RSA-2048 -> 0x01C00002, ECC P-256 -> 0x01C0000A, ECC P-384 ->
// 0x01C00016). InvalidInput for any other key.
Result<uint32_t> EkCertificateIndexFor(ByteSpan ek_public);

// What the verifier sends (credential_blob, encrypted_secret: the TPM2_ActivateCredential
// inputs) and what it must keep to check the answer: the SHA-256 of the secret (the
// verifier keeps its own copy of this file; the host learns nothing from the digest of a
// 32-byte random secret) and the SHA-256 of the enrolment bundle the challenge is for.
struct ChallengeBundle {
  std::vector<uint8_t> ak_name;
  std::vector<uint8_t> credential_blob;   // TPM2B_ID_OBJECT, with its size
  std::vector<uint8_t> encrypted_secret;  // TPM2B_ENCRYPTED_SECRET, with its size
  crypto::Digest256 secret_sha256{};
  crypto::Digest256 enrolment_sha256{};
  int64_t created_at = 0;
  bool operator==(const ChallengeBundle&) const = default;
};

// The host's answer: the secret TPM2_ActivateCredential recovered. It proves possession
// once and is worthless after (the verifier makes a fresh secret per challenge).
struct ActivationResponse {
  std::vector<uint8_t> ak_name;
  std::vector<uint8_t> secret;  // 1..64 bytes
  bool operator==(const ActivationResponse&) const = default;
};

struct EvidenceBundle {
  std::vector<uint8_t> nonce;                     // 1..32 bytes, as the host was asked
  std::optional<crypto::Digest256> bound_digest;  // SHA-256 of the bound data, if any
  std::vector<uint8_t> ak_name;                   // which AK signed
  PcrSelection pcr_selection;                     // what the host asked the TPM to quote
  std::vector<uint8_t> attest;                    // TPMS_ATTEST (bare, as signed)
  std::vector<uint8_t> signature;                 // TPMT_SIGNATURE
  PcrValues pcrs;                                 // values read: exactly pcr_selection
  std::vector<uint8_t> event_log;                 // binary TCG log; empty when none
  std::string ima_log;                            // IMA ASCII list; empty when none
  int64_t created_at = 0;                         // host's clock (informational, not trusted)
  bool operator==(const EvidenceBundle&) const = default;
};

std::string EncodeEnrolmentBundle(const EnrolmentBundle& bundle);
Result<EnrolmentBundle> ParseEnrolmentBundle(std::string_view text);
std::string EncodeChallengeBundle(const ChallengeBundle& bundle);
Result<ChallengeBundle> ParseChallengeBundle(std::string_view text);
std::string EncodeActivationResponse(const ActivationResponse& response);
Result<ActivationResponse> ParseActivationResponse(std::string_view text);
std::string EncodeEvidenceBundle(const EvidenceBundle& bundle);
Result<EvidenceBundle> ParseEvidenceBundle(std::string_view text);

// The parts AppraiseEvidence takes.
EvidenceParts ToEvidenceParts(const EvidenceBundle& bundle);

// The bundle's ak_name (which AK the host says signed) against the AK the verifier was given:
// "evidence.ak_name", else "evidence.ak_name.mismatch" (expected: the given AK's name).
// Separate from AppraiseEvidence, whose verdicts the audit log recomputes from the same
// inputs: a check added there would change every archived verdict.
Appraisal CheckEvidenceAkName(const EvidenceBundle& bundle, const TpmtPublic& ak);

// The last accepted clock info of one host, as a verifier keeps it between appraisals:
// {"format": "enclave-attest clock v1", "clock", "reset_count", "restart_count", "safe"}.
inline constexpr std::string_view kClockFormat = "enclave-attest clock v1";
std::string EncodeClockState(const ClockInfo& clock);
Result<ClockInfo> ParseClockState(std::string_view text);

}  // namespace enclave::attest
