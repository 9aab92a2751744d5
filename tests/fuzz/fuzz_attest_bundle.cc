// libFuzzer target: the bundle parsers of attest/bundle.h (enrolment, credential challenge,
// activation response, evidence, clock state), which read what the other side of the
// attestation sent. Invariants: no crash, leak or out-of-bounds read; whatever parses
// re-encodes to a document that parses to the same value (the encoding is canonical for
// the parsed value, so a second encode is byte-identical).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "enclave/attest/bundle.h"

using namespace enclave;
using namespace enclave::attest;

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
  RoundTrip<EnrolmentBundle>(text, ParseEnrolmentBundle, EncodeEnrolmentBundle);
  RoundTrip<ChallengeBundle>(text, ParseChallengeBundle, EncodeChallengeBundle);
  RoundTrip<ActivationResponse>(text, ParseActivationResponse, EncodeActivationResponse);
  RoundTrip<EvidenceBundle>(text, ParseEvidenceBundle, EncodeEvidenceBundle);
  auto clock = ParseClockState(text);
  if (clock.ok()) {
    auto again = ParseClockState(EncodeClockState(*clock));
    if (!again.ok() || again->clock != clock->clock || again->reset_count != clock->reset_count ||
        again->restart_count != clock->restart_count || again->safe != clock->safe) {
      std::abort();
    }
  }
  auto parsed = ParseEvidenceBundle(text);
  if (parsed.ok()) (void)ToEvidenceParts(*parsed);
  return 0;
}
