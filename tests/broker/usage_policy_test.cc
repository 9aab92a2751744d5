// Data-use policies (docs/formats/data-use-policy.md): the shipped examples parse and
// name the attestation policies they require; every strictness rule is refused with its
// JSON path; EvaluateRelease allows and refuses for each reason, collecting them all;
// signatures (sign, verify, tampering, untrusted and foreign signatures); key files; the
// test vector of the format document, checked against libsodium directly; the fuzz seeds;
// and `enclave-broker policy keygen|sign|verify` as a real process.
#include "enclave/broker/usage_policy.h"

#include <gtest/gtest.h>
#include <sodium.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "enclave/common/bytes.h"
#include "enclave/common/exit_codes.h"

extern char** environ;

namespace enclave::broker {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
void WriteText(const std::string& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}
std::string Source(const std::string& rel) { return ReadText(std::string(ENCLAVE_SOURCE_DIR) + "/" + rel); }
std::string Hex(const crypto::Digest256& d) { return HexEncode(d); }

// A fresh folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "usage-policy-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A valid policy exercising every key; tests mutate a copy.
const char kBase[] = R"({
  "format": "enclave-data-use-policy",
  "version": 2,
  "policy_id": "unit",
  "serial": 3,
  "description": "unit test policy",
  "attestation_policy_sha256": "1111111111111111111111111111111111111111111111111111111111111111",
  "datasets": [
    {"id": "ds-a", "job_kinds": ["train", "cv"], "requesters": ["alice@x.example", "bob@x.example"],
     "workloads": ["2222222222222222222222222222222222222222222222222222222222222222"]},
    {"id": "ds-b", "job_kinds": ["cv"], "requesters": ["*"],
     "workloads": ["2222222222222222222222222222222222222222222222222222222222222222",
                   "3333333333333333333333333333333333333333333333333333333333333333"]}
  ],
  "cipher_suites": ["aes-256-gcm"],
  "lease": {"duration_s": 3600, "reattest_interval_s": 600},
  "max_epochs": 100,
  "max_world_size": 4,
  "outputs": {"model": "encrypted-to-export-key", "clear_metrics": ["loss", "accuracy"],
              "released_keys": "process-memory"}
})";

ojson Base() { return ojson::parse(kBase); }

Status ParseStatus(const std::string& text) { return ParseUsagePolicy(text).status(); }

void ExpectRefused(const ojson& j, const std::string& message, Code code = Code::kInvalidInput) {
  Status s = ParseStatus(j.dump());
  EXPECT_EQ(s.code(), code) << j.dump();
  EXPECT_EQ(s.message(), message) << j.dump();
}

// ---- The shipped examples -------------------------------------------------------------

TEST(UsagePolicyExamples, AllThreeParse) {
  for (const char* name : {"hipaa-medical", "pci-financial", "dev-swtpm"}) {
    auto p = ParseUsagePolicy(Source(std::string("policies/data-use/") + name + ".json"));
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(p->policy_id, name);
    EXPECT_GE(p->serial, 1u);
    EXPECT_TRUE(p->require_model_export);
  }
}

