// Helpers shared by the crypto tests: status assertions, hex, temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::crypto::testing {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define ENCLAVE_TEST_CONCAT_INNER(a, b) a##b
#define ENCLAVE_TEST_CONCAT(a, b) ENCLAVE_TEST_CONCAT_INNER(a, b)

template <typename T>
::testing::AssertionResult IsOk(const T& v) {
  const Status& s = StatusOf(v);
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not OK: " << s.ToString();
}
template <typename T>
::testing::AssertionResult HasCode(const T& v, Code code) {
  const Status& s = StatusOf(v);
  if (s.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected code " << CodeName(code) << ", got "
                                       << (s.ok() ? std::string("OK") : s.ToString());
}

// All stream further context: EXPECT_CODE(f(), Code::kAuthFailed) << "case " << i;
#define ASSERT_OK(expr) ASSERT_TRUE(::enclave::crypto::testing::IsOk((expr))) << #expr << ": "
#define EXPECT_OK(expr) EXPECT_TRUE(::enclave::crypto::testing::IsOk((expr))) << #expr << ": "
#define EXPECT_CODE(expr, code) \
  EXPECT_TRUE(::enclave::crypto::testing::HasCode((expr), (code))) << #expr << ": "

#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)                                \
  auto tmp = (expr);                                                             \
  ASSERT_TRUE(tmp.ok()) << #expr << " -> " << tmp.status().ToString();           \
  lhs = std::move(tmp).value()
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(ENCLAVE_TEST_CONCAT(enclave_test_r_, __LINE__), lhs, expr)

inline std::vector<uint8_t> Hex(std::string_view hex) {
  auto r = HexDecode(hex);
  if (!r.ok()) {
    ADD_FAILURE() << "bad hex in test: " << r.status().ToString();
    return {};
  }
  return std::move(r).value();
}

inline std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

inline SecretBytes Secret(ByteSpan bytes) {
  auto s = SecretBytes::CopyFrom(bytes);
  if (!s.ok()) {
    ADD_FAILURE() << s.status().ToString();
    return {};
  }
  return std::move(s).value();
}

inline SecretBytes RandomSecret(size_t n) {
  auto s = SecretBytes::Random(n);
  if (!s.ok()) {
    ADD_FAILURE() << s.status().ToString();
    return {};
  }
  return std::move(s).value();
}

inline std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

inline bool AllZero(ByteSpan b) {
  for (uint8_t x : b)
    if (x != 0) return false;
  return true;
}

// A fresh directory under the system temp dir, removed (with its contents) at scope end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("enclave-crypto-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string File(std::string_view name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void WriteBytes(const std::string& path, ByteSpan bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  ASSERT_TRUE(f.good()) << "writing " << path;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void WriteText(const std::string& path, std::string_view text) {
  WriteBytes(path, ByteSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace enclave::crypto::testing
