// libFuzzer target: the broker's own message parsers (broker/messages.h), which read what
// a client sent (nonce request, its signed quote kept as bytes: attest_tpms_attest fuzzes
// their parsers) or what a broker answered (enrolment challenge, nonce),
// and the Content-Type check. The bundles inside requests are fuzzed by attest_bundle.
// Invariants: no crash, leak or out-of-bounds read; whatever parses re-encodes to a
// document that parses to the same value, and a second encode is byte-identical.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "enclave/broker/messages.h"

using namespace enclave;
using namespace enclave::broker;

namespace {

template <typename T, typename Parse, typename Encode>
void RoundTrip(std::string_view text, Parse parse, Encode encode) {
  Result<T> a = parse(text);
  if (!a.ok()) return;
  std::string once = encode(*a);
  Result<T> b = parse(once);
  if (!b.ok()) std::abort();
  if (encode(*b) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  RoundTrip<NonceRequest>(text, ParseNonceRequest, EncodeNonceRequest);
  RoundTrip<NonceIssued>(text, ParseNonceIssued, EncodeNonceIssued);
  RoundTrip<EnrolmentChallenge>(text, ParseEnrolmentChallenge, EncodeEnrolmentChallenge);
  (void)IsJsonContentType(text);
  (void)IsLowerHexId(text);
  return 0;
}
