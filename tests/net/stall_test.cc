// The stall timeout (ENCLAVE_NET_STALL_TIMEOUT_S, docs/formats/net-transport.md) through
// the plugin's ABI, with enclave_net_peer as a real second process on loopback:
//  - a receive whose sender stops (a proxy that stops forwarding) and a send whose
//    receiver stops reading (a SIGSTOPped process) fail with ncclRemoteError within the
//    timeout + 2 s, the connection stays failed, and close() returns at once;
//  - transfers that keep moving but take longer than the timeout (a rate-limited proxy,
//    receiving and sending) complete with exact bytes: the timeout counts progress;
//  - unset and 0 mean off: a 2 s pause is waited out;
//  - malformed values fail init() with one line naming the variable and the range.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "peer_process.h"
#include "plugin_driver.h"
#include "transport.h"
#include "wire.h"

namespace enclave::net::test {
namespace {

const uint8_t kKey[32] = {7, 1, 7, 1, 7, 1, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                          9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 0, 1, 0, 1, 0};
constexpr const char* kVar = "ENCLAVE_NET_STALL_TIMEOUT_S";
// What a connector writes on each socket before its first record.
constexpr size_t kHandshakeBytes = kClientHelloBytes + kClientFinishedBytes;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// An environment variable for one scope (nullptr: unset); restored afterwards. The peer
// process inherits what is set when it starts.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

bool WriteN(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A byte-level TCP proxy on 127.0.0.1 in front of a listener. Listener -> connector is
// forwarded as is; connector -> listener, the first free_bytes of each socket (the
// handshake, and more if asked) as is, then:
//   kHold:  nothing more; it stops reading, so the sender's socket buffers fill up;
//   kPause: nothing for pause_s, then everything;
//   kSlow:  at most rate bytes per second, in pieces of 4 KiB.
class Proxy {
 public:
  enum class Mode { kHold, kPause, kSlow };
  struct Config {
    Mode mode = Mode::kHold;
    size_t free_bytes = kHandshakeBytes;
    double pause_s = 0;
    double rate = 0;          // bytes per second (kSlow)
    int client_rcvbuf = 0;    // SO_RCVBUF of the sockets facing the connector (0: default)
  };
  Proxy(Config cfg, uint16_t upstream_port) : cfg_(cfg), upstream_(upstream_port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cfg_.client_rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &cfg_.client_rcvbuf, sizeof(int));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 64);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~Proxy() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    shutdown(fd_, SHUT_RDWR);  // accept4 returns
    acceptor_.join();
    close(fd_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  uint16_t port() const { return port_; }
  // Sockets on which the listener's side shut down or closed (we read EOF from it).
  int listener_eofs() const { return listener_eofs_.load(); }

 private:
  void AcceptLoop() {
    for (;;) {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(upstream_);
      if (connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(c);
        close(u);
        continue;
      }
      fds_.push_back(c);
      fds_.push_back(u);
      pumps_.emplace_back([this, c, u] {
        uint8_t buf[4096];
        for (;;) {
          ssize_t n = recv(u, buf, sizeof(buf), 0);
          if (n == 0) ++listener_eofs_;
          if (n <= 0 || !WriteN(c, buf, static_cast<size_t>(n))) break;
        }
        shutdown(c, SHUT_WR);
      });
      pumps_.emplace_back([this, c, u] { Forward(c, u); });
    }
  }

  // Sleeps until `until` (forever if none); true if the proxy is being destroyed.
  bool WaitStop(std::optional<Clock::time_point> until) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!until) {
      cv_.wait(lock, [&] { return stop_; });
    } else {
      cv_.wait_until(lock, *until, [&] { return stop_; });
    }
    return stop_;
  }

