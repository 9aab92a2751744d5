// The older plugin tables (ncclNetPlugin_v10 .. _v6), each driven through its own ABI the
// way that NCCL version calls it: init(logFn[, profFn]) once per process, devices,
// getProperties in the version's layout, listen(dev) / connect(dev[, config]) / accept
// retried until non-NULL (no per-communicator context before v11), regMr with the
// version's size type, isend/irecv (int sizes in v6..v8, size_t from v9, phandles in v10)
// of 0 B, 1 B and 1 MiB with test() polled until done and every byte checked, close.
// None of v6..v10 has finalize. Also: init fails closed without a job key, and the shared
// context refuses new connections once the key is cleared or replaced.
// Layouts: net/src/nccl_net_legacy.h (checked against NVIDIA/nccl v2.28.9-1).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "nccl_net_legacy.h"
#include "plugin_driver.h"

namespace enclave::net::test {
namespace {

const uint8_t kKey[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                          17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

// Per version: its symbol, properties struct and the size types of regMr and isend/irecv.
template <typename Net>
struct Abi;
template <>
struct Abi<ncclNet_v10_t> {
  static constexpr int kVersion = 10;
  static constexpr const char* kSymbol = "ncclNetPlugin_v10";
  using Props = ncclNetProperties_v10_t;
  using MrSize = size_t;
  using MsgSize = size_t;
};
template <>
struct Abi<ncclNet_v9_t> {
  static constexpr int kVersion = 9;
  static constexpr const char* kSymbol = "ncclNetPlugin_v9";
  using Props = ncclNetProperties_v9_t;
  using MrSize = size_t;
  using MsgSize = size_t;
};
template <>
struct Abi<ncclNet_v8_t> {
  static constexpr int kVersion = 8;
  static constexpr const char* kSymbol = "ncclNetPlugin_v8";
  using Props = ncclNetProperties_v8_t;
  using MrSize = size_t;
  using MsgSize = int;
};
template <>
struct Abi<ncclNet_v7_t> {
  static constexpr int kVersion = 7;
  static constexpr const char* kSymbol = "ncclNetPlugin_v7";
  using Props = ncclNetProperties_v7_t;
  using MrSize = int;
  using MsgSize = int;
};
template <>
struct Abi<ncclNet_v6_t> {
  static constexpr int kVersion = 6;
  static constexpr const char* kSymbol = "ncclNetPlugin_v6";
  using Props = ncclNetProperties_v6_t;
  using MrSize = int;
  using MsgSize = int;
};

// The calls whose signatures differ between versions.
template <typename Net>
ncclResult_t Init(Net* net) {
  if constexpr (Abi<Net>::kVersion == 10) {
    return net->init(CaptureLog, nullptr);
  } else {
    return net->init(CaptureLog);
  }
}

template <typename Net>
ncclResult_t Connect(Net* net, void* handle, void** send_comm) {
  if constexpr (Abi<Net>::kVersion == 10) {
    ncclNetCommConfig_v10_t config{-1};  // NCCL_NET_TRAFFIC_CLASS_UNDEF
    ncclNetDeviceHandle_v10_t* dev_comm = nullptr;
    return net->connect(0, &config, handle, send_comm, &dev_comm);
  } else if constexpr (Abi<Net>::kVersion == 6) {
    return net->connect(0, handle, send_comm);
  } else {
    ncclNetDeviceHandle_v11_t* dev_comm = nullptr;
    return net->connect(0, handle, send_comm, &dev_comm);
  }
}

template <typename Net>
ncclResult_t Accept(Net* net, void* listen_comm, void** recv_comm) {
  if constexpr (Abi<Net>::kVersion == 6) {
    return net->accept(listen_comm, recv_comm);
  } else {
    ncclNetDeviceHandle_v11_t* dev_comm = nullptr;
    return net->accept(listen_comm, recv_comm, &dev_comm);
  }
}

template <typename Net>
ncclResult_t Isend(Net* net, void* comm, void* data, typename Abi<Net>::MsgSize size, void* mh, void** req) {
  if constexpr (Abi<Net>::kVersion == 10) {
    return net->isend(comm, data, size, 0, mh, nullptr, req);
  } else {
    return net->isend(comm, data, size, 0, mh, req);
  }
}

template <typename Net>
ncclResult_t Irecv(Net* net, void* comm, void* data, typename Abi<Net>::MsgSize size, void* mh, void** req) {
  void* datas[1] = {data};
  typename Abi<Net>::MsgSize sizes[1] = {size};
  int tags[1] = {0};
  void* mhs[1] = {mh};
  if constexpr (Abi<Net>::kVersion == 10) {
    void* phandles[1] = {nullptr};
    return net->irecv(comm, 1, datas, sizes, tags, mhs, phandles, req);
  } else {
    return net->irecv(comm, 1, datas, sizes, tags, mhs, req);
  }
}

// NCCL's loop: connect() and accept() until both comms exist.
template <typename Net>
ncclResult_t ConnectAcceptLoop(Net* net, void* handle, void* listen_comm, void** s, void** r) {
  *s = nullptr;
  *r = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (*s == nullptr || *r == nullptr) {
    if (*s == nullptr) {
      if (ncclResult_t rc = Connect(net, handle, s); rc != ncclSuccess) return rc;
    }
    if (*r == nullptr) {
      if (ncclResult_t rc = Accept(net, listen_comm, r); rc != ncclSuccess) return rc;
    }
    if (Clock::now() > deadline) return ncclInProgress;
  }
  return ncclSuccess;
}

class NetAbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearLog();
    setenv("ENCLAVE_NET_IFNAME", "lo", 1);
    ASSERT_TRUE(p_.Load(ENCLAVE_NET_PLUGIN)) << p_.error;
    ASSERT_EQ(p_.set_key(kKey, sizeof(kKey)), 0);
  }
  template <typename Net>
  Net* Table() {
    return static_cast<Net*>(dlsym(p_.lib, Abi<Net>::kSymbol));
  }
  Plugin p_;
};

template <typename Net>
class NetAbiVersionTest : public NetAbiTest {};

using Versions = ::testing::Types<ncclNet_v10_t, ncclNet_v9_t, ncclNet_v8_t, ncclNet_v7_t, ncclNet_v6_t>;
class VersionName {
 public:
  template <typename T>
  static std::string GetName(int) {
    return "v" + std::to_string(Abi<T>::kVersion);
  }
};
TYPED_TEST_SUITE(NetAbiVersionTest, Versions, VersionName);

TYPED_TEST(NetAbiVersionTest, DrivenThroughItsOwnAbi) {
  using Net = TypeParam;
  using MsgSize = typename Abi<Net>::MsgSize;
  using MrSize = typename Abi<Net>::MrSize;
  Net* net = this->template Table<Net>();
  ASSERT_NE(net, nullptr) << Abi<Net>::kSymbol << " is not exported";
  EXPECT_STREQ(net->name, "enclave");

  ASSERT_EQ(Init(net), ncclSuccess) << LogText();
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 1);

