// libFuzzer target: TPMS_ATTEST (bare and TPM2B_ATTEST), TPML_PCR_SELECTION and
// TPMT_SIGNATURE parsers. Invariants: no crash or out-of-bounds read; whatever parses
// re-encodes to exactly the input; the PCR digest of a parsed selection is computable
// for full value sets.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_types.h"

using namespace enclave;
using namespace enclave::attest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan in(data, size);
  auto a = ParseTpmsAttest(in);
  if (a.ok()) {
    if (EncodeTpmsAttest(*a) != std::vector<uint8_t>(in.begin(), in.end())) std::abort();
    if (a->type == kTpmStAttestQuote) {
      PcrValues values;
      bool supported = true;
      for (const auto& b : a->quote_selection.banks) {
        if (!IsSupportedHash(b.hash)) supported = false;
        for (uint32_t i : PcrSelection::Indices(b)) values[b.hash][i] = std::vector<uint8_t>(HashSize(b.hash), 0x5A);
      }
      if (supported && !ComputePcrDigest(alg::kSha256, a->quote_selection, values).ok()) std::abort();
    }
  }
  (void)ParseTpm2bAttest(in);
  (void)ParsePcrSelection(in);
  auto s = ParseTpmtSignature(in);
  if (s.ok() && EncodeTpmtSignature(*s) != std::vector<uint8_t>(in.begin(), in.end())) std::abort();
  return 0;
}