TEST(UsagePolicyExamples, HipaaMedicalTerms) {
  auto p = ParseUsagePolicy(Source("policies/data-use/hipaa-medical.json"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->datasets.size(), 1u);
  EXPECT_EQ(p->datasets[0].dataset_id, "breast-cancer");  // examples/breast_cancer_sealed.toml
  EXPECT_EQ(p->datasets[0].job_kinds, (std::vector<std::string>{"train", "cv"}));
  EXPECT_EQ(p->cipher_suites, std::vector<crypto::Suite>{crypto::Suite::kAes256Gcm});
  EXPECT_EQ(p->lease_s, 3600);
  EXPECT_EQ(p->reattest_interval_s, 600);
  EXPECT_EQ(p->max_epochs, 500u);
  EXPECT_EQ(p->max_world_size, 8u);
  EXPECT_EQ(p->clear_metrics, (std::vector<std::string>{"loss", "accuracy", "roc_auc", "board_metrics", "curves"}));
}

TEST(UsagePolicyExamples, DevSwtpmAllowsTheDemoDatasets) {
  auto p = ParseUsagePolicy(Source("policies/data-use/dev-swtpm.json"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->datasets.size(), 2u);
  EXPECT_EQ(p->datasets[0].dataset_id, "wdbc-2026");  // the ids scripts/demo seals under
  EXPECT_EQ(p->datasets[1].dataset_id, "credit-2026");
  for (const auto& d : p->datasets) EXPECT_EQ(d.requesters, std::vector<std::string>{"*"});
  EXPECT_EQ(p->cipher_suites.size(), 2u);
  EXPECT_EQ(p->lease_s, 600);
  EXPECT_EQ(p->reattest_interval_s, 60);
}

// The attestation policy digests cannot drift from the files they name.
TEST(UsagePolicyExamples, AttestationPolicyDigestsMatchTheFiles) {
  const std::string swtpm = Source("policies/swtpm.json");
  const std::string server = Source("policies/example-server.json");
  ASSERT_FALSE(swtpm.empty());
  ASSERT_FALSE(server.empty());
  auto dev = ParseUsagePolicy(Source("policies/data-use/dev-swtpm.json"));
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(Hex(dev->attestation_policy_sha256), Hex(crypto::Sha256(AsBytes(swtpm))))
      << "policies/swtpm.json changed: update attestation_policy_sha256 in policies/data-use/dev-swtpm.json";
  for (const char* name : {"hipaa-medical", "pci-financial"}) {
    auto p = ParseUsagePolicy(Source(std::string("policies/data-use/") + name + ".json"));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(Hex(p->attestation_policy_sha256), Hex(crypto::Sha256(AsBytes(server))))
        << "policies/example-server.json changed: update policies/data-use/" << name << ".json";
  }
}

// ---- Strictness ---------------------------------------------------------------------------

TEST(UsagePolicyParse, BaseParsesToEveryField) {
  auto p = ParseUsagePolicy(kBase);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->policy_id, "unit");
  EXPECT_EQ(p->serial, 3u);
  EXPECT_EQ(p->description, "unit test policy");
  EXPECT_EQ(Hex(p->attestation_policy_sha256), std::string(64, '1'));
  ASSERT_EQ(p->datasets.size(), 2u);
  EXPECT_EQ(p->datasets[1].dataset_id, "ds-b");
  EXPECT_EQ(p->datasets[1].job_kinds, std::vector<std::string>{"cv"});
  EXPECT_EQ(p->datasets[0].requesters, (std::vector<std::string>{"alice@x.example", "bob@x.example"}));
  EXPECT_EQ(p->lease_s, 3600);
  EXPECT_EQ(p->reattest_interval_s, 600);
  EXPECT_EQ(p->max_epochs, 100u);
  EXPECT_EQ(p->max_world_size, 4u);
  EXPECT_EQ(p->clear_metrics, (std::vector<std::string>{"loss", "accuracy"}));
}

TEST(UsagePolicyParse, NotJsonDuplicatesAndTopLevel) {
  EXPECT_EQ(ParseStatus("{").code(), Code::kInvalidInput);
  EXPECT_EQ(ParseStatus("[]").message(), "data-use policy: the top level must be a JSON object");
  std::string dup = kBase;
  dup.replace(dup.find("\"serial\": 3"), 11, "\"serial\": 3, \"serial\": 4");
  Status s = ParseStatus(dup);
  EXPECT_EQ(s.code(), Code::kInvalidInput);
  EXPECT_EQ(s.message(), "data-use policy: duplicate JSON key 'serial'");
  std::string nested_dup = kBase;
  nested_dup.replace(nested_dup.find("\"duration_s\": 3600"), 18, "\"duration_s\": 3600, \"duration_s\": 60");
  EXPECT_EQ(ParseStatus(nested_dup).message(), "data-use policy: duplicate JSON key 'duration_s'");
  EXPECT_EQ(ParseStatus(std::string(kMaxUsagePolicyBytes + 1, ' ')).code(), Code::kInvalidInput);
}

TEST(UsagePolicyParse, FormatAndVersion) {
  ojson j = Base();
  j["format"] = "enclave-attestation-policy";
  ExpectRefused(j, "data-use policy: not a data-use policy ('format' must be \"enclave-data-use-policy\")");
  j = Base();
  j["version"] = 3;
  ExpectRefused(j, "data-use policy: version 3 is not supported (only 2)", Code::kUnsupported);
  // Version 1 had no workload rule: refused, saying what to add.
  j["version"] = 1;
  ExpectRefused(j,
                "data-use policy: version 1 is not supported (only 2; version 1 has no workload rule: add "
                "datasets[].workloads and outputs.released_keys, set version 2 and sign it again)",
                Code::kUnsupported);
  j["version"] = "2";
  ExpectRefused(j, "data-use policy: 'version' must be the integer 2");
  j["version"] = 2.0;
  ExpectRefused(j, "data-use policy: 'version' must be the integer 2");
}

TEST(UsagePolicyParse, WorkloadsAndReleasedKeys) {
  auto p = ParseUsagePolicy(kBase);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->datasets[1].workloads.size(), 2u);
  EXPECT_EQ(Hex(p->datasets[1].workloads[1]), std::string(64, '3'));
  EXPECT_EQ(p->released_keys, KeyCustody::kProcessMemory);
  const std::string w = "data-use policy: ";
  ojson j = Base();
  j["datasets"][0].erase("workloads");
  ExpectRefused(j, w + "missing key 'datasets[0].workloads'");
  j = Base();
  j["datasets"][0]["workloads"] = ojson::array();
  ExpectRefused(j, w + "'datasets[0].workloads' must not be empty");
  j = Base();
  j["datasets"][0]["workloads"] = {"*"};  // no wildcard: approved code is named by digest
  ExpectRefused(j, w + "'datasets[0].workloads[0]' must be 64 lowercase hex digits");
  j = Base();
  j["datasets"][1]["workloads"][1] = std::string(64, '2');
  ExpectRefused(j, w + "'datasets[1].workloads[1]' repeats workload " + std::string(64, '2'));
  j = Base();
  j["outputs"].erase("released_keys");
  ExpectRefused(j, w + "missing key 'outputs.released_keys'");
  j = Base();
  j["outputs"]["released_keys"] = "keystore";
  ExpectRefused(j, w + "'outputs.released_keys' must be \"process-memory\" or \"may-be-written\"");
  j["outputs"]["released_keys"] = "may-be-written";
  auto dev = ParseUsagePolicy(j.dump());
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  EXPECT_EQ(dev->released_keys, KeyCustody::kMayBeWritten);
}

struct Case {
  std::string name;
  std::function<void(ojson&)> mutate;
  std::string message;
};

