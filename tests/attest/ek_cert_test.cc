// EK certificate appraisal (attest/ek_cert.h) with certificates the test makes with OpenSSL:
// a root, an intermediate and EK certificates in the TCG profile's shape (keyEncipherment
// only, no TLS usages, optionally a critical subjectDirectoryAttributes). The swtpm EK
// certificate is checked in tests/attest_host/credential_swtpm_test.cc.
#include "enclave/attest/ek_cert.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "attest_test_util.h"

namespace enclave::attest {
namespace {

using attest_test::Bytes;
using PkeyPtr = std::shared_ptr<EVP_PKEY>;
using X509Ptr = std::shared_ptr<X509>;

PkeyPtr RsaKey() { return PkeyPtr(EVP_RSA_gen(2048), EVP_PKEY_free); }
PkeyPtr EcKey() { return PkeyPtr(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), EVP_PKEY_free); }

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A critical extension with an arbitrary OID and a DER SEQUENCE {} value.
void AddRawCritical(X509* cert, const char* oid) {
  ASN1_OBJECT* obj = OBJ_txt2obj(oid, 1);
  ASN1_OCTET_STRING* value = ASN1_OCTET_STRING_new();
  const unsigned char empty_seq[] = {0x30, 0x00};
  ASN1_OCTET_STRING_set(value, empty_seq, 2);
  X509_EXTENSION* ext = X509_EXTENSION_create_by_OBJ(nullptr, obj, 1, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  ASN1_OCTET_STRING_free(value);
  ASN1_OBJECT_free(obj);
}

struct CertSpec {
  std::string cn;
  bool ca = false;
  long not_before_s = -3600;
  long not_after_s = 365L * 24 * 3600;
  const char* critical_oid = nullptr;  // an extra critical extension
};

// Issues a certificate for `key`, signed by `issuer_key` (self-signed when `issuer` is null).
X509Ptr Issue(const CertSpec& spec, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
  X509Ptr cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), spec.not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), spec.not_after_s);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(spec.cn.c_str()), -1,
                             -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509_set_pubkey(cert.get(), key);
  X509* iss = issuer ? issuer : cert.get();
  if (spec.ca) {
    AddExt(cert.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(cert.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    // TCG EK profile: keyEncipherment, the EK certificate EKU, no TLS usages.
    AddExt(cert.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    AddExt(cert.get(), iss, NID_key_usage, "critical,keyEncipherment");
    AddExt(cert.get(), iss, NID_ext_key_usage, "2.23.133.8.1");
  }
  AddExt(cert.get(), iss, NID_subject_key_identifier, "hash");
  if (issuer) AddExt(cert.get(), iss, NID_authority_key_identifier, "keyid:always");
  if (spec.critical_oid) AddRawCritical(cert.get(), spec.critical_oid);
  EXPECT_GT(X509_sign(cert.get(), issuer_key, EVP_sha256()), 0);
  return cert;
}

Bytes Der(X509* cert) {
  unsigned char* p = nullptr;
  int len = i2d_X509(cert, &p);
  Bytes out(p, p + len);
  OPENSSL_free(p);
  return out;
}

Bytes Bn(EVP_PKEY* k, const char* name, size_t size) {
  BIGNUM* bn = nullptr;
  EVP_PKEY_get_bn_param(k, name, &bn);
  Bytes out(size);
  BN_bn2binpad(bn, out.data(), static_cast<int>(size));
  BN_free(bn);
  return out;
}

// TPM2B_PUBLIC of an EK (template L-1/L-2 shape) around `key`, encoded here from Part 2.
Bytes EkPublic(EVP_PKEY* key) {
  attest_test::Be t;
  bool rsa = EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA;
  t.u16(rsa ? 0x0001 : 0x0023).u16(0x000B).u32(0x000300B2).u16(0);
  t.u16(0x0006).u16(128).u16(0x0043);
  if (rsa) {
    Bytes n = Bn(key, OSSL_PKEY_PARAM_RSA_N, 256);
    t.u16(0x0010).u16(2048).u32(0).u16(256);
    t.b.insert(t.b.end(), n.begin(), n.end());
  } else {
    Bytes x = Bn(key, OSSL_PKEY_PARAM_EC_PUB_X, 32), y = Bn(key, OSSL_PKEY_PARAM_EC_PUB_Y, 32);
    t.u16(0x0010).u16(0x0003).u16(0x0010).u16(32);
    t.b.insert(t.b.end(), x.begin(), x.end());
    t.u16(32);
    t.b.insert(t.b.end(), y.begin(), y.end());
  }
  attest_test::Be s;
  s.u16(static_cast<uint16_t>(t.b.size()));
  s.b.insert(s.b.end(), t.b.begin(), t.b.end());
  return s.b;
}

class EkCertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_key_ = EcKey();
    inter_key_ = RsaKey();
    root_ = Issue({"Test TPM Vendor Root", true, -86400}, root_key_.get(), nullptr, root_key_.get());
    inter_ = Issue({"Test TPM Vendor EK CA", true, -86400}, inter_key_.get(), root_.get(), root_key_.get());
    trust_.roots = {Der(root_.get())};
    trust_.intermediates = {Der(inter_.get())};
  }
  Appraisal Appraise(const Bytes& cert, const Bytes& ek_public, const EkCertOptions& opts = {}) {
    auto a = AppraiseEkCertificate(cert, ek_public, trust_, opts);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : Appraisal();
  }
  PkeyPtr root_key_, inter_key_;
  X509Ptr root_, inter_;
  EkTrustStore trust_;
};

