// attest/host against swtpm: EK certificate and EK, AK attributes, quotes checked with
// OpenSSL and an independent TPMS_ATTEST reader, PCR extension, credential activation with
// tpm2-tools' MakeCredential, and no handle leak after many operations.
#include "enclave/attest/host/tpm.h"

#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "swtpm_fixture.h"
#include "test_util.h"

namespace enclave::attest::host {
namespace {

using testing::Bytes;
using testing::Hex;
using testing::SwtpmFixture;

constexpr uint16_t kSha1 = 0x0004;
constexpr uint16_t kSha256 = 0x000B;

Bytes RandomBytes(size_t n) {
  Bytes b(n);
  crypto::RandomBytes(b);
  return b;
}

class TpmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fixture_ = std::move(f).value();
    auto t = Tpm::Open(fixture_->tcti(), [this](std::string_view call, uint32_t rc) {
      calls_.emplace_back(call);
      if (rc != 0) failed_calls_.emplace_back(call);
    });
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tpm_ = std::move(t).value();
  }
  void TearDown() override {
    tpm_.reset();
    fixture_.reset();
  }

  LoadedKey Ek(EkType type = EkType::kRsa2048) {
    auto ek = tpm_->CreateEk(type);
    EXPECT_TRUE(ek.ok()) << ek.status().ToString();
    return ek.ok() ? std::move(ek).value() : LoadedKey();
  }

  std::string Tool(const std::string& name) { return fixture_->dir() + "/" + name; }

  std::unique_ptr<SwtpmFixture> fixture_;
  std::unique_ptr<Tpm> tpm_;
  std::vector<std::string> calls_, failed_calls_;
};

TEST(TpmOpen, UnreachableTctiIsUnavailableAndNamesTheCall) {
  // Port 1 on loopback: nothing listens there.
  auto t = Tpm::Open("swtpm:host=127.0.0.1,port=1");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kUnavailable) << t.status().ToString();
  EXPECT_NE(t.status().message().find("swtpm:host=127.0.0.1,port=1"), std::string::npos) << t.status().ToString();
  auto bad = Tpm::Open("no-such-tcti-module");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Tss2_TctiLdr_Initialize"), std::string::npos) << bad.status().ToString();
}

TEST_F(TpmTest, RsaEkCertificateKeyEqualsCreatedEkAndChainsToTheLocalCa) {
  auto cert_der = tpm_->ReadEkCertificate(EkType::kRsa2048);
  ASSERT_TRUE(cert_der.ok()) << cert_der.status().ToString();
  const uint8_t* p = cert_der->data();
  std::unique_ptr<X509, decltype(&X509_free)> cert(d2i_X509(nullptr, &p, static_cast<long>(cert_der->size())),
                                                   X509_free);
  ASSERT_TRUE(cert) << "EK certificate is not DER X.509";

  LoadedKey ek = Ek(EkType::kRsa2048);
  ASSERT_TRUE(ek.loaded());
  auto pem = Tpm::PublicKeyPem(ek.pub().public_area);
  ASSERT_TRUE(pem.ok()) << pem.status().ToString();
  auto ek_key = testing::PemToKey(*pem);
  ASSERT_TRUE(ek_key);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> cert_key(X509_get_pubkey(cert.get()), EVP_PKEY_free);
  ASSERT_TRUE(cert_key);
  EXPECT_EQ(EVP_PKEY_eq(cert_key.get(), ek_key.get()), 1)
      << "the EK certificate's key differs from the EK created from the TCG default template";

  // The EK matches the template (L-1) and its name is nameAlg || SHA-256(TPMT_PUBLIC).
  auto hdr = testing::ParsePublicHeader(ek.pub().public_area);
  EXPECT_EQ(hdr.type, 0x0001);
  EXPECT_EQ(hdr.attributes, kEkAttributes);
  Bytes name = {0x00, 0x0B};
  Bytes h = testing::Sha(EVP_sha256(), hdr.tpmt);
  name.insert(name.end(), h.begin(), h.end());
  EXPECT_EQ(Hex(ek.pub().name), Hex(name));

  // The certificate chains to the fixture's local CA (root + intermediate).
  auto load = [](const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "r");
    X509* c = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
    if (f) std::fclose(f);
    return std::unique_ptr<X509, decltype(&X509_free)>(c, X509_free);
  };
  auto root = load(fixture_->ca_root_cert());
  auto issuer = load(fixture_->ca_issuer_cert());
  ASSERT_TRUE(root && issuer);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), root.get());
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> chain(sk_X509_new_null(),
                                                                   [](STACK_OF(X509)* s) { sk_X509_free(s); });
  sk_X509_push(chain.get(), issuer.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  ASSERT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), chain.get()), 1);
  // EK certificates carry TPM-specific critical extensions (subjectAltName with TPM
  // attributes is fine; some have an unhandled critical one): only the signature chain matters here.
  X509_STORE_CTX_set_flags(ctx.get(), X509_V_FLAG_IGNORE_CRITICAL);
  EXPECT_EQ(X509_verify_cert(ctx.get()), 1) << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
}

