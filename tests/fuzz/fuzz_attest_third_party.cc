// libFuzzer target: the readers of third-party evidence (issue 20 §1). The first byte picks
// the reader (modulo 4), the rest is its input: 0 tpm2-tools serialized PCR file, 1 values
// file for the quoted selection sha256:0,7+sha1:7, 2 DER SubjectPublicKeyInfo (an AK's
// key), 3 PEM "PUBLIC KEY" text then its key. Invariants: no crash; whatever is accepted
// satisfies the documented sizes; a key-only AK never passes a quote without a signature.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "enclave/attest/ak_key.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm2_tools.h"

using namespace enclave;
using namespace enclave::attest;

namespace {

void CheckValues(const PcrValues& v) {
  size_t n = 0;
  for (const auto& [bank, pcrs] : v) {
    for (const auto& [index, value] : pcrs) {
      if (index > 23 || value.size() != HashSize(bank) || value.empty()) std::abort();
      ++n;
    }
  }
  if (n == 0) std::abort();
}

void CheckKey(const TpmtPublic& k) {
  if (k.type != alg::kRsa && k.type != alg::kEcc) std::abort();
  if (k.object_attributes != 0 || !k.encoded.empty()) std::abort();  // nothing but the key
  if (k.type == alg::kEcc && (k.ecc_x.size() != k.ecc_y.size() || k.ecc_x.empty())) std::abort();
  QuoteEvidence none;
  QuoteExpectations e;
  e.extra_data = {1};
  e.ak_known = AkKnowledge::kKeyOnly;
  if (AppraiseQuote(k, none, e).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ByteSpan in(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto v = ParseTpm2ToolsPcrSerialized(in);
      if (v.ok()) {
        CheckValues(*v);
        if ((in.size() - 136) % 532 != 0) std::abort();
      }
      break;
    }
    case 1: {
      static const PcrSelection order = *PcrSelection::FromString("sha256:0,7+sha1:7");
      auto v = ParseTpm2ToolsPcrValues(in, order);
      if (v.ok() != (in.size() == 32 + 32 + 20)) std::abort();
      if (v.ok()) CheckValues(*v);
      break;
    }
    case 2: {
      auto k = AkKeyFromSpki(in);
      if (k.ok()) CheckKey(*k);
      break;
    }
    default: {
      auto der = PemBlock(std::string_view(reinterpret_cast<const char*>(in.data()), in.size()), "PUBLIC KEY");
      if (der.ok()) {
        auto k = AkKeyFromSpki(*der);
        if (k.ok()) CheckKey(*k);
      }
      break;
    }
  }
  return 0;
}