  void Forward(int c, int u) {
    uint8_t buf[4096];
    size_t sent = 0, slow = 0;
    bool paused = false;
    Clock::time_point slow_start;
    for (;;) {
      size_t want = sizeof(buf);
      if (sent < cfg_.free_bytes) {
        want = std::min(want, cfg_.free_bytes - sent);
      } else if (!paused && cfg_.mode != Mode::kSlow) {
        paused = true;
        std::optional<Clock::time_point> until;
        if (cfg_.mode == Mode::kPause) until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                                  std::chrono::duration<double>(cfg_.pause_s));
        if (WaitStop(until)) break;
      }
      ssize_t n = recv(c, buf, want, 0);
      if (n <= 0) break;
      if (sent >= cfg_.free_bytes && cfg_.mode == Mode::kSlow) {
        if (slow == 0) slow_start = Clock::now();
        slow += static_cast<size_t>(n);
        auto due = slow_start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(static_cast<double>(slow) / cfg_.rate));
        if (WaitStop(due)) break;
      }
      if (!WriteN(u, buf, static_cast<size_t>(n))) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(u, SHUT_WR);
  }

  const Config cfg_;
  uint16_t upstream_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<int> listener_eofs_{0};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
};

class StallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearLog();
    ASSERT_TRUE(p_.Load(ENCLAVE_NET_PLUGIN)) << p_.error;
    ASSERT_EQ(p_.set_key(kKey, sizeof(kKey)), 0);
  }
  void TearDown() override {
    CloseData();
    if (ctx_ != nullptr) p_.net->finalize(ctx_);
  }
  void Init() {
    ASSERT_EQ(p_.net->init(&ctx_, 0x5eed, nullptr, CaptureLog, nullptr), ncclSuccess) << LogText();
  }

  // This process receives: it listens, a proxy with `cfg` sits in front of the listener,
  // and enclave_net_peer sends Schedule(seed, count, max_size) through it. Sets r_.
  void StartProxiedReceive(Proxy::Config cfg, int count, size_t max_size) {
    Init();
    if (HasFatalFailure()) return;
    uint8_t handle[128] = {0};
    ASSERT_EQ(p_.net->listen(ctx_, 0, handle, &l_), ncclSuccess);
    auto h = DecodeHandle(std::span<const uint8_t, 128>(handle, 128));
    ASSERT_TRUE(h.ok());
    proxy_ = std::make_unique<Proxy>(cfg, h->port);
    ListenHandle via = *h;  // the handle's address is routing only: point the sender at the proxy
    via.port = proxy_->port();
    uint8_t routed[128];
    EncodeHandle(via, std::span<uint8_t, 128>(routed, 128));
    ASSERT_TRUE(peer_.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", std::to_string(kSeed), std::to_string(count),
                             std::to_string(max_size)}));
    ASSERT_TRUE(peer_.WriteLine(Hex(kKey, sizeof(kKey))));
    ASSERT_TRUE(peer_.WriteLine(Hex(routed, sizeof(routed))));
    ASSERT_EQ(ConnectAccept(p_.net, ctx_, nullptr, l_, nullptr, &r_, 30), ncclSuccess) << LogText();
  }

  // This process sends: enclave_net_peer listens and receives Schedule(seed, count,
  // max_size); with a proxy config the connection goes through a proxy. Sets s_.
  void StartSend(std::optional<Proxy::Config> cfg, int count, size_t max_size) {
    Init();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(peer_.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "recv", std::to_string(kSeed), std::to_string(count),
                             std::to_string(max_size)}));
    ASSERT_TRUE(peer_.WriteLine(Hex(kKey, sizeof(kKey))));
    std::string line = peer_.ReadLine();
    ASSERT_EQ(line.rfind("HANDLE ", 0), 0u) << line;
    uint8_t handle[128];
    ASSERT_TRUE(Unhex(line.substr(7), handle, sizeof(handle)));
    auto h = DecodeHandle(std::span<const uint8_t, 128>(handle, 128));
    ASSERT_TRUE(h.ok());
    peer_port_ = h->port;
    if (cfg) {
      proxy_ = std::make_unique<Proxy>(*cfg, h->port);
      ListenHandle via = *h;
      via.port = proxy_->port();
      EncodeHandle(via, std::span<uint8_t, 128>(handle, 128));
    }
    ASSERT_EQ(ConnectAccept(p_.net, ctx_, handle, nullptr, &s_, nullptr, 30), ncclSuccess) << LogText();
  }

  // Closes the data comm and measures how long that took.
  double CloseData() {
    auto t = Clock::now();
    if (s_ != nullptr) {
      EXPECT_EQ(p_.net->closeSend(s_), ncclSuccess);
    }
    if (r_ != nullptr) {
      EXPECT_EQ(p_.net->closeRecv(r_), ncclSuccess);
    }
    s_ = r_ = nullptr;
    double took = Seconds(t);
    if (l_ != nullptr) p_.net->closeListen(l_);
    l_ = nullptr;
    return took;
  }

  // Polls test() until it is done or fails; ncclInProgress after timeout_s.
  ncclResult_t Poll(void* req, double timeout_s, int* size = nullptr) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int done = 0, got = 0;
    while (Clock::now() < deadline) {
      ncclResult_t rc = p_.net->test(req, &done, &got);
      if (rc != ncclSuccess) return rc;
      if (done) {
        if (size != nullptr) *size = got;
        return ncclSuccess;
      }
    }
    return ncclInProgress;
  }

  static constexpr uint64_t kSeed = 31;
  ScopedEnv ifname_{"ENCLAVE_NET_IFNAME", "lo"};
  Plugin p_;
  void* ctx_ = nullptr;
  void *l_ = nullptr, *s_ = nullptr, *r_ = nullptr;
  uint16_t peer_port_ = 0;
  std::unique_ptr<Proxy> proxy_;
  PeerProcess peer_;  // declared last: killed first, then the proxy goes
};

