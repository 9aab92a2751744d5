// The plugin through its ABI, across two real processes on loopback: this process
// and enclave_net_peer each init a context, listen, connect and accept (non-blocking
// retries), then send and receive the same schedule at once (0 B to 64 MiB, 16
// requests outstanding, receives posted larger than the message) and check every byte.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "peer_process.h"
#include "plugin_driver.h"

namespace enclave::net::test {
namespace {

const uint8_t kKey[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                          17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearLog();
    setenv("ENCLAVE_NET_IFNAME", "lo", 1);  // loopback; the peer process inherits it
    ASSERT_TRUE(p_.Load(ENCLAVE_NET_PLUGIN)) << p_.error;
    ASSERT_EQ(p_.set_key(kKey, sizeof(kKey)), 0);
  }
  Plugin p_;
};

TEST_F(PluginTest, PropertiesAreHostOnlyAndNamedEnclave) {
  EXPECT_STREQ(p_.net->name, "enclave");
  void* ctx = nullptr;
  ASSERT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(p_.net->devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 1);
  ncclNetProperties_v11_t props;
  ASSERT_EQ(p_.net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_GT(props.speed, 0);
  EXPECT_EQ(props.vProps.ndevs, 1);
  EXPECT_NE(p_.net->getProperties(1, &props), ncclSuccess);
  // Device memory is refused (NCCL's GDR probe expects this), host memory accepted.
  uint8_t handle[128] = {0};
  void* listen_comm = nullptr;
  ASSERT_EQ(p_.net->listen(ctx, 0, handle, &listen_comm), ncclSuccess);
  void *mh = nullptr, *s = nullptr, *r = nullptr;
  ASSERT_EQ(ConnectAccept(p_.net, ctx, handle, listen_comm, &s, &r), ncclSuccess);
  EXPECT_NE(p_.net->regMr(s, handle, 128, NCCL_PTR_CUDA, &mh), ncclSuccess);
  ASSERT_EQ(p_.net->regMr(s, handle, 128, NCCL_PTR_HOST, &mh), ncclSuccess);
  EXPECT_EQ(p_.net->deregMr(s, mh), ncclSuccess);
  EXPECT_EQ(p_.net->closeSend(s), ncclSuccess);
  EXPECT_EQ(p_.net->closeRecv(r), ncclSuccess);
  EXPECT_EQ(p_.net->closeListen(listen_comm), ncclSuccess);
  EXPECT_EQ(p_.net->finalize(ctx), ncclSuccess);
}

TEST_F(PluginTest, InitFailsClosedWithoutKey) {
  p_.clear_key();
  void* ctx = reinterpret_cast<void*>(1);
  EXPECT_NE(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclSuccess);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(LogText().find("no job key"), std::string::npos) << LogText();
  uint8_t short_key[16] = {0};
  EXPECT_EQ(p_.set_key(short_key, sizeof(short_key)), -1);
  EXPECT_EQ(p_.set_key(nullptr, 32), -1);
  EXPECT_NE(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclSuccess);
}

// ENCLAVE_NET_GPU=1 where GPU records cannot run (no GPU, or a build without CUDA) stops
// init with a line that says why, rather than quietly staging through the host; a value
// other than 0 or 1 is refused naming the variable. 0 is today's host-only plugin.
TEST_F(PluginTest, GpuRecordsAreRefusedAtInitWhereTheyCannotRun) {
  setenv("ENCLAVE_NET_GPU", "yes", 1);
  void* ctx = reinterpret_cast<void*>(1);
  EXPECT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(LogText().find("ENCLAVE_NET_GPU='yes': expected 1 (GPU records) or 0"), std::string::npos) << LogText();
  setenv("ENCLAVE_NET_GPU", "1", 1);
  setenv("NCCL_PROTO", "Simple,LL128", 1);  // LL128 would read device buffers while they are written
  EXPECT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(LogText().find("NCCL_PROTO='Simple,LL128': LL128 cannot run on GPU records"), std::string::npos)
      << LogText();
  unsetenv("NCCL_PROTO");
  const ncclResult_t rc = p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr);
  ncclNetProperties_v11_t props;
  if (rc == ncclSuccess) {  // a GPU machine: GPU buffers are offered to NCCL
    ASSERT_EQ(p_.net->getProperties(0, &props), ncclSuccess);
    EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_CUDA);
    p_.net->finalize(ctx);
  } else {
    EXPECT_EQ(rc, ncclInvalidUsage);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(LogText().find("ENCLAVE_NET_GPU=1, but "), std::string::npos) << LogText();
    EXPECT_TRUE(LogText().find("no CUDA device") != std::string::npos ||
                LogText().find("built without CUDA") != std::string::npos)
        << LogText();
    ASSERT_EQ(p_.net->getProperties(0, &props), ncclSuccess);
    EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  }
  setenv("ENCLAVE_NET_GPU", "0", 1);
  ASSERT_EQ(p_.net->init(&ctx, 1, nullptr, CaptureLog, nullptr), ncclSuccess);
  p_.net->finalize(ctx);
  unsetenv("ENCLAVE_NET_GPU");
}

