// The log witnessed as it grows (issue 17 section 2): Witnessing against two real witness
// processes on loopback. Concurrent appenders share rounds (batching); a witness that is
// down delays the wait and then fails it, never lets it pass; a log cut back after it was
// witnessed gets no cosignature again.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/witnessing.h"
#include "witness_fixture.h"

namespace enclave::audit {
namespace {

using namespace testing;
using namespace std::chrono_literals;

class WitnessingTest : public TwoWitnessesTest {
 protected:
  std::unique_ptr<LogWriter> OpenWriter(WriterOptions wo = {}) {
    auto w = LogWriter::Open(log_.dir.string(), log_.Key(), wo);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(*w) : nullptr;
  }
  std::unique_ptr<Witnessing> StartWitnessing(LogWriter& log, const std::string& quorum,
                                              std::chrono::milliseconds interval = 20ms) {
    WitnessingOptions o;
    o.client.timeout_s = 2;
    o.retry = 50ms;
    o.interval = interval;
    auto w = Witnessing::Start(log, Policy(quorum), o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(*w) : nullptr;
  }
};

TEST_F(WitnessingTest, ConcurrentAppendersShareCosignedCheckpoints) {
  auto log = OpenWriter();
  auto witnessing = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n");
  ASSERT_TRUE(witnessing);
  constexpr int kThreads = 8, kEach = 12;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::vector<uint8_t> bytes;
        auto index = log->Append(SampleEvent(static_cast<uint64_t>(t * 100 + i)), &bytes);
        if (!index.ok()) {
          failures[t] = index.status().ToString();
          return;
        }
        auto c = witnessing->AwaitCovering(*index, 20s);
        if (!c.ok()) {
          failures[t] = c.status().ToString();
          return;
        }
        // The entry is in the cosigned tree: its inclusion proof holds against the root
        // the checkpoint signs, and both witnesses' cosignatures verify.
        auto cp = VerifyCheckpointNote(c->note, log_.pub, "cosigned");
        auto proof = log->InclusionProof(*index, c->tree_size);
        if (!cp.ok() || !proof.ok() || cp->root != c->root ||
            !VerifyInclusion(*index, c->tree_size, LeafHash(bytes), *proof, cp->root).ok()) {
          failures[t] = "entry " + std::to_string(*index) + " not proven in the cosigned checkpoint";
          return;
        }
        auto by = PolicyCosignatures(witnessing->policy(), *ParseNote(c->note, "cosigned"));
        if (!by.ok() || by->size() != 2) failures[t] = "not cosigned by both witnesses";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "appender " << t;
  const WitnessingStats s = witnessing->stats();
  EXPECT_EQ(s.cosigned_size, uint64_t{kThreads * kEach});
  // Batching: far fewer rounds than entries (each round covers what was appended meanwhile).
  EXPECT_LT(s.rounds, uint64_t{kThreads * kEach});
  EXPECT_GE(s.quorum_rounds, 1u);
}

TEST_F(WitnessingTest, AWitnessDownDelaysThenFailsAndAQuorumOfOneGoesOn) {
  auto log = OpenWriter();
  auto both = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n");
  ASSERT_TRUE(both);
  ASSERT_TRUE(log->Append(SampleEvent(0)).ok());
  ASSERT_TRUE(both->AwaitCovering(0, 20s).ok());
  witnesses_[1]->Stop(SIGKILL);
  auto index = log->Append(SampleEvent(1));
  ASSERT_TRUE(index.ok());
  const auto start = std::chrono::steady_clock::now();
  auto c = both->AwaitCovering(*index, 700ms);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable);
  EXPECT_NE(c.status().message().find("no checkpoint holding audit entry 1 was cosigned"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("w2: "), std::string::npos) << c.status().message();
  EXPECT_GE(waited, 650ms);
  EXPECT_LT(waited, 5s);
  // The entry waits, it is not lost: once w2 is back, the same wait succeeds.
  ASSERT_TRUE(witnesses_[1]->Restart().ok());
  both.reset();
  auto again = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n");  // w2's new port
  ASSERT_TRUE(again);
  auto later = again->AwaitCovering(*index, 20s);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(later->tree_size, 2u);
  // One of two is enough when the policy says so.
  witnesses_[1]->Stop(SIGKILL);
  again.reset();
  auto one = StartWitnessing(*log, "group one any w1 w2\nquorum one\n");
  ASSERT_TRUE(one);
  ASSERT_TRUE(log->Append(SampleEvent(2)).ok());
  auto c1 = one->AwaitCovering(2, 20s);
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  EXPECT_EQ(PolicyCosignatures(one->policy(), *ParseNote(c1->note, "n"))->size(), 1u);
}

// OnCovering holds no thread: it returns at once, and the callback comes from the
// witnessing's notifier with the cosigned checkpoint, or with the failure once the wait is
// over. Rounds are spaced by the interval, so entries appended meanwhile share one.
TEST_F(WitnessingTest, OnCoveringCallsBackWithoutAWaitingThreadAndRoundsAreSpaced) {
  auto log = OpenWriter();
  auto witnessing = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n", 300ms);
  ASSERT_TRUE(witnessing);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<CosignedCheckpoint>> results;
  std::vector<std::thread::id> callers;
  constexpr int kEntries = 12;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kEntries; ++i) {
    auto index = log->Append(SampleEvent(static_cast<uint64_t>(i)));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    const auto before = std::chrono::steady_clock::now();
    witnessing->OnCovering(*index, 20s, [&, index = *index](Result<CosignedCheckpoint> c) {
      std::lock_guard<std::mutex> lk(mu);
      if (c.ok() && c->tree_size <= index) c = Internal("a checkpoint without entry " + std::to_string(index));
      results.push_back(std::move(c));
      callers.push_back(std::this_thread::get_id());
      cv.notify_all();
    });
    EXPECT_LT(std::chrono::steady_clock::now() - before, 100ms) << "OnCovering waited";
    std::this_thread::sleep_for(50ms);  // 12 entries over about 600 ms
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 30s, [&] { return results.size() == kEntries; }));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.status().ToString();
    for (const auto& id : callers) EXPECT_NE(id, std::this_thread::get_id());
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // One round, then one per 300 ms at most: far fewer than the 12 that back-to-back rounds make.
  const WitnessingStats s = witnessing->stats();
  EXPECT_LE(s.rounds, 1 + static_cast<uint64_t>(elapsed / 300ms)) << s.rounds << " rounds";
  EXPECT_EQ(s.cosigned_size, uint64_t{kEntries});