const char* kNoProgress = "made no progress for ";

// 1. The sender's bytes stop arriving (the proxy stops forwarding mid-message): the
// receiver's test() fails with ncclRemoteError about 1 s after the last byte moved.
TEST_F(StallTest, ReceiveFailsWhenSenderStops) {
  ScopedEnv timeout(kVar, "1");
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "2");  // the peer (the connector) picks the socket count
  Proxy::Config cfg;
  cfg.mode = Proxy::Mode::kHold;
  cfg.free_bytes = kHandshakeBytes + 100000;  // a few whole messages, then part of one
  const int count = 9;
  StartProxiedReceive(cfg, count, 262147);
  if (HasFatalFailure()) return;
  auto sched = Schedule(kSeed, count, 262147);
  auto t0 = Clock::now();
  ExchangeResult res = Exchange(p_.net, nullptr, r_, {}, sched, 0, kSeed + 1, 8, 20);
  const double failed_after = Seconds(t0);
  const std::string log = LogText();
  EXPECT_EQ(res.rc, ncclRemoteError) << res.what << "\n" << log;
  EXPECT_FALSE(res.wrong_data) << res.what;
  EXPECT_GT(res.received, 0) << "the bytes before the hold were delivered";
  EXPECT_LT(res.received, count);
  EXPECT_GE(failed_after, 0.95) << "failed before the timeout";
  EXPECT_LE(failed_after, 3.0) << "timeout 1 s + 2 s";
  EXPECT_NE(log.find("WARN NET/Enclave : receive connection with 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find(std::string(kNoProgress) + "1 s with "), std::string::npos) << log;
  EXPECT_NE(log.find("requests outstanding; failing it (ENCLAVE_NET_STALL_TIMEOUT_S=1)"), std::string::npos) << log;

  // Failed for good: a new irecv fails too, and the failure was logged once.
  std::vector<uint8_t> buf(100);
  void* data = buf.data();
  size_t size = buf.size();
  int tag = 0;
  void* req = nullptr;
  EXPECT_EQ(p_.net->irecv(r_, 1, &data, &size, &tag, nullptr, nullptr, &req), ncclRemoteError);
  EXPECT_EQ(Count(LogText(), kNoProgress), 1u) << LogText();
  // The failure shut the sockets down at once, not only at close(): the proxy reads EOF
  // from the listener side of both.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (proxy_->listener_eofs() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(proxy_->listener_eofs(), 2) << "sockets not shut down when the connection failed";
  EXPECT_LT(CloseData(), 1.0) << "close() joins the unblocked workers at once";
}

// 2. The receiver stops reading (SIGSTOP) with more outstanding than the socket buffers
// hold: the sender's test() fails, for every outstanding request; close() is prompt.
TEST_F(StallTest, SendFailsWhenReceiverStopsReading) {
  ScopedEnv timeout(kVar, "1");
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "2");
  StartSend(std::nullopt, 1, 0);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(peer_.Stop());
  std::vector<uint8_t> big(64u << 20, 0x5a), small(1000, 0xa5);
  void *r1 = nullptr, *r2 = nullptr;
  auto t0 = Clock::now();
  ASSERT_EQ(p_.net->isend(s_, big.data(), big.size(), 0, nullptr, nullptr, &r1), ncclSuccess);
  ASSERT_EQ(p_.net->isend(s_, small.data(), small.size(), 0, nullptr, nullptr, &r2), ncclSuccess);
  ASSERT_NE(r1, nullptr);
  ASSERT_NE(r2, nullptr);
  ncclResult_t rc = Poll(r1, 10);
  const double failed_after = Seconds(t0);
  EXPECT_EQ(rc, ncclRemoteError) << LogText();
  EXPECT_GE(failed_after, 0.95);
  EXPECT_LE(failed_after, 3.0);
  int done = 1, got = 0;
  EXPECT_EQ(p_.net->test(r2, &done, &got), ncclRemoteError);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(p_.net->test(r1, &done, &got), ncclRemoteError);
  void* r3 = nullptr;
  EXPECT_EQ(p_.net->isend(s_, small.data(), small.size(), 0, nullptr, nullptr, &r3), ncclRemoteError);
  const std::string log = LogText();
  EXPECT_NE(log.find("WARN NET/Enclave : send connection with 127.0.0.1:" + std::to_string(peer_port_) +
                     " made no progress for 1 s with 2 requests outstanding; failing it "
                     "(ENCLAVE_NET_STALL_TIMEOUT_S=1)"),
            std::string::npos)
      << log;
  EXPECT_EQ(Count(log, kNoProgress), 1u) << log;
  EXPECT_LT(CloseData(), 1.0) << "close() joins the unblocked workers at once";
}