TEST(UsagePolicyParse, EveryRuleNamesItsPath) {
  const std::string p = "data-use policy: ";
  const std::vector<Case> cases = {
      {"unknown top key", [](ojson& j) { j["extra"] = 1; }, p + "unknown key 'extra'"},
      {"missing key", [](ojson& j) { j.erase("description"); }, p + "missing key 'description'"},
      {"unknown nested key", [](ojson& j) { j["lease"]["grace_s"] = 5; }, p + "unknown key 'lease.grace_s'"},
      {"unknown dataset key", [](ojson& j) { j["datasets"][1]["note"] = ""; }, p + "unknown key 'datasets[1].note'"},
      {"missing dataset key", [](ojson& j) { j["datasets"][0].erase("requesters"); },
       p + "missing key 'datasets[0].requesters'"},
      {"missing outputs key", [](ojson& j) { j["outputs"].erase("model"); }, p + "missing key 'outputs.model'"},
      {"policy id type", [](ojson& j) { j["policy_id"] = 5; }, p + "'policy_id' must be a string"},
      {"policy id charset", [](ojson& j) { j["policy_id"] = "a b"; },
       p + "'policy_id' must be 1..128 bytes of letters, digits and . _ - :"},
      {"policy id empty", [](ojson& j) { j["policy_id"] = ""; },
       p + "'policy_id' must be 1..128 bytes of letters, digits and . _ - :"},
      {"serial zero", [](ojson& j) { j["serial"] = 0; },
       p + "'serial' must be in 1 .. 9007199254740991, got 0"},
      {"serial too big", [](ojson& j) { j["serial"] = 9007199254740992ull; },
       p + "'serial' must be in 1 .. 9007199254740991, got 9007199254740992"},
      {"serial negative", [](ojson& j) { j["serial"] = -1; },
       p + "'serial' must be in 1 .. 9007199254740991, got -1"},
      {"serial float", [](ojson& j) { j["serial"] = 1.5; },
       p + "'serial' must be an integer in 1 .. 9007199254740991"},
      {"serial string", [](ojson& j) { j["serial"] = "1"; },
       p + "'serial' must be an integer in 1 .. 9007199254740991"},
      {"description type", [](ojson& j) { j["description"] = nullptr; }, p + "'description' must be a string"},
      {"description control", [](ojson& j) { j["description"] = "a\nb"; },
       p + "'description' must not hold control characters"},
      {"description long", [](ojson& j) { j["description"] = std::string(1025, 'x'); },
       p + "'description' must be at most 1024 bytes"},
      {"digest short", [](ojson& j) { j["attestation_policy_sha256"] = "abcd"; },
       p + "'attestation_policy_sha256' must be 64 lowercase hex digits"},
      {"digest upper", [](ojson& j) { j["attestation_policy_sha256"] = std::string(64, 'A'); },
       p + "'attestation_policy_sha256' must be 64 lowercase hex digits"},
      {"datasets type", [](ojson& j) { j["datasets"] = ojson::object(); }, p + "'datasets' must be an array"},
      {"datasets empty", [](ojson& j) { j["datasets"] = ojson::array(); }, p + "'datasets' must not be empty"},
      {"dataset not object", [](ojson& j) { j["datasets"][1] = "ds-b"; },
       p + "'datasets[1]' must be a JSON object"},
      {"dataset id charset", [](ojson& j) { j["datasets"][1]["id"] = "ds/b"; },
       p + "'datasets[1].id' must be 1..128 bytes of letters, digits and . _ - :"},
      {"duplicate dataset id", [](ojson& j) { j["datasets"][1]["id"] = "ds-a"; },
       p + "'datasets[1].id' repeats dataset 'ds-a' of datasets[0]"},
      {"job kind unknown", [](ojson& j) { j["datasets"][1]["job_kinds"][0] = "infer"; },
       p + "'datasets[1].job_kinds[0]' must be one of cv, train"},
      {"job kind type", [](ojson& j) { j["datasets"][0]["job_kinds"][1] = 1; },
       p + "'datasets[0].job_kinds[1]' must be a string"},
      {"job kinds empty", [](ojson& j) { j["datasets"][0]["job_kinds"] = ojson::array(); },
       p + "'datasets[0].job_kinds' must not be empty"},
      {"job kind repeated", [](ojson& j) { j["datasets"][0]["job_kinds"] = {"cv", "cv"}; },
       p + "'datasets[0].job_kinds[1]' repeats 'cv'"},
      {"job kinds too many", [](ojson& j) { j["datasets"][0]["job_kinds"] = {"cv", "train", "cv"}; },
       p + "'datasets[0].job_kinds' must have at most 2 entries"},
      {"requesters empty", [](ojson& j) { j["datasets"][0]["requesters"] = ojson::array(); },
       p + "'datasets[0].requesters' must not be empty"},
      {"requester star not alone", [](ojson& j) { j["datasets"][0]["requesters"] = {"alice@x.example", "*"}; },
       p + "'datasets[0].requesters[1]' is \"*\" (any requester), which must be the only entry"},
      {"requester charset", [](ojson& j) { j["datasets"][0]["requesters"][1] = "bob smith"; },
       p + "'datasets[0].requesters[1]' must be \"*\" or 1..256 bytes of letters, digits and . _ - @ + :"},
      {"requester empty", [](ojson& j) { j["datasets"][0]["requesters"][0] = ""; },
       p + "'datasets[0].requesters[0]' must be \"*\" or 1..256 bytes of letters, digits and . _ - @ + :"},
      {"requester repeated", [](ojson& j) { j["datasets"][0]["requesters"][1] = "alice@x.example"; },
       p + "'datasets[0].requesters[1]' repeats 'alice@x.example'"},
      {"suites empty", [](ojson& j) { j["cipher_suites"] = ojson::array(); },
       p + "'cipher_suites' must not be empty"},
      {"suite unknown", [](ojson& j) { j["cipher_suites"][0] = "AES-256-GCM"; },
       p + "'cipher_suites[0]' must be one of aes-256-gcm, chacha20-poly1305"},
      {"suite repeated", [](ojson& j) { j["cipher_suites"] = {"aes-256-gcm", "aes-256-gcm"}; },
       p + "'cipher_suites[1]' repeats 'aes-256-gcm'"},
      {"lease type", [](ojson& j) { j["lease"] = 3600; }, p + "'lease' must be a JSON object"},
      {"lease short", [](ojson& j) { j["lease"]["duration_s"] = 59; },
       p + "'lease.duration_s' must be in 60 .. 86400, got 59"},
      {"lease long", [](ojson& j) { j["lease"]["duration_s"] = 86401; },
       p + "'lease.duration_s' must be in 60 .. 86400, got 86401"},
      {"reattest short", [](ojson& j) { j["lease"]["reattest_interval_s"] = 29; },
       p + "'lease.reattest_interval_s' must be in 30 .. 86400, got 29"},
      {"reattest beyond lease", [](ojson& j) { j["lease"]["reattest_interval_s"] = 3601; },
       p + "'lease.reattest_interval_s' (3601) must not exceed 'lease.duration_s' (3600)"},
      {"epochs zero", [](ojson& j) { j["max_epochs"] = 0; }, p + "'max_epochs' must be in 1 .. 1000000, got 0"},
      {"epochs big", [](ojson& j) { j["max_epochs"] = 1000001; },
       p + "'max_epochs' must be in 1 .. 1000000, got 1000001"},
      {"world zero", [](ojson& j) { j["max_world_size"] = 0; },
       p + "'max_world_size' must be in 1 .. 1024, got 0"},
      {"world big", [](ojson& j) { j["max_world_size"] = 1025; },
       p + "'max_world_size' must be in 1 .. 1024, got 1025"},
      {"world huge", [](ojson& j) { j["max_world_size"] = 18446744073709551615ull; },
       p + "'max_world_size' must be in 1 .. 1024, got 18446744073709551615"},
      {"outputs type", [](ojson& j) { j["outputs"] = ojson::array(); }, p + "'outputs' must be a JSON object"},
      {"model clear", [](ojson& j) { j["outputs"]["model"] = "clear"; },
       p + "'outputs.model' must be \"encrypted-to-export-key\" (the only value in v2)"},
      {"metric unknown", [](ojson& j) { j["outputs"]["clear_metrics"][1] = "f1"; },
       p + "'outputs.clear_metrics[1]' must be one of loss, accuracy, roc_auc, rmse, mae, r2, board_metrics, curves, "
           "importance, coefficients"},
      {"metric repeated", [](ojson& j) { j["outputs"]["clear_metrics"][1] = "loss"; },
       p + "'outputs.clear_metrics[1]' repeats 'loss'"},
      {"metrics type", [](ojson& j) { j["outputs"]["clear_metrics"] = "loss"; },
       p + "'outputs.clear_metrics' must be an array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ojson j = Base();
    c.mutate(j);
    ExpectRefused(j, c.message);
  }
}

TEST(UsagePolicyParse, EdgesThatAreAccepted) {
  ojson j = Base();
  j["outputs"]["clear_metrics"] = ojson::array();  // no metric in clear: the one empty array allowed
  j["lease"] = {{"duration_s", 60}, {"reattest_interval_s", 60}};
  j["serial"] = 9007199254740991ull;
  j["max_epochs"] = 1000000;
  j["max_world_size"] = 1024;
  j["description"] = "";
  auto p = ParseUsagePolicy(j.dump());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->clear_metrics.empty());
  EXPECT_EQ(p->serial, 9007199254740991ull);
}

// ---- EvaluateRelease ----------------------------------------------------------------------

