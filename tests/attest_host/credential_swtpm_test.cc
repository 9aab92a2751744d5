// The verifier's software MakeCredential (attest/credential.h) proved against a real TPM 2.0
// implementation (swtpm): the challenge activates with this project's ActivateCredential for
// an RSA-2048 and an ECC P-256 EK and returns the secret; it activates with tpm2-tools'
// tpm2_activatecredential (an independent host implementation); a challenge made for
// another AK name does not activate. And the EK certificate appraisal (attest/ek_cert.h) on
// swtpm's EK certificates, issued by the fixture's local CA.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "enclave/attest/credential.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/host/tpm.h"
#include "swtpm_fixture.h"
#include "test_util.h"

namespace enclave::attest {
namespace {

using host::AkType;
using host::EkType;
using host::LoadedKey;
using host::Tpm;
using testing::Bytes;
using testing::Hex;
using testing::SwtpmFixture;

crypto::SecretBytes FreshSecret(Bytes* copy) {
  copy->resize(32);
  crypto::RandomBytes(*copy);
  auto s = crypto::SecretBytes::CopyFrom(*copy);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

class CredentialSwtpmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fixture_ = std::move(f).value();
  }
  void OpenTpm() {
    auto t = Tpm::Open(fixture_->tcti());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tpm_ = std::move(t).value();
  }
  void TearDown() override {
    tpm_.reset();
    fixture_.reset();
  }
  std::string Path(const std::string& name) { return fixture_->dir() + "/" + name; }

