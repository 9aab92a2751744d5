// Internal: bounds-checked big-endian reader for TPM structures. Every read names the
// field, so errors read "TPMT_PUBLIC.unique.rsa.size at offset 12 needs 2 bytes, 0 left".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest::internal {

class BeReader {
 public:
  explicit BeReader(ByteSpan data) : data_(data) {}

  Status U8(std::string_view field, uint8_t* v) { return Read(field, 1, v); }
  Status U16(std::string_view field, uint16_t* v) { return Read(field, 2, v); }
  Status U32(std::string_view field, uint32_t* v) { return Read(field, 4, v); }
  Status U64(std::string_view field, uint64_t* v) { return Read(field, 8, v); }
  Status Bytes(std::string_view field, size_t n, ByteSpan* out) {
    RETURN_IF_ERROR(Need(field, n));
    *out = data_.subspan(pos_, n);
    pos_ += n;
    return OkStatus();
  }
  // TPM2B_*: u16 size (at most `max`) then that many bytes.
  Status Sized(std::string_view field, size_t max, std::vector<uint8_t>* out) {
    size_t at = pos_;
    uint16_t n = 0;
    RETURN_IF_ERROR(U16(std::string(field) + ".size", &n));
    if (n > max) {
      return InvalidInput("field '" + std::string(field) + ".size' at offset " + std::to_string(at) + " is " +
                          std::to_string(n) + ", more than the maximum " + std::to_string(max));
    }
    ByteSpan b;
    RETURN_IF_ERROR(Bytes(field, n, &b));
    out->assign(b.begin(), b.end());
    return OkStatus();
  }
  Status End(std::string_view structure) const {
    if (remaining() != 0) {
      return InvalidInput(std::string(structure) + ": " + std::to_string(remaining()) + " trailing bytes at offset " +
                          std::to_string(pos_));
    }
    return OkStatus();
  }
  size_t offset() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  Status Need(std::string_view field, size_t n) const {
    if (remaining() < n) {
      return InvalidInput("field '" + std::string(field) + "' at offset " + std::to_string(pos_) + " needs " +
                          std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
    }
    return OkStatus();
  }
  template <typename T>
  Status Read(std::string_view field, int n, T* v) {
    RETURN_IF_ERROR(Need(field, static_cast<size_t>(n)));
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x = (x << 8) | data_[pos_ + static_cast<size_t>(i)];
    pos_ += static_cast<size_t>(n);
    *v = static_cast<T>(x);
    return OkStatus();
  }
  ByteSpan data_;
  size_t pos_ = 0;
};

inline Status FieldError(std::string_view field, size_t offset, const std::string& what) {
  return InvalidInput("field '" + std::string(field) + "' at offset " + std::to_string(offset) + ": " + what);
}

}  // namespace enclave::attest::internal
