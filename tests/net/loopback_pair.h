// A send and a receive DataComm of one context connected to itself over loopback, for
// the transport's in-process tests (transport_test.cc, gpu_records_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>

#include "transport.h"

namespace enclave::net {

// A context on loopback with a fixed test key (0x42 bytes) and `nsocks` sockets.
inline std::unique_ptr<Context> MakeLoopbackContext(int nsocks, const RecordProtection& host = AeadProtection(),
                                                    const RecordProtection* device = nullptr) {
  setenv("ENCLAVE_NET_IFNAME", "lo", 1);
  auto dev = SelectDevice();
  EXPECT_TRUE(dev.ok()) << dev.status().message();
  auto key = crypto::SecretBytes::Create(32);
  EXPECT_TRUE(key.ok());
  std::memset(key->ExposeSecretMutable().data(), 0x42, 32);
  Options opt;
  opt.nsocks = nsocks;
  auto ctx = Context::Create(std::move(key).value(), 7, *dev, opt, host, device);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

struct Pair {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ListenComm> listen;
  std::unique_ptr<DataComm> send, recv;
};

// device: the record layers of GPU buffers (kernel_step_records.h on the CPU,
// gpu_records.h on a GPU), null for none.
inline Pair Connect(int nsocks, const RecordProtection* device = nullptr,
                    const RecordProtection& host = AeadProtection()) {
  Pair p;
  p.ctx = MakeLoopbackContext(nsocks, host, device);
  if (p.ctx == nullptr) return p;
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

}  // namespace enclave::net
