// Verifier cost of one attestation, per core: a P-256 quote over sha256:0-7 appraised
// (AK checks, signature, extraData, PCR set and digest, clock) plus a 2,000-event
// crypto-agile boot log parsed, replayed and compared with the quoted PCRs, side by
// side with the signature check alone; and the whole verifier entry point,
// AppraiseEvidence: a quote over sha256:0-9 plus a 2,000-event UEFI boot log (Secure Boot
// variables, separators, boot applications, GRUB command line, firmware drivers and
// blobs) replayed, compared and evaluated against a policy (Secure Boot on, allowed boot
// applications and command line, per-event digests for PCR 4). Evidence is made as the
// attest tests make it (OpenSSL key, TPMS_ATTEST signed as a TPM signs;
// tests/attest/boot_fixture.h).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "attest_test_util.h"
#include "boot_fixture.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/measurements.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/verifier.h"

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

// AppraiseEvidence on a 2,000-event boot log and a policy that reads it.
struct PolicyFixture {
  Pkey key = MakeEcKey();
  enclave::attest::Policy policy;
  EvidenceParts evidence;
  AppraisalContext context;
  bool ok = false;

  PolicyFixture() {
    std::vector<BootEvent> events = TypicalBoot();
    // Firmware drivers and blobs fill PCRs 0 and 2 up to 2,000 events, before the separators.
    std::vector<BootEvent> filler;
    for (size_t i = 0; events.size() + filler.size() < 2000; ++i) {
      uint32_t type = i % 2 ? 0x80000004 /* EV_EFI_BOOT_SERVICES_DRIVER */ : 0x80000008 /* blob */;
      filler.push_back({i % 2 ? 2u : 0u, type, StrBytes("firmware module " + std::to_string(i)), std::nullopt, true});
    }
    events.insert(events.begin() + 2, filler.begin(), filler.end());
    std::vector<uint32_t> quoted = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    auto pcrs = BootPcrs(events, 0x000B);
    Bytes concat;
    for (uint32_t i : quoted) {
      evidence.quote.pcrs[alg::kSha256][i] = pcrs[i];
      concat = Cat(concat, pcrs[i]);
    }
    Bytes nonce(16, 0x42);
    auto qd = QualifyingData(nonce, std::nullopt);
    AttestFields f;
    f.extra = Bytes(qd->begin(), qd->end());
    f.sel = {{alg::kSha256, quoted}};
    f.pcr_digest = Sha256(concat);
    evidence.quote.attest = EncodeAttest(f);
    evidence.quote.signature = SignAttest(key.get(), evidence.quote.attest);
    evidence.event_log = EncodeBootLog(events);

    std::string dir = "/tmp/enclave_bench_attest_" + std::to_string(getpid());
    WriteFile(dir + "/root.pem", SelfSignedPem("bench root"));
    nlohmann::json pcr4 = nlohmann::json::array();
    for (const auto& e : events)
      if (e.pcr == 4) pcr4.push_back(Hex(Sha256(e.measured ? *e.measured : e.data)));
    nlohmann::json j = {
        {"version", 1},
        {"name", "bench"},
        {"quote_pcrs", {{"sha256", quoted}}},
        {"ek_roots", {{"files", {"root.pem"}}}},
        {"max_evidence_age_s", 300},
        {"secure_boot", true},
        {"event_digests", {{"4", {{"sha256", pcr4}}}}},
        {"boot_applications", {{"sha256", {Hex(Sha256(StrBytes("shim image"))), Hex(Sha256(StrBytes("grub image")))}}}},
        {"kernel_cmdlines", {"/vmlinuz-6.1 root=/dev/sda1 ro"}},
    };
    auto p = ParsePolicy(j.dump(), dir);
    std::filesystem::remove_all(dir);
    if (!p.ok()) return;
    policy = *p;
    context.ak_public = EncodeAkPublic(key.get());
    context.nonce = nonce;
    context.nonce_issued_at = 1700000000;
    context.now = 1700000010;
    ok = true;
  }
};

void BM_AppraiseEvidence2000EventsWithPolicy(benchmark::State& state) {
  PolicyFixture fx;
  if (!fx.ok) {
    state.SkipWithError("policy did not parse");
    return;
  }
  for (auto _ : state) {
    auto v = AppraiseEvidence(fx.policy, fx.evidence, fx.context);
    if (!v.ok() || !v->passed()) {
      state.SkipWithError(v.ok() ? v->appraisal.Summary().c_str() : v.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AppraiseEvidence2000EventsWithPolicy);

// The parts of AppraiseEvidence, for finding where the time goes.
void BM_Part_ParseEventLogView2000(benchmark::State& state) {
  PolicyFixture fx;
  for (auto _ : state) {
    auto log = ParseEventLogView(fx.evidence.event_log);
    benchmark::DoNotOptimize(log);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Part_ParseEventLogView2000);

void BM_Part_ReplaySha256Bank2000(benchmark::State& state) {
  PolicyFixture fx;
  auto log = ParseEventLogView(fx.evidence.event_log);
  const uint16_t bank[] = {alg::kSha256};
  for (auto _ : state) {
    auto replay = ReplayEventLog(*log, bank);
    benchmark::DoNotOptimize(replay);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Part_ReplaySha256Bank2000);

void BM_Part_ReadMeasurements2000(benchmark::State& state) {
  PolicyFixture fx;
  auto log = ParseEventLogView(fx.evidence.event_log);
  for (auto _ : state) {
    auto m = ReadMeasurements(*log);
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Part_ReadMeasurements2000);

void BM_Part_AppraiseQuote(benchmark::State& state) {
  PolicyFixture fx;
  auto ak = ParseTpmtPublic(fx.context.ak_public);
  QuoteExpectations expect;
  auto qd = QualifyingData(fx.context.nonce, std::nullopt);
  expect.extra_data.assign(qd->begin(), qd->end());
  expect.selection = fx.policy.quote_selection;
  for (auto _ : state) {
    Appraisal a = AppraiseQuote(*ak, fx.evidence.quote, expect);
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Part_AppraiseQuote);

}  // namespace

BENCHMARK_MAIN();
