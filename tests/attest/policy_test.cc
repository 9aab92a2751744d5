// Attestation policy parsing (attest/policy.h): every key read into the Policy, the strict
// rules (unknown keys, wrong types, duplicates, ranges, rules the quote cannot back) as
// errors naming the JSON path, the digest over the file bytes, and the example policies
// in policies/.
#include "enclave/attest/policy.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "boot_fixture.h"
#include "enclave/attest/enrolment.h"
#include "enclave/common/files.h"

#ifndef ENCLAVE_POLICIES_DIR
#error "ENCLAVE_POLICIES_DIR must name the repository's policies/ folder"
#endif

namespace enclave::attest {
namespace {

using namespace attest_test;
using json = nlohmann::json;

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "policy_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(getpid());
    WriteFile(dir_ + "/roots/root.pem", SelfSignedPem("Policy Test Root"));
    base_ = {
        {"version", 1},
        {"name", "t"},
        {"quote_pcrs", {{"sha256", {0, 4, 7, 8, 10}}}},
        {"ek_roots", {{"dir", "roots"}}},
        {"max_evidence_age_s", 120},
    };
  }
  Result<Policy> Parse(const json& j) { return ParsePolicy(j.dump(), dir_); }
  // Parsing fails and the message names `path`.
  void ExpectError(const json& j, const std::string& path) {
    auto p = Parse(j);
    ASSERT_FALSE(p.ok()) << j.dump();
    EXPECT_NE(p.status().message().find(path), std::string::npos) << p.status().message() << " lacks " << path;
  }
  std::string dir_;
  json base_;
};

// An enrolment whose AK has a nameAlg with no name here (SM3) is judged, not an error: the
// name is a finding beside what the AK checks find, so the operator sees every fault.
TEST_F(PolicyTest, AnEnrolmentWithAnAkOfAnUnknownNameAlgIsFindingsNotAnError) {
  auto p = Parse(base_);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pkey key = MakeEcKey();
  AkOptions sm3;
  sm3.name_alg = 0x0012;  // TPM_ALG_SM3_256
  const Bytes tpmt = EncodeAkPublic(key.get(), sm3);
  EnrolmentBundle e;
  e.ak_public = {static_cast<uint8_t>(tpmt.size() >> 8), static_cast<uint8_t>(tpmt.size())};
  e.ak_public.insert(e.ak_public.end(), tpmt.begin(), tpmt.end());
  e.ak_name = {0x00, 0x12};
  e.ek_public = {0x00, 0x00};
  auto a = AppraiseEnrolment(*p, e, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->Failed("enrolment.ak_name.uncomputable")) << a->Summary();
  EXPECT_TRUE(a->Failed("ak.name_alg.weak")) << a->Summary();
  EXPECT_FALSE(a->ok());
}

TEST_F(PolicyTest, MinimalPolicyAndDefaults) {
  auto p = Parse(base_);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "t");
  EXPECT_EQ(p->quote_selection.ToString(), "sha256:0,4,7,8,10");
  EXPECT_EQ(p->max_evidence_age_s, 120);
  EXPECT_EQ(p->ek_trust.roots.size(), 1u);
  EXPECT_TRUE(p->require_event_log);
  EXPECT_FALSE(p->require_secure_boot);
  EXPECT_FALSE(p->require_ima_log);
  EXPECT_EQ(p->ak.min_rsa_bits, 2048u);
  EXPECT_EQ(p->ak.min_hash, alg::kSha256);
  EXPECT_TRUE(p->JudgedPcrs().empty());
}

