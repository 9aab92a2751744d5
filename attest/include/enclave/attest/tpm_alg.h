// TPM 2.0 algorithm identifiers (TPM 2.0 Part 2, TPM_ALG_ID) and the digests the
// verifier computes with them, through OpenSSL.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

namespace alg {
inline constexpr uint16_t kRsa = 0x0001;
inline constexpr uint16_t kSha1 = 0x0004;
inline constexpr uint16_t kHmac = 0x0005;
inline constexpr uint16_t kAes = 0x0006;
inline constexpr uint16_t kKeyedHash = 0x0008;
inline constexpr uint16_t kSha256 = 0x000B;
inline constexpr uint16_t kSha384 = 0x000C;
inline constexpr uint16_t kSha512 = 0x000D;
inline constexpr uint16_t kNull = 0x0010;
inline constexpr uint16_t kSm3_256 = 0x0012;
inline constexpr uint16_t kRsassa = 0x0014;
inline constexpr uint16_t kRsaes = 0x0015;
inline constexpr uint16_t kRsapss = 0x0016;
inline constexpr uint16_t kOaep = 0x0017;
inline constexpr uint16_t kEcdsa = 0x0018;
inline constexpr uint16_t kEcdh = 0x0019;
inline constexpr uint16_t kEcdaa = 0x001A;
inline constexpr uint16_t kSm2 = 0x001B;
inline constexpr uint16_t kEcschnorr = 0x001C;
inline constexpr uint16_t kEcc = 0x0023;
inline constexpr uint16_t kSymcipher = 0x0025;
}  // namespace alg

// TPM_ECC_CURVE
namespace curve {
inline constexpr uint16_t kNistP256 = 0x0003;
inline constexpr uint16_t kNistP384 = 0x0004;
inline constexpr uint16_t kNistP521 = 0x0005;
}  // namespace curve

// The hash algorithms this verifier computes: SHA-1, SHA-256, SHA-384, SHA-512.
// Digest size in bytes, or 0 for any other id (SM3 included: not supported here).
size_t HashSize(uint16_t hash_alg);
bool IsSupportedHash(uint16_t hash_alg);
// "sha1", "sha256", "sha384", "sha512"; other ids as "alg 0x%04x".
std::string AlgName(uint16_t alg);
// Inverse of AlgName for the supported hashes; 0 when unknown.
uint16_t HashAlgFromName(std::string_view name);

// H(part1 || part2 || ...). Unsupported for an id that is not a supported hash.
Result<std::vector<uint8_t>> Hash(uint16_t hash_alg, std::initializer_list<ByteSpan> parts);
// PCR extend in place: pcr = H(pcr || digest); pcr must already have the hash's size.
Status ExtendInPlace(uint16_t hash_alg, std::vector<uint8_t>& pcr, ByteSpan digest);
Status ExtendInPlace(uint16_t hash_alg, std::span<uint8_t> pcr, ByteSpan digest);

// Big-endian writer: the byte order of every TPM 2.0 structure.
class BeWriter {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Be(v, 2); }
  void U32(uint32_t v) { Be(v, 4); }
  void U64(uint64_t v) { Be(v, 8); }
  void Bytes(ByteSpan b) { out_.insert(out_.end(), b.begin(), b.end()); }
  // TPM2B_*: u16 size then the bytes.
  void Sized(ByteSpan b) {
    U16(static_cast<uint16_t>(b.size()));
    Bytes(b);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  void Be(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

}  // namespace enclave::attest
