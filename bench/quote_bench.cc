// Host-side quote latency against swtpm (wall-clock: the TPM is another process), side by
// side with the cheapest TPM round trip as the baseline:
//   BM_PcrRead        TPM2_PCR_Read of sha256:0-10 (baseline: the transport and command cost)
//   BM_QuotePcrs      TPM2_Quote of sha256:0-10 with an AK already loaded
//   BM_MakeEvidence   what `enclave-attest quote` does per quote: create the EK from its
//                     template, load the AK, read PCRs, quote, read PCRs again, flush; RSA-2048
//                     EK (arg 0) or ECC P-256 EK (arg 1)
// The swtpm is the tests' fixture (a fresh one with EK certificates) when the tests are
// built, else the TPM DefaultTcti() finds (/dev/tpmrm0 or scripts/swtpm-start's).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "enclave/attest/host/agent.h"
#include "enclave/attest/host/tpm.h"
#ifdef ENCLAVE_BENCH_OWN_SWTPM
#include "swtpm_fixture.h"
#endif

namespace {

using namespace enclave;
using namespace enclave::attest::host;

struct Env {
#ifdef ENCLAVE_BENCH_OWN_SWTPM
  std::unique_ptr<enclave::testing::SwtpmFixture> fixture;
#endif
  std::unique_ptr<Tpm> tpm;
  std::string state_dir;

  Env() {
    setenv("TSS2_LOG", "all+NONE", 0);
    std::string tcti;
#ifdef ENCLAVE_BENCH_OWN_SWTPM
    auto f = enclave::testing::SwtpmFixture::Start();
    if (!f.ok()) Die("starting swtpm: " + f.status().ToString());
    fixture = std::move(f).value();
    tcti = fixture->tcti();
    state_dir = fixture->dir() + "/bench-state";
#else
    auto t = DefaultTcti();
    if (!t.ok()) Die(t.status().ToString());
    tcti = *t;
    state_dir = std::filesystem::temp_directory_path().string() + "/enclave-quote-bench-" + std::to_string(getpid());
#endif
    auto opened = Tpm::Open(tcti);
    if (!opened.ok()) Die(opened.status().ToString());
    tpm = std::move(opened).value();
  }
  ~Env() {
    tpm.reset();
#ifndef ENCLAVE_BENCH_OWN_SWTPM
    std::filesystem::remove_all(state_dir);
#endif
  }
  [[noreturn]] static void Die(const std::string& why) {
    std::fprintf(stderr, "quote_bench: %s\n", why.c_str());
    std::exit(1);
  }
};

Env& GetEnv() {
  static Env env;
  return env;
}

const PcrSelection kSelection = {{0x000B, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}};

void BM_PcrRead(benchmark::State& state) {
  Env& env = GetEnv();
  for (auto _ : state) {
    auto v = env.tpm->ReadPcrs(kSelection);
    if (!v.ok()) {
      state.SkipWithError(v.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(v->data());
  }
}
BENCHMARK(BM_PcrRead)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_QuotePcrs(benchmark::State& state) {
  Env& env = GetEnv();
  auto ek = env.tpm->CreateEk(EkType::kEccP256);
  if (!ek.ok()) return state.SkipWithError(ek.status().ToString().c_str());
  auto blob = env.tpm->CreateAk(*ek);
  if (!blob.ok()) return state.SkipWithError(blob.status().ToString().c_str());
  auto ak = env.tpm->LoadAk(*ek, *blob);
  if (!ak.ok()) return state.SkipWithError(ak.status().ToString().c_str());
  std::vector<uint8_t> qualifying(32, 0x51);
  for (auto _ : state) {
    auto q = env.tpm->QuotePcrs(*ak, kSelection, qualifying);
    if (!q.ok()) {
      state.SkipWithError(q.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(q->attest.data());
  }
}
BENCHMARK(BM_QuotePcrs)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_MakeEvidence(benchmark::State& state) {
  Env& env = GetEnv();
  const std::string dir = env.state_dir + (state.range(0) == 0 ? "-rsa" : "-ecc");
  auto host_state = HostState::Open(dir, true);
  if (!host_state.ok()) return state.SkipWithError(host_state.status().ToString().c_str());
  if (!host_state->HasAk()) {
    EnrollOptions options;
    options.ek_type = state.range(0) == 0 ? EkType::kRsa2048 : EkType::kEccP256;
    auto e = Enroll(*env.tpm, *host_state, options, 1);
    if (!e.ok()) return state.SkipWithError(e.status().ToString().c_str());
  }
  auto sel = enclave::attest::PcrSelection::FromString("sha256:0,1,2,3,4,5,6,7,8,9,10");
  std::vector<uint8_t> nonce(32, 0x4E);
  LogSource no_logs = [] { return Result<HostLogs>(HostLogs{}); };
  for (auto _ : state) {
    auto ev = MakeEvidence(*env.tpm, *host_state, *sel, nonce, std::nullopt, no_logs, 1);
    if (!ev.ok()) {
      state.SkipWithError(ev.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(ev->attest.data());
  }
  state.SetLabel(state.range(0) == 0 ? "RSA-2048 EK" : "ECC P-256 EK");
}
BENCHMARK(BM_MakeEvidence)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