TEST_F(EkCertTest, RsaAndEccEkCertificatesChainAndMatchTheEk) {
  for (PkeyPtr ek : {RsaKey(), EcKey()}) {
    X509Ptr cert = Issue({"", false}, ek.get(), inter_.get(), inter_key_.get());
    Appraisal a = Appraise(Der(cert.get()), EkPublic(ek.get()));
    EXPECT_TRUE(a.ok()) << a.Summary();
    EXPECT_EQ(a.passed(), (std::vector<std::string>{"ek.cert.der", "ek.cert.chain", "ek.cert.key"}));
  }
}

TEST_F(EkCertTest, UntrustedIssuerIsChainUntrusted) {
  PkeyPtr other_root_key = EcKey();
  X509Ptr other_root = Issue({"Someone Else", true}, other_root_key.get(), nullptr, other_root_key.get());
  PkeyPtr ek = RsaKey();
  X509Ptr cert = Issue({"", false}, ek.get(), other_root.get(), other_root_key.get());
  Appraisal a = Appraise(Der(cert.get()), EkPublic(ek.get()));
  EXPECT_FALSE(a.ok());
  EXPECT_TRUE(a.Failed("ek.cert.chain.untrusted")) << a.Summary();
  EXPECT_FALSE(a.Failed("ek.cert.key.mismatch")) << a.Summary();

  // Without the intermediate, a genuine certificate cannot be chained either.
  X509Ptr genuine = Issue({"", false}, ek.get(), inter_.get(), inter_key_.get());
  EkTrustStore roots_only{trust_.roots, {}};
  auto b = AppraiseEkCertificate(Der(genuine.get()), EkPublic(ek.get()), roots_only);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->Failed("ek.cert.chain.untrusted")) << b->Summary();

  // An intermediate is not a trust anchor (no partial chains): trusting only the
  // intermediate as a "root" does not verify.
  EkTrustStore inter_as_root{{Der(inter_.get())}, {}};
  auto c = AppraiseEkCertificate(Der(genuine.get()), EkPublic(ek.get()), inter_as_root);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->Failed("ek.cert.chain.untrusted")) << c->Summary();
}

