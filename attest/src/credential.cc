#include "enclave/attest/credential.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <cstring>
#include <memory>
#include <string>

#include "be_reader.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/crypto/openssl_error.h"

namespace enclave::attest {
namespace {

constexpr uint16_t kAlgCfb = 0x0043;  // TPM_ALG_CFB
constexpr char kIdentityLabel[] = "IDENTITY";
constexpr char kStorageLabel[] = "STORAGE";
constexpr char kIntegrityLabel[] = "INTEGRITY";

// One OpenSSL failure -> Status, with the callee's name and OpenSSL's queued reason.
Status OsslError(std::string_view call) { return Internal("MakeCredential: " + crypto::OpenSslError(call)); }

const EVP_MD* Md(uint16_t hash_alg) {
  switch (hash_alg) {
    case alg::kSha1: return EVP_sha1();
    case alg::kSha256: return EVP_sha256();
    case alg::kSha384: return EVP_sha384();
    case alg::kSha512: return EVP_sha512();
    default: return nullptr;
  }
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;
using BnPtr = std::unique_ptr<BIGNUM, decltype(&BN_free)>;

void PutBe32(uint32_t v, uint8_t out[4]) {
  out[0] = static_cast<uint8_t>(v >> 24);
  out[1] = static_cast<uint8_t>(v >> 16);
  out[2] = static_cast<uint8_t>(v >> 8);
  out[3] = static_cast<uint8_t>(v);
}

Status CheckBits(const char* what, uint32_t bits) {
  if (bits == 0 || bits % 8 != 0 || bits > 8 * 1024) {
    return InvalidInput(std::string(what) + ": output size " + std::to_string(bits) +
                        " bits is not a positive multiple of 8 (at most 8192)");
  }
  return OkStatus();
}

// The OpenSSL group name of a TPM curve, and its coordinate size in bytes.
bool CurveInfo(uint16_t tpm_curve, const char** name, size_t* coord) {
  switch (tpm_curve) {
    case curve::kNistP256: *name = "P-256"; *coord = 32; return true;
    case curve::kNistP384: *name = "P-384"; *coord = 48; return true;
    default: return false;
  }
}

// Checks that `pub` is a key a TPM would accept for TPM2_ActivateCredential (restricted
// decryption key with an AES-CFB symmetric definition) and that this code supports it.
Status CheckEk(const TpmtPublic& pub) {
  const std::string where = "EK public (TPMT_PUBLIC)";
  if (pub.type != alg::kRsa && pub.type != alg::kEcc) {
    return InvalidInput(where + ".type is " + AlgName(pub.type) + ", expected rsa or ecc");
  }
  if (Md(pub.name_alg) == nullptr) {
    return InvalidInput(where + ".nameAlg is " + AlgName(pub.name_alg) + ", expected sha1/sha256/sha384/sha512");
  }
  const uint32_t need = attr::kRestricted | attr::kDecrypt;
  if ((pub.object_attributes & need) != need || (pub.object_attributes & attr::kSign) != 0) {
    return InvalidInput(where + ".objectAttributes is " + ObjectAttributesString(pub.object_attributes) +
                        ", expected restricted|decrypt and not sign (an EK-like storage key)");
  }
  if (pub.symmetric.algorithm != alg::kAes || pub.symmetric.mode != kAlgCfb ||
      (pub.symmetric.key_bits != 128 && pub.symmetric.key_bits != 192 && pub.symmetric.key_bits != 256)) {
    return InvalidInput(where + ".parameters.symmetric is " + AlgName(pub.symmetric.algorithm) + "-" +
                        std::to_string(pub.symmetric.key_bits) + " mode " + AlgName(pub.symmetric.mode) +
                        ", expected AES-128/192/256 in CFB mode");
  }
  if (pub.type == alg::kRsa) {
    if (pub.rsa_key_bits != 2048 && pub.rsa_key_bits != 3072 && pub.rsa_key_bits != 4096) {
      return InvalidInput(where + ".parameters.keyBits is " + std::to_string(pub.rsa_key_bits) +
                          ", expected 2048, 3072 or 4096");
    }
    if (pub.rsa_modulus.size() * 8 != pub.rsa_key_bits) {
      return InvalidInput(where + ".unique.rsa is " + std::to_string(pub.rsa_modulus.size()) + " bytes, expected " +
                          std::to_string(pub.rsa_key_bits / 8) + " for keyBits " + std::to_string(pub.rsa_key_bits));
    }
  } else {
    const char* name = nullptr;
    size_t coord = 0;
    if (!CurveInfo(pub.ecc_curve, &name, &coord)) {
      return InvalidInput(where + ".parameters.curveID is 0x" + HexEncode(std::vector<uint8_t>{
                                                                  static_cast<uint8_t>(pub.ecc_curve >> 8),
                                                                  static_cast<uint8_t>(pub.ecc_curve)}) +
                          ", expected NIST P-256 (0x0003) or P-384 (0x0004)");
    }
    if (pub.ecc_x.size() != coord || pub.ecc_y.size() != coord) {
      return InvalidInput(where + ".unique.ecc: x is " + std::to_string(pub.ecc_x.size()) + " bytes and y " +
                          std::to_string(pub.ecc_y.size()) + ", expected " + std::to_string(coord) + " each");
    }
  }
  return OkStatus();
}

Status CheckName(ByteSpan name) {
  if (name.size() < 2) {
    return InvalidInput("AK name is " + std::to_string(name.size()) + " bytes, expected nameAlg (2 bytes) || digest");
  }
  uint16_t name_alg = static_cast<uint16_t>(name[0] << 8 | name[1]);
  size_t digest = HashSize(name_alg);
  if (digest == 0) {
    return InvalidInput("AK name's nameAlg is " + AlgName(name_alg) + ", expected sha1/sha256/sha384/sha512");
  }
  if (name.size() != 2 + digest) {
    return InvalidInput("AK name is " + std::to_string(name.size()) + " bytes, expected " +
                        std::to_string(2 + digest) + " for nameAlg " + AlgName(name_alg));
  }
  return OkStatus();
}

Result<PkeyPtr> RsaKey(const TpmtPublic& pub) {
  BnPtr n(BN_bin2bn(pub.rsa_modulus.data(), static_cast<int>(pub.rsa_modulus.size()), nullptr), BN_free);
  BnPtr e(BN_new(), BN_free);
  if (!n || !e || BN_set_word(e.get(), pub.rsa_exponent == 0 ? 65537 : pub.rsa_exponent) != 1) {
    return OsslError("BN_bin2bn/BN_set_word");
  }
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(), OSSL_PARAM_BLD_free);
  if (!bld || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
    return OsslError("OSSL_PARAM_BLD_push_BN");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()), OSSL_PARAM_free);
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return OsslError("EVP_PKEY_fromdata(RSA EK)");
  }
  return PkeyPtr(key, EVP_PKEY_free);
}

