// Verifier cost of one attestation, per core: a P-256 quote over sha256:0-7 appraised
// (AK checks, signature, extraData, PCR set and digest, clock) plus a 2,000-event
// crypto-agile boot log parsed, replayed and compared with the quoted PCRs, side by
// side with the signature check alone. Evidence is made as the attest tests make it
// (OpenSSL key, TPMS_ATTEST signed as a TPM signs). Policy evaluation is not built yet
// and not included.
#include <benchmark/benchmark.h>

#include "attest_test_util.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/quote.h"

namespace {

using namespace enclave::attest;
using namespace attest_test;

struct Fixture {
  Pkey key = MakeEcKey();
  TpmtPublic ak;
  Bytes log;
  QuoteEvidence evidence;
  QuoteExpectations expect;

  Fixture() {
    ak = *ParseTpmtPublic(EncodeAkPublic(key.get()));
    std::vector<LogEvent> events;
    for (uint32_t i = 0; i < 2000; ++i) {
      events.push_back({i % 8, 0x80000003 /* EV_EFI_BOOT_SERVICES_APPLICATION */, StrBytes("event " + std::to_string(i))});
    }
    log = CryptoAgileLog(events);
    auto parsed = ParseEventLog(log);
    auto replay = ReplayEventLog(*parsed);
    AttestFields f;
    f.extra = Bytes(32, 0x4E);
    f.sel = {{alg::kSha256, {0, 1, 2, 3, 4, 5, 6, 7}}};
    Bytes concat;
    for (uint32_t i = 0; i < 8; ++i) {
      evidence.pcrs[alg::kSha256][i] = replay->pcrs.at(alg::kSha256).at(i);
      concat = Cat(concat, evidence.pcrs[alg::kSha256][i]);
    }
    f.pcr_digest = Sha256(concat);
    evidence.attest = EncodeAttest(f);
    evidence.signature = SignAttest(key.get(), evidence.attest);
    expect.extra_data = f.extra;
    expect.selection = *PcrSelection::FromString("sha256:0,1,2,3,4,5,6,7");
  }
};

void BM_QuotePlus2000EventLog(benchmark::State& state) {
  Fixture fx;
  for (auto _ : state) {
    Appraisal quote = AppraiseQuote(fx.ak, fx.evidence, fx.expect);
    auto parsed = ParseEventLog(fx.log);
    auto replay = ReplayEventLog(*parsed);
    Appraisal log = CompareWithQuote(*parsed, *replay, fx.evidence.pcrs, {});
    if (!quote.ok() || !log.ok()) {
      state.SkipWithError("evidence did not verify");
      break;
    }
    benchmark::DoNotOptimize(log);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_QuotePlus2000EventLog);

void BM_QuoteSignatureOnly(benchmark::State& state) {
  Fixture fx;
  auto sig = ParseTpmtSignature(fx.evidence.signature);
  for (auto _ : state) {
    Appraisal a = VerifyQuoteSignature(fx.ak, fx.evidence.attest, *sig);
    if (!a.ok()) {
      state.SkipWithError("signature did not verify");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_QuoteSignatureOnly);

}  // namespace

BENCHMARK_MAIN();
