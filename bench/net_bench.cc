// The encrypted NCCL transport on loopback: AES-256-GCM records vs the same transport
// with the benchmark-only plaintext record layer (net/testing/plaintext_records.h:
// same sockets, worker threads, framing and chunking; no AEAD, no staging copy, the
// receiver reads straight into the caller's buffer). One process, sender and receiver
// connected over 127.0.0.1 through the same Context/DataComm code the plugin wraps.
//
//   build-j/bench/enclave_bench_net [--benchmark_repetitions=3]
//
// Rates are message bytes per wall-clock second (the work is on the worker threads),
// 4 messages in flight. After the runs, a table gives encrypted / plaintext per size.
// BM_PingPong: the round trip of a one-chunk message (4,352 bytes, an all-reduce of a
// small model) over two connections, one each way, with 1 and 4 sockets: a message wakes
// only the workers of the sockets that carry it, so extra sockets should cost nothing.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <stdlib.h>

#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "plaintext_records.h"
#include "transport.h"

namespace {

using enclave::net::Context;
using enclave::net::DataComm;
using enclave::net::RecordProtection;

struct Pair {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<enclave::net::ListenComm> listen;
  std::unique_ptr<DataComm> send, recv;
};

Pair Connect(const RecordProtection& protection, int nsocks) {
  setenv("ENCLAVE_NET_IFNAME", "lo", 1);
  Pair p;
  std::vector<uint8_t> key(32, 0x42);
  auto dev = enclave::net::SelectDevice();
  auto secret = enclave::crypto::SecretBytes::CopyFrom(key);
  if (!dev.ok() || !secret.ok()) std::abort();
  enclave::net::Options opt;
  opt.nsocks = nsocks;
  auto ctx = Context::Create(std::move(secret).value(), 1, *dev, opt, protection);
  if (!ctx.ok()) std::abort();
  p.ctx = std::move(ctx).value();
  std::array<uint8_t, enclave::net::kHandleBytes> handle{};
  auto l = p.ctx->Listen(handle);
  if (!l.ok()) std::abort();
  p.listen = std::move(l).value();
  while (!p.send || !p.recv) {
    if (!p.send) {
      auto s = p.ctx->Connect(handle);
      if (!s.ok()) std::abort();
      p.send = std::move(s).value();
    }
    if (!p.recv) {
      auto r = p.listen->Accept();
      if (!r.ok()) std::abort();
      p.recv = std::move(r).value();
    }
  }
  return p;
}

void WaitDone(DataComm& comm, enclave::net::Request* r, benchmark::State& state) {
  bool done = false;
  uint64_t size = 0;
  while (!done) {
    if (!comm.Test(r, &done, &size).ok()) {
      state.SkipWithError("transport failed");
      return;
    }
    if (!done) sched_yield();
  }
}

void BM_Net(benchmark::State& state, bool encrypted) {
  const size_t size = static_cast<size_t>(state.range(0));
  const int nsocks = static_cast<int>(state.range(1));
  Pair p = Connect(encrypted ? enclave::net::AeadProtection()
                             : enclave::net::testing::PlaintextProtectionForBenchmarkOnly(),
                   nsocks);
  constexpr size_t kInFlight = 4;
  std::vector<std::vector<uint8_t>> sbuf(kInFlight, std::vector<uint8_t>(size, 0x5a)), rbuf(kInFlight, std::vector<uint8_t>(size));
  std::deque<std::pair<enclave::net::Request*, enclave::net::Request*>> flight;
  size_t i = 0;
  for (auto _ : state) {
    if (flight.size() == kInFlight) {
      WaitDone(*p.send, flight.front().first, state);
      WaitDone(*p.recv, flight.front().second, state);
      flight.pop_front();
    }
    auto s = p.send->Post(sbuf[i % kInFlight].data(), size);
    auto r = p.recv->Post(rbuf[i % kInFlight].data(), size);
    if (!s.ok() || !r.ok() || *s == nullptr || *r == nullptr) {
      state.SkipWithError("post failed");
      break;
    }
    flight.emplace_back(*s, *r);
    ++i;
  }
  while (!flight.empty()) {
    WaitDone(*p.send, flight.front().first, state);
    WaitDone(*p.recv, flight.front().second, state);
    flight.pop_front();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int nsocks : {2, 4, 8})  // 8: a many-core host (scripts/gpu-check runs this on 16 cores)
    for (int64_t size = 64 << 10; size <= 64 << 20; size *= 4) b->Args({size, nsocks});
  b->ArgNames({"bytes", "nsocks"})->UseRealTime()->MinTime(0.5);
}
BENCHMARK_CAPTURE(BM_Net, encrypted, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_Net, plaintext, false)->Apply(Args);

void BM_PingPong(benchmark::State& state, bool encrypted) {
  const size_t size = static_cast<size_t>(state.range(0));
  const int nsocks = static_cast<int>(state.range(1));
  const RecordProtection& protection =
      encrypted ? enclave::net::AeadProtection() : enclave::net::testing::PlaintextProtectionForBenchmarkOnly();
  Pair ping = Connect(protection, nsocks), pong = Connect(protection, nsocks);
  std::vector<uint8_t> a(size, 0x5a), b(size);
  // Posts a receive then a send of `size` bytes on one pair; false (and the state's error) if refused.
  auto post = [&](Pair& p, uint8_t* from, uint8_t* to, enclave::net::Request** s, enclave::net::Request** r) {
    auto rr = p.recv->Post(to, size);
    auto sr = p.send->Post(from, size);
    if (!rr.ok() || !sr.ok() || *rr == nullptr || *sr == nullptr) {
      state.SkipWithError("post failed");
      return false;
    }
    *r = *rr;
    *s = *sr;
    return true;
  };
  for (auto _ : state) {
    enclave::net::Request *s1, *r1, *s2, *r2;
    if (!post(ping, a.data(), b.data(), &s1, &r1)) break;
    WaitDone(*ping.recv, r1, state);
    if (!post(pong, b.data(), a.data(), &s2, &r2)) break;
    WaitDone(*pong.recv, r2, state);
    WaitDone(*ping.send, s1, state);
    WaitDone(*pong.send, s2, state);
  }
}
BENCHMARK_CAPTURE(BM_PingPong, encrypted, true)
    ->ArgsProduct({{4352}, {1, 4}})
    ->ArgNames({"bytes", "nsocks"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.5);

// Console output as usual, then encrypted / plaintext per (size, nsocks).
class RatioReporter : public benchmark::ConsoleReporter {
  using Key = std::pair<long long, int>;

 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.error_occurred || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const std::string name = r.benchmark_name();  // BM_Net/encrypted/bytes:N/nsocks:M/...
      const bool enc = name.find("/encrypted/") != std::string::npos;
      const auto b = name.find("/bytes:"), n = name.find("/nsocks:");
      if (b == std::string::npos || n == std::string::npos) continue;
      const Key key{std::stoll(name.substr(b + 7)), std::stoi(name.substr(n + 8))};
      (enc ? enc_ : plain_)[key] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%10s %7s %14s %14s %7s\n", "message", "sockets", "encrypted", "plaintext", "ratio");
    for (const auto& [key, e] : enc_) {
      auto p = plain_.find(key);
      if (p == plain_.end()) continue;
      std::printf("%7lld KiB %7d %9.2f GB/s %9.2f GB/s %6.0f%%\n", static_cast<long long>(key.first >> 10), key.second,
                  e / 1e9, p->second / 1e9, 100.0 * e / p->second);
    }
  }

 private:
  std::map<Key, double> enc_, plain_;  // bytes/s by (message bytes, nsocks)
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