  // Properties in this version's layout, equal to the v11 ones where the field exists.
  ncclNetProperties_v11_t v11;
  ASSERT_EQ(this->p_.net->getProperties(0, &v11), ncclSuccess);
  typename Abi<Net>::Props props;
  std::memset(&props, 0xA5, sizeof(props));
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_STREQ(props.name, v11.name);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_GT(props.speed, 0);
  EXPECT_EQ(props.speed, v11.speed);
  EXPECT_EQ(props.guid, v11.guid);
  EXPECT_EQ(props.maxComms, v11.maxComms);
  EXPECT_GT(props.maxComms, 0);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_EQ(props.latency, 0.0f);
  EXPECT_EQ(props.port, 0);
  if constexpr (Abi<Net>::kVersion >= 7) {
    EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(props.netDeviceVersion, NCCL_NET_DEVICE_INVALID_VERSION);
  }
  if constexpr (Abi<Net>::kVersion >= 8) {
    EXPECT_EQ(props.regIsGlobal, 0);
  }
  if constexpr (Abi<Net>::kVersion >= 9) {
    EXPECT_EQ(props.forceFlush, 0);
    EXPECT_EQ(props.vProps.ndevs, 1);
    EXPECT_EQ(props.vProps.devs[0], 0);
    EXPECT_EQ(props.maxP2pBytes, size_t{0x7fffffff});
    EXPECT_EQ(props.maxCollBytes, size_t{0x7fffffff});
    EXPECT_EQ(net->makeVDevice, nullptr);
  }
  EXPECT_NE(net->getProperties(1, &props), ncclSuccess);
  EXPECT_EQ(net->regMrDmaBuf, nullptr);

