// libFuzzer target: TPM2B_PUBLIC / TPMT_PUBLIC parser, name computation and the AK
// checks (which hand the key to OpenSSL). Invariants: no crash; a parsed TPMT_PUBLIC
// re-encodes to exactly its bytes; an AK that passes CheckAkPublic has every required
// attribute.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"

using namespace enclave;
using namespace enclave::attest;

namespace {
void Check(const TpmtPublic& p) {
  if (EncodeTpmtPublic(p) != p.encoded) std::abort();
  auto name = ComputeName(p);
  if (name.ok() && name->size() != 2 + HashSize(p.name_alg)) std::abort();
  Appraisal a = CheckAkPublic(p, AkPolicy{});
  constexpr uint32_t kRequired =
      attr::kFixedTpm | attr::kFixedParent | attr::kSensitiveDataOrigin | attr::kRestricted | attr::kSign;
  if (a.ok() && (p.object_attributes & kRequired) != kRequired) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan in(data, size);
  auto p = ParseTpm2bPublic(in);
  if (p.ok()) Check(*p);
  auto q = ParseTpmtPublic(in);
  if (q.ok()) Check(*q);
  return 0;
}