// 3a. Progress, not total time: the sender's bytes arrive at 160 KiB/s through a proxy,
// so the transfer takes about 3 s and one 256 KiB record alone 1.6 s, with the timeout
// at 1 s on both sides. Every message arrives with exact bytes.
TEST_F(StallTest, SlowButMovingReceiveCompletes) {
  ScopedEnv timeout(kVar, "1");
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "1");
  Proxy::Config cfg;
  cfg.mode = Proxy::Mode::kSlow;
  cfg.rate = 160 * 1024;
  const int count = 9;  // 0 B .. 262147 B, 467 KB in all
  StartProxiedReceive(cfg, count, 262147);
  if (HasFatalFailure()) return;
  auto sched = Schedule(kSeed, count, 262147);
  auto t0 = Clock::now();
  ExchangeResult res = Exchange(p_.net, nullptr, r_, {}, sched, 0, kSeed + 1, 8, 20);
  const double took = Seconds(t0);
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.received, count);
  EXPECT_GE(took, 2.0) << "the proxy did not slow the transfer down; the test proves nothing";
  EXPECT_EQ(LogText().find(kNoProgress), std::string::npos) << LogText();
  std::string out = peer_.ReadAll(20);
  EXPECT_NE(out.find("PEER OK sent=9"), std::string::npos) << out;
  EXPECT_LT(CloseData(), 1.0);
}

// 3b. The same for a sender whose socket buffers are full most of the time: the peer
// reads through a proxy that forwards 1 MiB/s into a small receive buffer, 5.4 MiB in
// all, so sends block for seconds while bytes keep moving.
TEST_F(StallTest, SlowButMovingSendCompletes) {
  ScopedEnv timeout(kVar, "1");
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "1");
  Proxy::Config cfg;
  cfg.mode = Proxy::Mode::kSlow;
  cfg.rate = 1024 * 1024;
  cfg.client_rcvbuf = 64 * 1024;
  const int count = 11;  // 0 B .. 4 MiB + 1
  const size_t max_size = (4u << 20) + 1;
  StartSend(cfg, count, max_size);
  if (HasFatalFailure()) return;
  auto sched = Schedule(kSeed, count, max_size);
  auto t0 = Clock::now();
  ExchangeResult res = Exchange(p_.net, s_, nullptr, sched, {}, kSeed, 0, 16, 30);
  const double took = Seconds(t0);
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.sent, count);
  EXPECT_GE(took, 1.2) << "the sends never blocked for longer than the timeout; the test proves nothing";
  EXPECT_EQ(LogText().find(kNoProgress), std::string::npos) << LogText();
  std::string out = peer_.ReadAll(20);
  EXPECT_NE(out.find("PEER OK sent=0 received=11"), std::string::npos) << out;
  EXPECT_LT(CloseData(), 1.0);
}

