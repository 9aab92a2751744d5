// The readers for third-party evidence (issue 20 §1): tpm2-tools PCR files (values and
// serialized, encoded here from tpm2-tools 5.4's in-memory layout, independently of
// attest/), AK public keys and PEM blocks, and quote appraisal with a key-only AK.
#include <gtest/gtest.h>

#include "boot_fixture.h"
#include "enclave/attest/ak_key.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm2_tools.h"

namespace enclave::attest {
namespace {

using namespace attest_test;

// tpm2-tools "serialized": TPML_PCR_SELECTION (132 bytes) || u32 n || n TPML_DIGEST (532 bytes).
Bytes Serialized(const std::vector<Sel>& sel, const std::vector<Bytes>& digests, size_t per_list = 8) {
  Le w;
  w.u32(uint32_t(sel.size()));
  for (size_t s = 0; s < 16; ++s) {
    if (s >= sel.size()) {
      w.raw(Bytes(8, 0));
      continue;
    }
    uint8_t bits[4] = {0, 0, 0, 0};
    for (uint32_t i : sel[s].pcrs) bits[i / 8] |= uint8_t(1u << (i % 8));
    w.u16(sel[s].hash).u8(3).u8(bits[0]).u8(bits[1]).u8(bits[2]).u8(bits[3]).u8(0);
  }
  const size_t lists = (digests.size() + per_list - 1) / per_list;
  w.u32(uint32_t(lists));
  for (size_t l = 0; l < lists; ++l) {
    const size_t first = l * per_list, count = std::min(per_list, digests.size() - first);
    w.u32(uint32_t(count));
    for (size_t d = 0; d < 8; ++d) {
      Bytes buffer(64, 0);
      uint16_t size = 0;
      if (d < count) {
        const Bytes& v = digests[first + d];
        std::copy(v.begin(), v.end(), buffer.begin());
        size = uint16_t(v.size());
      }
      w.u16(size).raw(buffer);
    }
  }
  return w.b;
}

struct Values {
  std::vector<Sel> sel = {{0x000B, {0, 7}}, {0x0004, {7}}};  // as tpm2_quote -l sha256:0,7+sha1:7
  std::vector<Bytes> digests = {Sha256(Bytes{0}), Sha256(Bytes{7}), Sha1(Bytes{7})};
};

TEST(Tpm2ToolsPcrs, SerializedFileReadsInSelectionOrder) {
  Values v;
  Bytes file = Serialized(v.sel, v.digests);
  ASSERT_EQ(file.size(), 668u);  // what tpm2_quote -F serialized writes for this selection
  auto pcrs = ParseTpm2ToolsPcrSerialized(file);
  ASSERT_TRUE(pcrs.ok()) << pcrs.status().ToString();
  EXPECT_EQ((*pcrs)[alg::kSha256][0], v.digests[0]);
  EXPECT_EQ((*pcrs)[alg::kSha256][7], v.digests[1]);
  EXPECT_EQ((*pcrs)[alg::kSha1][7], v.digests[2]);
  EXPECT_EQ(pcrs->size(), 2u);
  // More than 8 values span several TPML_DIGESTs, and any split is read the same.
  std::vector<Bytes> many;
  std::vector<uint32_t> all;
  for (uint32_t i = 0; i < 24; ++i) {
    all.push_back(i);
    many.push_back(Sha256(Bytes{uint8_t(i)}));
  }
  for (size_t per_list : {size_t{8}, size_t{5}}) {
    auto big = ParseTpm2ToolsPcrSerialized(Serialized({{0x000B, all}}, many, per_list));
    ASSERT_TRUE(big.ok()) << big.status().ToString();
    EXPECT_EQ((*big)[alg::kSha256][23], many[23]);
  }
}

TEST(Tpm2ToolsPcrs, SerializedFileIsReadExactly) {
  Values v;
  const Bytes good = Serialized(v.sel, v.digests);
  auto fails = [](const Bytes& b, const std::string& what) {
    auto r = ParseTpm2ToolsPcrSerialized(b);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find("tpm2-tools serialized PCR file"), std::string::npos) << r.status().message();
  };
  Bytes b = good;
  b.push_back(0);
  fails(b, "a byte too many");
  fails(Bytes(good.begin(), good.end() - 1), "a byte short");
  b = good;
  b[0] = 0;
  fails(b, "no bank");
  b = good;
  b[4 + 7] = 1;
  fails(b, "padding byte set");
  b = good;
  b[4 + 2 * 8] = 0x0C;
  fails(b, "an unused selection slot set");
  b = good;
  b[4 + 8] = 0x0B;
  fails(b, "a bank twice");
  b = good;
  b[4 + 6] = 1;
  fails(b, "PCR 24 selected");
  b = good;
  b[4 + 8] = 0x12;
  fails(b, "an unknown bank");
  fails(Serialized(v.sel, {v.digests[0], v.digests[1]}), "a value missing");
  fails(Serialized(v.sel, {v.digests[0], v.digests[1], v.digests[2], v.digests[2]}), "a value too many");
  fails(Serialized(v.sel, {v.digests[0], v.digests[2], v.digests[1]}), "a digest of the wrong size for its bank");
  b = good;
  b[136 + 4 + 66 * 3] = 1;  // the unused fourth TPM2B_DIGEST slot
  fails(b, "an unused digest slot set");
  b = good;
  b[136 + 4 + 66 * 2 + 2 + 20] = 1;  // past sha1 PCR 7's 20 bytes
  fails(b, "bytes past a digest set");
}

TEST(Tpm2ToolsPcrs, ValuesFileFollowsTheQuotedSelection) {
  Values v;
  Bytes file = Cat(Cat(v.digests[0], v.digests[1]), v.digests[2]);
  auto order = PcrSelection::FromString("sha256:0,7+sha1:7");
  ASSERT_TRUE(order.ok());
  auto pcrs = ParseTpm2ToolsPcrValues(file, *order);
  ASSERT_TRUE(pcrs.ok()) << pcrs.status().ToString();
  EXPECT_EQ((*pcrs)[alg::kSha1][7], v.digests[2]);
  EXPECT_FALSE(ParseTpm2ToolsPcrValues(Cat(file, Bytes{0}), *order).ok());
  auto short_file = ParseTpm2ToolsPcrValues(Bytes(file.begin(), file.end() - 1), *order);
  ASSERT_FALSE(short_file.ok());
  EXPECT_NE(short_file.status().message().find("sha1 PCR 7"), std::string::npos) << short_file.status().message();
}

TEST(AkKey, SubjectPublicKeyInfoGivesTheKeyOnly) {
  for (bool ec : {true, false}) {
    Pkey key = ec ? MakeEcKey() : MakeRsaKey();
    auto tpm = ParseTpmtPublic(EncodeAkPublic(key.get()));
    auto only = AkKeyFromSpki(SpkiDer(key.get()));
    ASSERT_TRUE(tpm.ok() && only.ok()) << only.status().ToString();
    EXPECT_EQ(only->type, tpm->type);
    EXPECT_EQ(only->ecc_curve, tpm->ecc_curve);
    EXPECT_EQ(only->ecc_x, tpm->ecc_x);
    EXPECT_EQ(only->ecc_y, tpm->ecc_y);
    EXPECT_EQ(only->rsa_modulus, tpm->rsa_modulus);
    EXPECT_EQ(only->rsa_key_bits, tpm->rsa_key_bits);
    EXPECT_EQ(only->rsa_exponent, tpm->rsa_exponent);
    EXPECT_EQ(only->object_attributes, 0u);  // nothing but the key is known
    EXPECT_TRUE(only->encoded.empty());
  }
  Pkey ec = MakeEcKey();
  EXPECT_FALSE(AkKeyFromSpki(Cat(SpkiDer(ec.get()), Bytes{0})).ok());
  Pkey ed(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free);
  EXPECT_FALSE(AkKeyFromSpki(SpkiDer(ed.get())).ok());
  Pkey k1 = MakeEcKey("secp256k1");
  EXPECT_FALSE(AkKeyFromSpki(SpkiDer(k1.get())).ok());
}

TEST(AkKey, PemBlockIsExactlyOneBlockOfItsLabel) {
  const std::string pem = "-----BEGIN PUBLIC KEY-----\nAAEC\n-----END PUBLIC KEY-----\n";
  auto der = PemBlock("\n" + pem, "PUBLIC KEY");
  ASSERT_TRUE(der.ok()) << der.status().ToString();
  EXPECT_EQ(*der, (Bytes{0x00, 0x01, 0x02}));
  EXPECT_FALSE(PemBlock(pem, "CERTIFICATE").ok());
  EXPECT_FALSE(PemBlock("junk\n" + pem, "PUBLIC KEY").ok());
  EXPECT_FALSE(PemBlock(pem + pem, "PUBLIC KEY").ok());
  EXPECT_FALSE(PemBlock(pem + "trailing", "PUBLIC KEY").ok());
  EXPECT_FALSE(PemBlock("-----BEGIN PUBLIC KEY-----\nAAEC\n", "PUBLIC KEY").ok());
  EXPECT_FALSE(
      PemBlock("-----BEGIN PUBLIC KEY-----\nProc-Type: 4,ENCRYPTED\n\nAAEC\n-----END PUBLIC KEY-----\n", "PUBLIC KEY")
          .ok());
}

// A quote checked with a key-only AK: what the key supports is checked, the rest is not
// evaluated, and a downgrade that the AK's scheme would have refused is named as such.
TEST(AkKey, KeyOnlyQuoteAppraisal) {
  Pkey key = MakeRsaKey();
  auto ak = AkKeyFromSpki(SpkiDer(key.get()));
  ASSERT_TRUE(ak.ok());
  AttestFields f;
  f.extra = Bytes(20, 0x4B);
  f.sel = {{0x000B, {0}}};
  f.pcr_digest = Sha256(Bytes(32, 0));
  QuoteEvidence ev;
  ev.attest = EncodeAttest(f);
  ev.pcrs[alg::kSha256][0] = Bytes(32, 0);
  QuoteExpectations e;
  e.extra_data = f.extra;
  e.selection = *PcrSelection::FromString("sha256:0");
  e.ak_known = AkKnowledge::kKeyOnly;
  for (uint16_t scheme : {uint16_t{0x0014}, uint16_t{0x0016}}) {  // RSASSA and RSA-PSS: either fits the key
    ev.signature = SignAttest(key.get(), ev.attest, scheme);
    Appraisal a = AppraiseQuote(*ak, ev, e);
    EXPECT_TRUE(a.ok()) << a.Summary();
    EXPECT_EQ(a.not_evaluated().size(), 6u);
  }
  ev.signature = SignAttest(key.get(), ev.attest, 0x0014, 0x0004);  // SHA-1: weak whatever the scheme
  EXPECT_TRUE(AppraiseQuote(*ak, ev, e).Failed("quote.signature.hash.weak"));
  // The same quote under the key's TPMT_PUBLIC checks everything (nothing not evaluated).
  auto full = ParseTpmtPublic(EncodeAkPublic(key.get()));
  ev.signature = SignAttest(key.get(), ev.attest);
  e.ak_known = AkKnowledge::kTpmPublic;
  Appraisal a = AppraiseQuote(*full, ev, e);
  EXPECT_TRUE(a.ok()) << a.Summary();
  EXPECT_TRUE(a.not_evaluated().empty());
  // A small RSA key is refused from the key alone.
  Pkey small = MakeRsaKey(1024);
  auto small_ak = AkKeyFromSpki(SpkiDer(small.get()));
  ASSERT_TRUE(small_ak.ok());
  e.ak_known = AkKnowledge::kKeyOnly;
  ev.signature = SignAttest(small.get(), ev.attest);
  EXPECT_TRUE(AppraiseQuote(*small_ak, ev, e).Failed("ak.rsa.key_bits.too_small"));
}

}  // namespace
}  // namespace enclave::attest
