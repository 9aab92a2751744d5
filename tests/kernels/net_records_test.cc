// The transport's records from the kernels' host+device code (kernels/net_records.h)
// against the CPU transport's own (net/src/wire.h: OpenSSL), byte for byte, both ways:
// what a GPU-encrypting rank sends, a CPU rank opens, and the other way round.
#include "enclave/kernels/net_records.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "enclave/crypto/aead.h"
#include "enclave/crypto/secret_bytes.h"
#include "wire.h"

namespace enclave::kernels {
namespace {

struct Keys {
  std::vector<uint8_t> raw;
  NetRecordKey kernel;
  NetRecordDeviceKey device;  // the GPU kernels' form (segmented tag)
  std::unique_ptr<crypto::Aead> openssl;
};

Keys MakeKeys(std::mt19937_64& rng) {
  Keys k;
  k.raw.resize(32);
  for (auto& b : k.raw) b = static_cast<uint8_t>(rng());
  NetRecordKeyOf(k.raw.data(), kAesTable.t0, &k.kernel);
  NetRecordDeviceKeyOf(k.raw.data(), &k.device);
  auto secret = crypto::SecretBytes::CopyFrom(k.raw);
  EXPECT_TRUE(secret.ok());
  auto aead = crypto::Aead::Create(crypto::Suite::kAes256Gcm, *secret);
  EXPECT_TRUE(aead.ok()) << aead.status().ToString();
  k.openssl = std::move(aead).value();
  return k;
}

net::RecordHeaderBytes HeaderOf(uint64_t seq, uint64_t len, uint64_t msg_index) {
  net::RecordHeader h;
  h.payload_len = static_cast<uint32_t>(len);
  h.seq = seq;
  h.msg_index = msg_index;
  h.msg_size = len + 100;
  return net::EncodeRecordHeader(h);
}

// Every length class of the unit and block loops: empty, partial blocks, whole units,
// one past, the transport's largest record.
const std::vector<uint64_t> kLengths = {0, 1, 15, 16, 17, 63, 64, 65, 127, 4096, 65536 + 7, net::kMaxRecordPayload};

TEST(NetRecords, TheKernelsSealExactlyWhatTheTransportSeals) {
  std::mt19937_64 rng(21);
  Keys k = MakeKeys(rng);
  for (uint64_t len : kLengths) {
    for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{0x0102030405060708}, ~uint64_t{0}}) {
      std::vector<uint8_t> plain(len);
      for (auto& b : plain) b = static_cast<uint8_t>(rng());
      const net::RecordHeaderBytes header = HeaderOf(seq, len, seq / 3);
      std::vector<uint8_t> want(len + kNetRecordTagBytes), got(len + kNetRecordTagBytes, 0xee);
      ASSERT_TRUE(net::SealRecord(*k.openssl, header, seq, ByteSpan(plain.data(), plain.size()), want).ok());
      SealNetRecord(k.kernel, kAesTable.t0, header.data(), seq, plain.data(), len, got.data());
      EXPECT_EQ(got, want) << "length " << len << ", seq " << seq;
    }
  }
}

TEST(NetRecords, EachSideOpensTheOthersRecords) {
  std::mt19937_64 rng(22);
  Keys k = MakeKeys(rng);
  for (uint64_t len : kLengths) {
    const uint64_t seq = rng();
    std::vector<uint8_t> plain(len);
    for (auto& b : plain) b = static_cast<uint8_t>(rng());
    const net::RecordHeaderBytes header = HeaderOf(seq, len, 7);
    // GPU-side seal, CPU-side open (the transport opens in place).
    std::vector<uint8_t> record(len + kNetRecordTagBytes);
    SealNetRecord(k.kernel, kAesTable.t0, header.data(), seq, plain.data(), len, record.data());
    std::vector<uint8_t> in_place = record;
    ASSERT_TRUE(net::OpenRecordInPlace(*k.openssl, header, seq, in_place).ok()) << "length " << len;
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), in_place.begin())) << "length " << len;
    // CPU-side seal, GPU-side open.
    std::vector<uint8_t> from_cpu(len + kNetRecordTagBytes), opened(len);
    ASSERT_TRUE(net::SealRecord(*k.openssl, header, seq, ByteSpan(plain.data(), plain.size()), from_cpu).ok());
    ASSERT_TRUE(OpenNetRecord(k.kernel, kAesTable.t0, header.data(), seq, from_cpu.data(), len, opened.data()))
        << "length " << len;
    EXPECT_EQ(opened, plain) << "length " << len;
  }
}