class Evaluate : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = ParseUsagePolicy(kBase);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    policy_ = *p;
    att_.fill(0x11);
    claims_.job_id = "job-1";
    claims_.kind = "train";
    claims_.requester = "alice@x.example";
    claims_.datasets = {"ds-a"};
    claims_.epochs = 100;
    claims_.world_size = 4;
    claims_.clear_metrics = {"loss"};
    claims_.model_export = true;
    claims_.workload_digest.fill(0x22);
    suites_ = {crypto::Suite::kAes256Gcm};
  }
  UsageDecision Run() const { return EvaluateRelease(policy_, claims_, att_, suites_); }
  std::vector<std::string> Reasons() const {
    UsageDecision d = Run();
    EXPECT_EQ(d.allowed, d.reasons.empty());
    return d.reasons;
  }

  UsagePolicy policy_;
  ReleaseClaims claims_;
  crypto::Digest256 att_{};
  std::vector<crypto::Suite> suites_;
};

TEST_F(Evaluate, Allows) {
  UsageDecision d = Run();
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.reasons.empty());
  // A "*" rule allows anyone; cv on both datasets.
  claims_.kind = "cv";
  claims_.requester = "mallory@else.example";
  claims_.datasets = {"ds-b"};
  EXPECT_TRUE(Run().allowed);
  claims_.requester = "alice@x.example";
  claims_.datasets = {"ds-a", "ds-b"};
  suites_ = {crypto::Suite::kAes256Gcm, crypto::Suite::kAes256Gcm};
  claims_.clear_metrics = {};
  EXPECT_TRUE(Run().allowed);
}

TEST_F(Evaluate, AttestationPolicyDigest) {
  att_[31] ^= 1;
  EXPECT_EQ(Reasons(), std::vector<std::string>{"attestation policy " + HexEncode(att_) +
                                                " is not the one policy 'unit' requires (" + std::string(64, '1') +
                                                ")"});
}

TEST_F(Evaluate, JobKind) {
  claims_.kind = "infer";
  EXPECT_EQ(Reasons(), (std::vector<std::string>{
                           "job kind 'infer' is not one of cv, train",
                           "dataset 'ds-a' may not be used for job kind 'infer' (allowed: train, cv)"}));
}

TEST_F(Evaluate, DatasetNotInPolicy) {
  claims_.datasets = {"ds-z"};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"dataset 'ds-z' is not in policy 'unit'"});
}

TEST_F(Evaluate, KindNotAllowedForDataset) {
  claims_.datasets = {"ds-b"};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"dataset 'ds-b' may not be used for job kind 'train' (allowed: cv)"});
}

TEST_F(Evaluate, Requester) {
  claims_.requester = "eve@x.example";
  EXPECT_EQ(Reasons(), std::vector<std::string>{"requester 'eve@x.example' may not use dataset 'ds-a'"});
  claims_.requester = "";  // even "*" needs a named requester
  claims_.kind = "cv";
  claims_.datasets = {"ds-b"};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"requester '' may not use dataset 'ds-b'"});
}

TEST_F(Evaluate, Suites) {
  suites_ = {crypto::Suite::kChaCha20Poly1305};
  EXPECT_EQ(Reasons(), std::vector<std::string>{
                           "dataset 'ds-a' is sealed with chacha20-poly1305, which policy 'unit' does not allow"});
  suites_ = {};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"0 cipher suite(s) given for 1 dataset(s)"});
  suites_ = {crypto::Suite::kAes256Gcm, crypto::Suite::kAes256Gcm};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"2 cipher suite(s) given for 1 dataset(s)"});
}

TEST_F(Evaluate, EpochsAndWorldSize) {
  claims_.epochs = 101;
  EXPECT_EQ(Reasons(), std::vector<std::string>{"epochs 101 exceed max_epochs 100 of policy 'unit'"});
  claims_.epochs = 100;
  claims_.world_size = 5;
  EXPECT_EQ(Reasons(), std::vector<std::string>{"world size 5 exceeds max_world_size 4 of policy 'unit'"});
}

TEST_F(Evaluate, ClearMetrics) {
  claims_.clear_metrics = {"loss", "roc_auc", "f1"};
  EXPECT_EQ(Reasons(), (std::vector<std::string>{"metric 'roc_auc' may not leave in clear under policy 'unit'",
                                                 "metric 'f1' may not leave in clear under policy 'unit'"}));
}

// The validation board's metrics, the curves, importance and coefficients are names of
// their own: a policy that lists only the per-epoch metrics lets none of them out.
TEST_F(Evaluate, EvaluationResultsNeedTheirOwnNames) {
  claims_.clear_metrics = {"loss", "board_metrics", "curves", "importance", "coefficients"};
  EXPECT_EQ(Reasons(), (std::vector<std::string>{
                           "metric 'board_metrics' may not leave in clear under policy 'unit'",
                           "metric 'curves' may not leave in clear under policy 'unit'",
                           "metric 'importance' may not leave in clear under policy 'unit'",
                           "metric 'coefficients' may not leave in clear under policy 'unit'"}));
  auto j = nlohmann::ordered_json::parse(kBase);
  j["outputs"]["clear_metrics"] = {"loss", "board_metrics", "curves", "importance", "coefficients", "rmse", "mae", "r2"};
  auto wide = ParseUsagePolicy(j.dump());
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  policy_ = *wide;
  EXPECT_TRUE(Reasons().empty());
}

TEST_F(Evaluate, ModelExport) {
  claims_.model_export = false;
  EXPECT_EQ(Reasons(), std::vector<std::string>{"the model must leave encrypted to the export key (policy 'unit'), "
                                                "and the job does not export it so"});
}

TEST_F(Evaluate, WorkloadApprovedPerDataset) {
  claims_.workload_digest.fill(0x33);  // approved for ds-b only
  EXPECT_EQ(Reasons(), std::vector<std::string>{"workload " + std::string(64, '3') +
                                                " is not approved for dataset 'ds-a' in policy 'unit'"});
  claims_.kind = "cv";
  claims_.datasets = {"ds-b"};
  EXPECT_TRUE(Run().allowed);
  claims_.datasets = {"ds-a", "ds-b"};
  suites_ = {crypto::Suite::kAes256Gcm, crypto::Suite::kAes256Gcm};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"workload " + std::string(64, '3') +
                                                " is not approved for dataset 'ds-a' in policy 'unit'"});
}

TEST_F(Evaluate, ReleasedKeysStayInProcessMemory) {
  claims_.writes_keys = true;
  EXPECT_EQ(Reasons(), std::vector<std::string>{
                           "the requester would write the released keys out of process memory, which policy 'unit' "
                           "forbids (outputs.released_keys is \"process-memory\")"});
  policy_.released_keys = KeyCustody::kMayBeWritten;
  EXPECT_TRUE(Run().allowed);
}