TEST_F(PluginTest, InProcessLoopbackOneSocketAndSixteen) {
  for (const char* nsocks : {"1", "16"}) {
    setenv("ENCLAVE_NET_NSOCKS", nsocks, 1);
    void* ctx = nullptr;
    ASSERT_EQ(p_.net->init(&ctx, 7, nullptr, CaptureLog, nullptr), ncclSuccess);
    uint8_t handle[128] = {0};
    void *l = nullptr, *s = nullptr, *r = nullptr;
    ASSERT_EQ(p_.net->listen(ctx, 0, handle, &l), ncclSuccess);
    ASSERT_EQ(ConnectAccept(p_.net, ctx, handle, l, &s, &r), ncclSuccess);
    auto sched = Schedule(3, 60, 8u << 20);
    ExchangeResult res = Exchange(p_.net, s, r, sched, sched, 3, 3, 32);
    EXPECT_EQ(res.rc, ncclSuccess) << nsocks << ": " << res.what << "\n" << LogText();
    EXPECT_EQ(res.received, 60);
    p_.net->closeSend(s);
    p_.net->closeRecv(r);
    p_.net->closeListen(l);
    p_.net->finalize(ctx);
  }
  unsetenv("ENCLAVE_NET_NSOCKS");
}

// A message larger than the posted receive fails the connection (never a partial copy).
TEST_F(PluginTest, MessageLargerThanReceiveFails) {
  void* ctx = nullptr;
  ASSERT_EQ(p_.net->init(&ctx, 9, nullptr, CaptureLog, nullptr), ncclSuccess);
  uint8_t handle[128] = {0};
  void *l = nullptr, *s = nullptr, *r = nullptr;
  ASSERT_EQ(p_.net->listen(ctx, 0, handle, &l), ncclSuccess);
  ASSERT_EQ(ConnectAccept(p_.net, ctx, handle, l, &s, &r), ncclSuccess);
  std::vector<uint8_t> out(100000, 7), in(99999, 0xEE);
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_EQ(p_.net->isend(s, out.data(), out.size(), 0, nullptr, nullptr, &sreq), ncclSuccess);
  void* data = in.data();
  size_t size = in.size();
  int tag = 0;
  ASSERT_EQ(p_.net->irecv(r, 1, &data, &size, &tag, nullptr, nullptr, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  ncclResult_t rc = ncclSuccess;
  int done = 0, got = 0;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (rc == ncclSuccess && !done && Clock::now() < deadline) rc = p_.net->test(rreq, &done, &got);
  EXPECT_EQ(rc, ncclRemoteError);
  EXPECT_EQ(done, 0);
  EXPECT_NE(LogText().find("message truncated: the sender sent 100000 bytes, the receive posted 99999"),
            std::string::npos)
      << LogText();
  for (uint8_t b : in) ASSERT_EQ(b, 0xEE);  // nothing was copied
  p_.net->closeSend(s);
  p_.net->closeRecv(r);
  p_.net->closeListen(l);
  p_.net->finalize(ctx);
}

TEST_F(PluginTest, TwoProcessesBothDirectionsZeroTo64MiB) {
  void* ctx = nullptr;
  ASSERT_EQ(p_.net->init(&ctx, 0x5eed, nullptr, CaptureLog, nullptr), ncclSuccess);
  uint8_t handle[128] = {0}, peer_handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(p_.net->listen(ctx, 0, handle, &l), ncclSuccess);
  const uint64_t seed = 11;
  const int count = 150;
  PeerProcess peer;
  ASSERT_TRUE(peer.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "both", std::to_string(seed), std::to_string(count),
                          std::to_string(64u << 20)}));
  ASSERT_TRUE(peer.WriteLine(Hex(kKey, sizeof(kKey))));
  std::string line = peer.ReadLine();
  ASSERT_EQ(line.rfind("HANDLE ", 0), 0u) << line;
  ASSERT_TRUE(Unhex(line.substr(7), peer_handle, sizeof(peer_handle)));
  ASSERT_TRUE(peer.WriteLine(Hex(handle, sizeof(handle))));
  void *s = nullptr, *r = nullptr;
  ASSERT_EQ(ConnectAccept(p_.net, ctx, peer_handle, l, &s, &r), ncclSuccess) << LogText();
  auto sched = Schedule(seed, count, 64u << 20);
  // We receive what the peer sends (its seed + 1) and send with ours, at the same time.
  ExchangeResult res = Exchange(p_.net, s, r, sched, sched, seed, seed + 1);
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.sent, count);
  EXPECT_EQ(res.received, count);
  std::string out = peer.ReadAll();
  EXPECT_EQ(peer.Wait(), 0) << out;
  EXPECT_NE(out.find("PEER OK sent=150 received=150"), std::string::npos) << out;
  p_.net->closeSend(s);
  p_.net->closeRecv(r);
  p_.net->closeListen(l);
  p_.net->finalize(ctx);
}