TEST_F(PolicyTest, EveryKeyIsRead) {
  json j = base_;
  std::string d32 = std::string(64, 'a'), d20 = std::string(40, 'b');
  j["quote_pcrs"]["sha1"] = {0};
  j["comment"] = "free text";
  j["ak"] = {{"min_rsa_bits", 3072}, {"ecc_curves", {"nist_p384"}}, {"min_hash", "sha384"}, {"comment", "x"}};
  j["event_log"] = {{"required", true}, {"exempt_pcrs", {10}}};
  j["pcr_values"] = {{"0", {{"sha256", {d32}}, {"sha1", {d20}}}}};
  j["event_digests"] = {{"4", {{"sha256", {d32}}}}};
  j["secure_boot"] = true;
  j["boot_applications"] = {{"sha256", {d32, std::string(64, 'c')}}};
  j["kernel_cmdlines"] = {"root=/dev/sda1 ro"};
  j["ima"] = {{"required", true},
              {"allow_violations", true},
              {"files", {{"/usr/bin/enclave-train", {{"digests", {"sha256:" + d32}}, {"required", false}}}}}};
  auto p = Parse(j);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ak.min_rsa_bits, 3072u);
  EXPECT_EQ(p->ak.ecc_curves, std::vector<uint16_t>{curve::kNistP384});
  EXPECT_EQ(p->ak.min_hash, alg::kSha384);
  EXPECT_EQ(p->log_exempt_pcrs, std::set<uint32_t>{10});
  EXPECT_EQ(p->pcr_values.at(0).at(alg::kSha1).size(), 1u);
  EXPECT_EQ(p->event_digests.at(4).at(alg::kSha256).size(), 1u);
  EXPECT_TRUE(p->require_secure_boot);
  EXPECT_EQ(p->boot_applications.at(alg::kSha256).size(), 2u);
  EXPECT_EQ(p->kernel_cmdlines, std::vector<std::string>{"root=/dev/sda1 ro"});
  EXPECT_TRUE(p->require_ima_log);
  EXPECT_TRUE(p->ima_allow_violations);
  ASSERT_EQ(p->ima_files.size(), 1u);
  EXPECT_EQ(p->ima_files[0].path, "/usr/bin/enclave-train");
  EXPECT_FALSE(p->ima_files[0].required);
  EXPECT_EQ(p->JudgedPcrs(), (std::set<uint32_t>{0, 4, 7, 8}));
}

TEST_F(PolicyTest, DigestIsSha256OfTheBytes) {
  std::string text = base_.dump(2);
  auto p = ParsePolicy(text, dir_);
  ASSERT_TRUE(p.ok());
  Bytes want = Sha256(StrBytes(text));
  EXPECT_EQ(Bytes(p->digest.begin(), p->digest.end()), want);
  auto q = ParsePolicy(text + "\n", dir_);
  ASSERT_TRUE(q.ok());
  EXPECT_NE(q->digest, p->digest);
}

TEST_F(PolicyTest, LoadPolicyFileResolvesAgainstItsDirectory) {
  WriteFile(dir_ + "/p.json", base_.dump());
  auto p = LoadPolicyFile(dir_ + "/p.json");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ek_trust.roots.size(), 1u);
  auto missing = LoadPolicyFile(dir_ + "/absent.json");
  EXPECT_FALSE(missing.ok());
}

TEST_F(PolicyTest, NotJson) {
  EXPECT_FALSE(ParsePolicy("{", dir_).ok());
  EXPECT_FALSE(ParsePolicy("", dir_).ok());
  EXPECT_FALSE(ParsePolicy("[]", dir_).ok());
  EXPECT_FALSE(ParsePolicy("{} trailing", dir_).ok());
  EXPECT_FALSE(ParsePolicy("{\"version\":1 /* comment */}", dir_).ok());
}

TEST_F(PolicyTest, DuplicateKeysAreRefused) {
  std::string text = base_.dump();
  text.insert(1, "\"name\":\"other\",");
  auto p = ParsePolicy(text, dir_);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("duplicate key 'name'"), std::string::npos) << p.status().message();
}

TEST_F(PolicyTest, UnknownKeysNameTheirPath) {
  json j = base_;
  j["secureboot"] = true;
  ExpectError(j, "$.secureboot");
  EXPECT_EQ(Parse(j).status().code(), Code::kInvalidInput);
  j = base_;
  j["ak"] = {{"min_bits", 2048}};
  ExpectError(j, "$.ak.min_bits");
  j = base_;
  j["ima"] = {{"files", {{"/bin/x", {{"digests", {"sha256:" + std::string(64, 'a')}}, {"requried", true}}}}}};
  ExpectError(j, "$.ima.files./bin/x.requried");
}

