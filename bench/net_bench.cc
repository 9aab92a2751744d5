// The encrypted NCCL transport on loopback: AES-256-GCM records vs the same transport
// with the benchmark-only plaintext record layer (net/testing/plaintext_records.h:
// same sockets, worker threads, framing and chunking; no AEAD, no staging copy, the
// receiver reads straight into the caller's buffer). One process, sender and receiver
// connected over 127.0.0.1 through the same Context/DataComm code the plugin wraps.
//
//   build-j/bench/enclave_bench_net [--benchmark_repetitions=3]
//
// Rates are message bytes per wall-clock second (the work is on the worker threads),
// 4 messages in flight. After the runs, a table gives encrypted / plaintext per size,
// and the encrypted rate against its computed limit on this machine's CPUs:
//   limit = cpus / (transport + cipher)   [bytes/s]
// transport: the plaintext run's CPU time per byte (the whole process, user + system:
//   sockets, worker threads, framing; BM_Net/plaintext's cpu_ns_per_byte counter);
// cipher: sealing, opening and copying out one record of the size the transport cuts
//   that message into, on one thread (BM_Cipher's ns_per_byte: what the encrypted
//   transport does per byte that the plaintext one does not);
// cpus: the CPUs this process may run on (sched_getaffinity).
// The encrypted rate can reach the limit only if the transport keeps every CPU busy
// and adds nothing per byte beyond those two costs; "of limit" says how close it gets.
// BM_PingPong: the round trip of a one-chunk message (4,352 bytes, an all-reduce of a
// small model) over two connections, one each way, with 1 and 4 sockets: a message wakes
// only the workers of the sockets that carry it, so extra sockets should cost nothing.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "enclave/crypto/aead.h"
#include "plaintext_records.h"
#include "transport.h"
#include "wire.h"

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

