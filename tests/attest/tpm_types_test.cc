// Known-structure tests: TPMS_ATTEST, TPM2B_PUBLIC / TPMT_PUBLIC, TPMT_SIGNATURE and
// TPML_PCR_SELECTION built by the test-side encoder (attest_test_util.h), parsed by attest/.
#include "enclave/attest/tpm_types.h"

#include <gtest/gtest.h>

#include "attest_test_util.h"

namespace enclave::attest {
namespace {

using namespace attest_test;

AttestFields SampleQuote() {
  AttestFields f;
  f.extra = Bytes(32, 0x11);
  f.sel = {{0x000B, {0, 1, 7, 23}}, {0x0004, {10}}};
  f.pcr_digest = Bytes(32, 0x22);
  return f;
}

TEST(TpmsAttest, ParsesEveryField) {
  AttestFields f = SampleQuote();
  Bytes b = EncodeAttest(f);
  auto a = ParseTpmsAttest(b);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->magic, 0xFF544347u);
  EXPECT_EQ(a->type, 0x8018);
  EXPECT_EQ(a->qualified_signer, f.signer);
  EXPECT_EQ(a->extra_data, f.extra);
  EXPECT_EQ(a->clock_info.clock, 1000u);
  EXPECT_EQ(a->clock_info.reset_count, 5u);
  EXPECT_EQ(a->clock_info.restart_count, 2u);
  EXPECT_EQ(a->clock_info.safe, 1);
  EXPECT_EQ(a->firmware_version, f.firmware);
  ASSERT_EQ(a->quote_selection.banks.size(), 2u);
  EXPECT_EQ(a->quote_selection.banks[0].hash, 0x000B);
  EXPECT_EQ(PcrSelection::Indices(a->quote_selection.banks[0]), (std::vector<uint32_t>{0, 1, 7, 23}));
  EXPECT_EQ(PcrSelection::Indices(a->quote_selection.banks[1]), (std::vector<uint32_t>{10}));
  EXPECT_EQ(a->quote_selection.ToString(), "sha256:0,1,7,23+sha1:10");
  EXPECT_EQ(a->quote_pcr_digest, f.pcr_digest);
  EXPECT_EQ(EncodeTpmsAttest(*a), b);  // library encoder agrees with the test encoder
  Bytes sized = Be().u16(uint16_t(b.size())).raw(b).b;
  EXPECT_TRUE(ParseTpm2bAttest(sized).ok());
}

TEST(TpmsAttest, EveryTruncationFailsNamingAField) {
  Bytes b = EncodeAttest(SampleQuote());
  for (size_t n = 0; n < b.size(); ++n) {
    auto a = ParseTpmsAttest(ByteSpan(b.data(), n));
    ASSERT_FALSE(a.ok()) << "accepted a truncation to " << n;
    EXPECT_NE(a.status().message().find("TPMS_ATTEST"), std::string::npos) << a.status().message();
  }
}

TEST(TpmsAttest, RejectsTrailingBytesOversizedFieldsAndBadSelection) {
  Bytes b = EncodeAttest(SampleQuote());
  b.push_back(0);
  auto a = ParseTpmsAttest(b);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("trailing"), std::string::npos);

  AttestFields f = SampleQuote();
  f.extra = Bytes(67, 1);  // TPM2B_DATA holds at most 66
  a = ParseTpmsAttest(EncodeAttest(f));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("TPMS_ATTEST.extraData.size"), std::string::npos) << a.status().message();

  f = SampleQuote();
  f.safe = 2;  // TPMI_YES_NO
  a = ParseTpmsAttest(EncodeAttest(f));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("clockInfo.safe"), std::string::npos);

  f = SampleQuote();
  f.sel = {{0x000B, {1}}, {0x000B, {2}}};  // a bank twice
  a = ParseTpmsAttest(EncodeAttest(f));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("pcrSelections[1].hash"), std::string::npos) << a.status().message();

  // sizeofSelect 5 is beyond what this verifier accepts.
  Be w;
  w.u32(1).u16(0x000B).u8(5).raw(Bytes(5, 0xFF));
  auto s = ParsePcrSelection(w.b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("sizeofSelect"), std::string::npos);
}

TEST(TpmsAttest, OtherTypesKeepTheirBodyAndMagicIsNotJudgedByTheParser) {
  AttestFields f = SampleQuote();
  f.magic = 0x12345678;
  f.type = 0x8017;  // TPM_ST_ATTEST_CERTIFY
  auto a = ParseTpmsAttest(EncodeAttest(f));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->magic, 0x12345678u);
  EXPECT_TRUE(a->quote_selection.banks.empty());
  EXPECT_FALSE(a->other_attested.empty());
}

