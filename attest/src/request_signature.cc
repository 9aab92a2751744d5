#include "enclave/attest/request_signature.h"

#include <algorithm>

#include "enclave/attest/quote.h"

namespace enclave::attest {
namespace {

constexpr char kNonceRequestLabel[] = "enclave nonce request v1";  // followed by its NUL

}  // namespace

Result<crypto::Digest256> NonceRequestQualifyingData(std::string_view host_id, ByteSpan salt) {
  if (host_id.empty() || host_id.size() > 255)
    return InvalidInput("nonce request: host id is " + std::to_string(host_id.size()) + " bytes, expected 1..255");
  if (salt.size() != kNonceRequestSaltBytes)
    return InvalidInput("nonce request: salt is " + std::to_string(salt.size()) + " bytes, expected " +
                        std::to_string(kNonceRequestSaltBytes));
  crypto::Sha256Hasher h;
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kNonceRequestLabel), sizeof(kNonceRequestLabel)));
  const uint8_t len = static_cast<uint8_t>(host_id.size());
  h.Update(std::span<const uint8_t>(&len, 1));
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(host_id.data()), host_id.size()));
  h.Update(salt);
  return h.Final();
}

Result<ClockInfo> VerifyNonceRequest(ByteSpan ak_public, std::string_view host_id, const SignedNonceRequest& request) {
  ASSIGN_OR_RETURN(crypto::Digest256 expected, NonceRequestQualifyingData(host_id, request.salt));
  auto ak = ParseTpm2bPublic(ak_public);
  if (!ak.ok()) return ak.status().Annotate("the enrolled AK public (TPM2B_PUBLIC)");
  auto attest = ParseTpmsAttest(request.attest);
  if (!attest.ok()) return PermissionDenied("nonce request: quote.attest.malformed: " + attest.status().message());
  if (attest->magic != kTpmGeneratedValue) return PermissionDenied("nonce request: quote.magic.mismatch");
  if (attest->type != kTpmStAttestQuote) return PermissionDenied("nonce request: quote.type.mismatch");
  if (!std::equal(attest->extra_data.begin(), attest->extra_data.end(), expected.begin(), expected.end()))
    return PermissionDenied("nonce request: quote.extra_data.mismatch (not a request of this host with this salt)");
  if (attest->clock_info.safe != 1) return PermissionDenied("nonce request: quote.clock.unsafe");
  auto sig = ParseTpmtSignature(request.signature);
  if (!sig.ok()) return PermissionDenied("nonce request: quote.signature.malformed: " + sig.status().message());
  const Appraisal a = VerifyQuoteSignature(*ak, request.attest, *sig);
  if (!a.ok()) {
    const std::string check = a.failures().empty() ? "quote.signature" : a.failures().front().check;
    return PermissionDenied("nonce request: " + check + " (not signed by this host's enrolled AK)");
  }
  return attest->clock_info;
}

}  // namespace enclave::attest
