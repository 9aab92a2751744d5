// DataComm in one process over loopback (the code the plugin wraps, without its ABI):
// a message wakes only the workers that carry one of its chunks, workers skip the
// messages they carry nothing of, and test() still reports requests in posting order
// with the exact bytes, whatever mix of one-chunk and many-chunk messages is in flight.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "transport.h"

namespace enclave::net {
namespace {

struct Pair {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ListenComm> listen;
  std::unique_ptr<DataComm> send, recv;
};

Pair Connect(int nsocks) {
  setenv("ENCLAVE_NET_IFNAME", "lo", 1);
  Pair p;
  auto dev = SelectDevice();
  EXPECT_TRUE(dev.ok()) << dev.status().message();
  auto key = crypto::SecretBytes::Create(32);
  EXPECT_TRUE(key.ok());
  std::memset(key->ExposeSecretMutable().data(), 0x42, 32);
  Options opt;
  opt.nsocks = nsocks;
  auto ctx = Context::Create(std::move(key).value(), 7, *dev, opt, AeadProtection());
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  p.ctx = std::move(ctx).value();
  std::array<uint8_t, kHandleBytes> handle{};
  auto l = p.ctx->Listen(handle);
  EXPECT_TRUE(l.ok()) << l.status().message();
  p.listen = std::move(l).value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((!p.send || !p.recv) && std::chrono::steady_clock::now() < deadline) {
    if (!p.send) {
      auto s = p.ctx->Connect(handle);
      EXPECT_TRUE(s.ok()) << s.status().message();
      if (!s.ok()) break;
      p.send = std::move(s).value();
    }
    if (!p.recv) {
      auto r = p.listen->Accept();
      EXPECT_TRUE(r.ok()) << r.status().message();
      if (!r.ok()) break;
      p.recv = std::move(r).value();
    }
  }
  EXPECT_TRUE(p.send && p.recv) << "no connection within 30 s";
  return p;
}

uint8_t Pattern(uint64_t msg, uint64_t i) { return static_cast<uint8_t>((msg * 131 + i * 7 + (i >> 12)) ^ 0x5a); }

// One message of the stream: its buffers and its requests.
struct Message {
  uint64_t index = 0;
  uint64_t size = 0;
  uint64_t slack = 0;  // receive posted this much larger than the message
  std::vector<uint8_t> out, in;
  Request* s = nullptr;
  Request* r = nullptr;
  bool s_done = false, r_done = false;
};

constexpr uint8_t kCanary = 0xc3;

// Sends `sizes` as one stream, up to `window` messages in flight. Each round tests every
// request in flight, newest first; once a request reports done, every earlier request of
// its connection must report done at its next test() too (requests complete in posting
// order). Checks the reported size and every received byte.
void Stream(Pair& p, const std::vector<uint64_t>& sizes, size_t window) {
  std::deque<Message> flight;
  // On a failed assertion the workers may still write into the buffers: close the
  // connections before the buffers go.
  struct CloseFirst {
    Pair& p;
    std::deque<Message>& flight;
    ~CloseFirst() {
      if (!flight.empty()) {
        p.send.reset();
        p.recv.reset();
      }
    }
  } close_first{p, flight};
  size_t next = 0;
  uint64_t sent_done = 0, recv_done = 0;  // messages reported done so far, per side
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (next < sizes.size() || !flight.empty()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "stream stuck: " << sent_done << " sends and " << recv_done << " receives done of " << sizes.size();
    while (next < sizes.size() && flight.size() < window) {
      Message& m = flight.emplace_back();
      m.index = next;
      m.size = sizes[next];
      m.slack = next % 3 == 0 ? 5 : 0;
      m.out.resize(m.size);
      for (uint64_t i = 0; i < m.size; ++i) m.out[i] = Pattern(m.index, i);
      m.in.assign(m.size + m.slack, kCanary);
      auto s = p.send->Post(m.out.data(), m.size);
      auto r = p.recv->Post(m.in.data(), m.size + m.slack);
      ASSERT_TRUE(s.ok() && r.ok());
      ASSERT_NE(*s, nullptr) << "no free send slot with " << flight.size() << " in flight";
      ASSERT_NE(*r, nullptr) << "no free receive slot with " << flight.size() << " in flight";
      m.s = *s;
      m.r = *r;
      ++next;
    }
    // Tests message i of one side; when it is done, every earlier one must be too.
    auto test = [&](bool send_side, size_t i) {
      DataComm& comm = send_side ? *p.send : *p.recv;
      const char* side = send_side ? "send" : "receive";
      for (size_t k = 0; k <= i; ++k) {
        const size_t e = k == 0 ? i : k - 1;  // i first, then the earlier ones
        Message& m = flight[e];
        bool& was_done = send_side ? m.s_done : m.r_done;
        if (was_done) continue;
        bool done = false;
        uint64_t size = 0;
        ASSERT_TRUE(comm.Test(send_side ? m.s : m.r, &done, &size).ok());
        if (e == i && !done) return;
        ASSERT_TRUE(done) << side << " of message " << flight[i].index << " done before message " << m.index;
        ASSERT_EQ(size, m.size) << side << " of message " << m.index;
        was_done = true;
        ++(send_side ? sent_done : recv_done);
      }
    };
    for (size_t i = flight.size(); i-- > 0;) {
      if (!flight[i].s_done) test(true, i);
      if (!flight[i].r_done) test(false, i);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Done in order, so done messages are at the front.
    while (!flight.empty() && flight.front().s_done && flight.front().r_done) {
      const Message& m = flight.front();
      for (uint64_t i = 0; i < m.size; ++i) {
        if (m.in[i] != m.out[i]) FAIL() << "message " << m.index << " (" << m.size << " bytes): byte " << i << " differs";
      }
      for (uint64_t i = m.size; i < m.in.size(); ++i) {
        if (m.in[i] != kCanary) FAIL() << "message " << m.index << ": byte " << i << " past its end was written";
      }
      flight.pop_front();
    }
    sched_yield();
  }
}

uint64_t ChunkCount(uint64_t size, int nsocks) { return PlanChunks(size, nsocks).count; }

TEST(DataCommWakeups, OneChunkMessagesLeaveTheOtherWorkersIdle) {
  constexpr int kSocks = 4;
  Pair p = Connect(kSocks);
  ASSERT_TRUE(p.send && p.recv);
  // 0 B .. 32 KiB: one chunk each with 4 sockets.
  std::vector<uint64_t> small;
  for (int i = 0; i < 400; ++i) small.push_back(std::vector<uint64_t>{0, 1, 100, 4096, 32768}[i % 5]);
  for (uint64_t s : small) ASSERT_EQ(ChunkCount(s, kSocks), 1u);
  ASSERT_NO_FATAL_FAILURE(Stream(p, small, 8));
  for (DataComm* c : {p.send.get(), p.recv.get()}) {
    const char* side = c == p.send.get() ? "send" : "receive";
    EXPECT_EQ(c->WorkerStatsForTest(0).messages, small.size()) << side;
    EXPECT_LE(c->WorkerStatsForTest(0).wakeups, small.size()) << side;
    for (int j = 1; j < kSocks; ++j) {
      EXPECT_EQ(c->WorkerStatsForTest(j).messages, 0u) << side << " worker " << j;
      EXPECT_EQ(c->WorkerStatsForTest(j).wakeups, 0u) << side << " worker " << j << " woke for no chunk";
    }
  }
  // A two-chunk message involves workers 0 and 1, a four-chunk one all of them.
  ASSERT_EQ(ChunkCount(64 << 10, kSocks), 2u);
  ASSERT_EQ(ChunkCount(128 << 10, kSocks), 4u);
  ASSERT_NO_FATAL_FAILURE(Stream(p, {64 << 10, 1, 128 << 10}, 8));
  for (DataComm* c : {p.send.get(), p.recv.get()}) {
    EXPECT_EQ(c->WorkerStatsForTest(0).messages, small.size() + 3);
    EXPECT_EQ(c->WorkerStatsForTest(1).messages, 2u);
    EXPECT_EQ(c->WorkerStatsForTest(2).messages, 1u);
    EXPECT_EQ(c->WorkerStatsForTest(3).messages, 1u);
  }
}

class DataCommStream : public ::testing::TestWithParam<int> {};

// Sizes around every chunk-count boundary for n sockets (0 B, 1 B, page and minimum
// chunk edges, k * 32 KiB and k * 256 KiB +-1 for 1 .. 2n+1 chunks, 64 MiB), each
// followed by a one-chunk message, so idle workers fall behind and skip whole runs.
std::vector<uint64_t> InterleavedSizes(int n) {
  std::vector<uint64_t> big = {0, 1, 4095, 4096, 4097, 32767, 32768, 32769};
  for (uint64_t k = 1; k <= static_cast<uint64_t>(2 * n + 1); ++k) {
    for (uint64_t c : {uint64_t{32768}, uint64_t{262144}}) {
      big.push_back(k * c - 1);
      big.push_back(k * c);
      big.push_back(k * c + 1);
    }
  }
  big.push_back(uint64_t{64} << 20);
  const uint64_t small[] = {0, 1, 3, 100, 4096, 32768};
  std::vector<uint64_t> out;
  for (size_t i = 0; i < big.size(); ++i) {
    out.push_back(big[i]);
    out.push_back(small[i % 6]);
    if (i % 4 == 0) out.push_back(small[(i + 3) % 6]);  // sometimes two in a row
  }
  return out;
}

TEST_P(DataCommStream, InterleavedSizesKeepBytesAndOrder) {
  const int n = GetParam();
  const std::vector<uint64_t> sizes = InterleavedSizes(n);
  std::set<uint64_t> counts;
  for (uint64_t s : sizes) counts.insert(ChunkCount(s, n));
  for (uint64_t c = 1; c <= static_cast<uint64_t>(2 * n + 1); ++c) EXPECT_TRUE(counts.count(c)) << c << " chunks";
  Pair p = Connect(n);
  ASSERT_TRUE(p.send && p.recv);
  ASSERT_NO_FATAL_FAILURE(Stream(p, sizes, 16));
  // Every message went through worker 0; worker j carried exactly those with > j chunks.
  for (int j = 0; j < n; ++j) {
    uint64_t expect = 0;
    for (uint64_t s : sizes) expect += ChunkCount(s, n) > static_cast<uint64_t>(j);
    EXPECT_EQ(p.send->WorkerStatsForTest(j).messages, expect) << "send worker " << j;
    EXPECT_EQ(p.recv->WorkerStatsForTest(j).messages, expect) << "receive worker " << j;
  }
  // A full window of the slots, all one chunk, after the mix: the slots are reused in turn.
  ASSERT_NO_FATAL_FAILURE(Stream(p, std::vector<uint64_t>(3 * DataComm::kMaxRequests, 1), DataComm::kMaxRequests));
}

INSTANTIATE_TEST_SUITE_P(Sockets, DataCommStream, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& sockets) { return std::to_string(sockets.param); });

}  // namespace
}  // namespace enclave::net
