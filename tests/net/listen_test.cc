// connect() and accept() in one process over loopback (the transport under the plugin):
// a local failure on either side is logged with what and where, closes every socket it
// had opened and leaves the listener usable; idle unauthenticated connections cannot
// hold the listener's handshake slots beyond their deadline.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "loopback_pair.h"
#include "transport.h"
#include "wire.h"

namespace enclave::net {
namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_log_mu;
std::string g_log;
void CaptureLog(LogLevel, const char* message) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log += std::string(message) + "\n";
}
std::string TakeLog() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return std::exchange(g_log, std::string());
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// AES-GCM records whose n-th MakeSender / MakeReceiver call (counting from 1) fails the
// way an exhausted RLIMIT_MEMLOCK does.
class FailingProtection final : public RecordProtection {
 public:
  mutable std::atomic<int> sender_calls{0}, receiver_calls{0};
  int fail_sender = 0, fail_receiver = 0;
  Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes& key) const override {
    if (++sender_calls == fail_sender) return FailedPrecondition("test: cannot lock the sender's memory");
    return AeadProtection().MakeSender(key);
  }
  Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes& key) const override {
    if (++receiver_calls == fail_receiver) {
      return FailedPrecondition("test: cannot lock 262160 bytes of secret memory into RAM (RLIMIT_MEMLOCK)");
    }
    return AeadProtection().MakeReceiver(key);
  }
};


struct Attempt {
  std::unique_ptr<DataComm> send, recv;
  Status connect_error, accept_error;
};

// NCCL's loop with a fresh copy of the handle (connect token 0): until both sides have
// a comm, or one of them fails, or the time is up.
Attempt ConnectAccept(Context& connector, ListenComm& listen, const std::array<uint8_t, kHandleBytes>& published,
                      std::chrono::seconds timeout = std::chrono::seconds(30)) {
  Attempt a;
  std::array<uint8_t, kHandleBytes> handle = published;
  const auto deadline = Clock::now() + timeout;
  bool connect_done = false;
  while ((!connect_done || !a.recv) && Clock::now() < deadline) {
    if (!connect_done) {
      auto s = connector.Connect(handle);
      if (!s.ok()) {
        a.connect_error = s.status();
        connect_done = true;
      } else if (*s) {
        a.send = std::move(s).value();
        connect_done = true;
      }
    }
    if (!a.recv) {
      auto r = listen.Accept();
      if (!r.ok()) {
        a.accept_error = r.status();
        break;
      }
      a.recv = std::move(r).value();
    }
    if (!a.connect_error.ok() && !a.recv) break;
    usleep(200);
  }
  return a;
}

class ListenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogHook(CaptureLog);
    TakeLog();
  }
  void TearDown() override { SetLogHook(nullptr); }
};

// A record layer that cannot be made on the second socket of an accepted connection
// (what a low RLIMIT_MEMLOCK does): accept() fails with one log line naming it, closes
// all four sockets, and the next connection is accepted.
TEST_F(ListenTest, AcceptThatCannotMakeItsRecordLayerLogsClosesAndRecovers) {
  FailingProtection failing;
  failing.fail_receiver = 2;
  auto listener = MakeLoopbackContext(4, failing);
  auto connector = MakeLoopbackContext(4, AeadProtection());
  ASSERT_TRUE(listener && connector);
  std::array<uint8_t, kHandleBytes> handle{};
  auto l = listener->Listen(handle);
  ASSERT_TRUE(l.ok()) << l.status().message();
  const int fds_before = OpenFds();
  {
    Attempt a = ConnectAccept(*connector, **l, handle);
    ASSERT_FALSE(a.accept_error.ok()) << "accept() did not fail";
    EXPECT_EQ(a.accept_error.code(), Code::kFailedPrecondition) << a.accept_error.ToString();
    const std::string log = TakeLog();
    EXPECT_NE(log.find("socket 1: record layer (MakeReceiver): test: cannot lock 262160 bytes"), std::string::npos)
        << log;
    EXPECT_NE(log.find("accept from 127.0.0.1:"), std::string::npos) << log;
  }
  // The connector finished its side; its comm goes when the attempt does.
  EXPECT_EQ(OpenFds(), fds_before) << "accept() left sockets open";
  {
    Attempt a = ConnectAccept(*connector, **l, handle);
    EXPECT_TRUE(a.connect_error.ok()) << a.connect_error.ToString();
    EXPECT_TRUE(a.accept_error.ok()) << a.accept_error.ToString() << "\n" << TakeLog();
    EXPECT_TRUE(a.send && a.recv);
  }
  EXPECT_EQ(OpenFds(), fds_before);
}

