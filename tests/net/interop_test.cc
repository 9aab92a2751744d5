// The plugin's listener against an independent connector in Python
// (interop_connector.py, written from docs/formats/net-transport.md alone): the
// handshake, key schedule, record format and chunk plan must agree byte for byte.
#include <gtest/gtest.h>

#include "peer_process.h"
#include "plugin_driver.h"

namespace enclave::net::test {
namespace {

TEST(NetInterop, PythonConnectorIsAcceptedAndDelivered) {
  ClearLog();
  setenv("ENCLAVE_NET_IFNAME", "lo", 1);
  Plugin p;
  ASSERT_TRUE(p.Load(ENCLAVE_NET_PLUGIN)) << p.error;
  uint8_t key[32];
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(0xa0 + i);
  ASSERT_EQ(p.set_key(key, sizeof(key)), 0);
  void* ctx = nullptr;
  const uint64_t comm_id = 0x1234567890abcdefull;
  ASSERT_EQ(p.net->init(&ctx, comm_id, nullptr, CaptureLog, nullptr), ncclSuccess);
  uint8_t handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(p.net->listen(ctx, 0, handle, &l), ncclSuccess);

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

}  // namespace
}  // namespace enclave::net::test
