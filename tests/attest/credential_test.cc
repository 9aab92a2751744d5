// Software MakeCredential (attest/credential.h), without a TPM: the test makes EK-shaped
// keys with OpenSSL, seals a secret to them, and opens the challenge with a test-side
// ActivateCredential built from OpenSSL's own KBKDF (SP 800-108, = KDFa) and SSKDF
// (SP 800-56A concatenation KDF, = KDFe), not from the library's KDF code. The proof against
// a real TPM is tests/attest_host/credential_swtpm_test.cc (swtpm, and tpm2-tools).
#include "enclave/attest/credential.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rsa.h>

#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "attest_test_util.h"
#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

using attest_test::Bytes;
using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// fixedTPM|fixedParent|sensitiveDataOrigin|adminWithPolicy|restricted|decrypt
constexpr uint32_t kEkAttrs = 0x000300B2;
constexpr uint32_t kAkAttrs = 0x00050072;  // ...|restricted|sign

Bytes BnBytes(EVP_PKEY* k, const char* name, size_t size) {
  BIGNUM* bn = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(k, name, &bn), 1) << name;
  Bytes out(size);
  BN_bn2binpad(bn, out.data(), static_cast<int>(size));
  BN_free(bn);
  return out;
}

struct SoftEk {
  PkeyPtr key{nullptr, EVP_PKEY_free};
  Bytes x;            // ECC: EK x coordinate
  Bytes tpm2b_public;  // TPM2B_PUBLIC, encoded here from Part 2 (not by the library)
};

// An EK-like TPMT_PUBLIC (TCG template L-1/L-2 shape) around a software key.
SoftEk MakeSoftEk(uint16_t type, int size_or_curve, uint32_t attrs = kEkAttrs, uint16_t sym_mode = 0x0043,
                  uint16_t sym_bits = 128) {
  SoftEk ek;
  attest_test::Be t;
  t.u16(type).u16(alg::kSha256).u32(attrs).u16(32);
  for (int i = 0; i < 32; ++i) t.u8(static_cast<uint8_t>(0xA0 + i));  // authPolicy: any 32 bytes
  t.u16(alg::kAes).u16(sym_bits).u16(sym_mode);
  if (type == alg::kRsa) {
    ek.key.reset(EVP_RSA_gen(static_cast<unsigned>(size_or_curve)));
    Bytes n = BnBytes(ek.key.get(), OSSL_PKEY_PARAM_RSA_N, static_cast<size_t>(size_or_curve / 8));
    t.u16(alg::kNull).u16(static_cast<uint16_t>(size_or_curve)).u32(0).u16(static_cast<uint16_t>(n.size()));
    t.b.insert(t.b.end(), n.begin(), n.end());
  } else {
    const bool p256 = size_or_curve == 256;
    ek.key.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", p256 ? "P-256" : "P-384"));
    size_t coord = p256 ? 32 : 48;
    ek.x = BnBytes(ek.key.get(), OSSL_PKEY_PARAM_EC_PUB_X, coord);
    Bytes y = BnBytes(ek.key.get(), OSSL_PKEY_PARAM_EC_PUB_Y, coord);
    t.u16(alg::kNull).u16(p256 ? 0x0003 : 0x0004).u16(alg::kNull);
    t.u16(static_cast<uint16_t>(coord));
    t.b.insert(t.b.end(), ek.x.begin(), ek.x.end());
    t.u16(static_cast<uint16_t>(coord));
    t.b.insert(t.b.end(), y.begin(), y.end());
  }
  attest_test::Be sized;
  sized.u16(static_cast<uint16_t>(t.b.size()));
  sized.b.insert(sized.b.end(), t.b.begin(), t.b.end());
  ek.tpm2b_public = sized.b;
  return ek;
}