TEST_F(TpmTest, MissingEccP256EkCertificateSaysWhichIndex) {
  // swtpm 0.7 provisions its ECC EK certificate for NIST P-384 (high range), none at 0x01C0000A.
  auto cert = tpm_->ReadEkCertificate(EkType::kEccP256);
  ASSERT_FALSE(cert.ok());
  EXPECT_EQ(cert.status().code(), Code::kNotFound) << cert.status().ToString();
  EXPECT_NE(cert.status().message().find("0x01c0000a"), std::string::npos) << cert.status().ToString();
  EXPECT_NE(cert.status().message().find("ECC-P256"), std::string::npos) << cert.status().ToString();

  // It is in the high range instead, for a P-384 key.
  auto p384 = tpm_->ReadNv(kEkCertNvEccP384);
  ASSERT_TRUE(p384.ok()) << p384.status().ToString();
  const uint8_t* der = p384->data();
  std::unique_ptr<X509, decltype(&X509_free)> cert384(d2i_X509(nullptr, &der, static_cast<long>(p384->size())), X509_free);
  ASSERT_TRUE(cert384);
  EXPECT_EQ(EVP_PKEY_get_bits(X509_get0_pubkey(cert384.get())), 384);

  auto undefined = tpm_->ReadNv(0x01C0FFFF);
  ASSERT_FALSE(undefined.ok());
  EXPECT_EQ(undefined.status().code(), Code::kNotFound);
  // The failing ESAPI call is named with the decoded TSS2 return code.
  EXPECT_NE(undefined.status().message().find("Esys_TR_FromTPMPublic"), std::string::npos)
      << undefined.status().ToString();
  EXPECT_NE(undefined.status().message().find("tpm:handle"), std::string::npos) << undefined.status().ToString();

  // The ECC EK itself is created from template L-2 and is a valid P-256 point.
  LoadedKey ek = Ek(EkType::kEccP256);
  ASSERT_TRUE(ek.loaded());
  auto hdr = testing::ParsePublicHeader(ek.pub().public_area);
  EXPECT_EQ(hdr.type, 0x0023);
  EXPECT_EQ(hdr.attributes, kEkAttributes);
  auto pem = Tpm::PublicKeyPem(ek.pub().public_area);
  ASSERT_TRUE(pem.ok()) << pem.status().ToString();
  EXPECT_NE(pem->find("BEGIN PUBLIC KEY"), std::string::npos);
}

