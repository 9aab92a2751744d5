// Interop with an independent verifier: quotes made by attest/host verify with tpm2-tools'
// tpm2_checkquote (signature, qualifying data and PCR digest), and a wrong nonce or a
// changed PCR value makes it fail.
#include <gtest/gtest.h>

#include "enclave/attest/host/tpm.h"
#include "swtpm_fixture.h"
#include "test_util.h"

namespace enclave::attest::host {
namespace {

using testing::Bytes;
using testing::Hex;

TEST(CheckquoteInterop, QuotesFromThisLibraryVerifyWithTpm2Checkquote) {
  if (!testing::SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
  ASSERT_TRUE(testing::InPath("tpm2_checkquote")) << "tpm2_checkquote not installed: scripts/install-deps installs tpm2-tools";
  auto fixture = testing::SwtpmFixture::Start();
  ASSERT_TRUE(fixture.ok()) << fixture.status().ToString();
  const std::string dir = (*fixture)->dir();
  auto tpm = Tpm::Open((*fixture)->tcti());
  ASSERT_TRUE(tpm.ok()) << tpm.status().ToString();
  auto ek = (*tpm)->CreateEk(EkType::kEccP256);
  ASSERT_TRUE(ek.ok()) << ek.status().ToString();
  // Something measured into PCR 16 so the digest is not over zeros only.
  ASSERT_TRUE((*tpm)->ExtendPcr(16, 0x000B, testing::Sha(EVP_sha256(), {'x'})).ok());

  const PcrSelection sel = {{0x000B, {0, 7, 16}}, {0x0004, {10}}};
  const std::string sel_text = "sha256:0,7,16+sha1:10";
  for (AkType type : {AkType::kEccP256, AkType::kRsa2048}) {
    SCOPED_TRACE(std::string(AkTypeName(type)));
    auto blob = (*tpm)->CreateAk(*ek, type);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    auto ak = (*tpm)->LoadAk(*ek, *blob);
    ASSERT_TRUE(ak.ok()) << ak.status().ToString();
    Bytes nonce(32);
    crypto::RandomBytes(nonce);
    auto quote = (*tpm)->QuotePcrs(*ak, sel, nonce);
    ASSERT_TRUE(quote.ok()) << quote.status().ToString();
    auto values = (*tpm)->ReadPcrs(sel);
    ASSERT_TRUE(values.ok()) << values.status().ToString();
    Bytes pcrs;  // tpm2_pcrread's "values" layout: the digests in selection order
    for (const PcrValue& v : *values) pcrs.insert(pcrs.end(), v.digest.begin(), v.digest.end());
    auto pem = Tpm::PublicKeyPem(ak->pub().public_area);
    ASSERT_TRUE(pem.ok()) << pem.status().ToString();

    const std::string ak_pem = dir + "/ak.pem", msg = dir + "/quote.msg", sig = dir + "/quote.sig",
                      pcr_file = dir + "/pcrs.bin", bad_pcr_file = dir + "/pcrs-bad.bin", log = dir + "/checkquote.log";
    testing::WriteFileBytes(ak_pem, Bytes(pem->begin(), pem->end()));
    testing::WriteFileBytes(msg, quote->attest);
    testing::WriteFileBytes(sig, quote->signature);
    testing::WriteFileBytes(pcr_file, pcrs);
    auto check = [&](const std::string& pcr_path, const Bytes& q) {
      return testing::RunTool({"tpm2_checkquote", "-u", ak_pem, "-m", msg, "-s", sig, "-f", pcr_path, "-l", sel_text,
                               "-g", "sha256", "-q", Hex(q)},
                              log);
    };
    auto ok = check(pcr_file, nonce);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    // The TPM2B_PUBLIC form of the key is accepted too.
    const std::string ak_pub = dir + "/ak.pub";
    testing::WriteFileBytes(ak_pub, ak->pub().public_area);
    auto tss = testing::RunTool({"tpm2_checkquote", "-u", ak_pub, "-m", msg, "-s", sig, "-f", pcr_file, "-l",
                                 sel_text, "-g", "sha256", "-q", Hex(nonce)},
                                log);
    EXPECT_EQ(tss.exit_code, 0) << tss.output;

    Bytes other_nonce = nonce;
    other_nonce[0] ^= 1;
    auto wrong_nonce = check(pcr_file, other_nonce);
    EXPECT_NE(wrong_nonce.exit_code, 0) << "tpm2_checkquote accepted a wrong nonce: " << wrong_nonce.output;
    EXPECT_NE(wrong_nonce.output.find("Error validating nonce"), std::string::npos) << wrong_nonce.output;
    Bytes bad = pcrs;
    bad[40] ^= 1;  // inside the second sha256 value (PCR 7)
    testing::WriteFileBytes(bad_pcr_file, bad);
    auto wrong_pcr = check(bad_pcr_file, nonce);
    EXPECT_NE(wrong_pcr.exit_code, 0) << "tpm2_checkquote accepted a changed PCR value: " << wrong_pcr.output;
    EXPECT_NE(wrong_pcr.output.find("PCR values failed to match"), std::string::npos) << wrong_pcr.output;
  }
}

}  // namespace
}  // namespace enclave::attest::host
