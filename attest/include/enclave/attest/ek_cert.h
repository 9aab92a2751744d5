// EK certificate appraisal (TCG EK Credential Profile for TPM Family 2.0): the certificate
// read from the TPM's NV (or published by the vendor) must be DER X.509, chain to a trusted
// TPM-vendor root, and certify exactly the EK the verifier will seal credentials to.
//
// Checks, each a machine-readable finding in the Appraisal (appraisal.h):
//   ek.cert.der            parses as X.509 and is strict DER
//       failures: ek.cert.parse.invalid (not an X.509 certificate at all),
//                 ek.cert.der.trailing_bytes (bytes after the certificate: NV padding),
//                 ek.cert.der.not_strict (BER: indefinite or non-minimal length, or a
//                 non-minimal INTEGER, at the reported offset; e.g. some Nuvoton certificates)
//   ek.cert.chain          chains to one of the trusted roots, through the given intermediates
//       failures: ek.cert.chain.untrusted, ek.cert.chain.expired, ek.cert.chain.not_yet_valid
//   ek.cert.key            the certificate's public key equals the EK public (TPM2B_PUBLIC):
//                          RSA modulus and exponent, or ECC curve and point
//       failure:  ek.cert.key.mismatch
//
// Chain rules (OpenSSL X509_STORE), chosen for the EK profile:
// - Trust anchors are self-signed roots only. X509_V_FLAG_PARTIAL_CHAIN is NOT set: an
//   intermediate in the trust directory helps build the path but is never itself an anchor,
//   so a leaked or mis-issued intermediate cannot stand in for the vendor root.
// - No X509 purpose is set. An EK certificate has keyUsage keyEncipherment (or keyAgreement)
//   and at most the TCG EKU tcg-kp-EKCertificate (2.23.133.8.1), never TLS usages, so a TLS
//   purpose would wrongly reject it. OpenSSL still enforces basicConstraints CA:TRUE (and
//   keyCertSign) on every issuer, signatures and validity periods.
// - Critical extensions OpenSSL does not handle fail the chain, except the TCG profile's
//   subjectDirectoryAttributes (2.5.29.9, TPM specification attributes), which the profile
//   allows to be critical; nothing else is ignored.
// - Time: now, unless the options give a verification time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

// Trusted TPM-vendor certificates, DER. Roots are trust anchors; intermediates are only
// candidates for building the path from the EK certificate to a root.
struct EkTrustStore {
  std::vector<std::vector<uint8_t>> roots;
  std::vector<std::vector<uint8_t>> intermediates;
};

// Reads every regular file of `dir` (not recursively): PEM (one or more certificates) or a
// single DER certificate. Self-signed certificates (subject = issuer and the signature
// verifies with their own key) become roots, all others intermediates. InvalidInput, naming
// the file, for a file that holds no certificate; FailedPrecondition when no root was found.
Result<EkTrustStore> LoadEkTrustDirectory(const std::string& dir);
// The same for explicit lists of files.
Result<EkTrustStore> LoadEkTrustFiles(const std::vector<std::string>& root_files,
                                      const std::vector<std::string>& intermediate_files);

struct EkCertOptions {
  // Verification time, Unix seconds; unset means now.
  std::optional<int64_t> verify_time;
  // Accept bytes after the certificate (TPMs that pad the NV index); the certificate itself
  // must still be strict DER. Off by default: a policy must name this quirk to accept it.
  bool allow_trailing_bytes = false;
};

// Appraises `cert` (the bytes as read from NV) against `trust` and the EK public
// (`ek_public`: TPM2B_PUBLIC, RSA or ECC). A Status error means "could not evaluate": the EK
// public does not parse, the trust store has no root, or OpenSSL failed.
Result<Appraisal> AppraiseEkCertificate(ByteSpan cert, ByteSpan ek_public, const EkTrustStore& trust,
                                        const EkCertOptions& options = {});

// Strict DER check of one TLV tree (exposed for tests): "" when strict, else what is wrong
// and at which offset. `consumed` receives the length of the outermost TLV.
std::string CheckStrictDer(ByteSpan der, size_t* consumed);

}  // namespace enclave::attest