TEST_F(Evaluate, DatasetList) {
  claims_.datasets = {};
  suites_ = {};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"no dataset is asked for"});
  claims_.datasets = {"ds-a", "ds-a", "ds-a"};
  suites_ = {crypto::Suite::kAes256Gcm, crypto::Suite::kAes256Gcm, crypto::Suite::kAes256Gcm};
  EXPECT_EQ(Reasons(), std::vector<std::string>{"dataset 'ds-a' is asked for more than once"});
}

TEST_F(Evaluate, CollectsEveryReasonInOrder) {
  att_.fill(0);
  claims_.kind = "cv";
  claims_.requester = "eve@x.example";
  claims_.datasets = {"ds-a", "ds-z", "ds-a"};
  suites_ = {crypto::Suite::kChaCha20Poly1305};
  claims_.epochs = 1000;
  claims_.world_size = 1000;
  claims_.clear_metrics = {"roc_auc"};
  claims_.model_export = false;
  std::vector<std::string> r = Reasons();
  ASSERT_EQ(r.size(), 10u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0].rfind("attestation policy 0000", 0), 0u);
  EXPECT_EQ(r[1], "requester 'eve@x.example' may not use dataset 'ds-a'");
  EXPECT_EQ(r[2], "dataset 'ds-z' is not in policy 'unit'");
  EXPECT_EQ(r[3], "1 cipher suite(s) given for 3 dataset(s)");
  EXPECT_EQ(r[4], "dataset 'ds-a' is sealed with chacha20-poly1305, which policy 'unit' does not allow");
  EXPECT_EQ(r[5], "epochs 1000 exceed max_epochs 100 of policy 'unit'");
  EXPECT_EQ(r[6], "world size 1000 exceeds max_world_size 4 of policy 'unit'");
  EXPECT_EQ(r[7], "metric 'roc_auc' may not leave in clear under policy 'unit'");
  EXPECT_EQ(r[8].rfind("the model must leave encrypted", 0), 0u);
  EXPECT_EQ(r[9], "dataset 'ds-a' is asked for more than once");
  EXPECT_FALSE(Run().allowed);
}

// ---- Signatures -----------------------------------------------------------------------------

PolicySignerKey KeyFromSeedByte(uint8_t first) {
  std::array<uint8_t, 32> seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(first + i);
  auto s = crypto::SecretBytes::CopyFrom(seed);
  if (!s.ok()) std::abort();
  auto k = PolicySignerKey::FromSeed(*s);
  if (!k.ok()) std::abort();
  return std::move(k).value();
}

TEST(UsagePolicySignature, SignVerifyRoundTrip) {
  auto key = PolicySignerKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  auto sig = SignUsagePolicy(kBase, *key);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  auto v = VerifyUsagePolicy(kBase, *sig, {KeyFromSeedByte(9).public_key(), key->public_key()});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->policy.policy_id, "unit");
  EXPECT_EQ(v->digest, crypto::Sha256(AsBytes(std::string_view(kBase))));
  EXPECT_EQ(v->signer, key->public_key());
  // The signature file's documented shape.
  auto j = nlohmann::json::parse(*sig);
  EXPECT_EQ(j["format"], "enclave-data-use-policy-signature");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["policy_sha256"], Hex(v->digest));
  EXPECT_EQ(j["signer"], HexEncode(key->public_key()));
  EXPECT_EQ(j["signature"].get<std::string>().size(), 128u);
  EXPECT_EQ(j.size(), 5u);
}

TEST(UsagePolicySignature, OneFlippedPolicyByteFails) {
  PolicySignerKey key = KeyFromSeedByte(1);
  auto sig = SignUsagePolicy(kBase, key);
  ASSERT_TRUE(sig.ok());
  std::string tampered = kBase;
  tampered[tampered.find("\"max_epochs\": 100") + 15] = '9';  // 100 -> 900: still a valid policy
  ASSERT_TRUE(ParseUsagePolicy(tampered).ok());
  auto v = VerifyUsagePolicy(tampered, *sig, {key.public_key()});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kAuthFailed);
  EXPECT_EQ(v.status().message().rfind("signature file is for another policy (sha256 " +
                                           Hex(crypto::Sha256(AsBytes(std::string_view(kBase)))),
                                       0),
            0u)
      << v.status().message();
}

TEST(UsagePolicySignature, FlippedSignatureByteFails) {
  PolicySignerKey key = KeyFromSeedByte(1);
  auto sig = SignUsagePolicy(kBase, key);
  ASSERT_TRUE(sig.ok());
  auto j = nlohmann::ordered_json::parse(*sig);
  for (size_t pos : {0u, 63u, 64u, 127u}) {
    std::string hex = j["signature"];
    hex[pos] = hex[pos] == '0' ? '1' : '0';
    auto t = j;
    t["signature"] = hex;
    auto v = VerifyUsagePolicy(kBase, t.dump(), {key.public_key()});
    ASSERT_FALSE(v.ok()) << pos;
    EXPECT_EQ(v.status().code(), Code::kAuthFailed) << pos;
    EXPECT_NE(v.status().message().find("Ed25519 signature does not verify under signer " +
                                        HexEncode(key.public_key())),
              std::string::npos)
        << v.status().message();
  }
}

TEST(UsagePolicySignature, SignerNotTrusted) {
  PolicySignerKey key = KeyFromSeedByte(1), other = KeyFromSeedByte(2);
  auto sig = SignUsagePolicy(kBase, key);
  ASSERT_TRUE(sig.ok());
  auto v = VerifyUsagePolicy(kBase, *sig, {other.public_key()});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kAuthFailed);
  EXPECT_EQ(v.status().message(), "policy signer " + HexEncode(key.public_key()) + " is not trusted");
  EXPECT_EQ(VerifyUsagePolicy(kBase, *sig, {}).status().code(), Code::kAuthFailed);
  // Claiming a trusted signer does not help: the signature is checked under the claimed key.
  auto j = nlohmann::ordered_json::parse(*sig);
  j["signer"] = HexEncode(other.public_key());
  auto forged = VerifyUsagePolicy(kBase, j.dump(), {other.public_key()});
  EXPECT_EQ(forged.status().code(), Code::kAuthFailed);
}

TEST(UsagePolicySignature, SignatureFileForAnotherPolicy) {
  PolicySignerKey key = KeyFromSeedByte(1);
  const std::string hipaa = Source("policies/data-use/hipaa-medical.json");
  auto sig = SignUsagePolicy(hipaa, key);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  auto v = VerifyUsagePolicy(kBase, *sig, {key.public_key()});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kAuthFailed);
  EXPECT_EQ(v.status().message(), "signature file is for another policy (sha256 " +
                                      Hex(crypto::Sha256(AsBytes(hipaa))) + "; this policy is " +
                                      Hex(crypto::Sha256(AsBytes(std::string_view(kBase)))) + ")");
}