// 4a. Off by default: with the variable unset, a sender whose bytes are held for 2 s
// (nothing moves while the receives are posted) completes normally.
TEST_F(StallTest, UnsetWaitsOutAPause) {
  ScopedEnv timeout(kVar, nullptr);
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "1");
  Proxy::Config cfg;
  cfg.mode = Proxy::Mode::kPause;
  cfg.pause_s = 2;
  const int count = 9;
  StartProxiedReceive(cfg, count, 262147);
  if (HasFatalFailure()) return;
  auto sched = Schedule(kSeed, count, 262147);
  auto t0 = Clock::now();
  ExchangeResult res = Exchange(p_.net, nullptr, r_, {}, sched, 0, kSeed + 1, 8, 20);
  const double took = Seconds(t0);
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.received, count);
  EXPECT_GE(took, 1.8) << "the pause did not happen; the test proves nothing";
  EXPECT_EQ(LogText().find(kNoProgress), std::string::npos) << LogText();
}

// 4b. 0 is off too: a sender whose receiver is stopped for 2 s with 64 MiB outstanding
// completes once it resumes.
TEST_F(StallTest, ZeroWaitsOutAStoppedReceiver) {
  ScopedEnv timeout(kVar, "0");
  ScopedEnv nsocks("ENCLAVE_NET_NSOCKS", "2");
  const int count = 13;  // 0 B .. 64 MiB
  const size_t max_size = 64u << 20;
  StartSend(std::nullopt, count, max_size);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(peer_.Stop());
  std::thread resume([this] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    peer_.Continue();
  });
  auto sched = Schedule(kSeed, count, max_size);
  auto t0 = Clock::now();
  ExchangeResult res = Exchange(p_.net, s_, nullptr, sched, {}, kSeed, 0, 16, 30);
  const double took = Seconds(t0);
  resume.join();
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.sent, count);
  EXPECT_GE(took, 1.8) << "the sends did not wait for the stopped receiver; the test proves nothing";
  EXPECT_EQ(LogText().find(kNoProgress), std::string::npos) << LogText();
  std::string out = peer_.ReadAll(20);
  EXPECT_NE(out.find("PEER OK sent=0 received=13"), std::string::npos) << out;
}

// 5. Values: whole seconds 0..86400; anything else fails init() with one line.
TEST(StallOptions, ParsesWholeSeconds) {
  for (auto [value, want] : std::vector<std::pair<const char*, int>>{
           {nullptr, 0}, {"", 0}, {"0", 0}, {"1", 1}, {"30", 30}, {"000007", 7}, {"86400", 86400}}) {
    ScopedEnv env(kVar, value);
    auto o = OptionsFromEnv();
    ASSERT_TRUE(o.ok()) << (value ? value : "(unset)") << ": " << o.status().ToString();
    EXPECT_EQ(o->stall_timeout_s, want) << (value ? value : "(unset)");
  }
}

TEST_F(StallTest, MalformedValuesFailInitWithOneLine) {
  for (const char* bad : {"abc", "-1", "-0", "+5", " 5", "5 ", "1.5", "5s", "86401", "100000", "99999999999999999999",
                          "0x10"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env(kVar, bad);
    ClearLog();
    void* ctx = reinterpret_cast<void*>(1);
    EXPECT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ctx, nullptr);
    const std::string log = LogText();
    const std::string want = std::string("ENCLAVE_NET_STALL_TIMEOUT_S='") + bad +
                             "': expected whole seconds 1..86400, or 0 for no stall timeout";
    const size_t at = log.find(want);
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_EQ(log.compare(at + want.size(), 1, "\n"), 0) << "the message ends there: " << log;
    EXPECT_EQ(Count(log, "WARN "), 1u) << "one line: " << log;
    auto o = OptionsFromEnv();
    EXPECT_FALSE(o.ok());
  }
  for (const char* good : {"0", "1", "86400"}) {
    ScopedEnv env(kVar, good);
    void* ctx = nullptr;
    EXPECT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclSuccess) << good << "\n" << LogText();
    if (ctx != nullptr) p_.net->finalize(ctx);
  }
}

}  // namespace
}  // namespace enclave::net::test
