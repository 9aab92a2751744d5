// The plugin's GPU record layers (net/src/gpu_records.cc) on a real GPU: device buffers
// sealed and opened by the kernels, against the CPU path on the other end (GPU -> CPU,
// CPU -> GPU, GPU -> GPU), byte for byte; a tampered record refused with nothing written
// to the device buffer. Skips without a GPU (CI); scripts/gpu-check runs it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <string>
#include <vector>

#include "gpu_records.h"
#include "kernel_step_records.h"
#include "loopback_pair.h"

namespace enclave::net {
namespace {

constexpr uint8_t kCanary = 0xc3;

// Null without a GPU (or in a build without CUDA): the tests then skip with the text
// scripts/gpu-check reads as "no GPU" (a GPU machine where they skip fails the check).
const RecordProtection* GpuRecords() {
  std::string why;
  return GpuRecordProtection(&why);
}
constexpr char kNoGpu[] = "no GPU (or built without CUDA)";

// A buffer of `size` bytes, on the GPU or the host, filled from / read back to host.
struct Buffer {
  bool device = false;
  uint64_t size = 0;
  std::vector<uint8_t> host;
  uint8_t* dev = nullptr;
  Buffer(bool on_device, const std::vector<uint8_t>& contents) : device(on_device), size(contents.size()), host(contents) {
    if (!device) return;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), size == 0 ? 1 : size), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Buffer() {
    if (dev != nullptr) cudaFree(dev);
  }
  uint8_t* data() { return device ? dev : host.data(); }
  std::vector<uint8_t> Read() {
    if (!device) return host;
    std::vector<uint8_t> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), dev, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

// Polls until both requests are done (or one side's error); returns the receive's status.
Status Finish(Pair& p, Request* s, Request* r, bool* received, uint64_t* got) {
  bool s_done = false;
  *received = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(s_done && *received) && std::chrono::steady_clock::now() < deadline) {
    uint64_t n = 0;
    if (!s_done) {
      if (Status st = p.send->Test(s, &s_done, &n); !st.ok()) return st;
    }
    if (!*received) RETURN_IF_ERROR(p.recv->Test(r, received, got));
    sched_yield();
  }
  return *received ? OkStatus() : Unavailable("not done within 60 s");
}

TEST(GpuRecords, DeviceBuffersInteroperateWithTheCpuPath) {
  const RecordProtection* gpu = GpuRecords();
  if (gpu == nullptr) GTEST_SKIP() << kNoGpu;
  Pair p = Connect(2, gpu);
  ASSERT_TRUE(p.send && p.recv);
  const uint64_t sizes[] = {0, 1, 4095, kMaxRecordPayload, 3 * kMaxRecordPayload + 5, 16ull << 20};
  for (int pairing = 1; pairing < 4; ++pairing) {  // 1: GPU -> CPU, 2: CPU -> GPU, 3: GPU -> GPU
    const bool s_dev = pairing & 1, r_dev = pairing & 2;
    for (uint64_t size : sizes) {
      std::vector<uint8_t> pattern(size);
      for (uint64_t i = 0; i < size; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + (i >> 11) + size);
      Buffer out(s_dev, pattern), in(r_dev, std::vector<uint8_t>(size + 64, kCanary));
      auto s = p.send->Post(out.data(), size, s_dev);
      auto r = p.recv->Post(in.data(), size + 64, r_dev);
      ASSERT_TRUE(s.ok() && *s != nullptr && r.ok() && *r != nullptr);
      bool received = false;
      uint64_t got = 0;
      Status st = Finish(p, *s, *r, &received, &got);
      ASSERT_TRUE(st.ok()) << "pairing " << pairing << ", " << size << " bytes: " << st.ToString();
      ASSERT_EQ(got, size);
      std::vector<uint8_t> back = in.Read();
      ASSERT_TRUE(std::equal(pattern.begin(), pattern.end(), back.begin())) << "pairing " << pairing << ", " << size;
      for (uint64_t i = size; i < back.size(); ++i) ASSERT_EQ(back[i], kCanary) << "past the end, byte " << i;
    }
  }
}

TEST(GpuRecords, ATamperedRecordLeavesTheDeviceBufferUntouched) {
  const RecordProtection* gpu = GpuRecords();
  if (gpu == nullptr) GTEST_SKIP() << kNoGpu;
  static const testing::KernelStepRecords corrupting(/*corrupt_sends=*/true);
  Pair p = Connect(1, gpu, corrupting);
  ASSERT_TRUE(p.send && p.recv);
  const uint64_t size = 2 * kMaxRecordPayload + 9;
  Buffer out(false, std::vector<uint8_t>(size, 0x11)), in(true, std::vector<uint8_t>(size, kCanary));
  auto s = p.send->Post(out.data(), size, false);
  auto r = p.recv->Post(in.data(), size, true);
  ASSERT_TRUE(s.ok() && *s != nullptr && r.ok() && *r != nullptr);
  bool received = false;
  uint64_t got = 0;
  Status st = Finish(p, *s, *r, &received, &got);
  EXPECT_FALSE(received);
  EXPECT_EQ(st.code(), Code::kAuthFailed) << st.ToString();
  EXPECT_NE(st.message().find("checked on the GPU"), std::string::npos) << st.message();
  p.send.reset();
  p.recv.reset();
  EXPECT_EQ(in.Read(), std::vector<uint8_t>(size, kCanary));
}

}  // namespace
}  // namespace enclave::net