// An EC public key from an uncompressed point; fails when the point is not on the curve.
Result<PkeyPtr> EcKey(const char* group, ByteSpan x, ByteSpan y, const char* what) {
  std::vector<uint8_t> point;
  point.push_back(0x04);
  point.insert(point.end(), x.begin(), x.end());
  point.insert(point.end(), y.begin(), y.end());
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(group), 0),
      OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()),
      OSSL_PARAM_construct_end()};
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) != 1) {
    ERR_clear_error();
    return InvalidInput(std::string(what) + " is not a point on " + group);
  }
  PkeyPtr k(key, EVP_PKEY_free);
  PkeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, k.get(), nullptr), EVP_PKEY_CTX_free);
  if (!check || EVP_PKEY_public_check(check.get()) != 1) {
    ERR_clear_error();
    return InvalidInput(std::string(what) + " is not a valid public point on " + group);
  }
  return k;
}

Result<std::vector<uint8_t>> BnParam(const EVP_PKEY* key, const char* param, size_t size) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, param, &bn) != 1) {
    return OsslError(std::string("EVP_PKEY_get_bn_param(") + param + ")");
  }
  BnPtr owned(bn, BN_free);
  std::vector<uint8_t> out(size);
  if (BN_bn2binpad(bn, out.data(), static_cast<int>(size)) != static_cast<int>(size)) return OsslError("BN_bn2binpad");
  return out;
}