TEST(UsagePolicySignature, MalformedSignatureFiles) {
  PolicySignerKey key = KeyFromSeedByte(1);
  auto sig = SignUsagePolicy(kBase, key);
  ASSERT_TRUE(sig.ok());
  const auto good = nlohmann::ordered_json::parse(*sig);
  auto status = [&](const std::function<void(nlohmann::ordered_json&)>& f) {
    auto j = good;
    f(j);
    return VerifyUsagePolicy(kBase, j.dump(), {key.public_key()}).status();
  };
  const std::string w = "data-use policy signature: ";
  EXPECT_EQ(status([](auto& j) { j["extra"] = 1; }).message(), w + "unknown key 'extra'");
  EXPECT_EQ(status([](auto& j) { j.erase("signer"); }).message(), w + "missing key 'signer'");
  EXPECT_EQ(status([](auto& j) { j["version"] = 2; }).code(), Code::kUnsupported);
  EXPECT_EQ(status([](auto& j) { j["format"] = "x"; }).code(), Code::kInvalidInput);
  EXPECT_EQ(status([](auto& j) { j["signature"] = "00"; }).message(),
            w + "'signature' must be 128 lowercase hex digits");
  EXPECT_EQ(status([](auto& j) { j["policy_sha256"] = 5; }).message(),
            w + "'policy_sha256' must be 64 lowercase hex digits");
  // The identity point (small order) is not a public key.
  Status small = status([](auto& j) { j["signer"] = "01" + std::string(62, '0'); });
  EXPECT_EQ(small.code(), Code::kInvalidInput);
  EXPECT_NE(small.message().find("is not a valid Ed25519 public key"), std::string::npos) << small.message();
  std::string dup = *sig;
  dup.insert(dup.find('{') + 1, "\"version\": 1,");
  EXPECT_EQ(VerifyUsagePolicy(kBase, dup, {key.public_key()}).status().message(), w + "duplicate JSON key 'version'");
  EXPECT_EQ(VerifyUsagePolicy(kBase, "", {key.public_key()}).status().code(), Code::kInvalidInput);
}

TEST(UsagePolicySignature, SigningRefusesAnInvalidPolicy) {
  PolicySignerKey key = KeyFromSeedByte(1);
  ojson j = Base();
  j["max_epochs"] = 0;
  auto sig = SignUsagePolicy(j.dump(), key);
  ASSERT_FALSE(sig.ok());
  EXPECT_EQ(sig.status().code(), Code::kInvalidInput);
}

// A signed policy that no longer parses (signed by hand, say) is refused after the
// signature checks, with the parser's message.
TEST(UsagePolicySignature, VerifiedButInvalidPolicyIsRefused) {
  PolicySignerKey key = KeyFromSeedByte(1);
  const std::string bad = "{\"format\":\"enclave-data-use-policy\",\"version\":2}";
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(bad));
  const std::vector<uint8_t> msg = UsagePolicySignatureInput(digest);
  std::array<uint8_t, 64> sig{};
  std::array<uint8_t, 32> seed{};
  for (size_t i = 0; i < 32; ++i) seed[i] = static_cast<uint8_t>(1 + i);
  std::array<uint8_t, 32> pk{};
  std::array<uint8_t, 64> sk{};
  ASSERT_EQ(crypto_sign_seed_keypair(pk.data(), sk.data(), seed.data()), 0);
  ASSERT_EQ(crypto_sign_detached(sig.data(), nullptr, msg.data(), msg.size(), sk.data()), 0);
  sodium_memzero(sk.data(), sk.size());
  ojson j = {{"format", "enclave-data-use-policy-signature"},
             {"version", 1},
             {"policy_sha256", Hex(digest)},
             {"signer", HexEncode(pk)},
             {"signature", HexEncode(sig)}};
  auto v = VerifyUsagePolicy(bad, j.dump(), {key.public_key()});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kInvalidInput);
  EXPECT_EQ(v.status().message(), "data-use policy: missing key 'policy_id'");
}

TEST(UsagePolicySignature, SignatureInputBytes) {
  crypto::Digest256 d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i);
  const std::vector<uint8_t> msg = UsagePolicySignatureInput(d);
  ASSERT_EQ(msg.size(), 59u);
  EXPECT_EQ(std::string(msg.begin(), msg.begin() + 26), "enclave data-use policy v1");
  EXPECT_EQ(msg[26], 0);
  EXPECT_TRUE(std::equal(d.begin(), d.end(), msg.begin() + 27));
}

// ---- Key files --------------------------------------------------------------------------------

TEST(PolicySignerKeyFile, SaveLoadRoundTrip) {
  TempDir dir;
  auto key = PolicySignerKey::Generate();
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(key->Save(dir / "k.key").ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir / "k.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 40);
  const std::string bytes = ReadText(dir / "k.key");
  EXPECT_EQ(bytes.substr(0, 8), "EPOLSK01");
  auto loaded = PolicySignerKey::Load(dir / "k.key");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->public_key(), key->public_key());
  // Ed25519 is deterministic: the same key gives the same signature file.
  EXPECT_EQ(*SignUsagePolicy(kBase, *loaded), *SignUsagePolicy(kBase, *key));
}

TEST(PolicySignerKeyFile, NeverOverwrites) {
  TempDir dir;
  WriteText(dir / "k.key", "precious");
  auto key = PolicySignerKey::Generate();
  ASSERT_TRUE(key.ok());
  Status s = key->Save(dir / "k.key");
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(ReadText(dir / "k.key"), "precious");
  WriteText(dir / "k.pub", "precious");
  EXPECT_EQ(SaveSignerPublicKey(dir / "k.pub", key->public_key()).code(), Code::kAlreadyExists);
  EXPECT_EQ(ReadText(dir / "k.pub"), "precious");
}

TEST(PolicySignerKeyFile, RefusesWrongMagicLengthAndMode) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes, mode_t mode) {
    WriteText(dir / name, bytes);
    ::chmod((dir / name).c_str(), mode);
    return PolicySignerKey::Load(dir / name).status();
  };
  const std::string seed(32, '\x07');
  EXPECT_TRUE(write("good.key", "EPOLSK01" + seed, 0600).ok());
  Status magic = write("magic.key", "EAUDSK01" + seed, 0600);
  EXPECT_EQ(magic.code(), Code::kInvalidInput);
  EXPECT_NE(magic.message().find("bad magic"), std::string::npos) << magic.message();
  EXPECT_EQ(write("short.key", "EPOLSK01" + seed.substr(1), 0600).code(), Code::kInvalidInput);
  EXPECT_EQ(write("long.key", "EPOLSK01" + seed + "x", 0600).code(), Code::kInvalidInput);
  EXPECT_EQ(write("audit.key", "EPOLSK01" + seed + seed, 0600).code(), Code::kInvalidInput);
  Status group = write("group.key", "EPOLSK01" + seed, 0640);
  EXPECT_EQ(group.code(), Code::kPermissionDenied);
  EXPECT_NE(group.message().find("mode 640"), std::string::npos) << group.message();
  EXPECT_EQ(write("other.key", "EPOLSK01" + seed, 0604).code(), Code::kPermissionDenied);
  EXPECT_EQ(PolicySignerKey::Load(dir / "absent.key").status().code(), Code::kNotFound);
}

