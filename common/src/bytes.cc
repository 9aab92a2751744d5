#include "enclave/common/bytes.h"

namespace enclave {

Status ByteReader::Need(std::string_view field, size_t n) const {
  if (remaining() < n) {
    return InvalidInput("field '" + std::string(field) + "' at offset " + std::to_string(pos_) +
                        " needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                        " left");
  }
  return OkStatus();
}

Status ByteReader::Le(std::string_view field, int n, uint64_t* v) {
  RETURN_IF_ERROR(Need(field, static_cast<size_t>(n)));
  uint64_t x = 0;
  for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
  pos_ += static_cast<size_t>(n);
  *v = x;
  return OkStatus();
}

Status ByteReader::U8(std::string_view field, uint8_t* v) {
  uint64_t x;
  RETURN_IF_ERROR(Le(field, 1, &x));
  *v = static_cast<uint8_t>(x);
  return OkStatus();
}
Status ByteReader::U16(std::string_view field, uint16_t* v) {
  uint64_t x;
  RETURN_IF_ERROR(Le(field, 2, &x));
  *v = static_cast<uint16_t>(x);
  return OkStatus();
}
Status ByteReader::U32(std::string_view field, uint32_t* v) {
  uint64_t x;
  RETURN_IF_ERROR(Le(field, 4, &x));
  *v = static_cast<uint32_t>(x);
  return OkStatus();
}
Status ByteReader::U64(std::string_view field, uint64_t* v) { return Le(field, 8, v); }

Status ByteReader::Bytes(std::string_view field, size_t n, ByteSpan* out) {
  RETURN_IF_ERROR(Need(field, n));
  *out = data_.subspan(pos_, n);
  pos_ += n;
  return OkStatus();
}

Status ByteReader::String(std::string_view field, size_t n, std::string* out) {
  ByteSpan b;
  RETURN_IF_ERROR(Bytes(field, n, &b));
  out->assign(reinterpret_cast<const char*>(b.data()), b.size());
  return OkStatus();
}

std::string HexEncode(ByteSpan bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Result<std::vector<uint8_t>> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidInput("hex string has odd length " + std::to_string(hex.size()));
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidInput("not a hex digit at position " + std::to_string(2 * i));
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace enclave
