#include "enclave/crypto/aead.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <climits>

#include "enclave/crypto/openssl_error.h"

namespace enclave::crypto {
namespace {

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

// The key schedule is set once per direction; each message sets only the nonce.
// OpenSSL keeps its own copy of the expanded key and cleanses it in EVP_CIPHER_CTX_free.
class EvpAead final : public Aead {
 public:
  EvpAead(Suite suite, CtxPtr enc, CtxPtr dec) : suite_(suite), enc_(std::move(enc)), dec_(std::move(dec)) {}

  Status Seal(std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
              std::span<const uint8_t> plaintext, std::span<uint8_t> out) override {
    if (nonce.size() != kAeadNonceBytes) return InvalidInput("AEAD nonce must be 12 bytes");
    if (out.size() != plaintext.size() + kAeadTagBytes) return Internal("AEAD seal: output size mismatch");
    if (plaintext.size() > INT_MAX || aad.size() > INT_MAX) return InvalidInput("AEAD message too large");
    int len = 0;
    if (EVP_EncryptInit_ex(enc_.get(), nullptr, nullptr, nullptr, nonce.data()) != 1)
      return Internal(OpenSslError("EVP_EncryptInit_ex"));
    if (!aad.empty() && EVP_EncryptUpdate(enc_.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1)
      return Internal(OpenSslError("EVP_EncryptUpdate(aad)"));
    if (EVP_EncryptUpdate(enc_.get(), out.data(), &len, plaintext.data(), static_cast<int>(plaintext.size())) != 1)
      return Internal(OpenSslError("EVP_EncryptUpdate"));
    int final_len = 0;
    if (EVP_EncryptFinal_ex(enc_.get(), out.data() + len, &final_len) != 1)
      return Internal(OpenSslError("EVP_EncryptFinal_ex"));
    if (EVP_CIPHER_CTX_ctrl(enc_.get(), EVP_CTRL_AEAD_GET_TAG, kAeadTagBytes,
                            out.data() + plaintext.size()) != 1)
      return Internal(OpenSslError("EVP_CTRL_AEAD_GET_TAG"));
    return OkStatus();
  }

  Status Open(std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
              std::span<const uint8_t> in, std::span<uint8_t> out) override {
    if (nonce.size() != kAeadNonceBytes) return InvalidInput("AEAD nonce must be 12 bytes");
    if (in.size() < kAeadTagBytes) return AuthFailed("ciphertext shorter than the tag");
    const size_t ct_len = in.size() - kAeadTagBytes;
    if (out.size() != ct_len) return Internal("AEAD open: output size mismatch");
    if (ct_len > INT_MAX || aad.size() > INT_MAX) return InvalidInput("AEAD message too large");
    int len = 0;
    bool ok = EVP_DecryptInit_ex(dec_.get(), nullptr, nullptr, nullptr, nonce.data()) == 1 &&
              (aad.empty() || EVP_DecryptUpdate(dec_.get(), nullptr, &len, aad.data(),
                                                static_cast<int>(aad.size())) == 1) &&
              EVP_DecryptUpdate(dec_.get(), out.data(), &len, in.data(), static_cast<int>(ct_len)) == 1 &&
              EVP_CIPHER_CTX_ctrl(dec_.get(), EVP_CTRL_AEAD_SET_TAG, kAeadTagBytes,
                                  const_cast<uint8_t*>(in.data() + ct_len)) == 1;
    int final_len = 0;
    ok = ok && EVP_DecryptFinal_ex(dec_.get(), out.data() + len, &final_len) == 1;
    if (!ok) {
      ERR_clear_error();
      if (!out.empty()) OPENSSL_cleanse(out.data(), out.size());
      return AuthFailed("AEAD tag mismatch");
    }
    return OkStatus();
  }

  Suite suite() const override { return suite_; }

 private:
  Suite suite_;
  CtxPtr enc_, dec_;
};

const EVP_CIPHER* CipherFor(Suite suite) {
  return suite == Suite::kAes256Gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
}

}  // namespace

std::string_view SuiteName(Suite suite) {
  switch (suite) {
    case Suite::kAes256Gcm: return "aes-256-gcm";
    case Suite::kChaCha20Poly1305: return "chacha20-poly1305";
  }
  return "unknown";
}

Result<Suite> ParseSuite(std::string_view name) {
  if (name == "aes-256-gcm") return Suite::kAes256Gcm;
  if (name == "chacha20-poly1305") return Suite::kChaCha20Poly1305;
  return InvalidInput("unknown cipher suite '" + std::string(name) +
                      "' (expected aes-256-gcm or chacha20-poly1305)");
}

Result<Suite> SuiteFromWire(uint16_t value) {
  if (value == 1) return Suite::kAes256Gcm;
  if (value == 2) return Suite::kChaCha20Poly1305;
  return Unsupported("unknown cipher suite id " + std::to_string(value));
}

Result<std::unique_ptr<Aead>> Aead::Create(Suite suite, const SecretBytes& key) {
  if (key.size() != kAeadKeyBytes) {
    return InvalidInput("AEAD key must be 32 bytes, got " + std::to_string(key.size()));
  }
  const EVP_CIPHER* cipher = CipherFor(suite);
  CtxPtr enc(EVP_CIPHER_CTX_new()), dec(EVP_CIPHER_CTX_new());
  if (!enc || !dec) return Internal("EVP_CIPHER_CTX_new failed");
  const uint8_t* k = key.ExposeSecret().data();
  if (EVP_EncryptInit_ex(enc.get(), cipher, nullptr, k, nullptr) != 1)
    return Internal(OpenSslError("EVP_EncryptInit_ex(key)"));
  if (EVP_DecryptInit_ex(dec.get(), cipher, nullptr, k, nullptr) != 1)
    return Internal(OpenSslError("EVP_DecryptInit_ex(key)"));
  return std::unique_ptr<Aead>(new EvpAead(suite, std::move(enc), std::move(dec)));
}

}  // namespace enclave::crypto
