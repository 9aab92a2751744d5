// Signed nonce requests (docs/protocol.md, "Signed nonce requests"): a host asks the broker
// for a nonce with a TPM2_Quote by its enrolled AK whose qualifying data names the host and
// a fresh salt, so only a process that can use that host's TPM obtains nonces for it. The
// quote's PCR selection and values mean nothing here; its clock info orders requests.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "enclave/attest/tpm_types.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest {

inline constexpr size_t kNonceRequestSaltBytes = 16;

// SHA-256("enclave nonce request v1" || 0x00 || u8 len(host_id) || host_id || salt):
// distinct from QualifyingData's label, so a request quote never passes as evidence.
// InvalidInput when host_id is empty or over 255 bytes, or salt is not 16 bytes.
Result<crypto::Digest256> NonceRequestQualifyingData(std::string_view host_id, ByteSpan salt);

struct SignedNonceRequest {
  std::vector<uint8_t> salt;       // kNonceRequestSaltBytes, random per request
  std::vector<uint8_t> attest;     // marshalled TPMS_ATTEST of the quote
  std::vector<uint8_t> signature;  // marshalled TPMT_SIGNATURE by the AK
};

// Checks that the request was signed by `ak_public` (TPM2B_PUBLIC): TPMS_ATTEST parses,
// magic TPM_GENERATED_VALUE, type TPM_ST_ATTEST_QUOTE, extraData equal to
// NonceRequestQualifyingData(host_id, salt), clock marked safe, and the signature verifies
// with the AK (its own scheme, no downgrade). The quote's clock info on success;
// PermissionDenied naming the failed check otherwise (InvalidInput for a bad salt size).
Result<ClockInfo> VerifyNonceRequest(ByteSpan ak_public, std::string_view host_id, const SignedNonceRequest& request);

}  // namespace enclave::attest
