// The plugin's listener against an independent connector in Python
// (interop_connector.py, written from docs/formats/net-transport.md alone): the
// handshake, key schedule, record format and chunk plan must agree byte for byte.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "peer_process.h"
#include "plugin_driver.h"
#include "transport.h"

namespace enclave::net::test {
namespace {

// The plugin loaded with a job key (bytes key_first, key_first + 1, ...) and listening on
// loopback for communicator `id`: what every test below starts from.
class NetInterop : public ::testing::Test {
 protected:
  void Listen(uint8_t key_first, uint64_t id) {
    ClearLog();
    setenv("ENCLAVE_NET_IFNAME", "lo", 1);
    ASSERT_TRUE(p.Load(ENCLAVE_NET_PLUGIN)) << p.error;
    for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(key_first + i);
    ASSERT_EQ(p.set_key(key, sizeof(key)), 0);
    comm_id = id;
    ASSERT_EQ(p.net->init(&ctx, comm_id, nullptr, CaptureLog, nullptr), ncclSuccess);
    ASSERT_EQ(p.net->listen(ctx, 0, handle, &l), ncclSuccess);
  }
  // The connector `py` started: accepts it, receives `sizes` (pattern `seed`) and checks
  // that both ends agree, then closes the connection.
  void AcceptAndReceive(PeerProcess& py, uint64_t seed, const std::vector<size_t>& sizes) {
    void* r = nullptr;
    ASSERT_EQ(ConnectAccept(p.net, ctx, nullptr, l, nullptr, &r, 60), ncclSuccess) << py.ReadAll(5) << LogText();
    ExchangeResult res = Exchange(p.net, nullptr, r, {}, sizes, 0, seed, 8, 60);
    EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
    EXPECT_EQ(res.received, static_cast<int>(sizes.size()));
    EXPECT_EQ(py.ReadLine(30), "PY OK " + std::to_string(sizes.size())) << py.ReadAll(5);
    p.net->closeRecv(r);
  }
  Plugin p;
  uint8_t key[32] = {};
  uint64_t comm_id = 0;
  void* ctx = nullptr;
  uint8_t handle[128] = {0};
  void* l = nullptr;
};

TEST_F(NetInterop, PythonConnectorIsAcceptedAndDelivered) {
  ASSERT_NO_FATAL_FAILURE(Listen(0xa0, 0x1234567890abcdefull));

  for (int nsocks : {1, 3}) {
    const uint64_t seed = 77 + static_cast<uint64_t>(nsocks);
    std::vector<size_t> sizes = {0, 1, 100, 32768, 32769, 65536, 262144, 262145, 700001, 5, 0, 123456};
    std::string sizes_line;
    for (size_t s : sizes) sizes_line += std::to_string(s) + " ";
    PeerProcess py;
    ASSERT_TRUE(py.Start({ENCLAVE_INTEROP_PYTHON, ENCLAVE_NET_INTEROP_SCRIPT}));
    ASSERT_TRUE(py.WriteLine(Hex(key, sizeof(key))));
    ASSERT_TRUE(py.WriteLine(Hex(handle, sizeof(handle))));
    ASSERT_TRUE(py.WriteLine(std::to_string(nsocks) + " " + std::to_string(seed) + " " + std::to_string(comm_id)));
    ASSERT_TRUE(py.WriteLine(sizes_line));
    py.CloseInput();
    void* r = nullptr;
    ncclResult_t rc = ConnectAccept(p.net, ctx, nullptr, l, nullptr, &r, 60);
    ASSERT_EQ(rc, ncclSuccess) << py.ReadAll(5) << LogText();
    ExchangeResult res = Exchange(p.net, nullptr, r, {}, sizes, 0, seed, 8, 60);
    EXPECT_EQ(res.rc, ncclSuccess) << res.what << "\n" << LogText();
    EXPECT_EQ(res.received, static_cast<int>(sizes.size()));
    std::string out = py.ReadLine(30);
    EXPECT_EQ(out, "PY OK " + std::to_string(sizes.size())) << out << py.ReadAll(5);
    p.net->closeRecv(r);
  }
  p.net->closeListen(l);
  p.net->finalize(ctx);
}

// How many handshakes the listener refused, by its log: the lines logged in full and the
// counts of the summary lines (at most one security line per 5 s; the summary comes when
// the interval has passed or the listener closes).
int RefusedInLog(const std::string& log) {
  int n = 0;
  const std::string full = "NET/Enclave : closed a connection from ", summary = "NET/Enclave : refused ";
  for (size_t p = 0, e; p < log.size(); p = e + 1) {
    e = log.find('\n', p);
    if (e == std::string::npos) e = log.size();
    const std::string line = log.substr(p, e - p);
    if (line.find(full) != std::string::npos && line.find("goes on waiting for its peer") != std::string::npos) ++n;
    if (auto q = line.find(summary); q != std::string::npos) n += std::atoi(line.c_str() + q + summary.size());
  }
  return n;
}

void StartConnector(PeerProcess& py, const uint8_t* key, const uint8_t* handle, int nsocks, uint64_t seed,
                    uint64_t comm_id, const std::string& mode, const std::vector<size_t>& sizes) {
  std::string sizes_line;
  for (size_t s : sizes) sizes_line += std::to_string(s) + " ";
  ASSERT_TRUE(py.Start({ENCLAVE_INTEROP_PYTHON, ENCLAVE_NET_INTEROP_SCRIPT}));
  ASSERT_TRUE(py.WriteLine(Hex(key, 32)));
  ASSERT_TRUE(py.WriteLine(Hex(handle, 128)));
  ASSERT_TRUE(py.WriteLine(std::to_string(nsocks) + " " + std::to_string(seed) + " " + std::to_string(comm_id) + " " +
                           mode));
  ASSERT_TRUE(py.WriteLine(sizes_line));
  py.CloseInput();
}

// Before the peer, what anyone who read the handle (the listen id) can send without the
// job key: a ClientHello that does not parse, one of another communicator, a forged
// ClientFinished, one that hangs up after our ServerHello. accept() closes each socket,
// logs it, never fails and never returns a connection, and then accepts the peer.
TEST_F(NetInterop, KeylessConnectionsAreClosedAndThePeerIsAcceptedAfterThem) {
  ASSERT_NO_FATAL_FAILURE(Listen(0xa0, 0x1234567890abcdefull));
  {
    PeerProcess py;
    StartConnector(py, key, handle, 2, 1, comm_id, "keyless", {});
    std::string line;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (line.empty() && Clock::now() < deadline) {
      void* r = nullptr;
      ASSERT_EQ(p.net->accept(l, &r, nullptr), ncclSuccess) << "accept() failed on a keyless connection\n"
                                                            << LogText();
      ASSERT_EQ(r, nullptr) << "accept() returned a connection without the job key";
      line = py.ReadLine(0.005);
    }
    EXPECT_EQ(line, "PY KEYLESS DROPPED 3") << py.ReadAll(5) << LogText();
    EXPECT_EQ(py.Wait(), 0);
  }
  const uint64_t seed = 91;
  const std::vector<size_t> sizes = {0, 1, 32769, 262145, 700001, 5};
  PeerProcess py;
  StartConnector(py, key, handle, 3, seed, comm_id, "", sizes);
  ASSERT_NO_FATAL_FAILURE(AcceptAndReceive(py, seed, sizes));
  p.net->closeListen(l);  // logs the count of refusals not logged one by one
  p.net->finalize(ctx);
  const std::string log = LogText();
  EXPECT_NE(log.find("ClientHello: nsocks 0 outside 1..16; accept() goes on waiting for its peer"), std::string::npos)
      << log;
  EXPECT_EQ(RefusedInLog(log), 4) << log;
  EXPECT_NE(log.find("before it proved the job key"), std::string::npos) << log;  // the last, in the summary
}

// The sockets of one connection share client_random; only sockets that proved the job key
// are grouped. A forged socket 0 (no key), a repeated socket 0 and a socket 1 that claims
// another socket count, all from the connection's own client_random, are closed one by
// one: the group they collided with is kept, completes and carries the records.
TEST_F(NetInterop, ARepeatedOrDisagreeingSocketIndexClosesOnlyThatSocket) {
  ASSERT_NO_FATAL_FAILURE(Listen(0x30, 0x77));
  const uint64_t seed = 5;
  const std::vector<size_t> sizes = {0, 7, 32768, 65537, 300000, 1};
  PeerProcess py;
  StartConnector(py, key, handle, 2, seed, comm_id, "collide", sizes);
  ASSERT_NO_FATAL_FAILURE(AcceptAndReceive(py, seed, sizes));
  p.net->closeListen(l);
  p.net->finalize(ctx);
  const std::string log = LogText();
  EXPECT_NE(log.find("ClientFinished MAC mismatch"), std::string::npos) << log;  // the forged socket 0, in full
  EXPECT_EQ(RefusedInLog(log), 3) << log;
  // The last of the three, in the summary line.
  EXPECT_NE(log.find("(socket 1 of 3): it proved the job key, but its connection has 2 sockets (a socket index that "
                     "repeats or disagrees on the socket count)"),
            std::string::npos)
      << log;
}

// A connection of two sockets of which only one comes (its connector died, or the other
// socket failed its handshake): the one that proved the key is not kept open forever, but
// closed when no further socket of its connection finished for kGroupTimeout.
TEST_F(NetInterop, AConnectionWhoseOtherSocketsNeverComeIsClosedAfterTheGroupTimeout) {
  ASSERT_NO_FATAL_FAILURE(Listen(0x50, 0x99));
  PeerProcess py;
  StartConnector(py, key, handle, 2, 1, 0x99, "half", {});
  const auto t0 = Clock::now();
  std::string line;
  while (line.empty() && Clock::now() < t0 + kGroupTimeout * 3) {
    void* r = nullptr;
    ASSERT_EQ(p.net->accept(l, &r, nullptr), ncclSuccess) << LogText();
    ASSERT_EQ(r, nullptr) << "accept() returned a connection with one of its two sockets";
    line = py.ReadLine(0.005);
  }
  const auto took = Clock::now() - t0;
  EXPECT_EQ(line, "PY HALF CLOSED") << py.ReadAll(5) << LogText();
  EXPECT_GE(took, kGroupTimeout);
  EXPECT_LT(took, kGroupTimeout + std::chrono::seconds(5));
  EXPECT_NE(LogText().find("closed 1 of the 2 sockets of a connection from 127.0.0.1:"), std::string::npos)
      << LogText();
  p.net->closeListen(l);
  p.net->finalize(ctx);
}

}  // namespace
}  // namespace enclave::net::test
