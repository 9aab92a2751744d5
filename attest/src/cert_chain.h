// Internal to attest/: the X.509 chain check that EK and AK certificates share (the rules in
// ek_cert.h: self-signed roots are the only anchors, no purpose, subjectDirectoryAttributes
// may be critical).
#pragma once

#include <openssl/x509.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/common/status.h"

namespace enclave::attest {

// Adds "<prefix>.chain" or one of "<prefix>.chain.{untrusted,expired,not_yet_valid}" (where:
// "<what> chain depth N (subject)") to `out`, verifying at `time` (unset: now). A Status
// error only when OpenSSL fails.
Status CheckCertificateChain(X509* leaf, const EkTrustStore& trust, std::optional<int64_t> time,
                             std::string_view prefix, std::string_view what, Appraisal* out);

}  // namespace enclave::attest