Bytes Kbkdf(const Bytes& key, const std::string& label, const Bytes& context, size_t bytes) {
  std::unique_ptr<EVP_KDF, decltype(&EVP_KDF_free)> kdf(EVP_KDF_fetch(nullptr, "KBKDF", nullptr), EVP_KDF_free);
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(EVP_KDF_CTX_new(kdf.get()), EVP_KDF_CTX_free);
  Bytes ctx_copy = context;
  std::string lbl = label;
  OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_MAC, const_cast<char*>("HMAC"), 0),
                    OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
                    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key.data()), key.size()),
                    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, lbl.data(), lbl.size()),
                    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, ctx_copy.data(), ctx_copy.size()),
                    OSSL_PARAM_construct_end()};
  Bytes out(bytes);
  EXPECT_EQ(EVP_KDF_derive(ctx.get(), out.data(), out.size(), p), 1) << "OpenSSL KBKDF";
  return out;
}

Bytes Sskdf(const Bytes& z, const Bytes& info, size_t bytes, const char* digest = "SHA256") {
  std::unique_ptr<EVP_KDF, decltype(&EVP_KDF_free)> kdf(EVP_KDF_fetch(nullptr, "SSKDF", nullptr), EVP_KDF_free);
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(EVP_KDF_CTX_new(kdf.get()), EVP_KDF_CTX_free);
  Bytes zc = z, ic = info;
  OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(digest), 0),
                    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, zc.data(), zc.size()),
                    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, ic.data(), ic.size()),
                    OSSL_PARAM_construct_end()};
  Bytes out(bytes);
  EXPECT_EQ(EVP_KDF_derive(ctx.get(), out.data(), out.size(), p), 1) << "OpenSSL SSKDF";
  return out;
}

Bytes Sized(const Bytes& b, size_t* pos) {
  if (*pos + 2 > b.size()) return {};
  size_t n = static_cast<size_t>(b[*pos] << 8 | b[*pos + 1]);
  *pos += 2;
  if (*pos + n > b.size()) return {};
  Bytes out(b.begin() + static_cast<long>(*pos), b.begin() + static_cast<long>(*pos + n));
  *pos += n;
  return out;
}

