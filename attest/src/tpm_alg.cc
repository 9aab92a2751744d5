#include "enclave/attest/tpm_alg.h"

// SHA*_Init/Update/Final: see HashInto.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <cstdio>
#include <memory>

namespace enclave::attest {

size_t HashSize(uint16_t hash_alg) {
  switch (hash_alg) {
    case alg::kSha1:
      return 20;
    case alg::kSha256:
      return 32;
    case alg::kSha384:
      return 48;
    case alg::kSha512:
      return 64;
    default:
      return 0;
  }
}

bool IsSupportedHash(uint16_t hash_alg) { return HashSize(hash_alg) != 0; }

std::string AlgName(uint16_t a) {
  switch (a) {
    case alg::kSha1:
      return "sha1";
    case alg::kSha256:
      return "sha256";
    case alg::kSha384:
      return "sha384";
    case alg::kSha512:
      return "sha512";
    case alg::kSm3_256:
      return "sm3_256";
    case alg::kRsa:
      return "rsa";
    case alg::kEcc:
      return "ecc";
    case alg::kRsassa:
      return "rsassa";
    case alg::kRsapss:
      return "rsapss";
    case alg::kEcdsa:
      return "ecdsa";
    case alg::kNull:
      return "null";
    default: {
      char buf[24];
      std::snprintf(buf, sizeof buf, "alg 0x%04x", a);
      return buf;
    }
  }
}

uint16_t HashAlgFromName(std::string_view name) {
  for (uint16_t a : {alg::kSha1, alg::kSha256, alg::kSha384, alg::kSha512}) {
    if (AlgName(a) == name) return a;
  }
  return 0;
}

namespace {

// The one-block-at-a-time digests (SHA256_Init/Update/Final and friends) rather than EVP:
// a replay hashes two short inputs per event and bank, thousands of times per log, and
// EVP_DigestInit_ex/Final_ex cost several times the compression itself there (provider
// dispatch, context clean-up; measured with callgrind, see bench/attest_bench.cc). They
// run the same assembly (SHA-NI where the CPU has it). Deprecated in OpenSSL 3.0, not
// removed; the digest is public data, so nothing here needs EVP's context cleansing.
template <typename Ctx, int (*Init)(Ctx*), int (*Update)(Ctx*, const void*, size_t),
          int (*Final)(unsigned char*, Ctx*)>
bool LowLevel(std::initializer_list<ByteSpan> parts, uint8_t* out) {
  Ctx ctx;
  if (Init(&ctx) != 1) return false;
  for (ByteSpan p : parts) {
    if (!p.empty() && Update(&ctx, p.data(), p.size()) != 1) return false;
  }
  return Final(out, &ctx) == 1;
}

// Hashes `parts` into `out`, which has the hash's size.
Status HashInto(uint16_t hash_alg, std::initializer_list<ByteSpan> parts, uint8_t* out) {
  bool ok = false;
  switch (hash_alg) {
    case alg::kSha1:
      ok = LowLevel<SHA_CTX, SHA1_Init, SHA1_Update, SHA1_Final>(parts, out);
      break;
    case alg::kSha256:
      ok = LowLevel<SHA256_CTX, SHA256_Init, SHA256_Update, SHA256_Final>(parts, out);
      break;
    case alg::kSha384:
      ok = LowLevel<SHA512_CTX, SHA384_Init, SHA384_Update, SHA384_Final>(parts, out);
      break;
    case alg::kSha512:
      ok = LowLevel<SHA512_CTX, SHA512_Init, SHA512_Update, SHA512_Final>(parts, out);
      break;
    default:
      return Unsupported("hash " + AlgName(hash_alg) + " is not supported");
  }
  if (!ok) return Internal("OpenSSL " + AlgName(hash_alg) + " digest failed");
  return OkStatus();
}

}  // namespace

Result<std::vector<uint8_t>> Hash(uint16_t hash_alg, std::initializer_list<ByteSpan> parts) {
  std::vector<uint8_t> out(HashSize(hash_alg));
  RETURN_IF_ERROR(HashInto(hash_alg, parts, out.data()));
  return out;
}

Status ExtendInPlace(uint16_t hash_alg, std::vector<uint8_t>& pcr, ByteSpan digest) {
  return ExtendInPlace(hash_alg, std::span<uint8_t>(pcr), digest);
}

Status ExtendInPlace(uint16_t hash_alg, std::span<uint8_t> pcr, ByteSpan digest) {
  if (pcr.size() != HashSize(hash_alg)) return Internal("PCR value has the wrong size for " + AlgName(hash_alg));
  uint8_t next[64];
  RETURN_IF_ERROR(HashInto(hash_alg, {pcr, digest}, next));
  std::copy(next, next + pcr.size(), pcr.begin());
  return OkStatus();
}

}  // namespace enclave::attest
