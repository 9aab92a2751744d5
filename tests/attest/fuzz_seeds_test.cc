// The valid-* seeds of the fuzz_attest_* targets (tests/fuzz/corpus/attest_*/) must
// still parse, so a format change cannot silently turn them into rejected inputs.
#include <gtest/gtest.h>

#include <filesystem>

#include "enclave/attest/ak_key.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/tpm2_tools.h"
#include "enclave/attest/ima_log.h"
#include "enclave/attest/measurements.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/files.h"

namespace enclave::attest {
namespace {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, std::vector<uint8_t>>> ValidSeeds(const std::string& name) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  fs::path dir = fs::path(ENCLAVE_FUZZ_CORPUS) / name;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("valid-", 0) != 0) continue;
    auto b = ReadWholeFile(e.path().string(), 1 << 20);
    if (b.ok()) out.emplace_back(e.path().filename().string(), *b);
  }
  return out;
}

TEST(AttestFuzzSeeds, ValidSeedsParse) {
  auto attest = ValidSeeds("attest_tpms_attest");
  ASSERT_GE(attest.size(), 4u);
  for (const auto& [name, b] : attest) {
    bool ok = ParseTpmsAttest(b).ok() || ParseTpm2bAttest(b).ok() || ParseTpmtSignature(b).ok();
    EXPECT_TRUE(ok) << name;
  }
  auto pub = ValidSeeds("attest_tpm2b_public");
  ASSERT_GE(pub.size(), 3u);
  for (const auto& [name, b] : pub) EXPECT_TRUE(ParseTpm2bPublic(b).ok() || ParseTpmtPublic(b).ok()) << name;
  auto logs = ValidSeeds("attest_eventlog");
  ASSERT_GE(logs.size(), 3u);
  for (const auto& [name, b] : logs) {
    auto log = ParseEventLog(b);
    ASSERT_TRUE(log.ok()) << name << ": " << log.status().ToString();
    EXPECT_TRUE(ReplayEventLog(*log).ok()) << name;
  }
  auto policies = ValidSeeds("attest_policy");
  ASSERT_GE(policies.size(), 3u);
  for (const auto& [name, b] : policies) {
    auto p = ParsePolicyText(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), "/base");
    EXPECT_TRUE(p.ok()) << name << ": " << p.status().ToString();
  }
  auto boots = ValidSeeds("attest_measurements");
  ASSERT_GE(boots.size(), 3u);
  for (const auto& [name, b] : boots) {
    EXPECT_TRUE(ParseEventLogView(b).ok() || ParseUefiVariable(b).ok()) << name;
  }
  auto third = ValidSeeds("attest_third_party");  // selector byte first (fuzz_attest_third_party.cc)
  ASSERT_GE(third.size(), 5u);
  for (const auto& [name, b] : third) {
    ASSERT_FALSE(b.empty()) << name;
    ByteSpan in(b.data() + 1, b.size() - 1);
    const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
    bool ok = false;
    switch (b[0]) {
      case 0: ok = ParseTpm2ToolsPcrSerialized(in).ok(); break;
      case 1: ok = ParseTpm2ToolsPcrValues(in, *PcrSelection::FromString("sha256:0,7+sha1:7")).ok(); break;
      case 2: ok = AkKeyFromSpki(in).ok(); break;
      case 3: ok = PemBlock(text, "PUBLIC KEY").ok() && AkKeyFromSpki(*PemBlock(text, "PUBLIC KEY")).ok(); break;
    }
    EXPECT_TRUE(ok) << name;
  }
  // fuzz_attest_golden: options byte, u32 LE log length, a boot log that parses, an IMA list.
  auto golden = ValidSeeds("attest_golden");
  ASSERT_GE(golden.size(), 3u);
  for (const auto& [name, b] : golden) {
    ASSERT_GE(b.size(), 5u) << name;
    const size_t n = b[1] | (b[2] << 8) | (b[3] << 16) | (size_t{b[4]} << 24);
    ASSERT_LE(5 + n, b.size()) << name;
    EXPECT_TRUE(ParseEventLogView(ByteSpan(b.data() + 5, n)).ok()) << name;
    const std::string_view ima(reinterpret_cast<const char*>(b.data()) + 5 + n, b.size() - 5 - n);
    EXPECT_TRUE(ima.empty() || ParseImaLog(ima).ok()) << name;
  }
  auto ima = ValidSeeds("attest_ima");
  ASSERT_GE(ima.size(), 2u);
  for (const auto& [name, b] : ima) {
    EXPECT_TRUE(ParseImaLog(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())).ok()) << name;
  }
}

}  // namespace
}  // namespace enclave::attest