// The TPM's side, in software (Part 1, "Credential Protection"), for a SHA-256 EK with
// AES-128-CFB. Returns the secret, or an explanation starting with "FAIL".
std::string SoftActivate(const SoftEk& ek, const Bytes& name, const CredentialChallenge& c, Bytes* secret) {
  size_t pos = 0;
  Bytes enc_secret = Sized(c.encrypted_secret, &pos);
  if (pos != c.encrypted_secret.size()) return "FAIL: TPM2B_ENCRYPTED_SECRET size";
  Bytes seed;
  if (EVP_PKEY_get_base_id(ek.key.get()) == EVP_PKEY_RSA) {
    std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new(ek.key.get(), nullptr),
                                                                    EVP_PKEY_CTX_free);
    EVP_PKEY_decrypt_init(ctx.get());
    EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_OAEP_PADDING);
    EVP_PKEY_CTX_set_rsa_oaep_md(ctx.get(), EVP_sha256());
    EVP_PKEY_CTX_set_rsa_mgf1_md(ctx.get(), EVP_sha256());
    void* label = OPENSSL_memdup("IDENTITY", 9);
    EVP_PKEY_CTX_set0_rsa_oaep_label(ctx.get(), label, 9);
    size_t len = 512;
    seed.resize(len);
    if (EVP_PKEY_decrypt(ctx.get(), seed.data(), &len, enc_secret.data(), enc_secret.size()) != 1) {
      return "FAIL: RSA-OAEP decryption of the seed";
    }
    seed.resize(len);
  } else {
    size_t p = 0;
    Bytes x = Sized(enc_secret, &p), y = Sized(enc_secret, &p);
    if (p != enc_secret.size()) return "FAIL: TPMS_ECC_POINT";
    Bytes point = {0x04};
    point.insert(point.end(), x.begin(), x.end());
    point.insert(point.end(), y.begin(), y.end());
    const char* group = x.size() == 32 ? "prime256v1" : "secp384r1";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(group), 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()),
        OSSL_PARAM_construct_end()};
    std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> fctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr),
                                                                     EVP_PKEY_CTX_free);
    EVP_PKEY* peer = nullptr;
    EVP_PKEY_fromdata_init(fctx.get());
    if (EVP_PKEY_fromdata(fctx.get(), &peer, EVP_PKEY_PUBLIC_KEY, params) != 1) return "FAIL: ephemeral point";
    PkeyPtr peer_key(peer, EVP_PKEY_free);
    std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> dctx(EVP_PKEY_CTX_new(ek.key.get(), nullptr),
                                                                     EVP_PKEY_CTX_free);
    size_t zlen = 0;
    EVP_PKEY_derive_init(dctx.get());
    EVP_PKEY_derive_set_peer(dctx.get(), peer_key.get());
    EVP_PKEY_derive(dctx.get(), nullptr, &zlen);
    Bytes z(zlen);
    if (EVP_PKEY_derive(dctx.get(), z.data(), &zlen) != 1) return "FAIL: ECDH";
    Bytes info = {'I', 'D', 'E', 'N', 'T', 'I', 'T', 'Y', 0};
    info.insert(info.end(), x.begin(), x.end());
    info.insert(info.end(), ek.x.begin(), ek.x.end());
    seed = Sskdf(z, info, 32);
  }
  Bytes sym_key = Kbkdf(seed, "STORAGE", name, 16);
  Bytes hmac_key = Kbkdf(seed, "INTEGRITY", {}, 32);

  pos = 0;
  Bytes id_object = Sized(c.credential_blob, &pos);
  if (pos != c.credential_blob.size()) return "FAIL: TPM2B_ID_OBJECT size";
  size_t q = 0;
  Bytes integrity = Sized(id_object, &q);
  Bytes enc_identity(id_object.begin() + static_cast<long>(q), id_object.end());
  Bytes mac_input = enc_identity;
  mac_input.insert(mac_input.end(), name.begin(), name.end());
  Bytes mac(32);
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), hmac_key.data(), static_cast<int>(hmac_key.size()), mac_input.data(), mac_input.size(),
       mac.data(), &mac_len);
  if (integrity != mac) return "FAIL: outer HMAC does not verify";
  Bytes plain(enc_identity.size());
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> cc(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  uint8_t iv[16] = {0};
  int len = 0;
  EVP_DecryptInit_ex(cc.get(), EVP_aes_128_cfb128(), nullptr, sym_key.data(), iv);
  EVP_DecryptUpdate(cc.get(), plain.data(), &len, enc_identity.data(), static_cast<int>(enc_identity.size()));
  size_t p = 0;
  *secret = Sized(plain, &p);
  if (p != plain.size()) return "FAIL: decrypted TPM2B_DIGEST does not parse";
  return "ok";
}

Bytes SoftAkName(uint8_t fill = 0x42) {
  Bytes name = {0x00, 0x0B};
  name.resize(34, fill);
  return name;
}

crypto::SecretBytes Secret(const Bytes& b) {
  auto s = crypto::SecretBytes::CopyFrom(b);
  EXPECT_TRUE(s.ok());
  return std::move(s).value();
}

struct KeyCase {
  const char* what;
  uint16_t type;
  int size;
};

class MakeCredentialRoundTrip : public ::testing::TestWithParam<KeyCase> {};