  std::unique_ptr<SwtpmFixture> fixture_;
  std::unique_ptr<Tpm> tpm_;
};

TEST_F(CredentialSwtpmTest, SoftwareMakeCredentialActivatesOnSwtpmForRsaAndEccEks) {
  ASSERT_NO_FATAL_FAILURE(OpenTpm());
  for (EkType ek_type : {EkType::kRsa2048, EkType::kEccP256}) {
    for (AkType ak_type : {AkType::kEccP256, AkType::kRsa2048}) {
      SCOPED_TRACE(std::string("EK ") + std::string(host::EkTypeName(ek_type)) + ", AK " +
                   std::string(host::AkTypeName(ak_type)));
      auto ek = tpm_->CreateEk(ek_type);
      ASSERT_TRUE(ek.ok()) << ek.status().ToString();
      auto blob = tpm_->CreateAk(*ek, ak_type);
      ASSERT_TRUE(blob.ok()) << blob.status().ToString();
      auto ak = tpm_->LoadAk(*ek, *blob);
      ASSERT_TRUE(ak.ok()) << ak.status().ToString();

      Bytes secret;
      auto challenge = MakeCredential(ek->pub().public_area, ak->pub().name, FreshSecret(&secret));
      ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
      auto got = tpm_->ActivateCredential(*ak, *ek, challenge->credential_blob, challenge->encrypted_secret);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(Hex(Bytes(got->ExposeSecret().begin(), got->ExposeSecret().end())), Hex(secret));

      // A shorter secret (any TPM2B_DIGEST up to the digest size) also round-trips.
      Bytes short_secret = {0x01, 0x02, 0x03};
      auto s3 = crypto::SecretBytes::CopyFrom(short_secret);
      ASSERT_TRUE(s3.ok());
      auto c3 = MakeCredential(ek->pub().public_area, ak->pub().name, *s3);
      ASSERT_TRUE(c3.ok()) << c3.status().ToString();
      auto got3 = tpm_->ActivateCredential(*ak, *ek, c3->credential_blob, c3->encrypted_secret);
      ASSERT_TRUE(got3.ok()) << got3.status().ToString();
      EXPECT_EQ(Hex(Bytes(got3->ExposeSecret().begin(), got3->ExposeSecret().end())), Hex(short_secret));
    }
  }
}

TEST_F(CredentialSwtpmTest, ChallengeForAnotherAkNameDoesNotActivate) {
  ASSERT_NO_FATAL_FAILURE(OpenTpm());
  for (EkType ek_type : {EkType::kRsa2048, EkType::kEccP256}) {
    SCOPED_TRACE(std::string(host::EkTypeName(ek_type)));
    auto ek = tpm_->CreateEk(ek_type);
    ASSERT_TRUE(ek.ok()) << ek.status().ToString();
    auto blob = tpm_->CreateAk(*ek);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    auto ak = tpm_->LoadAk(*ek, *blob);
    ASSERT_TRUE(ak.ok()) << ak.status().ToString();
    // A second, genuine AK of the same TPM: the challenge is for it, not for `ak`.
    auto other_blob = tpm_->CreateAk(*ek);
    ASSERT_TRUE(other_blob.ok()) << other_blob.status().ToString();
    ASSERT_NE(Hex(other_blob->pub.name), Hex(ak->pub().name));

    Bytes secret;
    auto challenge = MakeCredential(ek->pub().public_area, other_blob->pub.name, FreshSecret(&secret));
    ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
    auto refused = tpm_->ActivateCredential(*ak, *ek, challenge->credential_blob, challenge->encrypted_secret);
    ASSERT_FALSE(refused.ok()) << "a challenge for another AK name activated";
    EXPECT_EQ(refused.status().code(), Code::kAuthFailed) << refused.status().ToString();

    // A challenge sealed to another EK (here: the other EK type of the same TPM) does not either.
    auto wrong_ek = tpm_->CreateEk(ek_type == EkType::kRsa2048 ? EkType::kEccP256 : EkType::kRsa2048);
    ASSERT_TRUE(wrong_ek.ok()) << wrong_ek.status().ToString();
    auto for_other_ek = MakeCredential(wrong_ek->pub().public_area, ak->pub().name, FreshSecret(&secret));
    ASSERT_TRUE(for_other_ek.ok()) << for_other_ek.status().ToString();
    auto refused2 = tpm_->ActivateCredential(*ak, *ek, for_other_ek->credential_blob, for_other_ek->encrypted_secret);
    EXPECT_FALSE(refused2.ok()) << "a challenge sealed to another EK activated";
  }
}

// tpm2-tools as the host: tpm2_createek / tpm2_createak make the keys, our MakeCredential
// writes the tpm2-tools credential file, tpm2_activatecredential (with a PolicySecret session
// for the EK, as its manual shows) recovers the secret.
TEST_F(CredentialSwtpmTest, SoftwareMakeCredentialActivatesWithTpm2Activatecredential) {
  for (const char* tool : {"tpm2_createek", "tpm2_createak", "tpm2_startauthsession", "tpm2_policysecret",
                           "tpm2_activatecredential", "tpm2_flushcontext"}) {
    ASSERT_TRUE(testing::InPath(tool)) << tool << " not installed: scripts/install-deps installs tpm2-tools";
  }
  // swtpm serves one client at a time: this test does not open its own Tpm connection.
  const std::string tcti = fixture_->tcti();
  auto run = [&](std::vector<std::string> argv) {
    std::string name = argv[0];
    argv.insert(argv.begin() + 1, {"-T", tcti});
    auto r = testing::RunTool(argv, Path(name + ".log"));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    return r.exit_code == 0;
  };
  for (const char* ek_alg : {"rsa", "ecc"}) {
    SCOPED_TRACE(std::string("EK ") + ek_alg);
    const std::string ek_ctx = Path("ek.ctx"), ek_pub = Path("ek.pub"), ak_ctx = Path("ak.ctx"),
                      ak_pub = Path("ak.pub"), ak_name = Path("ak.name"), session = Path("session.ctx"),
                      cred = Path("cred.out"), out = Path("actcred.out");
    // With no resource manager between the tools and swtpm, each tool leaves its transient
    // object loaded (context-saved to the file): flush them, as tpm2-tools' own tests do.
    ASSERT_TRUE(run({"tpm2_createek", "-c", ek_ctx, "-G", ek_alg, "-u", ek_pub}));
    ASSERT_TRUE(run({"tpm2_flushcontext", "-t"}));
    ASSERT_TRUE(run({"tpm2_createak", "-C", ek_ctx, "-c", ak_ctx, "-G", "ecc", "-g", "sha256", "-s", "ecdsa", "-u",
                     ak_pub, "-n", ak_name}));
    ASSERT_TRUE(run({"tpm2_flushcontext", "-t"}));
    Bytes secret;
    auto challenge = MakeCredential(testing::ReadFileBytes(ek_pub), testing::ReadFileBytes(ak_name),
                                    FreshSecret(&secret));
    ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
    testing::WriteFileBytes(cred, EncodeTpm2ToolsCredential(*challenge));

    ASSERT_TRUE(run({"tpm2_startauthsession", "--policy-session", "-S", session}));
    ASSERT_TRUE(run({"tpm2_policysecret", "-S", session, "-c", "e"}));
    std::remove(out.c_str());
    bool activated = run({"tpm2_activatecredential", "-c", ak_ctx, "-C", ek_ctx, "-i", cred, "-o", out, "-P",
                          "session:" + session});
    run({"tpm2_flushcontext", session});
    ASSERT_TRUE(activated);
    EXPECT_EQ(Hex(testing::ReadFileBytes(out)), Hex(secret));
    run({"tpm2_flushcontext", "-t"});  // the EK and AK transient objects
  }
}

// A certificate for `subject_key` from a CA the verifier does not trust (made here).
Bytes CertFromUntrustedCa(EVP_PKEY* subject_key) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> ca_key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"),
                                                             EVP_PKEY_free);
  auto make = [](EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* signer, bool ca) {
    X509* c = X509_new();
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), ca ? 1 : 2);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 3600);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
    X509_set_issuer_name(c, X509_get_subject_name(issuer ? issuer : c));
    X509_set_pubkey(c, key);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : c, c, nullptr, nullptr, 0);
    X509_EXTENSION* bc =
        X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    X509_add_ext(c, bc, -1);
    X509_EXTENSION_free(bc);
    X509_sign(c, signer, EVP_sha256());
    return c;
  };
  X509* root = make(ca_key.get(), "Untrusted TPM Vendor", nullptr, ca_key.get(), true);
  X509* leaf = make(subject_key, "EK", root, ca_key.get(), false);
  unsigned char* p = nullptr;
  int len = i2d_X509(leaf, &p);
  Bytes der(p, p + len);
  OPENSSL_free(p);
  X509_free(leaf);
  X509_free(root);
  return der;
}

