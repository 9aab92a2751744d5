// Quote appraisal with keys made by OpenSSL in the test, signed as a TPM signs a
// TPMS_ATTEST (H(attest) then ECDSA P-256 / RSASSA / RSA-PSS, SHA-256), and every
// verifier-side rejection from issue 3.
#include "enclave/attest/quote.h"
#include "enclave/attest/verifier.h"

#include <gtest/gtest.h>

#include <set>

#include "attest_test_util.h"

namespace enclave::attest {
namespace {

using namespace attest_test;

// A host: AK key pair, its TPMT_PUBLIC, and PCR values.
struct Host {
  Pkey key;
  AkOptions opts;
  TpmtPublic ak;
  PcrValues pcrs;
  explicit Host(Pkey k, AkOptions o = {}) : key(std::move(k)), opts(o) {
    auto p = ParseTpmtPublic(EncodeAkPublic(key.get(), opts));
    if (!p.ok()) throw std::runtime_error(p.status().ToString());
    ak = *p;
    for (uint32_t i : {0u, 1u, 7u}) pcrs[alg::kSha256][i] = Sha256(Bytes{uint8_t(i)});
    pcrs[alg::kSha1][10] = Sha1(Bytes{10});
  }
  // Quote over sha256:0,1,7+sha1:10 with `extra`, digest computed here, independently.
  QuoteEvidence Quote(const Bytes& extra, AttestFields f = {}, uint16_t sig_alg = 0, uint16_t hash = 0x000B) {
    f.extra = extra;
    if (f.sel.empty()) f.sel = {{0x000B, {0, 1, 7}}, {0x0004, {10}}};
    Bytes concat;
    for (const auto& s : f.sel) {
      for (uint32_t i : s.pcrs) concat = Cat(concat, pcrs[s.hash][i]);
    }
    if (f.pcr_digest.empty()) f.pcr_digest = hash == 0x0004 ? Sha1(concat) : Sha256(concat);
    QuoteEvidence ev;
    ev.attest = EncodeAttest(f);
    ev.signature = SignAttest(key.get(), ev.attest, sig_alg, hash);
    ev.pcrs = pcrs;
    return ev;
  }
};

QuoteExpectations Expect(const Bytes& nonce) {
  QuoteExpectations e;
  e.extra_data = nonce;
  e.selection = *PcrSelection::FromString("sha256:0,1,7+sha1:10");
  return e;
}

const Bytes kNonce(32, 0x4E);

TEST(Quote, EcdsaP256QuoteVerifies) {
  Host h(MakeEcKey());
  Appraisal a = AppraiseQuote(h.ak, h.Quote(kNonce), Expect(kNonce));
  EXPECT_TRUE(a.ok()) << a.Summary();
  for (const char* c : {"ak.attributes", "quote.magic", "quote.type", "quote.signature", "quote.extra_data",
                        "quote.pcr_selection", "quote.pcr_values", "quote.pcr_digest", "quote.clock.safe"}) {
    EXPECT_NE(std::find(a.passed().begin(), a.passed().end(), c), a.passed().end()) << c;
  }
}

TEST(Quote, RsassaAndRsapssQuotesVerify) {
  Host h(MakeRsaKey());
  Appraisal a = AppraiseQuote(h.ak, h.Quote(kNonce), Expect(kNonce));
  EXPECT_TRUE(a.ok()) << a.Summary();
  AkOptions pss;
  pss.scheme = 0x0016;
  Host p(MakeRsaKey(), pss);
  a = AppraiseQuote(p.ak, p.Quote(kNonce, {}, 0x0016), Expect(kNonce));
  EXPECT_TRUE(a.ok()) << a.Summary();
}

TEST(Quote, WrongNonceIsRejected) {
  Host h(MakeEcKey());
  Appraisal a = AppraiseQuote(h.ak, h.Quote(Bytes(32, 0x4F)), Expect(kNonce));
  EXPECT_FALSE(a.ok());
  ASSERT_TRUE(a.Failed("quote.extra_data.mismatch")) << a.Summary();
  EXPECT_EQ(a.failures().size(), 1u) << a.Summary();
  EXPECT_EQ(a.failures()[0].expected, HexEncode(kNonce));
  EXPECT_EQ(a.failures()[0].got, HexEncode(Bytes(32, 0x4F)));
  // A verifier that forgot to set a nonce fails closed.
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(Bytes{}), Expect(Bytes{})).Failed("quote.extra_data.unset"));
}

