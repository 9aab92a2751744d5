// Little-endian writes into a preallocated (locked) buffer, and float arrays read back from
// bytes: the model file and checkpoints hold plaintext weights, which must not pass
// through ordinary heap vectors.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace enclave::trainer {

class LeCursor {
 public:
  explicit LeCursor(std::span<uint8_t> out) : out_(out) {}
  void Raw(const void* p, size_t n) {
    if (n > 0) std::memcpy(out_.data() + pos_, p, n);
    pos_ += n;
  }
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_[pos_++] = static_cast<uint8_t>(v >> (8 * i));
  }
  void F64(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    Le(u, 8);
  }
  template <typename T>  // float or uint32_t
  void Array32(const T* v, size_t n) {
    static_assert(sizeof(T) == 4);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      Le(u, 4);
    }
  }
  size_t pos() const { return pos_; }

 private:
  std::span<uint8_t> out_;
  size_t pos_ = 0;
};

inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

template <typename T>
T LoadLe32As(const uint8_t* p) {
  static_assert(sizeof(T) == 4);
  const uint32_t u = LoadLe32(p);
  T v;
  std::memcpy(&v, &u, 4);
  return v;
}

}  // namespace enclave::trainer
