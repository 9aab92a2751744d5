#include "enclave/attest/enrolment.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "enclave/attest/credential.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/bytes.h"

namespace enclave::attest {

Result<Appraisal> AppraiseEnrolment(const Policy& policy, const EnrolmentBundle& e, crypto::Digest256* ek_cert_sha256) {
  if (!policy.Accepts(AkForm::kEnrolment)) {
    return InvalidInput("policy '" + policy.name + "' does not accept enrolments (its ak_forms lacks \"enrolment\")");
  }
  Appraisal a;
  auto ak = ParseTpm2bPublic(e.ak_public);
  if (!ak.ok()) {
    a.Fail("enrolment.ak_public.malformed", "ak_public", "a TPM2B_PUBLIC", ak.status().message());
    return a;
  }
  // An AK whose nameAlg has no name here (SM3, NULL) is a finding like any other AK fault,
  // reported with the rest of what CheckAkPublic finds, not an error before them.
  auto name = ComputeName(*ak);
  if (!name.ok()) {
    a.Fail("enrolment.ak_name.uncomputable", "ak_name", "the name of the given AK", name.status().message());
  } else if (*name == e.ak_name) {
    a.Pass("enrolment.ak_name");
  } else {
    a.Fail("enrolment.ak_name.mismatch", "ak_name", HexEncode(*name), HexEncode(e.ak_name));
  }
  a.Merge(CheckAkPublic(*ak, policy.ak));

  auto index = EkCertificateIndexFor(e.ek_public);
  if (!index.ok()) {
    a.Fail("enrolment.ek_public.unsupported", "ek_public", "RSA-2048, ECC P-256 or P-384 EK", index.status().message());
    return a;
  }
  const EkCertificateEntry* cert = nullptr;
  for (const auto& c : e.ek_certificates) {
    if (c.nv_index == *index) cert = &c;
  }
  char where[32];
  std::snprintf(where, sizeof(where), "NV 0x%08x", *index);
  if (cert == nullptr) {
    a.Fail("enrolment.ek_cert.missing", where, "the EK certificate for the EK's type", "none in the bundle");
    return a;
  }
  if (ek_cert_sha256 != nullptr) *ek_cert_sha256 = crypto::Sha256(cert->der);
  ASSIGN_OR_RETURN(Appraisal ek, AppraiseEkCertificate(cert->der, e.ek_public, policy.ek_trust));
  a.Merge(ek);
  return a;
}

Result<MadeChallenge> MakeChallenge(const EnrolmentBundle& e, const crypto::Digest256& enrolment_sha256, int64_t now) {
  ASSIGN_OR_RETURN(crypto::SecretBytes secret, crypto::SecretBytes::Random(32));
  ASSIGN_OR_RETURN(CredentialChallenge c, MakeCredential(e.ek_public, e.ak_name, secret));
  MadeChallenge out{{}, std::move(secret)};
  out.bundle.ak_name = e.ak_name;
  out.bundle.credential_blob = std::move(c.credential_blob);
  out.bundle.encrypted_secret = std::move(c.encrypted_secret);
  out.bundle.secret_sha256 = crypto::Sha256(out.secret.ExposeSecret());
  out.bundle.enrolment_sha256 = enrolment_sha256;
  out.bundle.created_at = now;
  return out;
}

Appraisal CheckActivation(const ChallengeBundle& challenge, const ActivationResponse& r) {
  Appraisal a;
  if (r.ak_name == challenge.ak_name) {
    a.Pass("activation.ak_name");
  } else {
    a.Fail("activation.ak_name.mismatch", "ak_name", HexEncode(challenge.ak_name), HexEncode(r.ak_name));
  }
  const crypto::Digest256 got = crypto::Sha256(r.secret);
  if (crypto::ConstantTimeEquals(got, challenge.secret_sha256)) {
    a.Pass("activation.secret");
  } else {
    a.Fail("activation.secret.mismatch", "secret", "SHA-256 " + HexEncode(challenge.secret_sha256),
           "SHA-256 " + HexEncode(got));
  }
  return a;
}

}  // namespace enclave::attest