TEST(Quote, ChangedPcrValueIsRejected) {
  Host h(MakeEcKey());
  QuoteEvidence ev = h.Quote(kNonce);
  ev.pcrs[alg::kSha256][7][0] ^= 1;  // the host reports a PCR value other than the quoted one
  Appraisal a = AppraiseQuote(h.ak, ev, Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.pcr_digest.mismatch")) << a.Summary();
  EXPECT_FALSE(a.ok());
}

TEST(Quote, ForgedSignatureIsRejected) {
  Host h(MakeEcKey());
  QuoteEvidence ev = h.Quote(kNonce);
  ev.signature[10] ^= 0x01;  // inside signatureR
  EXPECT_TRUE(AppraiseQuote(h.ak, ev, Expect(kNonce)).Failed("quote.signature.invalid"));
  // Changing a signed byte after signing.
  ev = h.Quote(kNonce);
  ev.attest[ev.attest.size() - 51] ^= 1;  // firmwareVersion, last byte
  EXPECT_TRUE(AppraiseQuote(h.ak, ev, Expect(kNonce)).Failed("quote.signature.invalid"));
  Host r(MakeRsaKey());
  ev = r.Quote(kNonce);
  ev.signature.back() ^= 0x80;
  EXPECT_TRUE(AppraiseQuote(r.ak, ev, Expect(kNonce)).Failed("quote.signature.invalid"));
}

TEST(Quote, DifferentAkIsRejected) {
  Host h(MakeEcKey());
  Host other(MakeEcKey());
  Appraisal a = AppraiseQuote(other.ak, h.Quote(kNonce), Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.signature.invalid")) << a.Summary();
  EXPECT_FALSE(a.ok());
}

TEST(Quote, AkWithoutFixedTpmIsRejected) {
  AkOptions o;
  o.attributes &= ~0x2u;
  Host h(MakeEcKey(), o);
  Appraisal a = AppraiseQuote(h.ak, h.Quote(kNonce), Expect(kNonce));
  ASSERT_TRUE(a.Failed("ak.attributes.fixed_tpm.missing")) << a.Summary();
  EXPECT_FALSE(a.ok());
}

TEST(AkPublic, EveryRequiredAttributeAndSize) {
  struct Case {
    uint32_t clear;
    const char* check;
  } cases[] = {{0x2, "ak.attributes.fixed_tpm.missing"},
               {0x10, "ak.attributes.fixed_parent.missing"},
               {0x20, "ak.attributes.sensitive_data_origin.missing"},
               {0x10000, "ak.attributes.restricted.missing"},
               {0x40000, "ak.attributes.sign.missing"}};
  Pkey key = MakeEcKey();
  for (const auto& c : cases) {
    AkOptions o;
    o.attributes &= ~c.clear;
    auto p = ParseTpmtPublic(EncodeAkPublic(key.get(), o));
    ASSERT_TRUE(p.ok());
    Appraisal a = CheckAkPublic(*p, AkPolicy{});
    EXPECT_TRUE(a.Failed(c.check)) << c.check << ": " << a.Summary();
  }
  AkOptions dec;
  dec.attributes |= 0x20000;
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(key.get(), dec)), {}).Failed("ak.attributes.decrypt.set"));
  AkOptions sha1name;
  sha1name.name_alg = 0x0004;
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(key.get(), sha1name)), {}).Failed("ak.name_alg.weak"));
  AkOptions sha1scheme;
  sha1scheme.scheme_hash = 0x0004;
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(key.get(), sha1scheme)), {}).Failed("ak.scheme.hash.weak"));
  Pkey small = MakeRsaKey(1024);
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(small.get())), {}).Failed("ak.rsa.key_bits.too_small"));
  AkOptions wrong_curve;  // the point is P-256 but the key says P-384
  wrong_curve.curve = 0x0004;
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(key.get(), wrong_curve)), {}).Failed("ak.public.invalid"));
  Pkey p384 = MakeEcKey("P-384");
  AkOptions p384o;
  p384o.curve = 0x0004;
  EXPECT_TRUE(CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(p384.get(), p384o)), {}).ok());
  AkPolicy only256;
  only256.ecc_curves = {0x0003};
  EXPECT_TRUE(
      CheckAkPublic(*ParseTpmtPublic(EncodeAkPublic(p384.get(), p384o)), only256).Failed("ak.ecc.curve.not_allowed"));
}