TEST_F(TpmTest, AkAttributesAreExactlyTheRestrictedSigningSet) {
  LoadedKey ek = Ek();
  ASSERT_TRUE(ek.loaded());
  for (AkType type : {AkType::kEccP256, AkType::kRsa2048}) {
    SCOPED_TRACE(std::string(AkTypeName(type)));
    auto ak = tpm_->CreateAk(ek, type);
    ASSERT_TRUE(ak.ok()) << ak.status().ToString();
    auto hdr = testing::ParsePublicHeader(ak->pub.public_area);
    // fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign, nothing else.
    EXPECT_EQ(hdr.attributes, (1u << 1) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 16) | (1u << 18));
    EXPECT_EQ(hdr.type, type == AkType::kEccP256 ? 0x0023 : 0x0001);
    EXPECT_EQ(hdr.name_alg, kSha256);
    Bytes name = {0x00, 0x0B};
    Bytes h = testing::Sha(EVP_sha256(), hdr.tpmt);
    name.insert(name.end(), h.begin(), h.end());
    EXPECT_EQ(Hex(ak->pub.name), Hex(name));
    EXPECT_FALSE(ak->private_area.empty());
    auto loaded = tpm_->LoadAk(ek, *ak);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(Hex(loaded->pub().name), Hex(ak->pub.name));
  }
  // A stored name that does not match the key is refused.
  auto ak = tpm_->CreateAk(ek);
  ASSERT_TRUE(ak.ok());
  ak->pub.name.back() ^= 1;
  auto wrong = tpm_->LoadAk(ek, *ak);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("differs from the stored name"), std::string::npos) << wrong.status().ToString();
}

// Quotes with each AK type: the TPMS_ATTEST fields and the signature are checked here with
// OpenSSL and a reader written in the test.
TEST_F(TpmTest, QuoteHasMagicTypeNonceDigestAndAValidSignature) {
  LoadedKey ek = Ek();
  ASSERT_TRUE(ek.loaded());
  for (AkType type : {AkType::kEccP256, AkType::kRsa2048}) {
    SCOPED_TRACE(std::string(AkTypeName(type)));
    auto blob = tpm_->CreateAk(ek, type);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    auto ak = tpm_->LoadAk(ek, *blob);
    ASSERT_TRUE(ak.ok()) << ak.status().ToString();
    PcrSelection sel = {{kSha256, {16, 0, 7}}, {kSha1, {10}}};
    Bytes nonce = RandomBytes(32);
    auto quote = tpm_->QuotePcrs(*ak, sel, nonce);
    ASSERT_TRUE(quote.ok()) << quote.status().ToString();

    auto q = testing::ParseQuote(quote->attest);
    ASSERT_TRUE(q.has_value()) << "TPMS_ATTEST does not parse: " << Hex(quote->attest);
    EXPECT_EQ(q->magic, 0xFF544347u);
    EXPECT_EQ(q->type, 0x8018);
    EXPECT_EQ(Hex(q->extra), Hex(nonce));
    EXPECT_EQ(q->safe, 1);
    ASSERT_EQ(q->selection.size(), 2u);
    EXPECT_EQ(q->selection[0].first, kSha256);
    EXPECT_EQ(Hex(q->selection[0].second), "810001");  // PCRs 0, 7 (byte 0), 16 (byte 2)
    EXPECT_EQ(q->selection[1].first, kSha1);
    EXPECT_EQ(Hex(q->selection[1].second), "000400");  // PCR 10

    // pcrDigest = SHA-256 over the selected values, bank order, ascending index.
    auto values = tpm_->ReadPcrs(sel);
    ASSERT_TRUE(values.ok()) << values.status().ToString();
    ASSERT_EQ(values->size(), 4u);
    EXPECT_EQ((*values)[0].index, 0u);
    EXPECT_EQ((*values)[1].index, 7u);
    EXPECT_EQ((*values)[2].index, 16u);
    EXPECT_EQ((*values)[3].hash, kSha1);
    Bytes concat;
    for (const PcrValue& v : *values) concat.insert(concat.end(), v.digest.begin(), v.digest.end());
    EXPECT_EQ(Hex(q->pcr_digest), Hex(testing::Sha(EVP_sha256(), concat)));

    auto pem = Tpm::PublicKeyPem(ak->pub().public_area);
    ASSERT_TRUE(pem.ok()) << pem.status().ToString();
    auto key = testing::PemToKey(*pem);
    ASSERT_TRUE(key);
    EXPECT_EQ(testing::VerifyTpmtSignature(key.get(), quote->attest, quote->signature), "");
    // The check is real: one changed byte of the quote or another key fails it.
    Bytes tampered = quote->attest;
    tampered[tampered.size() - 1] ^= 1;
    EXPECT_EQ(testing::VerifyTpmtSignature(key.get(), tampered, quote->signature), "signature does not verify");
    // The qualified signer is the AK's qualified name: not checked against a value here,
    // but it must be a SHA-256 name.
    ASSERT_EQ(q->signer.size(), 34u);
    EXPECT_EQ(q->signer[0], 0x00);
    EXPECT_EQ(q->signer[1], 0x0B);
  }
  EXPECT_NE(std::find(calls_.begin(), calls_.end(), "Esys_Quote"), calls_.end()) << "the trace hook saw no Esys_Quote";
  EXPECT_TRUE(failed_calls_.empty()) << failed_calls_.front();
}

