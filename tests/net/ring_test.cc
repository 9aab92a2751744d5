// The CPU all-reduce over the encrypted plugin: ranks as threads of one process (one
// plugin, one key) for the sums, and as forked processes where a rank must hold another
// key or die mid-run.
#include "enclave/net/ring.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/net/plugin.h"
#include "nccl_net_v11.h"
#include "peer_process.h"

extern "C" ncclNet_v11_t ncclNetPlugin_v11;  // libnccl-net-enclave.so, which the ring uses

namespace enclave::net {
namespace {

using std::chrono::seconds;

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/ring-test-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

crypto::SecretBytes Key(uint8_t fill) {
  auto k = crypto::SecretBytes::Create(32);
  EXPECT_TRUE(k.ok());
  std::memset(k->ExposeSecretMutable().data(), fill, 32);
  return std::move(k).value();
}

Result<std::unique_ptr<Ring>> Join(const std::string& dir, int world, int rank, uint8_t key_fill, seconds timeout) {
  ASSIGN_OR_RETURN(auto ex, DirectoryExchange(dir, "job-ring-test"));
  RingOptions o;
  o.world_size = world;
  o.rank = rank;
  o.comm_id = 0x1234;
  o.timeout = timeout;
  return Ring::Connect(Key(key_fill), o, *ex);
}

// Every rank contributes rank+1 times a per-element pattern of small integers, so the
// float sums are exact and the expected result is known.
void RunSums(int world, const std::vector<size_t>& sizes) {
  TempDir dir;
  std::vector<std::vector<std::vector<float>>> out(world);
  std::vector<std::vector<double>> dout(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto ring = Join(dir.path(), world, r, 7, seconds(60));
      if (!ring.ok()) {
        errors[r] = ring.status().ToString();
        return;
      }
      for (size_t n : sizes) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97));
        Status st = (*ring)->AllReduceSum(v.data(), n);
        if (!st.ok()) {
          errors[r] = st.ToString();
          return;
        }
        out[r].push_back(std::move(v));
      }
      std::vector<double> d = {0.1 * (r + 1), -1e300, 3.0};
      Status st = (*ring)->AllReduceSum(d.data(), d.size());
      if (!st.ok()) errors[r] = st.ToString();
      dout[r] = d;
    });
  }
  for (auto& t : ranks) t.join();
  const float factor = static_cast<float>(world * (world + 1) / 2);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(out[r].size(), sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) {
        ASSERT_EQ(out[r][k][i], factor * static_cast<float>(i % 97)) << "rank " << r << " size " << sizes[k] << " i " << i;
      }
    }
    EXPECT_DOUBLE_EQ(dout[r][1], -1e300 * world);
    EXPECT_EQ(dout[r][2], 3.0 * world);
    EXPECT_EQ(std::memcmp(dout[r].data(), dout[0].data(), 3 * sizeof(double)), 0) << "rank " << r;
  }
  // The handle files are withdrawn once the ring is up.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(RingTest, TwoRanksSumExactly) { RunSums(2, {0, 1, 2, 3, 1000, 1 << 20}); }
TEST(RingTest, FourRanksSumExactly) { RunSums(4, {0, 1, 3, 5, 4096, 300001}); }
TEST(RingTest, ThreeRanksSumExactly) { RunSums(3, {2, 7, 65536}); }