// RSA: seed = random; encrypted secret = RSA-OAEP(EK, seed, label "IDENTITY\0").
Status RsaSeed(const TpmtPublic& ek, crypto::SecretBytes* seed, std::vector<uint8_t>* encrypted) {
  ASSIGN_OR_RETURN(*seed, crypto::SecretBytes::Random(HashSize(ek.name_alg)));
  ASSIGN_OR_RETURN(PkeyPtr key, RsaKey(ek));
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr), EVP_PKEY_CTX_free);
  const EVP_MD* md = Md(ek.name_alg);
  if (!ctx || EVP_PKEY_encrypt_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_OAEP_PADDING) != 1 ||
      EVP_PKEY_CTX_set_rsa_oaep_md(ctx.get(), md) != 1 || EVP_PKEY_CTX_set_rsa_mgf1_md(ctx.get(), md) != 1) {
    return OsslError("EVP_PKEY_encrypt_init(RSA-OAEP)");
  }
  // The label includes its terminating NUL (Part 1, "IDENTITY\0"); OpenSSL takes ownership.
  void* label = OPENSSL_memdup(kIdentityLabel, sizeof kIdentityLabel);
  if (label == nullptr || EVP_PKEY_CTX_set0_rsa_oaep_label(ctx.get(), label, sizeof kIdentityLabel) != 1) {
    OPENSSL_free(label);
    return OsslError("EVP_PKEY_CTX_set0_rsa_oaep_label");
  }
  size_t out_len = 0;
  auto s = seed->ExposeSecret();
  if (EVP_PKEY_encrypt(ctx.get(), nullptr, &out_len, s.data(), s.size()) != 1) return OsslError("EVP_PKEY_encrypt");
  encrypted->resize(out_len);
  if (EVP_PKEY_encrypt(ctx.get(), encrypted->data(), &out_len, s.data(), s.size()) != 1) {
    return OsslError("EVP_PKEY_encrypt");
  }
  encrypted->resize(out_len);
  return OkStatus();
}

// ECC: ephemeral key on the EK's curve; Z = ECDH(ephemeral, EK).x;
// seed = KDFe(nameAlg, Z, "IDENTITY", ephemeral.x, EK.x); encrypted secret = TPMS_ECC_POINT(ephemeral).
Status EccSeed(const TpmtPublic& ek, crypto::SecretBytes* seed, std::vector<uint8_t>* encrypted) {
  const char* group = nullptr;
  size_t coord = 0;
  if (!CurveInfo(ek.ecc_curve, &group, &coord)) return Internal("MakeCredential: curve checked but unknown");
  ASSIGN_OR_RETURN(PkeyPtr ek_key, EcKey(group, ek.ecc_x, ek.ecc_y, "EK public (TPMT_PUBLIC).unique.ecc"));
  PkeyPtr eph(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", group), EVP_PKEY_free);
  if (!eph) return OsslError("EVP_PKEY_Q_keygen(EC)");
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, eph.get(), nullptr), EVP_PKEY_CTX_free);
  size_t z_len = 0;
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer(ctx.get(), ek_key.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), nullptr, &z_len) != 1 || z_len != coord) {
    return OsslError("EVP_PKEY_derive(ECDH)");
  }
  ASSIGN_OR_RETURN(crypto::SecretBytes z, crypto::SecretBytes::Create(z_len));
  if (EVP_PKEY_derive(ctx.get(), z.ExposeSecretMutable().data(), &z_len) != 1 || z_len != coord) {
    return OsslError("EVP_PKEY_derive(ECDH)");
  }
  ASSIGN_OR_RETURN(auto eph_x, BnParam(eph.get(), OSSL_PKEY_PARAM_EC_PUB_X, coord));
  ASSIGN_OR_RETURN(auto eph_y, BnParam(eph.get(), OSSL_PKEY_PARAM_EC_PUB_Y, coord));
  ASSIGN_OR_RETURN(*seed, Kdfe(ek.name_alg, z.ExposeSecret(), kIdentityLabel, eph_x, ek.ecc_x,
                               static_cast<uint32_t>(8 * HashSize(ek.name_alg))));
  BeWriter point;
  point.Sized(eph_x);
  point.Sized(eph_y);
  *encrypted = std::move(point.bytes());
  return OkStatus();
}

struct HmacCtxFree {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

// HMAC_hash(key, parts...) through EVP_MAC.
Result<std::vector<uint8_t>> Hmac(uint16_t hash_alg, ByteSpan key, std::initializer_list<ByteSpan> parts) {
  const EVP_MD* md = Md(hash_alg);
  if (md == nullptr) return InvalidInput("HMAC: unsupported hash " + AlgName(hash_alg));
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr), EVP_MAC_free);
  std::unique_ptr<EVP_MAC_CTX, HmacCtxFree> ctx(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(EVP_MD_get0_name(md)), 0),
      OSSL_PARAM_construct_end()};
  if (!ctx || EVP_MAC_init(ctx.get(), key.data(), key.size(), params) != 1) return OsslError("EVP_MAC_init(HMAC)");
  for (ByteSpan p : parts) {
    if (EVP_MAC_update(ctx.get(), p.data(), p.size()) != 1) return OsslError("EVP_MAC_update");
  }
  std::vector<uint8_t> out(static_cast<size_t>(EVP_MD_get_size(md)));
  size_t len = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &len, out.size()) != 1 || len != out.size()) {
    return OsslError("EVP_MAC_final");
  }
  return out;
}

}  // namespace