TEST_F(TpmTest, QuoteRejectsBadInputBeforeTheTpm) {
  LoadedKey ek = Ek(EkType::kEccP256);
  auto blob = tpm_->CreateAk(ek);
  ASSERT_TRUE(blob.ok());
  auto ak = tpm_->LoadAk(ek, *blob);
  ASSERT_TRUE(ak.ok());
  EXPECT_EQ(tpm_->QuotePcrs(*ak, {}, RandomBytes(32)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tpm_->QuotePcrs(*ak, {{kSha256, {24}}}, RandomBytes(32)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tpm_->QuotePcrs(*ak, {{kSha256, {0}}}, RandomBytes(65)).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tpm_->QuotePcrs(*ak, {{kSha256, {0}}, {kSha256, {1}}}, RandomBytes(32)).status().code(),
            Code::kInvalidInput);
  // The TPM itself refuses qualifying data longer than its largest digest (swtpm: 64).
  auto too_long = tpm_->QuotePcrs(*ak, {{kSha256, {0}}}, RandomBytes(64));
  if (!too_long.ok()) {
    EXPECT_NE(too_long.status().message().find("Esys_Quote"), std::string::npos) << too_long.status().ToString();
  }
}

TEST_F(TpmTest, ExtendingPcr16ChangesTheQuotedDigest) {
  LoadedKey ek = Ek(EkType::kEccP256);
  auto blob = tpm_->CreateAk(ek);
  ASSERT_TRUE(blob.ok());
  auto ak = tpm_->LoadAk(ek, *blob);
  ASSERT_TRUE(ak.ok());
  PcrSelection sel = {{kSha256, {16}}};
  auto before = tpm_->ReadPcrs(sel);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  auto q1 = tpm_->QuotePcrs(*ak, sel, RandomBytes(32));
  ASSERT_TRUE(q1.ok()) << q1.status().ToString();

  Bytes event = testing::Sha(EVP_sha256(), {'b', 'o', 'o', 't'});
  ASSERT_TRUE(tpm_->ExtendPcr(16, kSha256, event).ok());
  auto after = tpm_->ReadPcrs(sel);
  ASSERT_TRUE(after.ok());
  Bytes expected = (*before)[0].digest;
  expected.insert(expected.end(), event.begin(), event.end());
  EXPECT_EQ(Hex((*after)[0].digest), Hex(testing::Sha(EVP_sha256(), expected)));

  auto q2 = tpm_->QuotePcrs(*ak, sel, RandomBytes(32));
  ASSERT_TRUE(q2.ok());
  auto p1 = testing::ParseQuote(q1->attest), p2 = testing::ParseQuote(q2->attest);
  ASSERT_TRUE(p1 && p2);
  EXPECT_NE(Hex(p1->pcr_digest), Hex(p2->pcr_digest));
  EXPECT_EQ(Hex(p1->pcr_digest), Hex(testing::Sha(EVP_sha256(), (*before)[0].digest)));
  EXPECT_EQ(Hex(p2->pcr_digest), Hex(testing::Sha(EVP_sha256(), (*after)[0].digest)));
  EXPECT_GT(p2->clock, 0u);

  // Bad extends fail before the TPM.
  EXPECT_EQ(tpm_->ExtendPcr(16, kSha256, Bytes(20)).code(), Code::kInvalidInput);
  EXPECT_EQ(tpm_->ExtendPcr(24, kSha256, Bytes(32)).code(), Code::kInvalidInput);
}

TEST_F(TpmTest, ReadsMoreThanEightPcrsAndFailsOnAnUnallocatedBank) {
  PcrBank all{kSha256, {}};
  for (uint32_t i = 0; i < 24; ++i) all.pcrs.push_back(23 - i);
  auto values = tpm_->ReadPcrs({all, {kSha1, {0, 17}}});
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  ASSERT_EQ(values->size(), 26u);
  for (uint32_t i = 0; i < 24; ++i) {
    EXPECT_EQ((*values)[i].index, i);
    EXPECT_EQ((*values)[i].digest.size(), 32u);
  }
  // PCR 17 (DRTM) starts at all 0xFF.
  EXPECT_EQ(Hex((*values)[25].digest), std::string(40, 'f'));
  // The fixture allocates sha1 and sha256 only.
  auto sha384 = tpm_->ReadPcrs({{0x000C, {0}}});
  ASSERT_FALSE(sha384.ok());
  EXPECT_EQ(sha384.status().code(), Code::kNotFound) << sha384.status().ToString();
  EXPECT_NE(sha384.status().message().find("sha384"), std::string::npos);
}

// The two halves of a tpm2-tools credential file (tpm2_makecredential -o): magic 0xBADCC0DE,
// version 1, then TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET.
bool SplitCredentialFile(const Bytes& file, Bytes* blob, Bytes* secret) {
  testing::Be r(file);
  if (r.U32() != 0xBADCC0DE || r.U32() != 1) return false;
  Bytes b = r.Sized();
  Bytes s = r.Sized();
  if (!r.done()) return false;
  *blob = {static_cast<uint8_t>(b.size() >> 8), static_cast<uint8_t>(b.size())};
  blob->insert(blob->end(), b.begin(), b.end());
  *secret = {static_cast<uint8_t>(s.size() >> 8), static_cast<uint8_t>(s.size())};
  secret->insert(secret->end(), s.begin(), s.end());
  return true;
}

TEST_F(TpmTest, ActivatesACredentialMadeByTpm2Makecredential) {
  ASSERT_TRUE(testing::InPath("tpm2_makecredential"))
      << "tpm2_makecredential not installed: scripts/install-deps installs tpm2-tools";
  for (EkType ek_type : {EkType::kRsa2048, EkType::kEccP256}) {
    SCOPED_TRACE(std::string(EkTypeName(ek_type)));
    LoadedKey ek = Ek(ek_type);
    ASSERT_TRUE(ek.loaded());
    auto blob = tpm_->CreateAk(ek);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    auto ak = tpm_->LoadAk(ek, *blob);
    ASSERT_TRUE(ak.ok()) << ak.status().ToString();

    const std::string ek_pub = Tool("ek.pub"), secret_file = Tool("secret.bin"), cred = Tool("cred.out");
    testing::WriteFileBytes(ek_pub, ek.pub().public_area);
    Bytes secret = RandomBytes(32);
    testing::WriteFileBytes(secret_file, secret);
    auto make = [&](const Bytes& name) {
      std::remove(cred.c_str());
      return testing::RunTool({"tpm2_makecredential", "-T", "none", "-u", ek_pub, "-s", secret_file, "-n",
                               Hex(name), "-o", cred},
                              Tool("makecredential.log"));
    };
    auto run = make(ak->pub().name);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    Bytes id_object, enc_secret;
    ASSERT_TRUE(SplitCredentialFile(testing::ReadFileBytes(cred), &id_object, &enc_secret));
    auto got = tpm_->ActivateCredential(*ak, ek, id_object, enc_secret);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(Hex(Bytes(got->ExposeSecret().begin(), got->ExposeSecret().end())), Hex(secret));

    // A challenge made for another AK name does not activate: the integrity check fails.
    Bytes other_name = ak->pub().name;
    other_name.back() ^= 1;
    run = make(other_name);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    ASSERT_TRUE(SplitCredentialFile(testing::ReadFileBytes(cred), &id_object, &enc_secret));
    auto refused = tpm_->ActivateCredential(*ak, ek, id_object, enc_secret);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Code::kAuthFailed) << refused.status().ToString();
    EXPECT_NE(refused.status().message().find("Esys_ActivateCredential"), std::string::npos);

    // Malformed input is refused before the TPM.
    Bytes truncated(id_object.begin(), id_object.end() - 1);
    EXPECT_EQ(tpm_->ActivateCredential(*ak, ek, truncated, enc_secret).status().code(), Code::kInvalidInput);
  }
}

TEST_F(TpmTest, NoHandleLeaksAfterManyQuotesAndFailures) {
  {
    LoadedKey ek = Ek(EkType::kEccP256);
    ASSERT_TRUE(ek.loaded());
    auto blob = tpm_->CreateAk(ek);
    ASSERT_TRUE(blob.ok());
    auto ak = tpm_->LoadAk(ek, *blob);
    ASSERT_TRUE(ak.ok());
    // While EK and AK are loaded the count sees exactly those two and no session.
    auto mid = tpm_->CountLoadedHandles();
    ASSERT_TRUE(mid.ok()) << mid.status().ToString();
    EXPECT_EQ(mid->transient.size(), 2u);
    EXPECT_TRUE(mid->loaded_sessions.empty() && mid->saved_sessions.empty());

    PcrSelection sel = {{kSha256, {0, 1, 2, 3, 4, 5, 6, 7, 16}}};
    for (int i = 0; i < 300; ++i) {
      auto q = tpm_->QuotePcrs(*ak, sel, RandomBytes(32));
      ASSERT_TRUE(q.ok()) << "quote " << i << ": " << q.status().ToString();
    }
    // Loads, failed activations and failed loads (each with a policy session) also clean up.
    for (int i = 0; i < 20; ++i) {
      {
        auto again = tpm_->LoadAk(ek, *blob);
        ASSERT_TRUE(again.ok()) << "load " << i << ": " << again.status().ToString();
      }
      AkBlob corrupt = *blob;
      corrupt.private_area[corrupt.private_area.size() / 2] ^= 1;
      corrupt.pub.name.clear();
      auto failed = tpm_->LoadAk(ek, corrupt);
      ASSERT_FALSE(failed.ok()) << "a corrupted private blob loaded";
      EXPECT_EQ(failed.status().code(), Code::kAuthFailed) << failed.status().ToString();
    }
    // The trace saw failures (the corrupted loads) but every session was flushed.
    EXPECT_FALSE(failed_calls_.empty());
  }
  auto after = tpm_->CountLoadedHandles();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(after->transient.empty()) << after->transient.size() << " transient objects left";
  EXPECT_TRUE(after->loaded_sessions.empty()) << after->loaded_sessions.size() << " sessions left";
  EXPECT_TRUE(after->saved_sessions.empty()) << after->saved_sessions.size() << " saved sessions left";
}

TEST_F(TpmTest, KeysOutlivingTheTpmObjectAreFlushedWithIt) {
  LoadedKey ek = Ek(EkType::kEccP256);
  ASSERT_TRUE(ek.loaded());
  tpm_.reset();  // flushes ek, which becomes empty
  EXPECT_FALSE(ek.loaded());
  auto t = Tpm::Open(fixture_->tcti());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto counts = (*t)->CountLoadedHandles();
  ASSERT_TRUE(counts.ok());
  EXPECT_TRUE(counts->transient.empty());
}

}  // namespace
}  // namespace enclave::attest::host