TEST(PolicySignerKeyFile, PublicKeyFile) {
  TempDir dir;
  PolicySignerKey key = KeyFromSeedByte(3);
  ASSERT_TRUE(SaveSignerPublicKey(dir / "k.pub", key.public_key()).ok());
  auto loaded = LoadSignerPublicKey(dir / "k.pub");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, key.public_key());
  auto j = nlohmann::json::parse(ReadText(dir / "k.pub"));
  EXPECT_EQ(j, (nlohmann::json{{"format", "enclave-policy-signer-public-key"},
                               {"version", 1},
                               {"algorithm", "ed25519"},
                               {"public_key", HexEncode(key.public_key())}}));
  auto parse = [&](const std::function<void(nlohmann::json&)>& f) {
    auto t = j;
    f(t);
    return ParseSignerPublicKey(t.dump()).status();
  };
  EXPECT_EQ(parse([](auto& t) { t["algorithm"] = "x25519"; }).code(), Code::kUnsupported);
  EXPECT_EQ(parse([](auto& t) { t["extra"] = true; }).code(), Code::kInvalidInput);
  EXPECT_EQ(parse([](auto& t) { t["public_key"] = "00"; }).code(), Code::kInvalidInput);
  EXPECT_EQ(parse([](auto& t) { t["public_key"] = "01" + std::string(62, '0'); }).code(), Code::kInvalidInput);
  EXPECT_EQ(parse([](auto& t) { t["format"] = "enclave-audit-log-public-key"; }).code(), Code::kInvalidInput);
}

// ---- The test vector of docs/formats/data-use-policy.md ------------------------------------

// The doc holds the vector as "<!-- vector:NAME -->" followed by a fenced block.
std::string DocBlock(const std::string& doc, const std::string& name) {
  const std::string marker = "<!-- vector:" + name + " -->";
  size_t at = doc.find(marker);
  if (at == std::string::npos) return "";
  size_t open = doc.find("```", at);
  size_t start = doc.find('\n', open) + 1;
  size_t close = doc.find("\n```", start);
  if (open == std::string::npos || close == std::string::npos) return "";
  return doc.substr(start, close + 1 - start);  // the block's lines, each ending in LF
}

std::string DocHex(const std::string& doc, const std::string& name) {
  std::string block = DocBlock(doc, name);
  while (!block.empty() && block.back() == '\n') block.pop_back();
  return block;
}

TEST(UsagePolicyVector, DocumentVectorMatchesLibsodium) {
  const std::string doc = Source("docs/formats/data-use-policy.md");
  ASSERT_FALSE(doc.empty());
  const std::string policy = DocBlock(doc, "policy");
  const std::string seed_hex = DocHex(doc, "seed"), pk_hex = DocHex(doc, "public_key");
  const std::string digest_hex = DocHex(doc, "policy_sha256"), input_hex = DocHex(doc, "signature_input");
  const std::string sig_hex = DocHex(doc, "signature");
  const std::string sig_file = DocBlock(doc, "signature_file");
  ASSERT_FALSE(policy.empty());
  ASSERT_EQ(seed_hex.size(), 64u);
  // RFC 8032, section 7.1, TEST 1: an independent check of the seed -> public key step.
  EXPECT_EQ(seed_hex, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  EXPECT_EQ(pk_hex, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");

  auto seed = HexDecode(seed_hex);
  ASSERT_TRUE(seed.ok());
  std::array<uint8_t, 32> pk{};
  std::array<uint8_t, 64> sk{};
  ASSERT_EQ(crypto_sign_seed_keypair(pk.data(), sk.data(), seed->data()), 0);
  EXPECT_EQ(HexEncode(pk), pk_hex);
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(policy));
  EXPECT_EQ(Hex(digest), digest_hex);
  const std::vector<uint8_t> input = UsagePolicySignatureInput(digest);
  EXPECT_EQ(HexEncode(input), input_hex);
  std::array<uint8_t, 64> sig{};
  ASSERT_EQ(crypto_sign_detached(sig.data(), nullptr, input.data(), input.size(), sk.data()), 0);
  sodium_memzero(sk.data(), sk.size());
  EXPECT_EQ(HexEncode(sig), sig_hex);

  // The project's code agrees: signing from the same seed gives the documented file, and
  // the documented file verifies.
  auto secret = crypto::SecretBytes::CopyFrom(*seed);
  ASSERT_TRUE(secret.ok());
  auto key = PolicySignerKey::FromSeed(*secret);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(HexEncode(key->public_key()), pk_hex);
  auto ours = SignUsagePolicy(policy, *key);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  EXPECT_EQ(*ours, sig_file);
  auto v = VerifyUsagePolicy(policy, sig_file, {key->public_key()});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->policy.policy_id, "example-vector");
  EXPECT_EQ(v->policy.serial, 7u);
}