  // A witness down: the callback still comes, with the failure, once the wait is over.
  witnesses_[1]->Stop(SIGKILL);
  auto index = log->Append(SampleEvent(99));
  ASSERT_TRUE(index.ok());
  std::promise<Result<CosignedCheckpoint>> failed;
  const auto asked = std::chrono::steady_clock::now();
  witnessing->OnCovering(*index, 700ms, [&](Result<CosignedCheckpoint> c) { failed.set_value(std::move(c)); });
  auto f = failed.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  const auto waited = std::chrono::steady_clock::now() - asked;
  auto c = f.get();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable);
  EXPECT_NE(c.status().message().find("was cosigned by the witness quorum"), std::string::npos) << c.status().message();
  EXPECT_GE(waited, 650ms);
  // Stopping calls back every waiter left.
  std::promise<Result<CosignedCheckpoint>> stopped;
  witnessing->OnCovering(*index, 60s, [&](Result<CosignedCheckpoint> c2) { stopped.set_value(std::move(c2)); });
  witnessing.reset();
  auto sf = stopped.get_future();
  ASSERT_EQ(sf.wait_for(0s), std::future_status::ready);
  EXPECT_NE(sf.get().status().message().find("witnessing stopped"), std::string::npos);
}

// Only published checkpoints are submitted: each cosigned checkpoint's tree has its tiles,
// even when the writer publishes only on demand.
TEST_F(WitnessingTest, CosignedCheckpointsArePublishedWithTheirTiles) {
  WriterOptions wo;
  wo.publish_interval = std::chrono::hours(1);  // publishes only when asked
  auto log = OpenWriter(wo);
  auto witnessing = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n");
  ASSERT_TRUE(witnessing);
  std::set<uint64_t> sizes;
  for (int round = 0; round < 3; ++round) {
    uint64_t last = 0;
    for (int i = 0; i < 5; ++i) {
      auto index = log->Append(SampleEvent(static_cast<uint64_t>(round * 10 + i)));
      ASSERT_TRUE(index.ok());
      last = *index;
    }
    auto c = witnessing->AwaitCovering(last, 20s);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    sizes.insert(c->tree_size);
    // The checkpoint file (the newest published) and the partial tiles of the cosigned size.
    const std::string tiles = log->tiles_dir();
    const std::string width = std::to_string(c->tree_size % 256);
    EXPECT_TRUE(std::filesystem::exists(tiles + "/tile/0/000.p/" + width)) << c->tree_size;
    EXPECT_TRUE(std::filesystem::exists(tiles + "/tile/entries/000.p/" + width)) << c->tree_size;
    const std::string published = ReadTextFile(tiles + "/checkpoint");
    const auto cp = VerifyCheckpointNote(published, log_.pub, "published");
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    EXPECT_GE(cp->tree_size, c->tree_size);
    EXPECT_EQ(c->note.rfind(published, 0), 0u) << "not the published checkpoint:\n" << c->note << "\n" << published;
  }
  EXPECT_EQ(sizes.size(), 3u);
  // Far fewer publications than batches: 15 appends, 3 rounds asked for one each.
  EXPECT_LE(log->stats().published, 4u) << log->stats().batches << " batches";
}