TEST(TpmtPublic, EccAkFieldsAndName) {
  Pkey key = MakeEcKey();
  Bytes pub = EncodeAkPublic(key.get());
  auto p = ParseTpmtPublic(pub);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->type, 0x0023);
  EXPECT_EQ(p->name_alg, 0x000B);
  EXPECT_EQ(p->object_attributes, kAkAttributes);
  EXPECT_EQ(ObjectAttributesString(p->object_attributes),
            "fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign");
  EXPECT_EQ(p->symmetric.algorithm, 0x0010);
  EXPECT_EQ(p->scheme.scheme, 0x0018);
  EXPECT_EQ(p->scheme.hash, 0x000B);
  EXPECT_EQ(p->ecc_curve, 0x0003);
  EXPECT_EQ(p->ecc_kdf.scheme, 0x0010);
  EXPECT_EQ(p->ecc_x.size(), 32u);
  EXPECT_EQ(p->ecc_y.size(), 32u);
  EXPECT_EQ(EncodeTpmtPublic(*p), pub);
  // Name = nameAlg (big-endian) || SHA-256(TPMT_PUBLIC), computed here with OpenSSL.
  auto name = ComputeName(*p);
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(*name, Cat(Bytes{0x00, 0x0B}, Sha256(pub)));
  // TPM2B_PUBLIC: the size prefix must match exactly.
  Bytes sized = Be().u16(uint16_t(pub.size())).raw(pub).b;
  EXPECT_TRUE(ParseTpm2bPublic(sized).ok());
  sized[1] ^= 1;
  EXPECT_FALSE(ParseTpm2bPublic(sized).ok());
}

TEST(TpmtPublic, RsaAkFields) {
  Pkey key = MakeRsaKey(2048);
  Bytes pub = EncodeAkPublic(key.get());
  auto p = ParseTpmtPublic(pub);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->type, 0x0001);
  EXPECT_EQ(p->scheme.scheme, 0x0014);
  EXPECT_EQ(p->rsa_key_bits, 2048);
  EXPECT_EQ(p->rsa_exponent, 0u);
  EXPECT_EQ(p->rsa_modulus.size(), 256u);
  EXPECT_EQ(EncodeTpmtPublic(*p), pub);
}

TEST(TpmtPublic, RsaesSchemeHasNoHashAndEcdaaHasACount) {
  // RSA decryption key (EK-like): symmetric AES-128-CFB, scheme RSAES (no details).
  Be w;
  w.u16(0x0001)
      .u16(0x000B)
      .u32(0x000300B2)
      .tpm2b(Bytes(32, 0x83))
      .u16(0x0006)
      .u16(128)
      .u16(0x0043)
      .u16(0x0015)
      .u16(2048)
      .u32(0)
      .tpm2b(Bytes(256, 0xC5));
  auto p = ParseTpmtPublic(w.b);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->symmetric.algorithm, 0x0006);
  EXPECT_EQ(p->symmetric.key_bits, 128);
  EXPECT_EQ(p->scheme.scheme, 0x0015);
  EXPECT_EQ(p->scheme.hash, 0);
  Be e;
  e.u16(0x0023)
      .u16(0x000B)
      .u32(kAkAttributes)
      .tpm2b({})
      .u16(0x0010)
      .u16(0x001A)
      .u16(0x000B)
      .u16(7)
      .u16(0x0003)
      .u16(0x0010)
      .tpm2b(Bytes(32, 1))
      .tpm2b(Bytes(32, 2));
  auto q = ParseTpmtPublic(e.b);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->scheme.count, 7);
}

TEST(TpmtPublic, RejectsTruncationUnknownTypesAndSchemes) {
  Pkey key = MakeEcKey();
  Bytes pub = EncodeAkPublic(key.get());
  for (size_t n = 0; n < pub.size(); ++n) {
    auto p = ParseTpmtPublic(ByteSpan(pub.data(), n));
    ASSERT_FALSE(p.ok()) << n;
    EXPECT_NE(p.status().message().find("TPMT_PUBLIC"), std::string::npos) << p.status().message();
  }
  Bytes keyedhash = pub;
  keyedhash[0] = 0x00;
  keyedhash[1] = 0x08;
  auto p = ParseTpmtPublic(keyedhash);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kUnsupported);
  AkOptions o;
  o.scheme = 0x0099;
  p = ParseTpmtPublic(EncodeAkPublic(key.get(), o));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("eccDetail.scheme"), std::string::npos) << p.status().message();
  Bytes big = pub;
  big.push_back(0);
  EXPECT_FALSE(ParseTpmtPublic(big).ok());
}

TEST(TpmtSignature, EcdsaRsassaAndRejections) {
  Pkey ec = MakeEcKey();
  Bytes sig = SignAttest(ec.get(), Bytes{1, 2, 3});
  auto s = ParseTpmtSignature(sig);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->sig_alg, 0x0018);
  EXPECT_EQ(s->hash, 0x000B);
  EXPECT_EQ(s->ecc_r.size(), 32u);
  EXPECT_EQ(EncodeTpmtSignature(*s), sig);
  Pkey rsa = MakeRsaKey();
  Bytes rsig = SignAttest(rsa.get(), Bytes{1, 2, 3});
  auto r = ParseTpmtSignature(rsig);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sig_alg, 0x0014);
  EXPECT_EQ(r->rsa_signature.size(), 256u);
  for (size_t n = 0; n < sig.size(); ++n) EXPECT_FALSE(ParseTpmtSignature(ByteSpan(sig.data(), n)).ok()) << n;
  Bytes hmac = Be().u16(0x0005).u16(0x000B).raw(Bytes(32, 0)).b;
  auto h = ParseTpmtSignature(hmac);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Code::kUnsupported);
}

TEST(PcrSelection, FromStringRoundTrip) {
  auto s = PcrSelection::FromString("sha256:0,1,2,7+sha1:10");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "sha256:0,1,2,7+sha1:10");
  EXPECT_FALSE(PcrSelection::FromString("sha256:24").ok());
  EXPECT_FALSE(PcrSelection::FromString("md5:1").ok());
  EXPECT_FALSE(PcrSelection::FromString("sha256:1+sha256:2").ok());
}

}  // namespace
}  // namespace enclave::attest
