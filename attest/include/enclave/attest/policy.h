// Attestation policy: what a host must prove before it is trusted. A JSON document in
// policies/, schema in docs/formats/attestation-policy.md. Parsing is strict: unknown keys,
// wrong types and out-of-range values are errors naming the JSON path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "enclave/attest/ek_cert.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest {

struct Policy {
  std::string name;
  PcrSelection quote_selection;   // the PCRs a host must quote, per bank
  EkTrustStore ek_trust;          // trusted TPM-vendor roots (and intermediates)
  AkPolicy ak;                    // AK attribute and key-size rules
  int64_t max_evidence_age_s = 0; // nonce issued -> appraisal; 0 is refused by the parser
  crypto::Digest256 digest{};     // SHA-256 of the policy file's bytes, for the audit log
  // Reference values (per PCR, Secure Boot, boot applications, kernel command line, IMA
  // file digests) follow in the implementation; see the format document.
};

// Parses policy JSON. `base_dir` resolves relative paths in it (the EK root directory).
Result<Policy> ParsePolicy(std::string_view json_text, const std::string& base_dir);
// Reads and parses a policy file; relative paths resolve against the file's directory.
Result<Policy> LoadPolicyFile(const std::string& path);

}  // namespace enclave::attest
