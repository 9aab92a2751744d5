#include "enclave/attest/ak_key.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include "cert_chain.h"

namespace enclave::attest {
namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

std::string OsslMessage() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "unknown OpenSSL error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::vector<uint8_t> BnParam(const EVP_PKEY* key, const char* name, size_t pad) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &bn) != 1) {
    ERR_clear_error();
    return {};
  }
  std::vector<uint8_t> out(pad == 0 ? static_cast<size_t>(BN_num_bytes(bn)) : pad);
  if (BN_bn2binpad(bn, out.data(), static_cast<int>(out.size())) < 0) out.clear();
  BN_free(bn);
  return out;
}

// The key of an EVP_PKEY in TpmtPublic's key fields.
Result<TpmtPublic> KeyOnly(const EVP_PKEY* key) {
  TpmtPublic t;
  t.name_alg = alg::kNull;
  t.symmetric.algorithm = alg::kNull;
  t.scheme.scheme = alg::kNull;
  if (EVP_PKEY_is_a(key, "RSA")) {
    t.type = alg::kRsa;
    t.rsa_modulus = BnParam(key, OSSL_PKEY_PARAM_RSA_N, 0);
    std::vector<uint8_t> e = BnParam(key, OSSL_PKEY_PARAM_RSA_E, 0);
    if (t.rsa_modulus.empty() || e.empty() || e.size() > 4) return InvalidInput("RSA public key: unusable modulus or exponent");
    uint32_t exponent = 0;
    for (uint8_t b : e) exponent = exponent << 8 | b;
    t.rsa_exponent = exponent == 65537 ? 0 : exponent;  // the TPM's encoding of the default
    const int bits = EVP_PKEY_get_bits(key);
    if (bits <= 0 || bits > 16384) return InvalidInput("RSA public key of " + std::to_string(bits) + " bits");
    t.rsa_key_bits = static_cast<uint16_t>(bits);
    return t;
  }
  if (EVP_PKEY_is_a(key, "EC")) {
    char group[64] = "";
    size_t len = 0;
    if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) != 1) {
      ERR_clear_error();
      return InvalidInput("EC public key without a named curve");
    }
    const std::string g = group;
    size_t size = 0;
    if (g == "prime256v1" || g == "P-256") {
      t.ecc_curve = curve::kNistP256;
      size = 32;
    } else if (g == "secp384r1" || g == "P-384") {
      t.ecc_curve = curve::kNistP384;
      size = 48;
    } else if (g == "secp521r1" || g == "P-521") {
      t.ecc_curve = curve::kNistP521;
      size = 66;
    } else {
      return Unsupported("EC public key on curve " + g + " (NIST P-256, P-384 and P-521 only)");
    }
    t.type = alg::kEcc;
    t.ecc_kdf.scheme = alg::kNull;
    t.ecc_x = BnParam(key, OSSL_PKEY_PARAM_EC_PUB_X, size);
    t.ecc_y = BnParam(key, OSSL_PKEY_PARAM_EC_PUB_Y, size);
    if (t.ecc_x.empty() || t.ecc_y.empty()) return InvalidInput("EC public key: unusable point");
    return t;
  }
  return Unsupported("public key type " + std::string(EVP_PKEY_get0_type_name(key)) + " (RSA and EC only)");
}

