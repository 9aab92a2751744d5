// AKs a verifier knows otherwise than from this project's enrolment: a bare TPM2B_PUBLIC, a
// PEM public key, or an X.509 AK certificate (as tpm2-tools, Keylime and vendor AK CAs hand
// them out). docs/formats/evidence.md, "Third-party evidence". What each form cannot tell
// the verifier is reported as not evaluated (appraisal.h), never as passed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

// How the verifier came to know the AK; a policy lists the forms it accepts (ak_forms).
enum class AkForm {
  kEnrolment,    // TPMT_PUBLIC from an enrolment bundle (EK certificate chain, credential activation)
  kTpmPublic,    // a bare TPM2B_PUBLIC (tpm2_createak -u): attributes known, no EK chain
  kPublicKey,    // a PEM SubjectPublicKeyInfo (tpm2_createak -f pem): the key only
  kCertificate,  // an X.509 AK certificate chained to the policy's ak_roots: the key only
};
// "enrolment", "tpm2b_public", "public_key", "certificate".
const char* AkFormName(AkForm form);
std::optional<AkForm> AkFormFromName(std::string_view name);

// The key of a DER SubjectPublicKeyInfo as a TpmtPublic holding only the key: type, and
// RSA keyBits, exponent and modulus, or ECC curve (NIST P-256/384/521) and x, y; nothing
// else is known (attributes 0, nameAlg and scheme TPM_ALG_NULL, `encoded` empty). Trailing
// bytes, other key types and curves are errors.
Result<TpmtPublic> AkKeyFromSpki(ByteSpan spki_der);

// The DER of the one PEM block labelled `label` ("PUBLIC KEY", "CERTIFICATE") in `text`:
// nothing but whitespace may surround it, and no other block may follow.
Result<std::vector<uint8_t>> PemBlock(std::string_view text, std::string_view label);

// An X.509 AK certificate (DER) against `trust` at `now` (unix seconds): strict DER with
// nothing after it ("ak.cert.der", else "ak.cert.parse.invalid", "ak.cert.der.not_strict",
// "ak.cert.der.trailing_bytes") and a chain to a trusted root, with the rules of the EK
// chain (ek_cert.h: self-signed roots only, no purpose) ("ak.cert.chain", else
// "ak.cert.chain.untrusted", ".expired", ".not_yet_valid"). `key` is the certified key,
// set whenever the certificate parses. A Status error: no root, or OpenSSL failed.
struct AkCertificate {
  Appraisal appraisal;
  std::optional<TpmtPublic> key;
};
Result<AkCertificate> AppraiseAkCertificate(ByteSpan cert_der, const EkTrustStore& trust, int64_t now);

}  // namespace enclave::attest
