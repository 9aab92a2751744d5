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

Result<std::vector<uint8_t>> Hash(uint16_t hash_alg, std::initializer_list<ByteSpan> parts) {
  const EVP_MD* md = nullptr;
  switch (hash_alg) {
    case alg::kSha1:
      md = EVP_sha1();
      break;
    case alg::kSha256:
      md = EVP_sha256();
      break;
    case alg::kSha384:
      md = EVP_sha384();
      break;
    case alg::kSha512:
      md = EVP_sha512();
      break;
    default:
      return Unsupported("hash " + AlgName(hash_alg) + " is not supported");
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) return Internal("EVP_DigestInit_ex failed");
  for (ByteSpan p : parts) {
    if (!p.empty() && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) != 1) {
      return Internal("EVP_DigestUpdate failed");
    }
  }
  std::vector<uint8_t> out(HashSize(hash_alg));
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out.data(), &n) != 1 || n != out.size()) {
    return Internal("EVP_DigestFinal_ex failed");
  }
  return out;
}

}  // namespace enclave::attest