TEST_F(PolicyTest, WrongTypesNameTheirPath) {
  json j = base_;
  j["max_evidence_age_s"] = "120";
  ExpectError(j, "$.max_evidence_age_s");
  j = base_;
  j["max_evidence_age_s"] = 1.5;
  ExpectError(j, "$.max_evidence_age_s");
  j = base_;
  j["secure_boot"] = 1;
  ExpectError(j, "$.secure_boot");
  j = base_;
  j["quote_pcrs"] = {{"sha256", {0, "7"}}};
  ExpectError(j, "$.quote_pcrs.sha256[1]");
  j = base_;
  j["name"] = json::array();
  ExpectError(j, "$.name");
  j = base_;
  j["comment"] = 5;
  ExpectError(j, "$.comment");
}

TEST_F(PolicyTest, RequiredKeys) {
  for (const char* key : {"version", "name", "quote_pcrs", "ek_roots", "max_evidence_age_s"}) {
    json j = base_;
    j.erase(key);
    ExpectError(j, std::string("$.") + key);
  }
}

TEST_F(PolicyTest, Ranges) {
  json j = base_;
  j["version"] = 2;
  ExpectError(j, "$.version");
  j = base_;
  j["max_evidence_age_s"] = 0;
  ExpectError(j, "$.max_evidence_age_s");
  j["max_evidence_age_s"] = 86401;
  ExpectError(j, "$.max_evidence_age_s");
  j = base_;
  j["quote_pcrs"] = {{"sha256", {24}}};
  ExpectError(j, "$.quote_pcrs.sha256[0]");
  j["quote_pcrs"] = {{"sha256", {1, 1}}};
  ExpectError(j, "$.quote_pcrs.sha256[1]");
  j["quote_pcrs"] = {{"sha256", json::array()}};
  ExpectError(j, "$.quote_pcrs.sha256");
  j["quote_pcrs"] = {{"sm3_256", {0}}};
  ExpectError(j, "$.quote_pcrs.sm3_256");
  j = base_;
  j["ak"] = {{"min_rsa_bits", 1024}};
  ExpectError(j, "$.ak.min_rsa_bits");
  j["ak"] = {{"min_hash", "sha1"}};
  ExpectError(j, "$.ak.min_hash");
  j["ak"] = {{"ecc_curves", {"nist_p192"}}};
  ExpectError(j, "$.ak.ecc_curves[0]");
  j = base_;
  j["pcr_values"] = {{"7", {{"sha256", {"abcd"}}}}};
  ExpectError(j, "$.pcr_values.7.sha256[0]");
  j["pcr_values"] = {{"07", {{"sha256", {std::string(64, 'a')}}}}};
  ExpectError(j, "$.pcr_values.07");
  j["pcr_values"] = {{"7", json::object()}};
  ExpectError(j, "$.pcr_values.7");
  j = base_;
  j["ima"] = {{"files", {{"relative/path", {{"digests", {"sha256:" + std::string(64, 'a')}}}}}}};
  j["event_log"] = {{"exempt_pcrs", {10}}};
  ExpectError(j, "$.ima.files.relative/path");
  j["ima"] = {{"files", {{"/bin/x", {{"digests", {"md5:00"}}}}}}};
  ExpectError(j, "$.ima.files./bin/x.digests[0]");
}

TEST_F(PolicyTest, RulesTheQuoteCannotBackAreRefused) {
  json j = base_;
  j["pcr_values"] = {{"9", {{"sha256", {std::string(64, 'a')}}}}};
  ExpectError(j, "$.pcr_values.9.sha256");
  j = base_;
  j["pcr_values"] = {{"7", {{"sha1", {std::string(40, 'a')}}}}};
  ExpectError(j, "$.pcr_values.7.sha1");
  j = base_;
  j["event_digests"] = {{"4", {{"sha1", {std::string(40, 'a')}}}}};
  ExpectError(j, "$.event_digests.4.sha1");
  j = base_;
  j["event_log"] = {{"exempt_pcrs", {7}}};
  j["secure_boot"] = true;
  ExpectError(j, "$.secure_boot");
  j = base_;
  j["quote_pcrs"] = {{"sha256", {0, 7}}};
  j["kernel_cmdlines"] = {"x"};
  ExpectError(j, "$.kernel_cmdlines");
  j = base_;
  j["event_log"] = {{"required", false}};
  j["secure_boot"] = true;
  ExpectError(j, "$.event_log.required");
  j = base_;
  j["ima"] = {{"required", true}};
  ExpectError(j, "$.event_log.exempt_pcrs");
  j["quote_pcrs"] = {{"sha256", {0}}};
  ExpectError(j, "$.ima");
}