// The connector's local failures: a refused handle, an unknown connect token, a record
// layer that cannot be made. Each is one log line; no socket stays open.
TEST_F(ListenTest, ConnectFailuresAreLoggedAndCloseTheirSockets) {
  FailingProtection failing;
  failing.fail_sender = 3;
  auto listener = MakeLoopbackContext(4, AeadProtection());
  auto connector = MakeLoopbackContext(4, failing);
  ASSERT_TRUE(listener && connector);
  std::array<uint8_t, kHandleBytes> handle{};
  auto l = listener->Listen(handle);
  ASSERT_TRUE(l.ok()) << l.status().message();
  const int fds_before = OpenFds();

  std::array<uint8_t, kHandleBytes> bad = handle;
  bad[0] = 'X';
  auto c = connector->Connect(bad);
  ASSERT_FALSE(c.ok());
  std::string log = TakeLog();
  EXPECT_NE(log.find("connect(): refused the listen handle: "), std::string::npos) << log;

  std::array<uint8_t, kHandleBytes> unknown = handle;
  unknown[kHandleTokenOffset] = 1;
  c = connector->Connect(unknown);
  ASSERT_FALSE(c.ok());
  log = TakeLog();
  EXPECT_NE(log.find("unknown connect token"), std::string::npos) << log;

  {
    Attempt a = ConnectAccept(*connector, **l, handle);
    ASSERT_FALSE(a.connect_error.ok()) << "connect() did not fail";
    log = TakeLog();
    EXPECT_NE(log.find(": socket 2: record layer (MakeSender): test: cannot lock"), std::string::npos) << log;
  }
  // The listener may hold the sockets in a comm or a pending handshake: close it too.
  l->reset();
  EXPECT_EQ(OpenFds(), fds_before - 1) << "connect() left sockets open";
}

// Idle TCP connections fill the listener's handshake slots; they are closed when their
// deadline passes, and a connection with the key that came after them is accepted.
TEST_F(ListenTest, IdleConnectionsCannotHoldTheHandshakeSlots) {
  auto listener = MakeLoopbackContext(4, AeadProtection());
  auto connector = MakeLoopbackContext(4, AeadProtection());
  ASSERT_TRUE(listener && connector);
  std::array<uint8_t, kHandleBytes> handle{};
  auto l = listener->Listen(handle);
  ASSERT_TRUE(l.ok()) << l.status().message();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(handle[6] | (handle[7] << 8)));
  std::memcpy(&addr.sin_addr, handle.data() + 8, 4);
  std::vector<int> idle;
  for (size_t i = 0; i < kMaxPendingHandshakes + 8; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
    idle.push_back(fd);
  }
  for (int i = 0; i < 5; ++i) {  // the listener takes them into its handshake slots
    auto r = (*l)->Accept();
    ASSERT_TRUE(r.ok() && *r == nullptr);
    usleep(10000);
  }
  const auto t0 = Clock::now();
  Attempt a = ConnectAccept(*connector, **l, handle, std::chrono::seconds(kHandshakeTimeout * 3));
  const auto took = Clock::now() - t0;
  const std::string log = TakeLog();
  EXPECT_TRUE(a.connect_error.ok()) << a.connect_error.ToString() << "\n" << log;
  EXPECT_TRUE(a.accept_error.ok()) << a.accept_error.ToString();
  EXPECT_TRUE(a.send && a.recv) << log;
  EXPECT_LT(took, kHandshakeTimeout * 2);
  EXPECT_NE(log.find("pending-handshake limit reached"), std::string::npos) << log;
  EXPECT_NE(log.find("handshake did not finish within"), std::string::npos) << log;
  // Bounded lines, not one per idle or waiting connection.
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = log.find(what); p != std::string::npos; p = log.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_LE(count("pending-handshake limit"), 3u) << log;
  EXPECT_LE(count("handshake did not finish"), 4u) << log;
  for (int fd : idle) close(fd);
}