Result<crypto::SecretBytes> Kdfa(uint16_t hash_alg, ByteSpan key, std::string_view label, ByteSpan context_u,
                                 ByteSpan context_v, uint32_t bits) {
  RETURN_IF_ERROR(CheckBits("KDFa", bits));
  if (Md(hash_alg) == nullptr) return InvalidInput("KDFa: unsupported hash " + AlgName(hash_alg));
  const size_t out_len = bits / 8, h = HashSize(hash_alg);
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(out_len));
  const std::vector<uint8_t> lbl(label.begin(), label.end());
  const uint8_t zero = 0;
  uint8_t l[4];
  PutBe32(bits, l);
  for (uint32_t i = 1, done = 0; done < out_len; ++i) {
    uint8_t counter[4];
    PutBe32(i, counter);
    ASSIGN_OR_RETURN(auto k, Hmac(hash_alg, key, {ByteSpan(counter, 4), lbl, ByteSpan(&zero, 1), context_u, context_v,
                                                  ByteSpan(l, 4)}));
    size_t n = std::min(h, out_len - done);
    std::memcpy(out.ExposeSecretMutable().data() + done, k.data(), n);
    OPENSSL_cleanse(k.data(), k.size());
    done += static_cast<uint32_t>(n);
  }
  return out;
}

Result<crypto::SecretBytes> Kdfe(uint16_t hash_alg, ByteSpan z, std::string_view label, ByteSpan party_u,
                                 ByteSpan party_v, uint32_t bits) {
  RETURN_IF_ERROR(CheckBits("KDFe", bits));
  const EVP_MD* md = Md(hash_alg);
  if (md == nullptr) return InvalidInput("KDFe: unsupported hash " + AlgName(hash_alg));
  const size_t out_len = bits / 8, h = HashSize(hash_alg);
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(out_len));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx) return OsslError("EVP_MD_CTX_new");
  const uint8_t zero = 0;
  uint8_t digest[EVP_MAX_MD_SIZE];
  for (uint32_t i = 1, done = 0; done < out_len; ++i) {
    uint8_t counter[4];
    PutBe32(i, counter);
    unsigned int len = 0;
    if (EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1 || EVP_DigestUpdate(ctx.get(), counter, 4) != 1 ||
        EVP_DigestUpdate(ctx.get(), z.data(), z.size()) != 1 ||
        EVP_DigestUpdate(ctx.get(), label.data(), label.size()) != 1 ||
        EVP_DigestUpdate(ctx.get(), &zero, 1) != 1 ||
        EVP_DigestUpdate(ctx.get(), party_u.data(), party_u.size()) != 1 ||
        EVP_DigestUpdate(ctx.get(), party_v.data(), party_v.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1 || len != h) {
      return OsslError("EVP_Digest (KDFe)");
    }
    size_t n = std::min(h, out_len - done);
    std::memcpy(out.ExposeSecretMutable().data() + done, digest, n);
    done += static_cast<uint32_t>(n);
  }
  OPENSSL_cleanse(digest, sizeof digest);
  return out;
}