TEST_F(CredentialSwtpmTest, SwtpmEkCertificateChainsToTheLocalCaAndCertifiesTheDefaultTemplateEk) {
  ASSERT_NO_FATAL_FAILURE(OpenTpm());
  auto trust = LoadEkTrustFiles({fixture_->ca_root_cert()}, {fixture_->ca_issuer_cert()});
  ASSERT_TRUE(trust.ok()) << trust.status().ToString();
  // The same, from a directory holding the root and the intermediate.
  const std::string dir = Path("ek-roots");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture_->ca_root_cert(), dir + "/root.pem");
  std::filesystem::copy_file(fixture_->ca_issuer_cert(), dir + "/issuer.pem");
  auto trust_dir = LoadEkTrustDirectory(dir);
  ASSERT_TRUE(trust_dir.ok()) << trust_dir.status().ToString();
  EXPECT_EQ(trust_dir->roots, trust->roots);
  EXPECT_EQ(trust_dir->intermediates, trust->intermediates);

  auto rsa_cert = tpm_->ReadEkCertificate(EkType::kRsa2048);
  ASSERT_TRUE(rsa_cert.ok()) << rsa_cert.status().ToString();
  auto rsa_ek = tpm_->CreateEk(EkType::kRsa2048);
  ASSERT_TRUE(rsa_ek.ok()) << rsa_ek.status().ToString();
  auto ecc_ek = tpm_->CreateEk(EkType::kEccP256);
  ASSERT_TRUE(ecc_ek.ok()) << ecc_ek.status().ToString();

  for (const EkTrustStore* store : {&*trust, &*trust_dir}) {
    auto a = AppraiseEkCertificate(*rsa_cert, rsa_ek->pub().public_area, *store);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE(a->ok()) << a->Summary();
    EXPECT_EQ(a->passed(), (std::vector<std::string>{"ek.cert.der", "ek.cert.chain", "ek.cert.key"}));
  }

  // The genuine RSA certificate does not certify the ECC EK: key mismatch, chain still fine.
  auto wrong_key = AppraiseEkCertificate(*rsa_cert, ecc_ek->pub().public_area, *trust);
  ASSERT_TRUE(wrong_key.ok()) << wrong_key.status().ToString();
  EXPECT_TRUE(wrong_key->Failed("ek.cert.key.mismatch")) << wrong_key->Summary();
  EXPECT_FALSE(wrong_key->Failed("ek.cert.chain.untrusted")) << wrong_key->Summary();

  // swtpm's ECC EK certificate is for P-384 (high range, template H-3): it chains, and it
  // does not certify the P-256 EK of template L-2.
  auto p384_cert = tpm_->ReadNv(host::kEkCertNvEccP384);
  ASSERT_TRUE(p384_cert.ok()) << p384_cert.status().ToString();
  auto p384 = AppraiseEkCertificate(*p384_cert, ecc_ek->pub().public_area, *trust);
  ASSERT_TRUE(p384.ok()) << p384.status().ToString();
  EXPECT_TRUE(p384->Failed("ek.cert.key.mismatch")) << p384->Summary();
  EXPECT_FALSE(p384->Failed("ek.cert.chain.untrusted")) << p384->Summary();

  // A certificate for the genuine EK key, from a CA the verifier does not trust.
  for (const LoadedKey* ek : {&*rsa_ek, &*ecc_ek}) {
    auto pem = Tpm::PublicKeyPem(ek->pub().public_area);
    ASSERT_TRUE(pem.ok()) << pem.status().ToString();
    auto key = testing::PemToKey(*pem);
    ASSERT_TRUE(key);
    auto untrusted = AppraiseEkCertificate(CertFromUntrustedCa(key.get()), ek->pub().public_area, *trust);
    ASSERT_TRUE(untrusted.ok()) << untrusted.status().ToString();
    EXPECT_FALSE(untrusted->ok());
    EXPECT_TRUE(untrusted->Failed("ek.cert.chain.untrusted")) << untrusted->Summary();
    EXPECT_FALSE(untrusted->Failed("ek.cert.key.mismatch")) << untrusted->Summary();
  }
}

}  // namespace
}  // namespace enclave::attest