TEST(Quote, ClockChecksAgainstPreviousValues) {
  Host h(MakeEcKey());
  QuoteExpectations e = Expect(kNonce);
  e.previous = ClockInfo{1000, 5, 2, 1};
  AttestFields f;
  f.clock = 2000;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).ok());
  f = {};
  f.reset = 4;  // reset counter went back
  f.clock = 2000;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).Failed("quote.clock.reset_count.decreased"));
  f = {};
  f.restart = 1;
  f.clock = 2000;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).Failed("quote.clock.restart_count.decreased"));
  f = {};
  f.reset = 6;
  f.restart = 0;  // a TPM Reset zeroes restartCount: fine when resetCount went up
  f.clock = 2000;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).ok());
  f = {};
  f.clock = 1000;  // not increasing (a replayed quote)
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).Failed("quote.clock.not_increasing"));
  f = {};
  f.safe = 0;
  f.clock = 2000;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), e).Failed("quote.clock.unsafe"));
}

TEST(Quote, ReplayedQuoteIsRejected) {
  Host h(MakeEcKey());
  QuoteEvidence first = h.Quote(kNonce);
  QuoteExpectations e = Expect(kNonce);
  ASSERT_TRUE(AppraiseQuote(h.ak, first, e).ok());
  // The verifier stores the accepted clock info and issues a fresh nonce; the old quote
  // sent again fails on both.
  e.previous = QuotedAttest(first)->clock_info;
  e.extra_data = Bytes(32, 0x77);
  Appraisal a = AppraiseQuote(h.ak, first, e);
  EXPECT_TRUE(a.Failed("quote.extra_data.mismatch")) << a.Summary();
  EXPECT_TRUE(a.Failed("quote.clock.not_increasing")) << a.Summary();
}

TEST(Quote, MagicTypeAndSelectionChecks) {
  Host h(MakeEcKey());
  AttestFields f;
  f.magic = 0xFF544348;  // a TPM2_Sign over attacker-chosen bytes cannot start with the magic
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), Expect(kNonce)).Failed("quote.magic.mismatch"));
  f = {};
  f.type = 0x8017;
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), Expect(kNonce)).Failed("quote.type.mismatch"));
  f = {};
  f.sel = {{0x000B, {0, 1}}, {0x0004, {10}}};  // PCR 7 left out
  QuoteEvidence ev = h.Quote(kNonce, f);
  ev.pcrs[alg::kSha256].erase(7);
  Appraisal a = AppraiseQuote(h.ak, ev, Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.pcr_selection.mismatch")) << a.Summary();
  // Same set in another bank order is the same selection.
  f = {};
  f.sel = {{0x0004, {10}}, {0x000B, {0, 1, 7}}};
  EXPECT_TRUE(AppraiseQuote(h.ak, h.Quote(kNonce, f), Expect(kNonce)).ok());
}