TEST(RingTest, EveryRankGetsTheSameBitsAndARunRepeats) {
  const int world = 4;
  const size_t n = 10007;
  auto run = [&]() {
    TempDir dir;
    std::vector<std::vector<float>> v(world, std::vector<float>(n));
    std::vector<std::string> errors(world);
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
      std::mt19937 gen(static_cast<unsigned>(r));
      std::uniform_real_distribution<float> d(-1, 1);
      for (float& x : v[r]) x = d(gen) * 1e3f;
      ranks.emplace_back([&, r] {
        auto ring = Join(dir.path(), world, r, 9, seconds(60));
        Status st = ring.ok() ? (*ring)->AllReduceSum(v[r].data(), n) : ring.status();
        if (!st.ok()) errors[r] = st.ToString();
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "");
    return v;
  };
  auto a = run(), b = run();
  for (int r = 1; r < world; ++r) EXPECT_EQ(std::memcmp(a[r].data(), a[0].data(), n * sizeof(float)), 0) << r;
  EXPECT_EQ(std::memcmp(a[0].data(), b[0].data(), n * sizeof(float)), 0);
}

// Rank 1 runs in a child process: with another key, or dying after the ring is up.
// Returns the parent's (rank 0's) status.
enum class Child { kWrongKey, kDieAfterConnect };
Status RunAgainstChild(Child what, bool* dir_left_empty = nullptr) {
  TempDir dir;
  pid_t pid = fork();
  if (pid == 0) {
    auto ring = Join(dir.path(), 2, 1, what == Child::kWrongKey ? 8 : 7, seconds(8));
    if (what == Child::kDieAfterConnect && ring.ok()) {
      std::vector<float> v(1000, 1.0f);
      (void)(*ring)->AllReduceSum(v.data(), v.size());
      _exit(0);  // exits without joining the second all-reduce: its sockets close
    }
    _exit(ring.ok() ? 0 : 3);
  }
  auto ring = Join(dir.path(), 2, 0, 7, seconds(8));
  Status st = ring.status();
  if (ring.ok()) {
    std::vector<float> v(1000, 1.0f);
    st = (*ring)->AllReduceSum(v.data(), v.size());
    if (st.ok()) st = (*ring)->AllReduceSum(v.data(), v.size());
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (dir_left_empty != nullptr) *dir_left_empty = std::filesystem::is_empty(dir.path());
  return st;
}

// Rank 1's exchange, holding rank 1's Fetch until the test opens it: rank 1 publishes (so
// rank 0 starts connecting and accepting) but does not connect to rank 0 yet.
class Gated final : public HandleExchange {
 public:
  explicit Gated(std::unique_ptr<HandleExchange> inner) : inner_(std::move(inner)) {}
  Status Publish(int rank, const RingHandle& h) override { return inner_->Publish(rank, h); }
  Result<RingHandle> Fetch(int rank, std::chrono::steady_clock::time_point d) override {
    while (!open.load() && std::chrono::steady_clock::now() < d) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return inner_->Fetch(rank, d);
  }
  void Withdraw(int rank) override { inner_->Withdraw(rank); }
  std::atomic<bool> open{false};

 private:
  std::unique_ptr<HandleExchange> inner_;
};

// Someone without the job key who read rank 0's handle (the rendezvous carries it in the
// clear) connects to rank 0 before rank 1 does: enclave_net_peer with another key, first
// in another communicator, then in the ring's (its comm id is no secret either). Each
// connect() fails. Rank 0's listener closes those connections and goes on waiting; the
// ring of ranks 0 and 1 forms and sums.
TEST(RingTest, AConnectionWithoutTheKeyBeforeTheNeighbourDoesNotEndTheRing) {
  TempDir dir;
  Result<std::unique_ptr<Ring>> r0 = Internal("not run"), r1 = Internal("not run");
  std::thread t0([&] { r0 = Join(dir.path(), 2, 0, 7, seconds(20)); });
  auto ex1 = DirectoryExchange(dir.path(), "job-ring-test");
  ASSERT_TRUE(ex1.ok());
  Gated gated(std::move(ex1).value());
  std::thread t1([&] {
    RingOptions o;
    o.world_size = 2;
    o.rank = 1;
    o.comm_id = 0x1234;
    o.timeout = seconds(20);
    r1 = Ring::Connect(Key(7), o, gated);
  });
  auto ex = DirectoryExchange(dir.path(), "job-ring-test");
  ASSERT_TRUE(ex.ok());
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  auto h0 = (*ex)->Fetch(0, deadline);
  ASSERT_TRUE(h0.ok()) << h0.status().ToString();
  ASSERT_TRUE((*ex)->Fetch(1, deadline).ok());  // rank 0 reads it too and starts accepting
  for (const char* comm_id : {"24301", "4660"}) {  // 0x5eed, then the ring's 0x1234
    test::PeerProcess intruder;
    ASSERT_TRUE(intruder.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", "1", "1", "100", comm_id}));
    const crypto::SecretBytes other = Key(8);
    ASSERT_TRUE(intruder.WriteLine(HexEncode(other.ExposeSecret())));
    ASSERT_TRUE(intruder.WriteLine(HexEncode(ByteSpan(h0->data(), h0->size()))));
    const std::string out = intruder.ReadAll(15);
    EXPECT_EQ(intruder.Wait(), 2) << out;  // its connect() was refused
    EXPECT_NE(out.find(comm_id == std::string("4660") ? "did not prove the job key" : "before its ServerHello"),
              std::string::npos)
        << out;
  }
  // Rank 0 calls accept() all the while: by now it has seen the intruder hang up.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  gated.open = true;
  t0.join();
  t1.join();
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  std::thread s0([&] { EXPECT_TRUE((*r0)->AllReduceSum(a.data(), a.size()).ok()); });
  EXPECT_TRUE((*r1)->AllReduceSum(b.data(), b.size()).ok());
  s0.join();
  EXPECT_EQ(a[0], 3.0f);
  EXPECT_EQ(a[999], 3.0f);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// A rank with another key looks like any connection without the key to its neighbour's
// listener, which goes on waiting: both ranks fail when their timeout passes.
TEST(RingTest, ARankWithoutTheJobKeyIsRefused) {
  bool empty = false;
  Status st = RunAgainstChild(Child::kWrongKey, &empty);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_TRUE(empty) << "a failed join left its handle file behind";
}

// Records what rank 1 published, so a later test can plant it as a crashed run's file.
class Recording final : public HandleExchange {
 public:
  explicit Recording(std::unique_ptr<HandleExchange> inner) : inner_(std::move(inner)) {}
  Status Publish(int rank, const RingHandle& h) override {
    published = h;
    return inner_->Publish(rank, h);
  }
  Result<RingHandle> Fetch(int rank, std::chrono::steady_clock::time_point d) override { return inner_->Fetch(rank, d); }
  void Withdraw(int rank) override { inner_->Withdraw(rank); }
  RingHandle published{};

 private:
  std::unique_ptr<HandleExchange> inner_;
};

TEST(RingTest, AStaleHandleOfACrashedRunIsReplacedNotFatal) {
  RingHandle stale{};
  {
    // A finished ring: rank 1's handle now names a closed port.
    TempDir first;
    std::thread r0([&] { (void)Join(first.path(), 2, 0, 7, seconds(20)); });
    auto ex = DirectoryExchange(first.path(), "job-ring-test");
    ASSERT_TRUE(ex.ok());
    Recording rec(std::move(ex).value());
    RingOptions o;
    o.world_size = 2;
    o.rank = 1;
    o.comm_id = 0x1234;
    o.timeout = seconds(20);
    auto ring = Ring::Connect(Key(7), o, rec);
    r0.join();
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    stale = rec.published;
  }
  TempDir dir;
  {
    auto ex = DirectoryExchange(dir.path(), "job-ring-test");
    ASSERT_TRUE(ex.ok());
    ASSERT_TRUE((*ex)->Publish(1, stale).ok());  // what the crashed run left
  }
  // Rank 0 starts first and reads the stale file; rank 1 comes half a second later.
  Result<std::unique_ptr<Ring>> r0 = Internal("not run");
  std::thread t0([&] { r0 = Join(dir.path(), 2, 0, 7, seconds(20)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto r1 = Join(dir.path(), 2, 1, 7, seconds(20));
  t0.join();
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  std::thread s0([&] { EXPECT_TRUE((*r0)->AllReduceSum(a.data(), a.size()).ok()); });
  EXPECT_TRUE((*r1)->AllReduceSum(b.data(), b.size()).ok());
  s0.join();
  EXPECT_EQ(a[9], 3.0f);
  EXPECT_EQ(b[0], 3.0f);
}

TEST(RingTest, APeerThatDiesFailsTheRunInsteadOfHanging) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = RunAgainstChild(Child::kDieAfterConnect);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(30));
}

TEST(RingTest, RefusesBadArguments) {
  TempDir dir;
  EXPECT_EQ(Join(dir.path(), 2, 2, 7, seconds(1)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(Join(dir.path(), 0, 0, 7, seconds(1)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(DirectoryExchange(dir.path(), "../x").status().code(), Code::kInvalidInput);
  EXPECT_EQ(DirectoryExchange(dir.path() + "/missing", "t").status().code(), Code::kNotFound);
  auto ex = DirectoryExchange(dir.path(), "t");
  ASSERT_TRUE(ex.ok());
  {
    FILE* f = std::fopen((dir.path() + "/t.rank-1.handle").c_str(), "w");
    std::fputs("abcd\n", f);
    std::fclose(f);
  }
  EXPECT_EQ((*ex)->Fetch(1, std::chrono::steady_clock::now()).status().code(), Code::kInvalidInput);
  EXPECT_EQ((*ex)->Fetch(2, std::chrono::steady_clock::now()).status().code(), Code::kUnavailable);
}

// A handle whose listener is closed again (what a crashed run leaves): a dead port.
RingHandle DeadHandle() {
  ncclNet_v11_t* net = &ncclNetPlugin_v11;
  uint8_t key[32];
  std::memset(key, 7, sizeof(key));
  EXPECT_EQ(enclave_net_set_job_key(key, sizeof(key)), 0);
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t config{};
  EXPECT_EQ(net->init(&ctx, 0x1234, &config, nullptr, nullptr), ncclSuccess);
  RingHandle h{};
  void* listen = nullptr;
  EXPECT_EQ(net->listen(ctx, 0, h.data(), &listen), ncclSuccess);
  net->closeListen(listen);
  net->finalize(ctx);
  return h;
}

// A stale handle that nobody replaces: connect() writes its token into the handle, which
// must not look like a fresh one. Rank 0 fails within its timeout (2 s) after a few
// attempts and log lines, instead of retrying the dead port forever at full speed.
TEST(RingTest, AStaleHandleNeverReplacedFailsInTimeWithFewLogLines) {
  TempDir dir, logs;
  {
    auto ex = DirectoryExchange(dir.path(), "job-ring-test");
    ASSERT_TRUE(ex.ok());
    ASSERT_TRUE((*ex)->Publish(1, DeadHandle()).ok());
  }
  const std::string log = logs.path() + "/stderr.txt";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(9);
    const auto t0 = std::chrono::steady_clock::now();
    auto ring = Join(dir.path(), 2, 0, 7, seconds(2));
    const auto took = std::chrono::steady_clock::now() - t0;
    std::fprintf(stderr, "RESULT %s\n", ring.ok() ? "ok" : ring.status().ToString().c_str());
    if (ring.ok()) _exit(3);
    if (ring.status().code() != Code::kUnavailable) _exit(4);
    _exit(took < std::chrono::milliseconds(4000) ? 0 : 5);
  }
  int wstatus = 0;
  bool exited = false;
  for (int i = 0; i < 200 && !exited; ++i) {  // 20 s for a 2 s timeout
    exited = waitpid(pid, &wstatus, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
  }
  std::ifstream in(log);
  std::string line, text;
  size_t lines = 0;
  while (std::getline(in, line)) {
    if (++lines <= 12) text += line + "\n";
  }
  ASSERT_TRUE(exited) << "Ring::Connect did not return within 20 s (timeout 2 s); " << lines
                      << " lines on stderr, the first:\n" << text;
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "3: connected, 4: not kUnavailable, 5: took 4 s or more\n" << text;
  EXPECT_GE(lines, 2u) << text;  // the plugin's refused connect, the ring's retry line
  EXPECT_LE(lines, 12u) << text;
  EXPECT_NE(text.find("could not connect to rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("published no fresh handle in time"), std::string::npos) << text;
}

// Rank 1 (raw ABI) answers the reduce-scatter at once but sends its all-gather message
// 4 s late; rank 0's AllReduceSum times out after 2 s. Nothing may land in rank 0's
// buffer after the call returned (the trainer frees it), and the ring stays failed.
TEST(RingTest, AFailedAllReduceWritesNothingLaterAndTheRingStaysFailed) {
  TempDir dir;
  const size_t n = 1000;  // two chunks of 500 floats
  std::vector<float> data(n, 1.0f);
  std::atomic<bool> rank0_done{false};
  std::thread r1([&] {
    ncclNet_v11_t* net = &ncclNetPlugin_v11;
    auto ex = DirectoryExchange(dir.path(), "job-ring-test");
    ASSERT_TRUE(ex.ok());
    uint8_t key[32];
    std::memset(key, 7, sizeof(key));
    ASSERT_EQ(enclave_net_set_job_key(key, sizeof(key)), 0);
    void* ctx = nullptr;
    ncclNetCommConfig_v11_t config{};
    ASSERT_EQ(net->init(&ctx, 0x1234, &config, nullptr, nullptr), ncclSuccess);
    RingHandle mine{};
    void* lc = nullptr;
    ASSERT_EQ(net->listen(ctx, 0, mine.data(), &lc), ncclSuccess);
    ASSERT_TRUE((*ex)->Publish(1, mine).ok());
    auto h0 = (*ex)->Fetch(0, std::chrono::steady_clock::now() + seconds(20));
    ASSERT_TRUE(h0.ok());
    void *sc = nullptr, *rc = nullptr;
    const auto deadline = std::chrono::steady_clock::now() + seconds(20);
    while ((sc == nullptr || rc == nullptr) && std::chrono::steady_clock::now() < deadline) {
      if (sc == nullptr) {
        ASSERT_EQ(net->connect(ctx, 0, h0->data(), &sc, nullptr), ncclSuccess);
      }
      if (rc == nullptr) {
        ASSERT_EQ(net->accept(lc, &rc, nullptr), ncclSuccess);
      }
    }
    ASSERT_TRUE(sc != nullptr && rc != nullptr);
    auto wait = [&](void* req) {
      int done = 0, size = 0;
      while (done == 0 && net->test(req, &done, &size) == ncclSuccess) std::this_thread::yield();
    };
    std::vector<float> chunk(500, 2.0f), in(500), late(500, 12345.0f);
    void* p = in.data();
    size_t size = 2000;
    int tag = 0;
    void *rq = nullptr, *sq = nullptr;
    ASSERT_EQ(net->irecv(rc, 1, &p, &size, &tag, nullptr, nullptr, &rq), ncclSuccess);
    ASSERT_EQ(net->isend(sc, chunk.data(), 2000, 0, nullptr, nullptr, &sq), ncclSuccess);
    wait(rq);
    wait(sq);  // the reduce-scatter is done
    ASSERT_EQ(net->irecv(rc, 1, &p, &size, &tag, nullptr, nullptr, &rq), ncclSuccess);
    wait(rq);  // rank 0's all-gather message
    std::this_thread::sleep_for(std::chrono::seconds(4));
    if (net->isend(sc, late.data(), 2000, 0, nullptr, nullptr, &sq) == ncclSuccess) wait(sq);
    for (int i = 0; i < 100 && !rank0_done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    net->closeSend(sc);
    net->closeRecv(rc);
    net->closeListen(lc);
    net->finalize(ctx);
  });
  auto ring = Join(dir.path(), 2, 0, 7, seconds(2));
  EXPECT_TRUE(ring.ok()) << ring.status().ToString();
  if (ring.ok()) {
    Status st = (*ring)->AllReduceSum(data.data(), n);
    EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
    std::fill(data.begin(), data.end(), -1.0f);  // the caller owns its buffer again
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // rank 1's late message: 2 s after the error
    EXPECT_EQ(std::count(data.begin(), data.end(), -1.0f), static_cast<long>(n))
        << "written after AllReduceSum returned: data[0] = " << data[0];
    const auto t0 = std::chrono::steady_clock::now();
    Status again = (*ring)->AllReduceSum(data.data(), n);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
    EXPECT_EQ(again.code(), Code::kUnavailable) << again.ToString();
    EXPECT_NE(again.message().find("failed earlier"), std::string::npos) << again.ToString();
    EXPECT_EQ(std::count(data.begin(), data.end(), -1.0f), static_cast<long>(n));
  }
  rank0_done = true;
  r1.join();
}

}  // namespace
}  // namespace enclave::net