// Locked memory of this process, in KiB (VmLck: counted for root too).
long LockedKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A ClientHello costs anyone who knows the listen id and the communicator (neither is
// secret) a ServerHello, but no locked memory held: the listener keeps no key of a socket
// that has not proved the job key, so connections without the key cannot use up the
// RLIMIT_MEMLOCK that the real peer's keys and record layers need.
TEST_F(ListenTest, HellosWithoutTheKeyHoldNoLockedMemory) {
  auto listener = MakeLoopbackContext(4, AeadProtection());
  ASSERT_TRUE(listener);
  std::array<uint8_t, kHandleBytes> handle{};
  auto l = listener->Listen(handle);
  ASSERT_TRUE(l.ok()) << l.status().message();
  auto decoded = DecodeHandle(handle);
  ASSERT_TRUE(decoded.ok());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(handle[6] | (handle[7] << 8)));
  std::memcpy(&addr.sin_addr, handle.data() + 8, 4);
  // One hello first, so that whatever the listener keeps for good is there before we count.
  auto hello_on = [&](int fd) {
    ClientHello ch;
    ch.listen_id = decoded->listen_id;
    crypto::RandomBytes(ch.client_random);
    ch.comm_id = 7;
    ch.nsocks = 1;
    const auto bytes = EncodeClientHello(ch);
    ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  };
  auto answered = [&](const std::vector<int>& fds, size_t from) {
    size_t n = 0;
    for (size_t i = from; i < fds.size(); ++i) {
      const int fd = fds[i];
      std::array<uint8_t, kServerHelloBytes> got{};
      size_t have = 0;
      for (int tries = 0; tries < 200 && have < got.size(); ++tries) {
        (void)(*l)->Accept();
        const ssize_t r = recv(fd, got.data() + have, got.size() - have, MSG_DONTWAIT);
        if (r > 0) have += static_cast<size_t>(r);
        if (have < got.size()) usleep(2000);
      }
      n += have == got.size();
    }
    return n;
  };
  std::vector<int> fds;
  auto open_one = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
    hello_on(fd);
    fds.push_back(fd);
  };
  open_one();
  ASSERT_EQ(answered(fds, 0), 1u);
  // Released secrets' pages stay locked for reuse (up to 128 of them): taken here, so
  // that every page a waiting socket kept would be a newly locked one, whatever ran before.
  std::vector<crypto::SecretBytes> pool_drained;
  for (int i = 0; i < 130; ++i) {
    auto b = crypto::SecretBytes::Create(32);
    ASSERT_TRUE(b.ok());
    pool_drained.push_back(std::move(b).value());
  }
  const long before = LockedKiB();
  ASSERT_GE(before, 0);
  for (size_t i = 1; i < kMaxPendingHandshakes - 4; ++i) open_one();
  ASSERT_EQ(answered(fds, 1), fds.size() - 1) << "every hello got its ServerHello";
  const long after = LockedKiB();
  // Holding two keys per waiting socket would be 2 pages each: 480 KiB for 60 sockets.
  EXPECT_LT(after - before, 64) << "KiB locked for " << fds.size() << " sockets that never proved the key";
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace enclave::net
