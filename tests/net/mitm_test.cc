// A man-in-the-middle TCP proxy on loopback between enclave_net_peer (the sender, a
// separate process) and this process (the receiver, through the plugin's ABI). The
// proxy parses the handshake and the record framing of each socket and flips,
// replays, drops, reorders, injects or truncates. Each attack on the records must fail
// the connection: a test() returns an error, a log line names the failure, and no request
// ever completes with bytes other than the sender's. An attack on the handshake closes
// that connection only: accept() never fails and never returns it, logs why, and then
// accepts the sender's next connection (not through the proxy).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "peer_process.h"
#include "plugin_driver.h"
#include "wire.h"

namespace enclave::net::test {
namespace {

const uint8_t kKey[32] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};

enum class Attack { kNone, kFlipCiphertext, kFlipTag, kFlipHeader, kReplay, kDrop, kReorder, kInject, kTruncate,
                    kFlipClientHello, kFlipClientFinished };

bool ReadN(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool WriteN(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Listens on 127.0.0.1; each accepted socket is paired with one to the real listener.
// The attack hits record number kTarget (counted from 0) of socket 0.
class Proxy {
 public:
  static constexpr int kTarget = 3;
  Proxy(Attack attack, uint16_t upstream_port) : attack_(attack), upstream_(upstream_port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    acceptor_.join();
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  uint16_t port() const { return port_; }
  bool attacked() const { return attacked_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
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
      pumps_.emplace_back([c, u] {  // listener -> connector: untouched
        uint8_t buf[4096];
        for (;;) {
          ssize_t n = recv(u, buf, sizeof(buf), 0);
          if (n <= 0 || !WriteN(c, buf, static_cast<size_t>(n))) break;
        }
        shutdown(c, SHUT_WR);
      });
      pumps_.emplace_back([this, c, u] { Forward(c, u); });
    }
  }

  void Forward(int c, int u) {
    uint8_t hello[kClientHelloBytes], fin[kClientFinishedBytes];
    if (!ReadN(c, hello, sizeof(hello))) return Close(u);
    const bool target = hello[80] == 0 && hello[81] == 0;  // socket_index 0
    if (target && attack_ == Attack::kFlipClientHello) {
      hello[30] ^= 0x01;  // client_random
      attacked_ = true;
    }
    if (!WriteN(u, hello, sizeof(hello)) || !ReadN(c, fin, sizeof(fin))) return Close(u);
    if (target && attack_ == Attack::kFlipClientFinished) {
      fin[20] ^= 0x01;
      attacked_ = true;
    }
    if (!WriteN(u, fin, sizeof(fin))) return Close(u);
    std::vector<uint8_t> held;
    for (int n = 0;; ++n) {
      std::vector<uint8_t> rec(kRecordHeaderBytes);
      if (!ReadN(c, rec.data(), kRecordHeaderBytes)) break;
      uint32_t len;
      std::memcpy(&len, rec.data() + 4, 4);
      rec.resize(kRecordHeaderBytes + len + kRecordTagBytes);
      if (!ReadN(c, rec.data() + kRecordHeaderBytes, len + kRecordTagBytes)) break;
      if (!target || n != kTarget || attack_ == Attack::kNone) {
        if (!WriteN(u, rec.data(), rec.size())) break;
        if (!held.empty() && !WriteN(u, held.data(), held.size())) break;  // reorder: late
        held.clear();
        continue;
      }
      attacked_ = true;
      switch (attack_) {
        case Attack::kFlipCiphertext: rec[kRecordHeaderBytes + len / 2] ^= 0x40; break;
        case Attack::kFlipTag: rec[rec.size() - 1] ^= 0x01; break;
        case Attack::kFlipHeader: rec[16] ^= 0x01; break;  // msg_index
        case Attack::kReplay: WriteN(u, rec.data(), rec.size()); break;  // and again below
        case Attack::kDrop: continue;
        case Attack::kReorder: held = rec; continue;  // sent after the next record
        case Attack::kInject: {
          // A record with the right sequence number and framing, but made without the key.
          std::vector<uint8_t> fake = rec;
          for (size_t i = kRecordHeaderBytes; i < fake.size(); ++i) fake[i] = static_cast<uint8_t>(i * 31);
          WriteN(u, fake.data(), fake.size());
          break;
        }
        case Attack::kTruncate:
          WriteN(u, rec.data(), rec.size() / 2);
          return Close(u);
        default: break;
      }
      if (!WriteN(u, rec.data(), rec.size())) break;
    }
    Close(u);
  }
  static void Close(int u) { shutdown(u, SHUT_WR); }

  Attack attack_;
  uint16_t upstream_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false}, attacked_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
};

struct Case {
  Attack attack;
  const char* log;  // what the receiver's log must say
};

class MitmTest : public ::testing::TestWithParam<Case> {};

void PrintTo(const Case& c, std::ostream* os) { *os << "expect '" << c.log << "'"; }

std::string CaseName(const ::testing::TestParamInfo<Case>& param) {
  static const char* const kNames[] = {"None",     "FlipCiphertext",  "FlipTag",           "FlipHeader",
                                       "Replay",   "Drop",            "Reorder",           "Inject",
                                       "Truncate", "FlipClientHello", "FlipClientFinished"};
  return kNames[static_cast<int>(param.param.attack)];
}

TEST_P(MitmTest, DetectedAndNoWrongBytesDelivered) {
  const Case c = GetParam();
  ClearLog();
  setenv("ENCLAVE_NET_IFNAME", "lo", 1);
  Plugin p;
  ASSERT_TRUE(p.Load(ENCLAVE_NET_PLUGIN)) << p.error;
  ASSERT_EQ(p.set_key(kKey, sizeof(kKey)), 0);
  void* ctx = nullptr;
  ASSERT_EQ(p.net->init(&ctx, 0x5eed, nullptr, CaptureLog, nullptr), ncclSuccess);
  uint8_t handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(p.net->listen(ctx, 0, handle, &l), ncclSuccess);
  auto h = DecodeHandle(std::span<const uint8_t, 128>(handle, 128));
  ASSERT_TRUE(h.ok());
  Proxy proxy(c.attack, h->port);
  // The handle's address is routing only: point the sender at the proxy.
  ListenHandle via = *h;
  via.port = proxy.port();
  uint8_t routed[128];
  EncodeHandle(via, std::span<uint8_t, 128>(routed, 128));

  const uint64_t seed = 21;
  const int count = 24;
  const size_t max_size = 600000;
  PeerProcess peer;
  ASSERT_TRUE(peer.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", std::to_string(seed), std::to_string(count),
                          std::to_string(max_size)}));
  ASSERT_TRUE(peer.WriteLine(Hex(kKey, sizeof(kKey))));
  ASSERT_TRUE(peer.WriteLine(Hex(routed, sizeof(routed))));
  void* r = nullptr;
  const bool on_handshake = c.attack == Attack::kFlipClientHello || c.attack == Attack::kFlipClientFinished;
  if (on_handshake) {
    // accept() as NCCL calls it until the refusal is logged: never an error, never the
    // tampered connection.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (LogText().find(c.log) == std::string::npos && Clock::now() < deadline) {
      ASSERT_EQ(p.net->accept(l, &r, nullptr), ncclSuccess) << "accept() failed on the tampered handshake\n"
                                                            << LogText();
      ASSERT_EQ(r, nullptr) << "accept() returned the tampered connection";
    }
    EXPECT_TRUE(proxy.attacked());
    ASSERT_NE(LogText().find(c.log), std::string::npos) << "expected '" << c.log << "' in:\n" << LogText();
    if (c.attack == Attack::kFlipClientHello) {
      // The sender sees our ServerFinished over another transcript: its connect() fails.
      const std::string out = peer.ReadAll(30);
      EXPECT_EQ(peer.Wait(), 2) << out;
    } else {
      // The sender finished its side and sends into the proxy; it cannot tell.
      peer.Kill();
      peer.Wait();
    }
    // The sender again, with the handle as listen() wrote it: accepted, every message delivered.
    PeerProcess again;
    ASSERT_TRUE(again.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", std::to_string(seed),
                             std::to_string(count), std::to_string(max_size)}));
    ASSERT_TRUE(again.WriteLine(Hex(kKey, sizeof(kKey))));
    ASSERT_TRUE(again.WriteLine(Hex(handle, sizeof(handle))));
    ASSERT_EQ(ConnectAccept(p.net, ctx, nullptr, l, nullptr, &r, 30), ncclSuccess) << LogText();
    ExchangeResult res = Exchange(p.net, nullptr, r, {}, Schedule(seed, count, max_size), 0, seed + 1, 8, 60);
    EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
    EXPECT_FALSE(res.wrong_data) << res.what;
    EXPECT_EQ(res.received, count);
    std::string out = again.ReadAll(30);
    EXPECT_EQ(again.Wait(), 0) << out;
    p.net->closeRecv(r);
    p.net->closeListen(l);
    p.net->finalize(ctx);
    return;
  }
  ncclResult_t rc = ConnectAccept(p.net, ctx, nullptr, l, nullptr, &r, 30);
  ExchangeResult res;
  if (rc == ncclSuccess) {
    auto sched = Schedule(seed, count, max_size);
    res = Exchange(p.net, nullptr, r, {}, sched, 0, seed + 1, 8, 60);
    rc = res.rc;
  }
  const std::string log = LogText();
  EXPECT_FALSE(res.wrong_data) << res.what;
  if (c.attack == Attack::kNone) {
    EXPECT_EQ(rc, ncclSuccess) << res.what << "\n" << log;
    EXPECT_EQ(res.received, count);
  } else {
    EXPECT_TRUE(proxy.attacked());
    EXPECT_NE(rc, ncclSuccess) << "attack not detected; received " << res.received;
    EXPECT_NE(rc, ncclInProgress) << "timed out instead of failing";
    EXPECT_NE(log.find(c.log), std::string::npos) << "expected '" << c.log << "' in:\n" << log;
    EXPECT_LT(res.received, count);
  }
  if (r) p.net->closeRecv(r);
  p.net->closeListen(l);
  p.net->finalize(ctx);
  peer.Kill();
  peer.Wait();
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, MitmTest,
    ::testing::Values(Case{Attack::kNone, ""}, Case{Attack::kFlipCiphertext, "tag mismatch"},
                      Case{Attack::kFlipTag, "tag mismatch"}, Case{Attack::kFlipHeader, "record for message 2, expected message 3"},
                      Case{Attack::kReplay, "(replayed or reordered record)"},
                      Case{Attack::kDrop, "(dropped or reordered record)"},
                      Case{Attack::kReorder, "(dropped or reordered record)"}, Case{Attack::kInject, "tag mismatch"},
                      Case{Attack::kTruncate, "connection closed by peer"},
                      Case{Attack::kFlipClientHello, "proved the job key"},
                      Case{Attack::kFlipClientFinished, "ClientFinished MAC mismatch"}),
    CaseName);

}  // namespace
}  // namespace enclave::net::test