  uint8_t handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(net->listen(0, handle, &l), ncclSuccess) << LogText();
  ASSERT_NE(l, nullptr);
  void *s = nullptr, *r = nullptr;
  ASSERT_EQ(ConnectAcceptLoop(net, handle, l, &s, &r), ncclSuccess) << LogText();

  // Device memory is refused (NCCL's GDR probe expects it); host memory is accepted.
  void* mh = nullptr;
  EXPECT_NE(net->regMr(s, handle, MrSize{128}, NCCL_PTR_CUDA, &mh), ncclSuccess);

  uint64_t seed = static_cast<uint64_t>(Abi<Net>::kVersion);
  for (size_t n : {size_t{0}, size_t{1}, size_t{1} << 20}) {
    SCOPED_TRACE("message of " + std::to_string(n) + " bytes");
    std::vector<uint8_t> out(n), in(n + 16, 0xEE);  // the receive is posted larger
    Fill(out.data(), n, seed, n);
    void *smr = nullptr, *rmr = nullptr;
    ASSERT_EQ(net->regMr(s, out.data(), static_cast<MrSize>(out.size()), NCCL_PTR_HOST, &smr), ncclSuccess);
    ASSERT_EQ(net->regMr(r, in.data(), static_cast<MrSize>(in.size()), NCCL_PTR_HOST, &rmr), ncclSuccess);
    void *sreq = nullptr, *rreq = nullptr;
    ASSERT_EQ(Irecv(net, r, in.data(), static_cast<MsgSize>(in.size()), rmr, &rreq), ncclSuccess) << LogText();
    ASSERT_EQ(Isend(net, s, out.data(), static_cast<MsgSize>(n), smr, &sreq), ncclSuccess) << LogText();
    ASSERT_NE(sreq, nullptr);
    ASSERT_NE(rreq, nullptr);
    int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while ((!sdone || !rdone) && Clock::now() < deadline) {
      if (!sdone) {
        ASSERT_EQ(net->test(sreq, &sdone, &ssize), ncclSuccess) << LogText();
      }
      if (!rdone) {
        ASSERT_EQ(net->test(rreq, &rdone, &rsize), ncclSuccess) << LogText();
      }
    }
    ASSERT_TRUE(sdone && rdone) << "timed out\n" << LogText();
    EXPECT_EQ(ssize, static_cast<int>(n));
    EXPECT_EQ(rsize, static_cast<int>(n));
    if (n > 0) {  // out.data() may be NULL when n is 0
      EXPECT_EQ(std::memcmp(in.data(), out.data(), n), 0);
    }
    for (size_t o = n; o < in.size(); ++o) ASSERT_EQ(in[o], 0xEE) << "written past the message end";
    EXPECT_EQ(net->deregMr(s, smr), ncclSuccess);
    EXPECT_EQ(net->deregMr(r, rmr), ncclSuccess);
  }

  // The int sizes of the oldest layouts: a negative one is refused, never widened.
  if constexpr (std::is_same_v<MsgSize, int>) {
    uint8_t b[1] = {0};
    void* req = reinterpret_cast<void*>(1);
    EXPECT_EQ(Isend(net, s, b, -1, nullptr, &req), ncclInvalidArgument);
    EXPECT_EQ(Irecv(net, r, b, -1, nullptr, &req), ncclInvalidArgument);
  }
  if constexpr (std::is_same_v<MrSize, int>) {
    EXPECT_EQ(net->regMr(s, handle, -1, NCCL_PTR_HOST, &mh), ncclInvalidArgument);
  }
  // maxRecvs is 1: a grouped receive is refused.
  {
    uint8_t b0[4], b1[4];
    void* datas[2] = {b0, b1};
    MsgSize sizes[2] = {4, 4};
    int tags[2] = {0, 0};
    void* mhs[2] = {nullptr, nullptr};
    void* req = nullptr;
    ncclResult_t rc;
    if constexpr (Abi<Net>::kVersion == 10) {
      void* ph[2] = {nullptr, nullptr};
      rc = net->irecv(r, 2, datas, sizes, tags, mhs, ph, &req);
    } else {
      rc = net->irecv(r, 2, datas, sizes, tags, mhs, &req);
    }
    EXPECT_NE(rc, ncclSuccess);
  }