Result<CredentialChallenge> MakeCredential(ByteSpan ek_public, ByteSpan ak_name, const crypto::SecretBytes& secret) {
  auto parsed = ParseTpm2bPublic(ek_public);
  if (!parsed.ok()) return parsed.status().Annotate("MakeCredential: EK public (TPM2B_PUBLIC)");
  const TpmtPublic& ek = *parsed;
  RETURN_IF_ERROR(CheckEk(ek).Annotate("MakeCredential"));
  RETURN_IF_ERROR(CheckName(ak_name).Annotate("MakeCredential"));
  const size_t digest = HashSize(ek.name_alg);
  if (secret.empty() || secret.size() > digest) {
    return InvalidInput("MakeCredential: secret is " + std::to_string(secret.size()) + " bytes, expected 1 to " +
                        std::to_string(digest) + " (a TPM2B_DIGEST no longer than the EK nameAlg " +
                        AlgName(ek.name_alg) + " digest)");
  }

  crypto::SecretBytes seed;
  std::vector<uint8_t> encrypted_seed;
  RETURN_IF_ERROR(ek.type == alg::kRsa ? RsaSeed(ek, &seed, &encrypted_seed) : EccSeed(ek, &seed, &encrypted_seed));

  ASSIGN_OR_RETURN(crypto::SecretBytes sym_key,
                   Kdfa(ek.name_alg, seed.ExposeSecret(), kStorageLabel, ak_name, {}, ek.symmetric.key_bits));
  ASSIGN_OR_RETURN(crypto::SecretBytes hmac_key, Kdfa(ek.name_alg, seed.ExposeSecret(), kIntegrityLabel, {}, {},
                                                      static_cast<uint32_t>(8 * digest)));

  // encIdentity = AES-CFB(symKey, IV = 0, TPM2B_DIGEST(secret)).
  ASSIGN_OR_RETURN(crypto::SecretBytes plain, crypto::SecretBytes::Create(2 + secret.size()));
  {
    auto p = plain.ExposeSecretMutable();
    p[0] = static_cast<uint8_t>(secret.size() >> 8);
    p[1] = static_cast<uint8_t>(secret.size());
    std::memcpy(p.data() + 2, secret.ExposeSecret().data(), secret.size());
  }
  const EVP_CIPHER* cipher = ek.symmetric.key_bits == 128   ? EVP_aes_128_cfb128()
                             : ek.symmetric.key_bits == 192 ? EVP_aes_192_cfb128()
                                                            : EVP_aes_256_cfb128();
  std::vector<uint8_t> enc_identity(plain.size());
  {
    std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> c(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
    const uint8_t iv[16] = {0};
    int len = 0, fin = 0;
    if (!c || EVP_EncryptInit_ex(c.get(), cipher, nullptr, sym_key.ExposeSecret().data(), iv) != 1 ||
        EVP_EncryptUpdate(c.get(), enc_identity.data(), &len, plain.ExposeSecret().data(),
                          static_cast<int>(plain.size())) != 1 ||
        EVP_EncryptFinal_ex(c.get(), enc_identity.data() + len, &fin) != 1 ||
        static_cast<size_t>(len + fin) != plain.size()) {
      return OsslError("EVP_Encrypt (AES-CFB encIdentity)");
    }
  }
  ASSIGN_OR_RETURN(auto outer_hmac, Hmac(ek.name_alg, hmac_key.ExposeSecret(), {enc_identity, ak_name}));

  BeWriter id_object;  // TPM2B_ID_OBJECT contents: TPM2B_DIGEST integrityHMAC || encIdentity
  id_object.Sized(outer_hmac);
  id_object.Bytes(enc_identity);
  CredentialChallenge out;
  BeWriter blob, enc_secret;
  blob.Sized(id_object.bytes());
  enc_secret.Sized(encrypted_seed);
  out.credential_blob = std::move(blob.bytes());
  out.encrypted_secret = std::move(enc_secret.bytes());
  return out;
}

std::vector<uint8_t> EncodeTpm2ToolsCredential(const CredentialChallenge& challenge) {
  BeWriter w;
  w.U32(kTpm2ToolsCredentialMagic);
  w.U32(kTpm2ToolsCredentialVersion);
  w.Bytes(challenge.credential_blob);
  w.Bytes(challenge.encrypted_secret);
  return std::move(w.bytes());
}

Result<CredentialChallenge> ParseTpm2ToolsCredential(ByteSpan file) {
  internal::BeReader r(file);
  uint32_t magic = 0, version = 0;
  RETURN_IF_ERROR(r.U32("credential file magic", &magic));
  if (magic != kTpm2ToolsCredentialMagic) {
    return InvalidInput("credential file: magic at offset 0 is 0x" + HexEncode(ByteSpan(file.data(), 4)) +
                        ", expected 0xbadcc0de (tpm2-tools credential)");
  }
  RETURN_IF_ERROR(r.U32("credential file version", &version));
  if (version != kTpm2ToolsCredentialVersion) {
    return InvalidInput("credential file: version at offset 4 is " + std::to_string(version) + ", expected 1");
  }
  std::vector<uint8_t> blob, secret;
  // Maxima from TPM 2.0 Part 2: TPMU_ENCRYPTED_SECRET and TPM2B_ID_OBJECT (sizes of the
  // largest supported structures, generously bounded by a 4096-bit RSA ciphertext).
  RETURN_IF_ERROR(r.Sized("TPM2B_ID_OBJECT", 2 + 64 + 2 + 64, &blob));
  RETURN_IF_ERROR(r.Sized("TPM2B_ENCRYPTED_SECRET", 512, &secret));
  RETURN_IF_ERROR(r.End("credential file"));
  CredentialChallenge c;
  BeWriter b, s;
  b.Sized(blob);
  s.Sized(secret);
  c.credential_blob = std::move(b.bytes());
  c.encrypted_secret = std::move(s.bytes());
  return c;
}

}  // namespace enclave::attest