// CPU time of the whole process so far (all threads, user + system).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// Polls until the request is done: yielding between polls (the round-trip benchmark, where
// the latency is the figure), or sleeping 20 us (the throughput benchmarks: the waiting
// thread then takes almost no CPU, so the CPU time measured is the transport's own; NCCL's
// proxy thread yields in a loop instead, and on a host with few CPUs takes what it uses
// from the transport).
enum class Poll { kYield, kSleep };
void WaitDone(DataComm& comm, enclave::net::Request* r, benchmark::State& state, Poll poll = Poll::kYield) {
  bool done = false;
  uint64_t size = 0;
  while (!done) {
    if (!comm.Test(r, &done, &size).ok()) {
      state.SkipWithError("transport failed");
      return;
    }
    if (done) break;
    if (poll == Poll::kYield) {
      sched_yield();
    } else {
      const timespec pause{0, 20'000};
      nanosleep(&pause, nullptr);
    }
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
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    if (flight.size() == kInFlight) {
      WaitDone(*p.send, flight.front().first, state, Poll::kSleep);
      WaitDone(*p.recv, flight.front().second, state, Poll::kSleep);
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
    WaitDone(*p.send, flight.front().first, state, Poll::kSleep);
    WaitDone(*p.recv, flight.front().second, state, Poll::kSleep);
    flight.pop_front();
  }
  const double cpu_seconds = ProcessCpuSeconds() - cpu_start;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
  // Every thread of the process (both ends, every worker), user and system time.
  state.counters["cpu_ns_per_byte"] = cpu_seconds * 1e9 / static_cast<double>(state.iterations() * size);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int nsocks : {1, 2, 4, 8})  // 1: the plugin's default on 2 CPUs; 8: a many-core host (gpu-check, 16)
    for (int64_t size = 64 << 10; size <= 64 << 20; size *= 4) b->Args({size, nsocks});
  b->ArgNames({"bytes", "nsocks"})->UseRealTime()->MinTime(0.5);
}
BENCHMARK_CAPTURE(BM_Net, encrypted, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_Net, plaintext, false)->Apply(Args);

// What the encrypted record layer does per byte beyond the plaintext one, on one thread:
// seal a record (AeadSender: into staging), open it in place and copy the plaintext out
// (AeadReceiver), for the record length the transport cuts a message of `bytes` into
// over `nsocks` sockets (its first chunk).
void BM_Cipher(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const int nsocks = static_cast<int>(state.range(1));
  const auto len = static_cast<uint32_t>(enclave::net::PlanChunks(size, nsocks).Length(0));
  auto key = enclave::crypto::SecretBytes::CopyFrom(std::vector<uint8_t>(32, 0x42));
  if (!key.ok()) std::abort();
  auto seal = enclave::crypto::Aead::Create(enclave::crypto::Suite::kAes256Gcm, *key);
  auto open = enclave::crypto::Aead::Create(enclave::crypto::Suite::kAes256Gcm, *key);
  if (!seal.ok() || !open.ok()) std::abort();
  enclave::net::RecordHeader h;
  h.payload_len = len;
  h.msg_size = size;
  std::vector<uint8_t> plain(len, 0x5a), record(len + enclave::net::kRecordTagBytes), out(len);
  uint64_t seq = 0;
  const double cpu_start = ThreadCpuSeconds();
  for (auto _ : state) {
    h.seq = seq;
    const auto header = enclave::net::EncodeRecordHeader(h);
    if (!enclave::net::SealRecord(**seal, header, seq, enclave::ByteSpan(plain.data(), len), record).ok() ||
        !enclave::net::OpenRecordInPlace(**open, header, seq, record).ok()) {
      state.SkipWithError("record failed");
      break;
    }
    std::memcpy(out.data(), record.data(), len);
    benchmark::DoNotOptimize(out.data());
    ++seq;
  }
  const double thread_seconds = ThreadCpuSeconds() - cpu_start;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
  state.counters["ns_per_byte"] = thread_seconds * 1e9 / static_cast<double>(state.iterations() * len);
}
BENCHMARK(BM_Cipher)->Apply(Args);

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

// Console output as usual, then per (size, nsocks): encrypted / plaintext, and the
// encrypted rate against its computed limit (the header comment).
class RatioReporter : public benchmark::ConsoleReporter {
  using Key = std::pair<long long, int>;
  struct Figures {
    double rate = 0, cpu_ns_per_byte = 0;
  };

 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.error_occurred || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")) continue;
      const std::string name = r.benchmark_name();  // BM_Net/encrypted/bytes:N/nsocks:M/..., BM_Cipher/bytes:...
      const auto b = name.find("/bytes:"), n = name.find("/nsocks:");
      if (b == std::string::npos || n == std::string::npos) continue;
      const Key key{std::stoll(name.substr(b + 7)), std::stoi(name.substr(n + 8))};
      auto counter = [&](const char* c) {
        auto it = r.counters.find(c);
        return it == r.counters.end() ? 0.0 : it->second.value;
      };
      if (name.rfind("BM_Cipher/", 0) == 0) {
        cipher_ns_per_byte_[key] = counter("ns_per_byte");
      } else if (name.rfind("BM_Net/", 0) == 0) {
        const bool enc = name.find("/encrypted/") != std::string::npos;
        (enc ? enc_ : plain_)[key] = {counter("bytes_per_second"), counter("cpu_ns_per_byte")};
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const int cpus = AvailableCpus();
    std::printf("\nlimit = %d CPUs / (plaintext transport CPU per byte + cipher per byte), all measured in this run\n",
                cpus);
    std::printf("%10s %7s %11s %11s %6s %9s %9s %9s %11s %8s\n", "message", "sockets", "encrypted", "plaintext",
                "ratio", "transport", "cipher", "enc. CPU", "limit", "of limit");
    std::printf("%10s %7s %11s %11s %6s %9s %9s %9s %11s %8s\n", "", "", "GB/s", "GB/s", "", "ns/B", "ns/B", "ns/B",
                "GB/s", "");
    for (const auto& [key, e] : enc_) {
      auto p = plain_.find(key);
      if (p == plain_.end()) continue;
      auto c = cipher_ns_per_byte_.find(key);
      const double cipher = c == cipher_ns_per_byte_.end() ? 0.0 : c->second;
      const double per_byte = p->second.cpu_ns_per_byte + cipher;  // ns of CPU per byte
      const double limit = per_byte > 0 && cipher > 0 ? cpus / per_byte * 1e9 : 0.0;  // bytes/s
      std::printf("%7lld KiB %7d %11.2f %11.2f %5.0f%% %9.3f %9.3f %9.3f %11.2f %7.0f%%\n",
                  static_cast<long long>(key.first >> 10), key.second, e.rate / 1e9, p->second.rate / 1e9,
                  100.0 * e.rate / p->second.rate, p->second.cpu_ns_per_byte, cipher, e.cpu_ns_per_byte, limit / 1e9,
                  limit > 0 ? 100.0 * e.rate / limit : 0.0);
    }
  }

 private:
  std::map<Key, Figures> enc_, plain_;       // by (message bytes, nsocks)
  std::map<Key, double> cipher_ns_per_byte_;  // BM_Cipher
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