TEST_P(MakeCredentialRoundTrip, SoftwareActivationRecoversTheSecretAndChecksTheName) {
  const KeyCase& kc = GetParam();
  SoftEk ek = MakeSoftEk(kc.type, kc.size);
  ASSERT_TRUE(ek.key);
  Bytes name = SoftAkName();
  for (size_t len : {1u, 16u, 32u}) {
    SCOPED_TRACE("secret of " + std::to_string(len) + " bytes");
    Bytes secret(len);
    for (size_t i = 0; i < len; ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);
    auto c = MakeCredential(ek.tpm2b_public, name, Secret(secret));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // TPM2B_ID_OBJECT = size || TPM2B_DIGEST(HMAC-SHA256) || AES-CFB(TPM2B_DIGEST(secret)).
    EXPECT_EQ(c->credential_blob.size(), 2 + 2 + 32 + 2 + len);
    if (kc.type == alg::kRsa) {
      EXPECT_EQ(c->encrypted_secret.size(), 2 + static_cast<size_t>(kc.size / 8));
    } else {
      size_t coord = kc.size == 256 ? 32 : 48;
      EXPECT_EQ(c->encrypted_secret.size(), 2 + 2 + coord + 2 + coord);
    }
    Bytes got;
    EXPECT_EQ(SoftActivate(ek, name, *c, &got), "ok");
    EXPECT_EQ(got, secret);
    // The same challenge does not open for another AK name: the outer HMAC covers the name.
    Bytes other;
    EXPECT_EQ(SoftActivate(ek, SoftAkName(0x43), *c, &other), "FAIL: outer HMAC does not verify");
  }
}

INSTANTIATE_TEST_SUITE_P(Keys, MakeCredentialRoundTrip,
                         ::testing::Values(KeyCase{"rsa2048", alg::kRsa, 2048}, KeyCase{"rsa3072", alg::kRsa, 3072},
                                           KeyCase{"p256", alg::kEcc, 256}, KeyCase{"p384", alg::kEcc, 384}),
                         [](const auto& param_info) { return std::string(param_info.param.what); });

TEST(MakeCredential, EveryChallengeUsesAFreshSeed) {
  for (auto [type, size] : {std::pair{alg::kRsa, 2048}, std::pair{alg::kEcc, 256}}) {
    SoftEk ek = MakeSoftEk(type, size);
    Bytes secret(32, 0x11);
    auto a = MakeCredential(ek.tpm2b_public, SoftAkName(), Secret(secret));
    auto b = MakeCredential(ek.tpm2b_public, SoftAkName(), Secret(secret));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->encrypted_secret, b->encrypted_secret);
    EXPECT_NE(a->credential_blob, b->credential_blob);
  }
}