TEST_F(EkCertTest, KeyDifferentFromTheEkIsKeyMismatch) {
  PkeyPtr certified = RsaKey(), actual = RsaKey(), ecc = EcKey();
  X509Ptr cert = Issue({"", false}, certified.get(), inter_.get(), inter_key_.get());
  Appraisal a = Appraise(Der(cert.get()), EkPublic(actual.get()));
  EXPECT_TRUE(a.Failed("ek.cert.key.mismatch")) << a.Summary();
  EXPECT_FALSE(a.Failed("ek.cert.chain.untrusted")) << a.Summary();
  ASSERT_FALSE(a.failures().empty());
  EXPECT_NE(a.failures().back().expected, a.failures().back().got);
  // An RSA certificate for an ECC EK.
  Appraisal b = Appraise(Der(cert.get()), EkPublic(ecc.get()));
  EXPECT_TRUE(b.Failed("ek.cert.key.mismatch")) << b.Summary();
}

TEST_F(EkCertTest, ExpiryIsReportedAndVerifyTimeIsHonoured) {
  PkeyPtr ek = EcKey();
  X509Ptr old = Issue({"", false, -7200, -3600}, ek.get(), inter_.get(), inter_key_.get());
  Appraisal a = Appraise(Der(old.get()), EkPublic(ek.get()));
  EXPECT_TRUE(a.Failed("ek.cert.chain.expired")) << a.Summary();
  EkCertOptions then;
  then.verify_time = static_cast<int64_t>(std::time(nullptr)) - 5400;
  Appraisal b = Appraise(Der(old.get()), EkPublic(ek.get()), then);
  EXPECT_TRUE(b.ok()) << b.Summary();
}

TEST_F(EkCertTest, CriticalExtensionsOnlyTheTcgSubjectDirectoryAttributesIsAccepted) {
  PkeyPtr ek = RsaKey();
  X509Ptr sda = Issue({"", false, -3600, 3600, "2.5.29.9"}, ek.get(), inter_.get(), inter_key_.get());
  Appraisal a = Appraise(Der(sda.get()), EkPublic(ek.get()));
  EXPECT_TRUE(a.ok()) << a.Summary();
  X509Ptr unknown = Issue({"", false, -3600, 3600, "1.3.6.1.4.1.99999.1"}, ek.get(), inter_.get(), inter_key_.get());
  Appraisal b = Appraise(Der(unknown.get()), EkPublic(ek.get()));
  EXPECT_TRUE(b.Failed("ek.cert.chain.untrusted")) << b.Summary();
}

TEST_F(EkCertTest, NotDerTrailingBytesAndNonStrictDerAreReported) {
  PkeyPtr ek = RsaKey();
  Bytes der = Der(Issue({"", false}, ek.get(), inter_.get(), inter_key_.get()).get());

  Appraisal junk = Appraise(Bytes{0x01, 0x02, 0x03}, EkPublic(ek.get()));
  EXPECT_TRUE(junk.Failed("ek.cert.parse.invalid")) << junk.Summary();
  EXPECT_FALSE(junk.ok());

  // NV padding after the certificate: reported, and accepted only when the option says so.
  Bytes padded = der;
  padded.resize(der.size() + 16, 0x00);
  Appraisal p = Appraise(padded, EkPublic(ek.get()));
  EXPECT_TRUE(p.Failed("ek.cert.der.trailing_bytes")) << p.Summary();
  EXPECT_NE(p.Summary().find("16 bytes after"), std::string::npos) << p.Summary();
  EkCertOptions allow;
  allow.allow_trailing_bytes = true;
  Appraisal q = Appraise(padded, EkPublic(ek.get()), allow);
  EXPECT_TRUE(q.ok()) << q.Summary();

  // The outer Certificate SEQUENCE length (not covered by the signature) in a non-minimal
  // long form: 30 82 LL LL -> 30 83 00 LL LL. BER that OpenSSL still parses and verifies.
  ASSERT_EQ(der[0], 0x30);
  ASSERT_EQ(der[1], 0x82);
  Bytes ber = {0x30, 0x83, 0x00};
  ber.insert(ber.end(), der.begin() + 2, der.end());
  Appraisal r = Appraise(ber, EkPublic(ek.get()));
  EXPECT_TRUE(r.Failed("ek.cert.der.not_strict")) << r.Summary();
  EXPECT_NE(r.Summary().find("offset 0"), std::string::npos) << r.Summary();
  EXPECT_FALSE(r.ok());
}

