// The verifier's side of enrolment (docs/formats/evidence.md, "Bundles"), shared by
// `enclave-attest challenge`/`confirm` and the broker: check an enrolment bundle against
// the policy, make a credential challenge for it, and check the host's answer.
#pragma once

#include <cstdint>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/policy.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::attest {

// Checks worth passing before a challenge is made: the AK name is the name of the AK
// public, the AK meets the policy, and the EK certificate for the EK's type chains to the
// policy's EK roots and certifies exactly the EK public. Findings "enrolment.*", "ak.*",
// "ek.cert.*". When `ek_cert_sha256` is given it receives the digest of the certificate
// that was judged. A Status error means "could not evaluate".
Result<Appraisal> AppraiseEnrolment(const Policy& policy, const EnrolmentBundle& enrolment,
                                    crypto::Digest256* ek_cert_sha256 = nullptr);

// A fresh 32-byte secret and the credential challenge that only the TPM holding both the
// enrolment's EK and its AK can open (software MakeCredential). The verifier keeps the
// challenge bundle (it carries the secret's SHA-256) to check the answer.
struct MadeChallenge {
  ChallengeBundle bundle;
  crypto::SecretBytes secret;
};
Result<MadeChallenge> MakeChallenge(const EnrolmentBundle& enrolment, const crypto::Digest256& enrolment_sha256,
                                    int64_t now);

// The host's answer against the verifier's copy of the challenge: the same AK name, and a
// secret whose SHA-256 equals the kept one (compared in constant time). Findings
// "activation.*".
Appraisal CheckActivation(const ChallengeBundle& challenge, const ActivationResponse& response);

}  // namespace enclave::attest