TEST_F(PolicyTest, EkRoots) {
  json j = base_;
  j["ek_roots"] = {{"files", {"roots/root.pem"}}, {"intermediates", json::array()}};
  EXPECT_TRUE(Parse(j).ok());
  j["ek_roots"] = {{"dir", "roots"}, {"files", {"roots/root.pem"}}};
  ExpectError(j, "$.ek_roots");
  j["ek_roots"] = {{"files", {"roots/absent.pem"}}};
  ExpectError(j, "$.ek_roots.files");
  j["ek_roots"] = {{"dir", "absent"}};
  ExpectError(j, "$.ek_roots.dir");
  j["ek_roots"] = json::object();
  ExpectError(j, "$.ek_roots");
}

// The example policies parse, with EK roots where they expect them.
TEST_F(PolicyTest, ExamplePolicies) {
  const std::string src = ENCLAVE_POLICIES_DIR;
  // swtpm.json expects scripts/swtpm-start's output at ../out/swtpm from policies/.
  WriteFile(dir_ + "/out/swtpm/ek-root-ca.pem", SelfSignedPem("swtpm root"));
  WriteFile(dir_ + "/out/swtpm/ek-issuer-ca.pem", SelfSignedPem("swtpm issuer"));
  WriteFile(dir_ + "/policies/ek-roots/vendor-root.pem", SelfSignedPem("vendor root"));
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    if (entry.path().extension() != ".json") continue;
    ++n;
    auto bytes = ReadWholeFile(entry.path().string(), kMaxPolicyBytes);
    ASSERT_TRUE(bytes.ok());
    auto p = ParsePolicy(std::string(bytes->begin(), bytes->end()), dir_ + "/policies");
    EXPECT_TRUE(p.ok()) << entry.path() << ": " << p.status().ToString();
  }
  EXPECT_GE(n, 2u);
}

// ak_forms (issue 20 §1): which AKs the policy accepts, and the trust each form needs,
// always written out: a policy drops the EK chain only by saying so twice.
TEST_F(PolicyTest, AkFormsAndTheRootsTheyNeed) {
  auto p = Parse(base_);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ak_forms, (std::vector<AkForm>{AkForm::kEnrolment, AkForm::kTpmPublic}));  // as before
  EXPECT_TRUE(p->Accepts(AkForm::kEnrolment));
  EXPECT_FALSE(p->Accepts(AkForm::kPublicKey));
  // Enrolment accepted: ek_roots required.
  json j = base_;
  j.erase("ek_roots");
  ExpectError(j, "$.ek_roots");
  j["ak_forms"] = {"enrolment"};
  ExpectError(j, "$.ek_roots");
  // No enrolment: ek_roots refused, so they cannot be left in place and silently unused.
  j = base_;
  j["ak_forms"] = {"public_key"};
  ExpectError(j, "$.ek_roots");
  j.erase("ek_roots");
  p = Parse(j);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->ek_trust.roots.empty());
  EXPECT_EQ(p->ak_forms, std::vector<AkForm>{AkForm::kPublicKey});
  // Certificates need ak_roots, and ak_roots need certificates.
  j["ak_forms"] = {"certificate", "tpm2b_public"};
  ExpectError(j, "$.ak_roots");
  j["ak_roots"] = {{"files", {"roots/root.pem"}}};
  p = Parse(j);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ak_trust.roots.size(), 1u);
  j["ak_forms"] = {"tpm2b_public"};
  ExpectError(j, "$.ak_roots");
  // Unknown, repeated, empty.
  j = base_;
  j["ak_forms"] = {"enrolment", "pem"};
  ExpectError(j, "$.ak_forms[1]");
  j["ak_forms"] = {"enrolment", "enrolment"};
  ExpectError(j, "$.ak_forms[1]");
  j["ak_forms"] = json::array();
  ExpectError(j, "$.ak_forms");
}