bool OnlySpace(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

const char* AkFormName(AkForm form) {
  switch (form) {
    case AkForm::kEnrolment:
      return "enrolment";
    case AkForm::kTpmPublic:
      return "tpm2b_public";
    case AkForm::kPublicKey:
      return "public_key";
    case AkForm::kCertificate:
      return "certificate";
  }
  return "?";
}

std::optional<AkForm> AkFormFromName(std::string_view name) {
  for (AkForm f : {AkForm::kEnrolment, AkForm::kTpmPublic, AkForm::kPublicKey, AkForm::kCertificate}) {
    if (name == AkFormName(f)) return f;
  }
  return std::nullopt;
}

Result<TpmtPublic> AkKeyFromSpki(ByteSpan spki_der) {
  const uint8_t* p = spki_der.data();
  PkeyPtr key(d2i_PUBKEY(nullptr, &p, static_cast<long>(spki_der.size())), EVP_PKEY_free);
  if (!key) return InvalidInput("not a DER SubjectPublicKeyInfo: " + OsslMessage());
  if (p != spki_der.data() + spki_der.size()) {
    return InvalidInput("SubjectPublicKeyInfo: " + std::to_string(spki_der.data() + spki_der.size() - p) +
                        " bytes after its " + std::to_string(p - spki_der.data()) + "-byte DER");
  }
  return KeyOnly(key.get());
}

Result<std::vector<uint8_t>> PemBlock(std::string_view text, std::string_view label) {
  const std::string begin = "-----BEGIN " + std::string(label) + "-----";
  const std::string end = "-----END " + std::string(label) + "-----";
  const size_t b = text.find(begin);
  if (b == std::string_view::npos) return InvalidInput("no PEM block '" + begin + "'");
  if (!OnlySpace(text.substr(0, b))) return InvalidInput("text before '" + begin + "'");
  const size_t e = text.find(end, b);
  if (e == std::string_view::npos) return InvalidInput("PEM block without '" + end + "'");
  if (!OnlySpace(text.substr(e + end.size()))) return InvalidInput("text after '" + end + "' (one block only)");
  const std::string_view block = text.substr(b, e + end.size() - b);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(block.data(), static_cast<int>(block.size())),
                                                BIO_free);
  if (!bio) return Internal("BIO_new_mem_buf failed");
  char* name = nullptr;
  char* header = nullptr;
  unsigned char* data = nullptr;
  long len = 0;
  if (PEM_read_bio(bio.get(), &name, &header, &data, &len) != 1) {
    return InvalidInput("PEM block '" + std::string(label) + "' does not decode: " + OsslMessage());
  }
  const bool named = name != nullptr && label == name;
  const bool no_headers = header != nullptr && header[0] == '\0';
  std::vector<uint8_t> der(data, data + len);
  OPENSSL_free(name);
  OPENSSL_free(header);
  OPENSSL_free(data);
  if (!named) return InvalidInput("PEM block is not labelled '" + std::string(label) + "'");
  if (!no_headers) return InvalidInput("PEM block '" + std::string(label) + "' has headers (encrypted or legacy PEM)");
  return der;
}

Result<AkCertificate> AppraiseAkCertificate(ByteSpan cert_der, const EkTrustStore& trust, int64_t now) {
  if (trust.roots.empty()) return FailedPrecondition("AK certificate appraisal: no trusted AK root (ak_roots)");
  AkCertificate out;
  Appraisal& a = out.appraisal;
  const uint8_t* p = cert_der.data();
  X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(cert_der.size())), X509_free);
  if (!cert) {
    a.Fail("ak.cert.parse.invalid", "AK certificate (" + std::to_string(cert_der.size()) + " bytes)",
           "a DER X.509 certificate", OsslMessage());
    return out;
  }
  const size_t used = static_cast<size_t>(p - cert_der.data());
  size_t consumed = 0;
  const std::string der_error = CheckStrictDer(cert_der.first(used), &consumed);
  bool der_ok = true;
  if (!der_error.empty()) {
    a.Fail("ak.cert.der.not_strict", "AK certificate", "strict DER", der_error);
    der_ok = false;
  }
  if (used != cert_der.size()) {
    a.Fail("ak.cert.der.trailing_bytes", "AK certificate", "nothing after the certificate",
           std::to_string(cert_der.size() - used) + " bytes after the " + std::to_string(used) + "-byte certificate");
    der_ok = false;
  }
  if (der_ok) a.Pass("ak.cert.der");
  RETURN_IF_ERROR(CheckCertificateChain(cert.get(), trust, now, "ak.cert", "AK certificate", &a));
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  if (key == nullptr) {
    a.Fail("ak.cert.key.unusable", "AK certificate subjectPublicKeyInfo", "an RSA or EC public key", OsslMessage());
    return out;
  }
  auto k = KeyOnly(key);
  if (!k.ok()) {
    a.Fail("ak.cert.key.unusable", "AK certificate subjectPublicKeyInfo", "an RSA or NIST-curve EC public key",
           k.status().message());
    return out;
  }
  out.key = std::move(*k);
  return out;
}

}  // namespace enclave::attest
