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
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kernel_step_records.h"
#include "loopback_pair.h"
#include "transport.h"

namespace enclave::net {
namespace {

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

// Whether message `index` is posted as a GPU buffer on the send or the receive side.
using OnDevice = std::function<bool(uint64_t index, bool send_side)>;

// Sends `sizes` as one stream, up to `window` messages in flight. Each round tests every
// request in flight, newest first; once a request reports done, every earlier request of
// its connection must report done at its next test() too (requests complete in posting
// order). Checks the reported size and every received byte.
void Stream(Pair& p, const std::vector<uint64_t>& sizes, size_t window, const OnDevice& on_device = {}) {
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
      const bool s_dev = on_device && on_device(m.index, true), r_dev = on_device && on_device(m.index, false);
      auto s = p.send->Post(m.out.data(), m.size, s_dev);
      auto r = p.recv->Post(m.in.data(), m.size + m.slack, r_dev);
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

// The GPU path's record layers (here their kernel steps on the CPU) and the CPU path on
// one connection, message by message in all four pairings: a GPU-sealed record opens on
// the CPU, a CPU-sealed one through the kernel steps, with the exact bytes, in order.
TEST(DeviceRecords, GpuAndCpuBuffersInteroperateOnOneConnection) {
  static const testing::KernelStepRecords kernel_steps;
  Pair p = Connect(3, &kernel_steps);
  ASSERT_TRUE(p.send && p.recv);
  ASSERT_TRUE(p.send->has_device_layers() && p.recv->has_device_layers());
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < 48; ++i) {
    sizes.push_back(i % 6 == 0 ? 0 : i % 5 == 0 ? 3 * kMaxRecordPayload + 1000 + i : 1 + i * 4099);
  }
  Stream(p, sizes, 8, [](uint64_t index, bool send_side) { return ((send_side ? index : index / 2) & 1) != 0; });
}

// A record changed on the wire fails the GPU path's tag check: the receive is never
// reported done, test() returns the authentication failure, and not one byte reached
// the receive buffer.
TEST(DeviceRecords, ATamperedRecordIsRefusedBeforeAnythingIsDecrypted) {
  static const testing::KernelStepRecords kernel_steps, corrupting(/*corrupt_sends=*/true);
  Pair p = Connect(2, &kernel_steps, corrupting);
  ASSERT_TRUE(p.send && p.recv);
  const uint64_t size = 2 * kMaxRecordPayload + 77;
  std::vector<uint8_t> out(size, 0x11), in(size, kCanary);
  auto s = p.send->Post(out.data(), size, /*on_device=*/false);  // the host layer, which corrupts
  auto r = p.recv->Post(in.data(), size, /*on_device=*/true);
  ASSERT_TRUE(s.ok() && *s != nullptr && r.ok() && *r != nullptr);
  Status st;
  bool done = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (st.ok() && !done && std::chrono::steady_clock::now() < deadline) {
    uint64_t got = 0;
    st = p.recv->Test(*r, &done, &got);
    sched_yield();
  }
  EXPECT_FALSE(done) << "a tampered message was reported received";
  EXPECT_EQ(st.code(), Code::kAuthFailed) << st.ToString();
  EXPECT_NE(st.message().find("authentication failed"), std::string::npos) << st.message();
  p.send.reset();
  p.recv.reset();  // workers joined: the buffer can be read
  EXPECT_EQ(in, std::vector<uint8_t>(size, kCanary)) << "bytes of a tampered message reached the buffer";
}

// A GPU buffer on a connection without GPU record layers is a caller's error, refused
// at post time; the connection stays usable.
TEST(DeviceRecords, AGpuBufferWithoutGpuRecordsIsRefusedAtPost) {
  Pair p = Connect(1);
  ASSERT_TRUE(p.send && p.recv);
  EXPECT_FALSE(p.send->has_device_layers());
  uint8_t buf[16] = {};
  auto s = p.send->Post(buf, sizeof buf, /*on_device=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidInput);
  EXPECT_NE(s.status().message().find("ENCLAVE_NET_GPU"), std::string::npos) << s.status().message();
  Stream(p, {5, 70000}, 2);
}

}  // namespace
}  // namespace enclave::net
