#include "enclave/crypto/hash.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include <cstdlib>

namespace enclave::crypto {

Digest256 Sha256(std::span<const uint8_t> data) {
  Sha256Hasher h;
  h.Update(data);
  return h.Final();
}

struct Sha256Hasher::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256Hasher::Sha256Hasher() : state_(new State) {
  state_->ctx = EVP_MD_CTX_new();
  // Allocation or init failure of a built-in digest means the process is broken.
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256Hasher::~Sha256Hasher() { EVP_MD_CTX_free(state_->ctx); }

void Sha256Hasher::Update(std::span<const uint8_t> data) {
  if (EVP_DigestUpdate(state_->ctx, data.data(), data.size()) != 1) std::abort();
}

Digest256 Sha256Hasher::Final() {
  Digest256 out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(state_->ctx, out.data(), &len) != 1 || len != out.size()) std::abort();
  return out;
}

Digest256 HmacSha256(const SecretBytes& key, std::span<const uint8_t> data) {
  Digest256 out{};
  unsigned int len = 0;
  auto k = key.ExposeSecret();
  if (HMAC(EVP_sha256(), k.data(), static_cast<int>(k.size()), data.data(), data.size(), out.data(),
           &len) == nullptr ||
      len != out.size()) {
    std::abort();
  }
  return out;
}

Result<SecretBytes> HkdfSha256(const SecretBytes& ikm, std::span<const uint8_t> salt,
                               std::string_view info, size_t length) {
  ASSIGN_OR_RETURN(SecretBytes out, SecretBytes::Create(length));
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  if (ctx == nullptr) return Internal("EVP_PKEY_CTX_new_id(HKDF) failed");
  auto k = ikm.ExposeSecret();
  size_t out_len = length;
  bool ok = EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 &&
            EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt.data(), static_cast<int>(salt.size())) == 1 &&
            EVP_PKEY_CTX_set1_hkdf_key(ctx, k.data(), static_cast<int>(k.size())) == 1 &&
            EVP_PKEY_CTX_add1_hkdf_info(ctx, reinterpret_cast<const unsigned char*>(info.data()),
                                        static_cast<int>(info.size())) == 1 &&
            EVP_PKEY_derive(ctx, out.ExposeSecretMutable().data(), &out_len) == 1 && out_len == length;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) return Internal("HKDF-SHA256 derivation failed (EVP_PKEY_derive)");
  return out;
}

}  // namespace enclave::crypto
