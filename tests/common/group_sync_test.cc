// GroupSync: every caller returns only after a sync that began after its write, and a
// failed sync fails every later caller (tests with real threads).
#include "enclave/common/group_sync.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace enclave {
namespace {

TEST(GroupSyncTest, EveryCallerWaitsForASyncThatBeganAfterItsWriteAndConcurrentCallersShareOne) {
  std::atomic<uint64_t> writes{0};
  std::atomic<uint64_t> covered{0};  // the writes every completed sync has made durable
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  GroupSync sync([&] {
    if (running.fetch_add(1) != 0) overlapped = true;
    const uint64_t at_start = writes.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    uint64_t c = covered.load();
    while (c < at_start && !covered.compare_exchange_weak(c, at_start)) {
    }
    running.fetch_sub(1);
    return OkStatus();
  });
  constexpr int kThreads = 16, kPerThread = 25;
  std::atomic<int> uncovered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t mine = writes.fetch_add(1) + 1;  // "the write"
        ASSERT_TRUE(sync.Sync().ok());
        if (covered.load() < mine) uncovered.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(uncovered.load(), 0) << "a caller returned before a sync covering its write completed";
  EXPECT_FALSE(overlapped.load()) << "two syncs ran at once";
  const uint64_t n = sync.syncs();
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, static_cast<uint64_t>(kThreads * kPerThread));
  std::cout << kThreads * kPerThread << " writes, " << n << " syncs\n";
}

TEST(GroupSyncTest, AFailedSyncFailsThatCallerAndEveryLaterOneEvenWhenTheNextSyncWouldPass) {
  int calls = 0;
  GroupSync sync([&] {
    ++calls;
    return calls == 2 ? IoError("fdatasync of x: Input/output error") : OkStatus();
  });
  EXPECT_TRUE(sync.Sync().ok());
  const Status failed = sync.Sync();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("Input/output error"), std::string::npos) << failed.ToString();
  const Status later = sync.Sync();
  EXPECT_FALSE(later.ok()) << "a write after a failed sync was acknowledged";
  EXPECT_EQ(later.message(), failed.message());
  EXPECT_EQ(calls, 2) << "the barrier ran the sync again after it failed";
}

TEST(GroupSyncTest, ATicketAlreadyCoveredReturnsWithoutASync) {
  int calls = 0;
  GroupSync sync([&] {
    ++calls;
    return OkStatus();
  });
  const uint64_t a = sync.Issue(), b = sync.Issue();
  ASSERT_TRUE(sync.Through(b).ok());
  ASSERT_TRUE(sync.Through(a).ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace enclave