  EXPECT_EQ(net->closeSend(s), ncclSuccess);
  EXPECT_EQ(net->closeRecv(r), ncclSuccess);
  EXPECT_EQ(net->closeListen(l), ncclSuccess);
  // No finalize in v6..v10: the shared context lives until the process exits.
}

// Init without a key fails for every version, as v11's does (fail closed), whether or not
// another test created the shared context before; with the key set again it succeeds.
TEST_F(NetAbiTest, InitFailsClosedWithoutKey) {
  auto* v10 = Table<ncclNet_v10_t>();
  auto* v9 = Table<ncclNet_v9_t>();
  auto* v8 = Table<ncclNet_v8_t>();
  auto* v7 = Table<ncclNet_v7_t>();
  auto* v6 = Table<ncclNet_v6_t>();
  ASSERT_TRUE(v10 && v9 && v8 && v7 && v6);
  p_.clear_key();
  EXPECT_NE(Init(v10), ncclSuccess);
  EXPECT_NE(Init(v9), ncclSuccess);
  EXPECT_NE(Init(v8), ncclSuccess);
  EXPECT_NE(Init(v7), ncclSuccess);
  EXPECT_NE(Init(v6), ncclSuccess);
  EXPECT_NE(LogText().find("no job key"), std::string::npos) << LogText();
  ASSERT_EQ(p_.set_key(kKey, sizeof(kKey)), 0);
  EXPECT_EQ(Init(v10), ncclSuccess) << LogText();
  EXPECT_EQ(Init(v6), ncclSuccess) << LogText();
}

// One process-wide context: after the key is cleared or replaced, listen and connect of
// every older table refuse (there is no later init() that could notice); with the same key
// set again they work.
TEST_F(NetAbiTest, SharedContextFollowsTheKey) {
  auto* v10 = Table<ncclNet_v10_t>();
  auto* v6 = Table<ncclNet_v6_t>();
  ASSERT_TRUE(v10 && v6);
  ASSERT_EQ(Init(v10), ncclSuccess) << LogText();
  uint8_t handle[128] = {0};
  void* l = nullptr;
  ASSERT_EQ(v10->listen(0, handle, &l), ncclSuccess) << LogText();

  p_.clear_key();
  void* l2 = reinterpret_cast<void*>(1);
  EXPECT_EQ(v6->listen(0, handle, &l2), ncclInvalidUsage);
  EXPECT_EQ(l2, nullptr);
  void* s = reinterpret_cast<void*>(1);
  EXPECT_EQ(Connect(v10, handle, &s), ncclInvalidUsage);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(LogText().find("cleared or replaced"), std::string::npos) << LogText();

  uint8_t other[32];
  for (int i = 0; i < 32; ++i) other[i] = static_cast<uint8_t>(kKey[i] ^ (i == 0 ? 0x80 : 0));
  ASSERT_EQ(p_.set_key(other, sizeof(other)), 0);
  EXPECT_EQ(Connect(v6, handle, &s), ncclInvalidUsage);
  EXPECT_NE(Init(v6), ncclSuccess);  // the shared context keeps the first key
  EXPECT_NE(LogText().find("restart the process"), std::string::npos) << LogText();

  // The same key again: a v6 sender reaches the v10 listener (same context, comm_id 0).
  ASSERT_EQ(p_.set_key(kKey, sizeof(kKey)), 0);
  void* r = nullptr;
  s = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while ((s == nullptr || r == nullptr) && Clock::now() < deadline) {
    if (s == nullptr) {
      ASSERT_EQ(Connect(v6, handle, &s), ncclSuccess) << LogText();
    }
    if (r == nullptr) {
      ASSERT_EQ(Accept(v10, l, &r), ncclSuccess) << LogText();
    }
  }
  ASSERT_TRUE(s != nullptr && r != nullptr) << LogText();
  EXPECT_EQ(v6->closeSend(s), ncclSuccess);
  EXPECT_EQ(v10->closeRecv(r), ncclSuccess);
  EXPECT_EQ(v10->closeListen(l), ncclSuccess);
}

}  // namespace
}  // namespace enclave::net::test