// The attack of issue 17: a log cut back to an earlier head after its witnesses cosigned a
// larger tree, then continued with another history. No witness cosigns it again.
TEST_F(WitnessingTest, ALogCutBackAfterItWasWitnessedIsNeverCosignedAgain) {
  {
    auto log = OpenWriter();
    auto w = StartWitnessing(*log, "group both 2 w1 w2\nquorum both\n");
    ASSERT_TRUE(w);
    for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(log->Append(SampleEvent(i)).ok());
    ASSERT_TRUE(w->AwaitCovering(5, 20s).ok());
  }
  CutBackAndRewrite(log_, 4, 3);  // 4 kept, 3 others: size 7 > 6, a different tree
  auto log = OpenWriter();
  auto w = StartWitnessing(*log, "group one any w1 w2\nquorum one\n");
  ASSERT_TRUE(w);
  auto c = w->AwaitCovering(6, 1500ms);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable);
  // Both witnesses refused: the proof from the size they cosigned does not hold.
  EXPECT_NE(c.status().message().find("w1: "), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("not consistent"), std::string::npos) << c.status().message();
  EXPECT_EQ(w->stats().quorum_rounds, 0u);
}

TEST_F(WitnessingTest, StartRefusesAPolicyThatCannotWitnessThisLog) {
  auto log = OpenWriter();
  // Another log's key.
  TestLog other = MakeLog("witnessing-other-log");
  const std::string text = "log " + NoteVerifierKey(other.pub) + "\nwitness w1 " + witnesses_[0]->verifier_key() +
                           " " + Url(0) + "\nquorum w1\n";
  auto w = Witnessing::Start(*log, *WitnessPolicy::Parse(text, "p"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no `log` line for this log"), std::string::npos) << w.status().message();
  // A quorum that needs a witness without a URL.
  const std::string no_url = "log " + NoteVerifierKey(log_.pub) + "\nwitness w1 " + witnesses_[0]->verifier_key() +
                             "\nquorum w1\n";
  w = Witnessing::Start(*log, *WitnessPolicy::Parse(no_url, "p"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("cannot make its quorum"), std::string::npos) << w.status().message();
  w = Witnessing::Start(*log, *WitnessPolicy::Parse("log " + NoteVerifierKey(log_.pub) + "\nquorum none\n", "p"));
  ASSERT_FALSE(w.ok());
}

}  // namespace
}  // namespace enclave::audit