// VerifyQuoteOrigin, the gate before a broker logs or archives evidence, also wants a
// TPM-generated quote: the AK's signature over bytes with another magic (TPM2_Sign over
// chosen bytes) or another attestation type, with the right qualifying data, is refused.
TEST(Quote, OriginNeedsTheTpmGeneratedMagicAndTheQuoteType) {
  Host h(MakeEcKey());
  const Bytes tpmt = EncodeAkPublic(h.key.get());
  Bytes tpm2b = {static_cast<uint8_t>(tpmt.size() >> 8), static_cast<uint8_t>(tpmt.size())};
  tpm2b = Cat(tpm2b, tpmt);
  const crypto::Digest256 bound = crypto::Sha256(AsBytes(std::string_view("request")));
  auto qd = QualifyingData(kNonce, bound);
  ASSERT_TRUE(qd.ok());
  const Bytes extra(qd->begin(), qd->end());
  EXPECT_TRUE(VerifyQuoteOrigin(tpm2b, h.Quote(extra), kNonce, bound).ok());
  AttestFields f;
  f.magic = 0;
  Status magic = VerifyQuoteOrigin(tpm2b, h.Quote(extra, f), kNonce, bound);
  EXPECT_EQ(magic.code(), Code::kPermissionDenied);
  EXPECT_NE(magic.message().find("quote.magic.mismatch"), std::string::npos) << magic.ToString();
  f = {};
  f.type = 0x8017;  // TPM_ST_ATTEST_CERTIFY
  Status type = VerifyQuoteOrigin(tpm2b, h.Quote(extra, f), kNonce, bound);
  EXPECT_EQ(type.code(), Code::kPermissionDenied);
  EXPECT_NE(type.message().find("quote.type.mismatch"), std::string::npos) << type.ToString();
  // And the two it checked before.
  EXPECT_NE(VerifyQuoteOrigin(tpm2b, h.Quote(kNonce), kNonce, bound).message().find("quote.extra_data"),
            std::string::npos);
  Host other(MakeEcKey());
  EXPECT_NE(VerifyQuoteOrigin(tpm2b, other.Quote(extra), kNonce, bound).message().find("quote.signature"),
            std::string::npos);
}