void ExpectInvalid(const Result<CredentialChallenge>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected a refusal mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(MakeCredential, RefusesKeysATpmWouldNotActivateWith) {
  Bytes secret(32, 0x11);
  // A signing key (an AK) is not a storage key: TPM2_ActivateCredential would refuse it.
  ExpectInvalid(MakeCredential(MakeSoftEk(alg::kRsa, 2048, kAkAttrs).tpm2b_public, SoftAkName(), Secret(secret)),
                "objectAttributes");
  // Symmetric mode other than CFB (0x0044 = OFB).
  ExpectInvalid(MakeCredential(MakeSoftEk(alg::kEcc, 256, kEkAttrs, 0x0044).tpm2b_public, SoftAkName(), Secret(secret)),
                "symmetric");
  // Trailing bytes after the TPM2B_PUBLIC.
  Bytes padded = MakeSoftEk(alg::kRsa, 2048).tpm2b_public;
  padded.push_back(0);
  ExpectInvalid(MakeCredential(padded, SoftAkName(), Secret(secret)), "EK public (TPM2B_PUBLIC)");
  // An ECC point that is not on the curve.
  Bytes off_curve = MakeSoftEk(alg::kEcc, 256).tpm2b_public;
  off_curve[off_curve.size() - 1] ^= 1;  // last byte of y
  ExpectInvalid(MakeCredential(off_curve, SoftAkName(), Secret(secret)), "not a");
}

TEST(MakeCredential, RefusesBadNamesAndSecretSizes) {
  SoftEk ek = MakeSoftEk(alg::kEcc, 256);
  Bytes secret(32, 0x11);
  Bytes short_name = SoftAkName();
  short_name.pop_back();
  ExpectInvalid(MakeCredential(ek.tpm2b_public, short_name, Secret(secret)), "AK name is 33 bytes, expected 34");
  Bytes handle_name = {0x40, 0x00, 0x00, 0x01};  // a handle-style name, not a key name
  ExpectInvalid(MakeCredential(ek.tpm2b_public, handle_name, Secret(secret)), "nameAlg");
  ExpectInvalid(MakeCredential(ek.tpm2b_public, SoftAkName(), Secret(Bytes(33, 1))),
                "secret is 33 bytes, expected 1 to 32");
  ExpectInvalid(MakeCredential(ek.tpm2b_public, SoftAkName(), crypto::SecretBytes()), "secret is 0 bytes");
}

TEST(Kdf, KdfaEqualsOpenSslKbkdfCounterModeAcrossBlocks) {
  Bytes key(32);
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  Bytes context = {1, 2, 3, 4, 5};
  for (uint32_t bits : {128u, 256u, 520u, 1024u}) {
    auto got = Kdfa(alg::kSha256, key, "STORAGE", context, {}, bits);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    Bytes g(got->ExposeSecret().begin(), got->ExposeSecret().end());
    EXPECT_EQ(HexEncode(g), HexEncode(Kbkdf(key, "STORAGE", context, bits / 8))) << bits << " bits";
  }
  EXPECT_FALSE(Kdfa(alg::kSha256, key, "X", {}, {}, 12).ok());  // not a multiple of 8
  EXPECT_FALSE(Kdfa(0x0012, key, "X", {}, {}, 128).ok());       // SM3: unsupported here
}

TEST(Kdf, KdfeEqualsOpenSslSskdf) {
  Bytes z(32, 0x5A), u(32, 0x01), v(32, 0x02);
  Bytes info = {'I', 'D', 'E', 'N', 'T', 'I', 'T', 'Y', 0};
  info.insert(info.end(), u.begin(), u.end());
  info.insert(info.end(), v.begin(), v.end());
  for (uint32_t bits : {256u, 384u, 768u}) {
    auto got = Kdfe(alg::kSha256, z, "IDENTITY", u, v, bits);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    Bytes g(got->ExposeSecret().begin(), got->ExposeSecret().end());
    EXPECT_EQ(HexEncode(g), HexEncode(Sskdf(z, info, bits / 8))) << bits << " bits";
  }
}

TEST(Tpm2ToolsCredentialFile, RoundTripsAndRejectsDamage) {
  SoftEk ek = MakeSoftEk(alg::kRsa, 2048);
  auto c = MakeCredential(ek.tpm2b_public, SoftAkName(), Secret(Bytes(32, 9)));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Bytes file = EncodeTpm2ToolsCredential(*c);
  ASSERT_GE(file.size(), 8u);
  EXPECT_EQ(HexEncode(ByteSpan(file.data(), 8)), "badcc0de00000001");
  auto back = ParseTpm2ToolsCredential(file);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->credential_blob, c->credential_blob);
  EXPECT_EQ(back->encrypted_secret, c->encrypted_secret);

  Bytes bad_magic = file;
  bad_magic[0] ^= 0xFF;
  auto r1 = ParseTpm2ToolsCredential(bad_magic);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("magic"), std::string::npos) << r1.status().ToString();
  Bytes bad_version = file;
  bad_version[7] = 2;
  auto r2 = ParseTpm2ToolsCredential(bad_version);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("version"), std::string::npos) << r2.status().ToString();
  Bytes trailing = file;
  trailing.push_back(0);
  auto r3 = ParseTpm2ToolsCredential(trailing);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("trailing"), std::string::npos) << r3.status().ToString();
  Bytes truncated(file.begin(), file.end() - 1);
  EXPECT_FALSE(ParseTpm2ToolsCredential(truncated).ok());
}

}  // namespace
}  // namespace enclave::attest
