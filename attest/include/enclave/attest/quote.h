// Attestation-key and quote appraisal (verifier side, no TPM).
#pragma once

#include <optional>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/tpm_types.h"

namespace enclave::attest {

struct AkPolicy {
  uint32_t min_rsa_bits = 2048;
  // ECC curves accepted: NIST P-256 and larger.
  std::vector<uint16_t> ecc_curves = {curve::kNistP256, curve::kNistP384, curve::kNistP521};
  // Weakest hash accepted for nameAlg and for the signing scheme (by digest size).
  uint16_t min_hash = alg::kSha256;
};

// AK attribute checks: fixedTPM, fixedParent, sensitiveDataOrigin, restricted and sign
// set, decrypt clear; RSA or ECC only; key size / curve; nameAlg and scheme hash not
// weaker than policy; a restricted signing key must carry its scheme (RSASSA or RSAPSS for
// RSA, ECDSA for ECC) so that the verifier can refuse any other. Checks are named
// "ak.<what>" ("ak.attributes.fixed_tpm.missing", "ak.rsa.key_bits.too_small", ...).
Appraisal CheckAkPublic(const TpmtPublic& ak, const AkPolicy& policy);

// Verifies `sig` over `attest_bytes` (the marshalled TPMS_ATTEST) with the AK public:
// digest = H_sig.hash(attest_bytes), then RSASSA-PKCS1-v1_5, RSA-PSS or ECDSA with
// OpenSSL. The signature's scheme and hash must equal the AK's scheme and hash (no
// downgrade) and meet `min_hash`. Findings: "quote.signature.*".
Appraisal VerifyQuoteSignature(const TpmtPublic& ak, ByteSpan attest_bytes, const TpmtSignature& sig,
                               uint16_t min_hash = alg::kSha256);

// What the verifier knows of the AK. kTpmPublic: its TPMT_PUBLIC (attributes, nameAlg,
// scheme). kKeyOnly: only the public key (a PEM key, an AK certificate's key), held in a
// TpmtPublic whose type and key fields alone are set (ak_key.h): the checks that need the
// rest are reported as not evaluated (Appraisal::not_evaluated), never as passed.
enum class AkKnowledge { kTpmPublic, kKeyOnly };

struct QuoteExpectations {
  std::vector<uint8_t> extra_data;  // qualifying data the verifier asked for
  PcrSelection selection;           // exactly the PCRs the verifier asked for
  AkPolicy ak_policy;
  std::optional<ClockInfo> previous;  // last clock info accepted for this host
  AkKnowledge ak_known = AkKnowledge::kTpmPublic;
};

struct QuoteEvidence {
  std::vector<uint8_t> attest;     // marshalled TPMS_ATTEST (what the TPM signed)
  std::vector<uint8_t> signature;  // marshalled TPMT_SIGNATURE
  PcrValues pcrs;                  // the PCR values the host reports
};

// Full quote appraisal: AK attributes; TPMS_ATTEST parse, magic and type; signature with
// the AK (no downgrade); extraData equal byte for byte; quoted selection equal to the
// expected one; reported PCR values exactly the selected set, each of the bank's size;
// pcrDigest = H_sig.hash(selected values in selection order) equal to the quoted one;
// clock: safe set, resetCount and restartCount never decrease, clock increases.
// Malformed evidence is a finding ("quote.attest.malformed"), not an error.
Appraisal AppraiseQuote(const TpmtPublic& ak, const QuoteEvidence& evidence, const QuoteExpectations& expect);

// The parsed quote of a passing appraisal, for the caller to store clock info.
Result<TpmsAttest> QuotedAttest(const QuoteEvidence& evidence);

// H_hash(values of `sel` in selection order, ascending index per bank). InvalidInput when
// a selected value is missing or has the wrong size.
Result<std::vector<uint8_t>> ComputePcrDigest(uint16_t hash, const PcrSelection& sel, const PcrValues& values);

}  // namespace enclave::attest