// Issue 20 §4: a type mismatch must not hide the other failures. Only the PCR checks, which
// need a TPMS_QUOTE_INFO, are skipped.
TEST(Quote, TypeMismatchStillReportsEveryIndependentCheck) {
  Host h(MakeEcKey()), other(MakeEcKey());
  AttestFields f;
  f.type = 0x8017;  // TPM_ST_ATTEST_CERTIFY
  f.safe = 0;
  QuoteEvidence ev = h.Quote(Bytes(32, 0x4F), f);            // the wrong nonce, too
  ev.signature = other.Quote(Bytes(32, 0x4F), f).signature;  // and signed by another key
  Appraisal a = AppraiseQuote(h.ak, ev, Expect(kNonce));
  std::set<std::string> failed;
  for (const auto& x : a.failures()) failed.insert(x.check);
  EXPECT_EQ(failed, (std::set<std::string>{"quote.type.mismatch", "quote.signature.invalid",
                                           "quote.extra_data.mismatch", "quote.clock.unsafe"}))
      << a.Summary();
  for (const auto& x : a.failures()) {
    if (x.check == "quote.type.mismatch") {
      EXPECT_EQ(x.expected, "8018 (TPM_ST_ATTEST_QUOTE)");
      EXPECT_EQ(x.got, "8017");  // hex, as expected is
    }
  }
  for (const auto& c : a.passed()) EXPECT_FALSE(c.starts_with("quote.pcr")) << c;
  // A genuine signature and nonce over the wrong type: only the type fails.
  f.safe = 1;
  a = AppraiseQuote(h.ak, h.Quote(kNonce, f), Expect(kNonce));
  ASSERT_EQ(a.failures().size(), 1u) << a.Summary();
  EXPECT_EQ(a.failures()[0].check, "quote.type.mismatch");
  for (const char* c : {"quote.signature", "quote.extra_data", "quote.clock.safe"})
    EXPECT_NE(std::find(a.passed().begin(), a.passed().end(), c), a.passed().end()) << c;
  // A TPMS_ATTEST that does not parse still has its signature checked over its bytes.
  Bytes cut = h.Quote(kNonce).attest;
  cut.resize(cut.size() - 1);
  QuoteEvidence malformed{cut, SignAttest(h.key.get(), cut), h.pcrs};
  a = AppraiseQuote(h.ak, malformed, Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.attest.malformed")) << a.Summary();
  EXPECT_NE(std::find(a.passed().begin(), a.passed().end(), "quote.signature"), a.passed().end()) << a.Summary();
}

TEST(Quote, ReportedValuesMustBeExactlyTheSelectedSet) {
  Host h(MakeEcKey());
  QuoteEvidence ev = h.Quote(kNonce);
  ev.pcrs[alg::kSha256][8] = Bytes(32, 0);
  EXPECT_TRUE(AppraiseQuote(h.ak, ev, Expect(kNonce)).Failed("quote.pcr_values.unselected"));
  ev = h.Quote(kNonce);
  ev.pcrs[alg::kSha1].erase(10);
  EXPECT_TRUE(AppraiseQuote(h.ak, ev, Expect(kNonce)).Failed("quote.pcr_values.missing"));
  ev = h.Quote(kNonce);
  ev.pcrs[alg::kSha256][0].push_back(0);
  EXPECT_TRUE(AppraiseQuote(h.ak, ev, Expect(kNonce)).Failed("quote.pcr_values.size"));
}

TEST(Quote, NoSchemeOrHashDowngrade) {
  Host h(MakeRsaKey());  // AK scheme RSASSA/SHA-256
  // Signed with SHA-1 by the same key: a valid signature, but a weaker hash than the AK's.
  Appraisal a = AppraiseQuote(h.ak, h.Quote(kNonce, {}, 0x0014, 0x0004), Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.signature.hash.mismatch")) << a.Summary();
  EXPECT_TRUE(a.Failed("quote.signature.hash.weak")) << a.Summary();
  // RSA-PSS signature under an RSASSA AK.
  a = AppraiseQuote(h.ak, h.Quote(kNonce, {}, 0x0016), Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.signature.scheme.mismatch")) << a.Summary();
  // SHA-384 signature under a SHA-256 AK: also refused (the AK's scheme is fixed).
  a = AppraiseQuote(h.ak, h.Quote(kNonce, {}, 0x0014, 0x000C), Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.signature.hash.mismatch")) << a.Summary();
}

TEST(Quote, MalformedEvidenceIsAFindingNotAPass) {
  Host h(MakeEcKey());
  QuoteEvidence ev = h.Quote(kNonce);
  ev.attest.resize(ev.attest.size() - 1);
  Appraisal a = AppraiseQuote(h.ak, ev, Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.attest.malformed"));
  EXPECT_FALSE(a.ok());
  ev = h.Quote(kNonce);
  ev.signature.resize(3);
  a = AppraiseQuote(h.ak, ev, Expect(kNonce));
  EXPECT_TRUE(a.Failed("quote.signature.malformed"));
  EXPECT_FALSE(a.ok());
  EXPECT_FALSE(Appraisal().ok());  // nothing checked is not a pass
}

TEST(Quote, PcrDigestMatchesHandComputation) {
  PcrValues v;
  v[alg::kSha256][3] = Bytes(32, 3);
  v[alg::kSha256][1] = Bytes(32, 1);
  v[alg::kSha1][2] = Bytes(20, 2);
  auto sel = PcrSelection::FromString("sha1:2+sha256:3,1");
  auto d = ComputePcrDigest(alg::kSha256, *sel, v);
  ASSERT_TRUE(d.ok());
  // Selection order: sha1 bank first, then sha256 ascending (1 before 3).
  EXPECT_EQ(*d, Sha256(Cat(Cat(Bytes(20, 2), Bytes(32, 1)), Bytes(32, 3))));
  v[alg::kSha256].erase(3);
  EXPECT_FALSE(ComputePcrDigest(alg::kSha256, *sel, v).ok());
}

}  // namespace
}  // namespace enclave::attest