// A record changed anywhere (ciphertext, tag, header), taken for another sequence number
// or opened with another key fails the tag, and nothing is decrypted into the output.
TEST(NetRecords, AChangedRecordOpensToNothing) {
  std::mt19937_64 rng(23);
  Keys k = MakeKeys(rng), other = MakeKeys(rng);
  const uint64_t len = 1000, seq = 41;
  std::vector<uint8_t> plain(len, 0x5a), record(len + kNetRecordTagBytes);
  const net::RecordHeaderBytes header = HeaderOf(seq, len, 2);
  ASSERT_TRUE(net::SealRecord(*k.openssl, header, seq, ByteSpan(plain.data(), plain.size()), record).ok());
  auto refused = [&](const NetRecordKey& key, const net::RecordHeaderBytes& h, uint64_t s,
                     const std::vector<uint8_t>& r) {
    std::vector<uint8_t> out(len, 0xcc);
    const bool ok = OpenNetRecord(key, kAesTable.t0, h.data(), s, r.data(), len, out.data());
    return !ok && out == std::vector<uint8_t>(len, 0xcc);
  };
  std::vector<uint8_t> opened(len);
  ASSERT_TRUE(OpenNetRecord(k.kernel, kAesTable.t0, header.data(), seq, record.data(), len, opened.data()));
  for (size_t at : {size_t{0}, size_t{len / 2}, size_t{len - 1}, size_t{len}, size_t{len + 15}}) {
    std::vector<uint8_t> bad = record;
    bad[at] ^= 0x01;
    EXPECT_TRUE(refused(k.kernel, header, seq, bad)) << "byte " << at << " flipped";
  }
  net::RecordHeaderBytes bad_header = header;
  bad_header[20] ^= 0x01;  // msg_index
  EXPECT_TRUE(refused(k.kernel, bad_header, seq, record));
  EXPECT_TRUE(refused(k.kernel, header, seq + 1, record));
  EXPECT_TRUE(refused(other.kernel, header, seq, record));
}

// The GPU's decomposition (units, 512-byte GHASH segments, a combining step) gives the
// transport's bytes: every segment boundary class (one block, one segment, one past, a
// short last segment) and the largest record; opened both ways.
TEST(NetRecords, TheSegmentedKernelStepsSealAndOpenAsTheTransportDoes) {
  std::mt19937_64 rng(24);
  Keys k = MakeKeys(rng);
  std::vector<uint64_t> lengths = kLengths;
  for (uint64_t len : {511, 512, 513, 1024, 16383, 16384 + 16 * 7 + 3}) lengths.push_back(len);
  for (uint64_t len : lengths) {
    const uint64_t seq = len % 2 == 0 ? ~uint64_t{0} - len : len * 977;
    std::vector<uint8_t> plain(len);
    for (auto& b : plain) b = static_cast<uint8_t>(rng());
    const net::RecordHeaderBytes header = HeaderOf(seq, len, 5);
    std::vector<uint8_t> want(len + kNetRecordTagBytes), got(len + kNetRecordTagBytes, 0xee);
    ASSERT_TRUE(net::SealRecord(*k.openssl, header, seq, ByteSpan(plain.data(), plain.size()), want).ok());
    SealNetRecordInSegments(k.device, header.data(), seq, plain.data(), len, got.data());
    ASSERT_EQ(got, want) << "length " << len;
    std::vector<uint8_t> opened(len, 0xcc);
    ASSERT_TRUE(OpenNetRecordInSegments(k.device, header.data(), seq, want.data(), len, opened.data()))
        << "length " << len;
    EXPECT_EQ(opened, plain) << "length " << len;
    if (len == 0) continue;
    std::vector<uint8_t> bad = want;
    bad[rng() % (len + kNetRecordTagBytes)] ^= 0x80;
    std::vector<uint8_t> untouched(len, 0xcc);
    EXPECT_FALSE(OpenNetRecordInSegments(k.device, header.data(), seq, bad.data(), len, untouched.data()))
        << "length " << len;
    EXPECT_EQ(untouched, std::vector<uint8_t>(len, 0xcc)) << "length " << len;
  }
}

}  // namespace
}  // namespace enclave::kernels