TEST(StrictDer, FlagsBerEncodings) {
  size_t n = 0;
  EXPECT_EQ(CheckStrictDer(Bytes{0x30, 0x03, 0x02, 0x01, 0x05}, &n), "");
  EXPECT_EQ(n, 5u);
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x80, 0x02, 0x01, 0x05, 0x00, 0x00}, &n).find("indefinite"), std::string::npos);
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x81, 0x03, 0x02, 0x01, 0x05}, &n).find("below 128"), std::string::npos);
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x04, 0x02, 0x02, 0x00, 0x05}, &n).find("INTEGER not minimally"),
            std::string::npos);
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x03, 0x01, 0x01, 0x01}, &n).find("BOOLEAN"), std::string::npos);
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x05, 0x02, 0x01}, &n).find("past the end"), std::string::npos);
  // The offending TLV's offset is named.
  EXPECT_NE(CheckStrictDer(Bytes{0x30, 0x05, 0x05, 0x00, 0x04, 0x81, 0x00}, &n).find("offset 4"), std::string::npos);
}

TEST(EkTrustStore, DirectorySortsRootsFromIntermediatesAndRefusesEmptyOrJunk) {
  PkeyPtr root_key = EcKey(), inter_key = EcKey();
  X509Ptr root = Issue({"Dir Root", true}, root_key.get(), nullptr, root_key.get());
  X509Ptr inter = Issue({"Dir Inter", true}, inter_key.get(), root.get(), root_key.get());
  std::string dir = ::testing::TempDir() + "ek_trust_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto none = LoadEkTrustDirectory(dir);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kFailedPrecondition) << none.status().ToString();

  FILE* f = std::fopen((dir + "/root.pem").c_str(), "w");
  ASSERT_NE(f, nullptr);
  PEM_write_X509(f, root.get());
  std::fclose(f);
  Bytes inter_der = Der(inter.get());
  attest_test::Bytes copy = inter_der;
  FILE* g = std::fopen((dir + "/inter.der").c_str(), "wb");
  ASSERT_NE(g, nullptr);
  std::fwrite(copy.data(), 1, copy.size(), g);
  std::fclose(g);
  auto store = LoadEkTrustDirectory(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(store->roots, std::vector<Bytes>{Der(root.get())});
  EXPECT_EQ(store->intermediates, std::vector<Bytes>{inter_der});

  FILE* h = std::fopen((dir + "/readme.txt").c_str(), "w");
  ASSERT_NE(h, nullptr);
  std::fputs("not a certificate\n", h);
  std::fclose(h);
  auto junk = LoadEkTrustDirectory(dir);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("readme.txt"), std::string::npos) << junk.status().ToString();

  // A non-self-signed certificate offered as a root is refused.
  auto wrong = LoadEkTrustFiles({dir + "/inter.der"}, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not self-signed"), std::string::npos) << wrong.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST(EkCertAppraisal, EmptyTrustStoreCannotEvaluate) {
  PkeyPtr ek = RsaKey();
  X509Ptr self = Issue({"self", false}, ek.get(), nullptr, ek.get());
  auto a = AppraiseEkCertificate(Der(self.get()), EkPublic(ek.get()), EkTrustStore{});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kFailedPrecondition) << a.status().ToString();
}

}  // namespace
}  // namespace enclave::attest
