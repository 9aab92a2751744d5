#include "enclave/attest/tpm_alg.h"

#include <openssl/evp.h>

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

// Explicitly fetched digests, once per process: EVP_sha256() and friends make every
// EVP_DigestInit_ex look the algorithm up again under a lock (a replay hashes thousands
// of times per log).
const EVP_MD* FetchedDigest(uint16_t hash_alg) {
  static const EVP_MD* const kSha1 = EVP_MD_fetch(nullptr, "SHA1", nullptr);
  static const EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  static const EVP_MD* const kSha384 = EVP_MD_fetch(nullptr, "SHA384", nullptr);
  static const EVP_MD* const kSha512 = EVP_MD_fetch(nullptr, "SHA512", nullptr);
  switch (hash_alg) {
    case alg::kSha1: return kSha1;
    case alg::kSha256: return kSha256;
    case alg::kSha384: return kSha384;
    case alg::kSha512: return kSha512;
    default: return nullptr;
  }
}

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};



// Hashes `parts` into `out`, which has the hash's size.
Status HashInto(uint16_t hash_alg, std::initializer_list<ByteSpan> parts, uint8_t* out) {
  if (!IsSupportedHash(hash_alg)) return Unsupported("hash " + AlgName(hash_alg) + " is not supported");
  const EVP_MD* md = FetchedDigest(hash_alg);
  if (md == nullptr) return Internal("EVP_MD_fetch(" + AlgName(hash_alg) + ") failed");
  thread_local std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());  // reused by this thread
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) return Internal("EVP_DigestInit_ex failed");
  for (ByteSpan p : parts) {
    if (!p.empty() && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) != 1) {
      return Internal("EVP_DigestUpdate failed");
    }
  }
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &n) != 1 || n != HashSize(hash_alg)) {
    return Internal("EVP_DigestFinal_ex failed");
  }
  return OkStatus();
}

}  // namespace

Result<std::vector<uint8_t>> Hash(uint16_t hash_alg, std::initializer_list<ByteSpan> parts) {
  std::vector<uint8_t> out(HashSize(hash_alg));
  RETURN_IF_ERROR(HashInto(hash_alg, parts, out.data()));
  return out;
}

Status ExtendInPlace(uint16_t hash_alg, std::vector<uint8_t>& pcr, ByteSpan digest) {
  if (pcr.size() != HashSize(hash_alg)) return Internal("PCR value has the wrong size for " + AlgName(hash_alg));
  uint8_t next[64];
  RETURN_IF_ERROR(HashInto(hash_alg, {pcr, digest}, next));
  std::copy(next, next + pcr.size(), pcr.begin());
  return OkStatus();
}

}  // namespace enclave::attest
