// Test driver for tpm2_quote_interop_test.sh: appraises a quote made by tpm2-tools
// (tpm2_quote -m TPMS_ATTEST -s TPMT_SIGNATURE, tpm2_create -u TPM2B_PUBLIC,
// tpm2_pcrread -o values) with attest/. Prints the findings; exit 0 pass, 1 fail, 2 error.
//   attest_quote_interop AK.pub QUOTE.msg QUOTE.sig PCRS.bin SELECTION NONCE_HEX
#include <cstdio>

#include "enclave/attest/quote.h"
#include "enclave/common/files.h"

using namespace enclave;
using namespace enclave::attest;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s AK.pub QUOTE.msg QUOTE.sig PCRS.bin SELECTION NONCE_HEX\n", argv[0]);
    return 2;
  }
  auto read = [](const char* p) { return ReadWholeFile(p, 1 << 20); };
  auto ak_bytes = read(argv[1]);
  auto msg = read(argv[2]);
  auto sig = read(argv[3]);
  auto pcrs = read(argv[4]);
  auto sel = PcrSelection::FromString(argv[5]);
  auto nonce = HexDecode(argv[6]);
  if (!ak_bytes.ok() || !msg.ok() || !sig.ok() || !pcrs.ok() || !sel.ok() || !nonce.ok()) {
    std::fprintf(stderr, "cannot read the inputs\n");
    return 2;
  }
  auto ak = ParseTpm2bPublic(*ak_bytes);
  if (!ak.ok()) {
    std::fprintf(stderr, "AK: %s\n", ak.status().ToString().c_str());
    return 2;
  }
  // tpm2_pcrread -o: the selected values concatenated in selection order.
  QuoteEvidence ev{*msg, *sig, {}};
  size_t off = 0;
  for (const auto& bank : sel->banks) {
    for (uint32_t i : PcrSelection::Indices(bank)) {
      size_t n = HashSize(bank.hash);
      if (off + n > pcrs->size()) {
        std::fprintf(stderr, "PCR file too short\n");
        return 2;
      }
      ev.pcrs[bank.hash][i].assign(pcrs->begin() + off, pcrs->begin() + off + n);
      off += n;
    }
  }
  if (off != pcrs->size()) {
    std::fprintf(stderr, "PCR file has %zu extra bytes\n", pcrs->size() - off);
    return 2;
  }
  QuoteExpectations ex;
  ex.extra_data = *nonce;
  ex.selection = *sel;
  Appraisal a = AppraiseQuote(*ak, ev, ex);
  for (const auto& f : a.failures()) {
    std::printf("FAIL %s [%s] expected %s got %s\n", f.check.c_str(), f.where.c_str(), f.expected.c_str(),
                f.got.c_str());
  }
  std::printf("%s: %zu checks passed\n", a.ok() ? "PASS" : "REJECT", a.passed().size());
  return a.ok() ? 0 : 1;
}
