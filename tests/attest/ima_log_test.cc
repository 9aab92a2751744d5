// IMA ima-ng log: parsing, template-data validation and PCR 10 replay, against the
// synthetic log whose values make_eventlog.py computed with hashlib.
#include "enclave/attest/ima_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attest_test_util.h"
#include "enclave/common/files.h"

namespace enclave::attest {
namespace {

using namespace attest_test;

std::string ImaText() {
  auto b = ReadWholeFile(std::string(ENCLAVE_TEST_DATA) + "/attest/synthetic_ima_ng.txt", 1 << 20);
  if (!b.ok()) throw std::runtime_error(b.status().ToString());
  return std::string(b->begin(), b->end());
}

nlohmann::json Expected() {
  auto b = ReadWholeFile(std::string(ENCLAVE_TEST_DATA) + "/attest/synthetic_expected.json", 1 << 20);
  return nlohmann::json::parse(b->begin(), b->end())["ima"];
}

TEST(ImaLog, SyntheticLogReplaysToHashlibValues) {
  auto log = ParseImaLog(ImaText());
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  auto e = Expected();
  ASSERT_EQ(log->entries.size(), e["entries"].get<size_t>());
  EXPECT_EQ(log->entries[1].path, "/usr/bin/enclave-train");
  EXPECT_EQ(log->entries[1].file_digest_alg, alg::kSha256);
  EXPECT_EQ(log->entries[1].file_digest, Sha256(StrBytes("#!/bin/sh\necho trainer\n")));
  EXPECT_EQ(log->entries[4].path, "/opt/app/my file.bin");
  for (uint16_t bank : {alg::kSha1, alg::kSha256, alg::kSha384}) {
    auto pcr = ReplayImaLog(*log, bank);
    ASSERT_TRUE(pcr.ok());
    EXPECT_EQ(HexEncode(*pcr), e["pcr10"][AlgName(bank)].get<std::string>()) << AlgName(bank);
  }
  PcrValues quoted;
  quoted[alg::kSha256][10] = *HexDecode(e["pcr10"]["sha256"].get<std::string>());
  EXPECT_TRUE(CompareImaWithQuote(*log, quoted, false).ok());
  quoted[alg::kSha256][10][0] ^= 1;
  EXPECT_TRUE(CompareImaWithQuote(*log, quoted, false).Failed("ima.pcr.mismatch"));
  EXPECT_TRUE(CompareImaWithQuote(*log, {}, false).Failed("ima.pcr.not_quoted"));
}

TEST(ImaLog, TemplateDataLayout) {
  // d-ng: u32le(len("sha256") + 2 + 32) "sha256" ':' '\0' digest; n-ng: u32le(len+1) path '\0'.
  Bytes digest(32, 0xAA);
  Le w;
  w.u32(6 + 2 + 32).str("sha256").u8(':').u8(0).raw(digest).u32(5).str("/bin").u8(0);
  EXPECT_EQ(ImaNgTemplateData("sha256", digest, "/bin"), w.b);
}

std::string Line(const std::string& algo, const Bytes& digest, const std::string& path) {
  Bytes data = ImaNgTemplateData(algo, digest, path);
  return "10 " + HexEncode(Sha1(data)) + " ima-ng " + algo + ":" + HexEncode(digest) + " " + path + "\n";
}

TEST(ImaLog, ChangedFileDigestOrPathIsRejectedWithTheLine) {
  std::string text = ImaText();
  // Claim another file digest for the trainer without fixing the template hash.
  std::string trainer = HexEncode(Sha256(StrBytes("#!/bin/sh\necho trainer\n")));
  std::string forged = text;
  forged.replace(forged.find(trainer), 2, trainer[0] == 'a' ? "bb" : "aa");
  auto log = ParseImaLog(forged);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("line 2"), std::string::npos) << log.status().message();
  EXPECT_NE(log.status().message().find("template hash"), std::string::npos);
  std::string renamed = text;
  renamed.replace(renamed.find("/usr/bin/enclave-train"), 22, "/usr/bin/enclave-trail");
  EXPECT_FALSE(ParseImaLog(renamed).ok());
  // A consistent line with a changed digest parses but no longer replays to the quote.
  auto e = Expected();
  std::string consistent = Line("sha256", Bytes(32, 0x01), "/usr/bin/enclave-train");
  size_t start = text.find('\n') + 1, end = text.find('\n', start) + 1;
  std::string swapped = text.substr(0, start) + consistent + text.substr(end);
  auto sl = ParseImaLog(swapped);
  ASSERT_TRUE(sl.ok()) << sl.status().ToString();
  PcrValues quoted;
  quoted[alg::kSha256][10] = *HexDecode(e["pcr10"]["sha256"].get<std::string>());
  EXPECT_TRUE(CompareImaWithQuote(*sl, quoted, false).Failed("ima.pcr.mismatch"));
}

TEST(ImaLog, ViolationsExtendAllOnesAndAreReported) {
  std::string violation = "10 " + std::string(40, '0') + " ima-ng sha256:" + std::string(64, '0') + " /tmp/busy\n";
  std::string text = Line("sha256", Bytes(32, 7), "/a") + violation;
  auto log = ParseImaLog(text);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_TRUE(log->entries[1].violation);
  Bytes pcr(32, 0);
  pcr = Sha256(Cat(pcr, Sha256(ImaNgTemplateData("sha256", Bytes(32, 7), "/a"))));
  pcr = Sha256(Cat(pcr, Bytes(32, 0xFF)));
  EXPECT_EQ(*ReplayImaLog(*log, alg::kSha256), pcr);
  PcrValues quoted;
  quoted[alg::kSha256][10] = pcr;
  EXPECT_TRUE(CompareImaWithQuote(*log, quoted, false).Failed("ima.violation"));
  EXPECT_TRUE(CompareImaWithQuote(*log, quoted, true).ok());
}

TEST(ImaLog, MalformedLinesAreRejected) {
  std::string ok = Line("sha256", Bytes(32, 7), "/a");
  EXPECT_TRUE(ParseImaLog(ok).ok());
  for (std::string bad : {
           std::string(""),                        // no entries
           ok.substr(0, ok.size() - 1),            // no final newline
           ok + "\n",                              // empty line
           "11" + ok.substr(2),                    // not PCR 10
           ok.substr(0, 3) + "zz" + ok.substr(5),  // template hash not hex
           "10 " + std::string(40, '0') + " ima-sig sha256:" + std::string(64, '0') + " /x \n",  // other template
           "10 " + std::string(40, '0') + " ima-ng md5:" + std::string(32, '0') + " /x\n",       // unknown algo
           "10 " + std::string(40, '0') + " ima-ng sha256:" + std::string(62, '0') + " /x\n",    // short digest
           "10 " + std::string(40, '0') + " ima-ng sha256" + std::string(64, '0') + " /x\n",     // no colon
           ok.substr(0, ok.size() - 1) + "\r\n",                                                 // CR
       }) {
    EXPECT_FALSE(ParseImaLog(bad).ok()) << bad;
  }
  // SHA-256 template-hash column (ascii_runtime_measurements_sha256).
  Bytes data = ImaNgTemplateData("sha256", Bytes(32, 7), "/a");
  std::string l256 = "10 " + HexEncode(Sha256(data)) + " ima-ng sha256:" + HexEncode(Bytes(32, 7)) + " /a\n";
  EXPECT_TRUE(ParseImaLog(l256, alg::kSha256).ok());
  EXPECT_FALSE(ParseImaLog(l256, alg::kSha1).ok());
}

}  // namespace
}  // namespace enclave::attest
