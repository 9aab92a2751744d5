#include "enclave/common/bytes.h"

#include <gtest/gtest.h>

namespace enclave {
namespace {

TEST(Bytes, WriterReaderRoundTrip) {
  ByteWriter w;
  w.U8(0xab);
  w.U16(0x1234);
  w.U32(0xdeadbeef);
  w.U64(0x0102030405060708ull);
  w.Bytes("xyz");
  EXPECT_EQ(HexEncode(w.bytes()), "ab3412efbeadde0807060504030201" "78797a");
  ByteReader r(w.bytes());
  uint8_t a;
  uint16_t b;
  uint32_t c;
  uint64_t d;
  std::string s;
  ASSERT_TRUE(r.U8("a", &a).ok());
  ASSERT_TRUE(r.U16("b", &b).ok());
  ASSERT_TRUE(r.U32("c", &c).ok());
  ASSERT_TRUE(r.U64("d", &d).ok());
  ASSERT_TRUE(r.String("s", 3, &s).ok());
  EXPECT_EQ(a, 0xab);
  EXPECT_EQ(b, 0x1234);
  EXPECT_EQ(c, 0xdeadbeefu);
  EXPECT_EQ(d, 0x0102030405060708ull);
  EXPECT_EQ(s, "xyz");
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(Bytes, ShortReadNamesFieldAndOffset) {
  std::vector<uint8_t> data = {1, 2};
  ByteReader r(data);
  uint32_t v;
  Status s = r.U32("chunk_size", &v);
  EXPECT_EQ(s.code(), Code::kInvalidInput);
  EXPECT_EQ(s.message(), "field 'chunk_size' at offset 0 needs 4 bytes, 2 left");
}

TEST(Bytes, HexRejectsBadInput) {
  EXPECT_FALSE(HexDecode("abc").ok());
  EXPECT_FALSE(HexDecode("zz").ok());
  EXPECT_EQ(*HexDecode("00FFa0"), (std::vector<uint8_t>{0x00, 0xff, 0xa0}));
}

}  // namespace
}  // namespace enclave
