// Little-endian encoding, and a bounds-checked reader for parsing untrusted bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/status.h"

namespace enclave {

using ByteSpan = std::span<const uint8_t>;

inline ByteSpan AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(ByteSpan b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void Bytes(std::string_view s) { Bytes(AsBytes(s)); }
  size_t size() const { return out_.size(); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Every read checks the remaining length and names the field it was reading, so a
// parse error says what and where ("field 'x' at offset N needs 4 bytes, 2 left").
class ByteReader {
 public:
  explicit ByteReader(ByteSpan data) : data_(data) {}

  Status U8(std::string_view field, uint8_t* v);
  Status U16(std::string_view field, uint16_t* v);
  Status U32(std::string_view field, uint32_t* v);
  Status U64(std::string_view field, uint64_t* v);
  Status Bytes(std::string_view field, size_t n, ByteSpan* out);
  Status String(std::string_view field, size_t n, std::string* out);
  size_t offset() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  Status Need(std::string_view field, size_t n) const;
  Status Le(std::string_view field, int n, uint64_t* v);
  ByteSpan data_;
  size_t pos_ = 0;
};

std::string HexEncode(ByteSpan bytes);
// Lower- or upper-case hex, even length; nothing else.
Result<std::vector<uint8_t>> HexDecode(std::string_view hex);

}  // namespace enclave
