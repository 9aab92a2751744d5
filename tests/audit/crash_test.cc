// Crash safety: a forked writer process appends from several threads and reports every
// acknowledged index through a pipe; the test kills it with SIGKILL at a random moment,
// many times over. After each kill, every acknowledged entry must be in the log with the
// content that was acknowledged, the log must recover and verify, and it must stay
// consistent with the tree head accepted after the previous round (no rollback).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <random>
#include <thread>

#include "audit_test_util.h"

namespace enclave::audit {
namespace {

using namespace testing;

struct Ack {
  uint64_t index;
  uint32_t thread;
  uint32_t seq;
};

std::string HostFor(uint32_t round, uint32_t thread, uint32_t seq) {
  return "r" + std::to_string(round) + "-t" + std::to_string(thread) + "-n" + std::to_string(seq);
}

[[noreturn]] void WriterChild(const TestLog& log, int fd, uint32_t round) {
  auto key = LogSigningKey::Load(log.key_path);
  if (!key.ok()) _exit(3);
  auto w = LogWriter::Open(log.dir.string(), std::move(*key));
  if (!w.ok()) _exit(4);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t n = 0;; ++n) {
        auto idx = (*w)->Append(HostEnrolled("crash-test", HostFor(round, t, n), "", ""));
        if (!idx.ok()) _exit(5);
        Ack a{*idx, t, n};
        // Writes of at most PIPE_BUF bytes are atomic: acks from threads never interleave.
        if (::write(fd, &a, sizeof a) != static_cast<ssize_t>(sizeof a)) _exit(6);
      }
    });
  }
  for (auto& th : threads) th.join();
  _exit(0);
}

TEST(CrashSafety, KillNineDuringAppendsNeverLosesAnAcknowledgedEntry) {
  TestLog log = MakeLog("crash");
  std::mt19937 rng(12345);
  std::optional<AuditorState> accepted;
  uint64_t total_acked = 0, total_recovered_bytes = 0;
  constexpr uint32_t kRounds = 60;
  for (uint32_t round = 0; round < kRounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      WriterChild(log, fds[1], round);
    }
    ::close(fds[1]);
    // Kill at a random moment: sometimes while the child is still recovering the log.
    const int delay_us = std::uniform_int_distribution<int>(0, 40000)(rng);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "round " << round << ": the writer exited by itself with status " << wstatus;
    std::vector<Ack> acks;
    Ack a;
    ssize_t n;
    while ((n = ::read(fds[0], &a, sizeof a)) == static_cast<ssize_t>(sizeof a)) acks.push_back(a);
    ASSERT_EQ(n, 0) << "torn ack record in the pipe";
    ::close(fds[0]);
    total_acked += acks.size();

    // Recover (as the broker would on restart), then verify as an auditor.
    {
      auto w = LogWriter::Open(log.dir.string(), log.Key());
      ASSERT_TRUE(w.ok()) << "round " << round << ": " << w.status().ToString();
      total_recovered_bytes += (*w)->recovery().truncated_bytes;
    }
    std::map<uint64_t, std::string> hosts;
    VerifyOptions opts;
    if (accepted) opts.trusted = &*accepted;
    opts.on_entry = [&](uint64_t index, uint64_t, ByteSpan, const Entry& e) -> Status {
      hosts[index] = e.event.fields.value("host", "");
      return OkStatus();
    };
    auto v = VerifyLog(log.dir.string(), log.pub, opts);
    ASSERT_TRUE(v.ok()) << "round " << round << ": " << v.status().ToString();
    for (const Ack& k : acks) {
      auto it = hosts.find(k.index);
      ASSERT_NE(it, hosts.end()) << "round " << round << ": acknowledged entry " << k.index << " is missing";
      ASSERT_EQ(it->second, HostFor(round, k.thread, k.seq)) << "round " << round << ": entry " << k.index;
    }
    accepted = AuditorState{log.pub.log_id, v->latest};
  }
  EXPECT_GT(total_acked, 0u) << "the writer never got to acknowledge anything";
  std::printf("crash test: %u kills, %llu acknowledged entries all present, %llu torn bytes recovered\n", kRounds,
              static_cast<unsigned long long>(total_acked), static_cast<unsigned long long>(total_recovered_bytes));
}

}  // namespace
}  // namespace enclave::audit