// A process with another job key connects first (anyone can: the handle and its listen id
// travel in the clear). Its connect() fails, since the listener cannot prove that key; the
// listener closes the connection, logs it and goes on waiting. The peer with the key that
// comes next is accepted and its schedule delivered.
TEST_F(PluginTest, PeerWithAnotherJobKeyIsRefusedAndTheRealPeerIsAcceptedAfterIt) {
  void* ctx = nullptr;
  ASSERT_EQ(p_.net->init(&ctx, 0x5eed, nullptr, CaptureLog, nullptr), ncclSuccess);
  uint8_t handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(p_.net->listen(ctx, 0, handle, &l), ncclSuccess);
  {
    const char* nsocks = std::getenv("ENCLAVE_NET_NSOCKS");
    const std::string saved = nsocks != nullptr ? nsocks : "";
    setenv("ENCLAVE_NET_NSOCKS", "1", 1);  // one socket: one refusal, logged in full
    PeerProcess intruder;
    ASSERT_TRUE(intruder.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", "5", "4", "1000"}));
    if (nsocks != nullptr) {
      setenv("ENCLAVE_NET_NSOCKS", saved.c_str(), 1);
    } else {
      unsetenv("ENCLAVE_NET_NSOCKS");
    }
    uint8_t other[32];
    for (int i = 0; i < 32; ++i) other[i] = static_cast<uint8_t>(kKey[i] ^ (i == 31 ? 1 : 0));  // one bit differs
    ASSERT_TRUE(intruder.WriteLine(Hex(other, sizeof(other))));
    ASSERT_TRUE(intruder.WriteLine(Hex(handle, sizeof(handle))));
    // accept() as NCCL calls it, until the intruder gave up and the listener logged it:
    // never an error, never a connection.
    std::string line;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline && (line.empty() || LogText().find("proved the job key") == std::string::npos)) {
      void* r = nullptr;
      ASSERT_EQ(p_.net->accept(l, &r, nullptr), ncclSuccess) << "accept() failed on the intruder\n" << LogText();
      ASSERT_EQ(r, nullptr) << "accept() returned a connection to a peer with another key";
      if (line.empty()) line = intruder.ReadLine(0.005);
    }
    std::string out = line + "\n" + intruder.ReadAll(10);
    EXPECT_EQ(intruder.Wait(), 2) << out;  // its connect() failed
    EXPECT_NE(out.find("did not prove the job key"), std::string::npos) << out;
    EXPECT_NE(LogText().find("before it proved the job key; accept() goes on waiting for its peer"), std::string::npos)
        << LogText();
  }
  const uint64_t seed = 31;
  const int count = 12;
  PeerProcess peer;
  ASSERT_TRUE(peer.Start({ENCLAVE_NET_PEER, ENCLAVE_NET_PLUGIN, "send", std::to_string(seed), std::to_string(count),
                          "1000000"}));
  ASSERT_TRUE(peer.WriteLine(Hex(kKey, sizeof(kKey))));
  ASSERT_TRUE(peer.WriteLine(Hex(handle, sizeof(handle))));
  void* r = nullptr;
  ASSERT_EQ(ConnectAccept(p_.net, ctx, nullptr, l, nullptr, &r, 30), ncclSuccess) << LogText();
  ExchangeResult res = Exchange(p_.net, nullptr, r, {}, Schedule(seed, count, 1000000), 0, seed + 1, 8, 60);
  EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
  EXPECT_EQ(res.received, count);
  std::string out = peer.ReadAll();
  EXPECT_EQ(peer.Wait(), 0) << out;
  p_.net->closeRecv(r);
  p_.net->closeListen(l);
  p_.net->finalize(ctx);
}

}  // namespace
}  // namespace enclave::net::test