// The evaluation example under the vector in the document.
TEST(UsagePolicyVector, DocumentEvaluationExample) {
  const std::string doc = Source("docs/formats/data-use-policy.md");
  auto p = ParseUsagePolicy(DocBlock(doc, "policy"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const crypto::Digest256 swtpm = crypto::Sha256(AsBytes(Source("policies/swtpm.json")));
  ReleaseClaims c;
  c.job_id = "doc-job";
  c.kind = "train";
  c.requester = "alice@hospital.example";
  c.datasets = {"wdbc-2026"};
  c.epochs = 100;
  c.world_size = 2;
  c.clear_metrics = {"loss"};
  c.model_export = true;
  ASSERT_FALSE(p->datasets.empty());
  ASSERT_FALSE(p->datasets[0].workloads.empty());
  c.workload_digest = p->datasets[0].workloads[0];
  EXPECT_TRUE(EvaluateRelease(*p, c, swtpm, {crypto::Suite::kAes256Gcm}).allowed);
  c.kind = "cv";
  c.epochs = 101;
  c.clear_metrics = {"loss", "roc_auc"};
  UsageDecision d = EvaluateRelease(*p, c, swtpm, {crypto::Suite::kAes256Gcm});
  EXPECT_FALSE(d.allowed);
  std::string listed;
  for (const std::string& r : d.reasons) listed += "    " + r + "\n";
  EXPECT_NE(doc.find("refused with, in order:\n\n" + listed), std::string::npos) << listed;
}

// ---- Fuzz seeds ---------------------------------------------------------------------------------

// valid-*.json seeds parse; valid-signed-* seeds (policy, 0x00, signature file) verify
// under the fuzz target's fixed signer (seed bytes 0x60..0x7f).
TEST(UsagePolicyFuzzSeeds, ValidSeedsAreAccepted) {
  const fs::path dir = fs::path(ENCLAVE_SOURCE_DIR) / "tests/fuzz/corpus/usage_policy";
  ASSERT_TRUE(fs::is_directory(dir));
  const PolicySignerKey fuzz_key = KeyFromSeedByte(0x60);
  size_t valid = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string bytes = ReadText(e.path().string());
    if (name.rfind("valid-signed-", 0) == 0) {
      const size_t nul = bytes.find('\0');
      ASSERT_NE(nul, std::string::npos) << name;
      auto v = VerifyUsagePolicy(std::string_view(bytes).substr(0, nul), std::string_view(bytes).substr(nul + 1),
                                 {fuzz_key.public_key()});
      EXPECT_TRUE(v.ok()) << name << ": " << v.status().ToString();
      ++valid;
    } else if (name.rfind("valid-", 0) == 0) {
      EXPECT_TRUE(ParseUsagePolicy(bytes).ok()) << name << ": " << ParseUsagePolicy(bytes).status().ToString();
      ++valid;
    } else if (name.rfind("invalid-", 0) == 0) {
      EXPECT_FALSE(ParseUsagePolicy(bytes).ok()) << name;
    }
  }
  EXPECT_GE(valid, 4u);
}

// ---- enclave-broker policy keygen | sign | verify --------------------------------------------

#ifdef ENCLAVE_BROKER_BIN
int RunBroker(const std::vector<std::string>& args, std::string* output) {
  char tmpl[] = "/tmp/policy-cli-XXXXXX";
  int out = ::mkstemp(tmpl);
  if (out < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out, 1);
  posix_spawn_file_actions_adddup2(&fa, out, 2);
  std::vector<std::string> argv = {ENCLAVE_BROKER_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, ENCLAVE_BROKER_BIN, &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out);
  int status = 0;
  if (rc == 0) ::waitpid(pid, &status, 0);
  if (output) *output = ReadText(tmpl);
  ::unlink(tmpl);
  return rc == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PolicyCli, KeygenSignVerify) {
  TempDir dir;
  std::string out;
  const std::string policy = dir / "hipaa.json";
  WriteText(policy, Source("policies/data-use/hipaa-medical.json"));

  ASSERT_EQ(RunBroker({"policy", "keygen", "--out", dir / "officer"}, &out), kExitOk) << out;
  struct stat st {};
  ASSERT_EQ(::stat((dir / "officer.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto pub = LoadSignerPublicKey(dir / "officer.pub");
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_NE(out.find(HexEncode(*pub)), std::string::npos) << out;
  // Never overwrites a key.
  const std::string key_before = ReadText(dir / "officer.key");
  EXPECT_EQ(RunBroker({"policy", "keygen", "--out", dir / "officer"}, &out), kExitAlreadyExists) << out;
  EXPECT_EQ(ReadText(dir / "officer.key"), key_before);

  ASSERT_EQ(RunBroker({"policy", "sign", "--policy", policy, "--key", dir / "officer.key"}, &out), kExitOk) << out;
  ASSERT_TRUE(fs::exists(policy + ".sig"));
  const std::string sig_before = ReadText(policy + ".sig");
  EXPECT_EQ(RunBroker({"policy", "sign", "--policy", policy, "--key", dir / "officer.key"}, &out),
            kExitAlreadyExists)
      << out;
  EXPECT_EQ(ReadText(policy + ".sig"), sig_before);

  ASSERT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--signer", dir / "officer.pub"}, &out), kExitOk)
      << out;
  const std::string digest = Hex(crypto::Sha256(AsBytes(ReadText(policy))));
  EXPECT_EQ(out, "OK policy hipaa-medical serial 1 sha256 " + digest + " signed by " + HexEncode(*pub) + "\n");

  ASSERT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--sig", policy + ".sig", "--signer",
                       dir / "officer.pub", "--json"},
                      &out),
            kExitOk)
      << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["policy_id"], "hipaa-medical");
  EXPECT_EQ(j["serial"], 1);
  EXPECT_EQ(j["policy_sha256"], digest);
  EXPECT_EQ(j["signer"], HexEncode(*pub));

  // A second officer: trusted in a comma-separated list; alone, the signature is untrusted.
  ASSERT_EQ(RunBroker({"policy", "keygen", "--out", dir / "other"}, &out), kExitOk) << out;
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--signer", dir / "other.pub"}, &out),
            kExitAuthFailed)
      << out;
  EXPECT_NE(out.find("is not trusted"), std::string::npos) << out;
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--signer",
                       dir / "other.pub" + "," + dir / "officer.pub"},
                      &out),
            kExitOk)
      << out;

  // One changed byte in the policy: authentication failed (exit 4).
  std::string text = ReadText(policy);
  text[text.find("\"max_epochs\": 500") + 14] = '9';
  WriteText(policy, text);
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--signer", dir / "officer.pub"}, &out),
            kExitAuthFailed)
      << out;
  EXPECT_NE(out.find("authentication failed: "), std::string::npos) << out;
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", policy, "--signer", dir / "officer.pub", "--json"}, &out),
            kExitAuthFailed);
  EXPECT_NE(out.find("\"code\":\"authentication failed\""), std::string::npos) << out;
}

TEST(PolicyCli, RefusesToSignAnInvalidPolicy) {
  TempDir dir;
  std::string out;
  ASSERT_EQ(RunBroker({"policy", "keygen", "--out", dir / "k"}, &out), kExitOk) << out;
  ojson j = Base();
  j["lease"]["reattest_interval_s"] = 7200;
  WriteText(dir / "bad.json", j.dump());
  EXPECT_EQ(RunBroker({"policy", "sign", "--policy", dir / "bad.json", "--key", dir / "k.key", "--out",
                       dir / "bad.sig"},
                      &out),
            kExitInvalidInput)
      << out;
  EXPECT_NE(out.find("'lease.reattest_interval_s' (7200) must not exceed"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "bad.sig"));
  // A key readable by others is refused.
  ::chmod((dir / "k.key").c_str(), 0644);
  WriteText(dir / "good.json", kBase);
  EXPECT_EQ(RunBroker({"policy", "sign", "--policy", dir / "good.json", "--key", dir / "k.key"}, &out),
            kExitPermissionDenied)
      << out;
  // Usage errors.
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", dir / "good.json"}, &out), kExitUsage) << out;
  EXPECT_EQ(RunBroker({"policy", "verify", "--policy", dir / "good.json", "--signer", ","}, &out),
            kExitInvalidInput)
      << out;
}
#endif

}  // namespace
}  // namespace enclave::broker