// `policy create` writes each list entry as {"value": V, "comment": "where it came from"}:
// read exactly as V, and strict otherwise.
TEST_F(PolicyTest, ListEntriesMayBeObjectsWithAComment) {
  const std::string d32(64, 'a'), d20(40, 'b');
  auto entry = [](const std::string& v) { return json{{"value", v}, {"comment", "event 19 of golden.json"}}; };
  json j = base_;
  j["quote_pcrs"]["sha1"] = {0};
  j["event_log"] = {{"required", true}, {"exempt_pcrs", {10}}};
  j["pcr_values"] = {{"0", {{"sha256", {entry(d32)}}, {"sha1", {d20, entry(std::string(40, 'c'))}}}}};
  j["event_digests"] = {{"7", {{"sha256", {entry(d32)}}}}};
  j["boot_applications"] = {{"sha256", {json{{"value", d32}}}}};  // the comment is optional
  j["kernel_cmdlines"] = {entry("/vmlinuz root=/dev/sda1 ro"), "/vmlinuz ro"};
  j["ima"] = {{"required", true},
              {"mode", "allowlist"},
              {"allowlist", {{"/usr/bin/x", {entry("sha256:" + d32)}}}},
              {"files", {{"/usr/bin/x", {{"digests", {entry("sha256:" + d32)}}}}}}};
  auto p = Parse(j);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->pcr_values.at(0).at(alg::kSha256), std::set<Bytes>{Bytes(32, 0xaa)});
  EXPECT_EQ(p->pcr_values.at(0).at(alg::kSha1), (std::set<Bytes>{Bytes(20, 0xbb), Bytes(20, 0xcc)}));
  EXPECT_EQ(p->event_digests.at(7).at(alg::kSha256), std::set<Bytes>{Bytes(32, 0xaa)});
  EXPECT_EQ(p->boot_applications.at(alg::kSha256), std::set<Bytes>{Bytes(32, 0xaa)});
  EXPECT_EQ(p->kernel_cmdlines, (std::vector<std::string>{"/vmlinuz root=/dev/sda1 ro", "/vmlinuz ro"}));
  EXPECT_TRUE(p->ima_allowlist.at("/usr/bin/x").count({alg::kSha256, Bytes(32, 0xaa)}));
  ASSERT_EQ(p->ima_files.size(), 1u);
  EXPECT_TRUE(p->ima_files[0].digests.count({alg::kSha256, Bytes(32, 0xaa)}));

  // Strict: another member, no value, a comment that is not a string, a value of the wrong
  // kind; and only list entries may be objects.
  json k = base_;
  k["kernel_cmdlines"] = {{{"value", "ro"}, {"from", "event 3"}}};
  ExpectError(k, "$.kernel_cmdlines[0].from: unknown key");
  k["kernel_cmdlines"] = {{{"comment", "event 3"}}};
  ExpectError(k, "$.kernel_cmdlines[0].value: missing");
  k["kernel_cmdlines"] = {{{"value", "ro"}, {"comment", 3}}};
  ExpectError(k, "$.kernel_cmdlines[0].comment: expected a string");
  k = base_;
  k["boot_applications"] = {{"sha256", {{{"value", std::string(40, 'a')}}}}};
  ExpectError(k, "$.boot_applications.sha256[0].value: expected 32 bytes of hex");
  k["boot_applications"] = {{"sha256", {{{"value", {{"value", d32}}}}}}};
  ExpectError(k, "$.boot_applications.sha256[0].value: expected a string, got object");
  k = base_;
  k["quote_pcrs"] = {{"sha256", {{{"value", 0}}}}};
  ExpectError(k, "$.quote_pcrs.sha256[0]: expected an integer, got object");
}

}  // namespace
}  // namespace enclave::attest
