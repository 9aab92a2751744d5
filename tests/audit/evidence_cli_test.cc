// `enclave-audit evidence record` and `evidence verify` end to end, on real files and
// processes: the documented outputs and exit codes (0 reproduced, 14 differs, 13 could not
// evaluate, 4 a log that does not verify, 3 not a verdict, 6 no such entry, 2 usage).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "audit_test_util.h"
#include "evidence_fixture.h"

namespace enclave::audit {
namespace {

using namespace testing;
using nlohmann::json;

struct CmdResult {
  int rc;
  std::string out, err;
};

CmdResult Exec(const std::string& args, const fs::path& cwd) {
  const std::string err_file = (cwd / "stderr.txt").string();
  const std::string cmd = "cd '" + cwd.string() + "' && '" + std::string(ENCLAVE_AUDIT_BIN) + "' " + args + " 2>'" +
                          err_file + "'";
  CmdResult r{};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "", "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

class EvidenceCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ScratchDir("evidence-cli");
    ASSERT_EQ(Exec("init --log log --signing-key log.key --public-key log.pub", dir_).rc, 0);
    WritePolicy(dir_, "policy", PolicyJson());
    attest_test::WriteFile((dir_ / "enrolment.json").string(), host_.EnrolmentBundle());
    attest_test::WriteFile((dir_ / "evidence.json").string(), host_.EvidenceBundle(TestNonce()));
    const std::string record = "evidence record --log log --signing-key log.key --host gpu-host-7 --policy "
                               "policies/policy.json --enrolment enrolment.json --evidence evidence.json --nonce " +
                               HexEncode(TestNonce()) + " --nonce-issued-at " + std::to_string(kIssuedAt) +
                               " --json --appraised-at ";
    // Entry 0: a pass; entry 1: the same evidence appraised too late, a fail.
    CmdResult r = Exec(record + std::to_string(kIssuedAt + 30), dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["entry"], 0);
    EXPECT_EQ(json::parse(r.out)["verdict"]["verdict"], "pass");
    r = Exec(record + std::to_string(kIssuedAt + 301), dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["entry"], 1);
    EXPECT_EQ(json::parse(r.out)["verdict"]["verdict"], "fail");
    // Entry 2: not a verdict.
    r = Exec(R"(append --log log --signing-key log.key --event '{"type":"host.enrolled","actor":"broker","host":"gpu-host-7"}')",
             dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    // Entry 3: a broker that recorded "pass" for the late evidence.
    {
      auto key = LogSigningKey::Load((dir_ / "log.key").string());
      ASSERT_TRUE(key.ok());
      auto w = LogWriter::Open((dir_ / "log").string(), std::move(*key));
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      auto archive = EvidenceArchive::Open((dir_ / "log").string(), false);
      ASSERT_TRUE(archive.ok());
      VerdictInputs in = MakeInputs(host_, (dir_ / "policies/policy.json").string());
      in.context.appraised_at = kIssuedAt + 301;
      attest::Verdict forged;
      forged.appraisal.Pass("quote.signature");
      auto idx = RecordAttestationVerdict(**w, *archive, in, forged);
      ASSERT_TRUE(idx.ok()) << idx.status().ToString();
      ASSERT_EQ(*idx, 3u);
    }
  }

  CmdResult Verify(const std::string& extra) {
    return Exec("evidence verify --log log --key log.pub " + extra, dir_);
  }

  json EntryFields(uint64_t index) {
    CmdResult r = Exec("show --log log --key log.pub --json", dir_);
    EXPECT_EQ(r.rc, 0) << r.err;
    json entry = json::parse(r.out)["entries"][index]["entry"];
    return entry;
  }

  fs::path Blob(const std::string& hex) { return dir_ / "log/archive/sha256" / hex; }

  fs::path dir_;
  SyntheticHost host_;
};

TEST_F(EvidenceCliTest, PassAndFailReproduce) {
  CmdResult r = Verify("--entry 0");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("REPRODUCED: entry 0, attestation.verdict for host gpu-host-7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("byte for byte"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
  r = Verify("--entry 1 --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["outcome"], "reproduced");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["recorded_entry_verdict"], "rejected");
  EXPECT_EQ(j["recorded"], j["recomputed"]);
  EXPECT_EQ(j["recomputed"]["verdict"], "fail");
  EXPECT_EQ(j["recomputed"]["failures"][0]["check"], "evidence.age.expired");
  EXPECT_EQ(j["log"]["entries"], 4);
}

TEST_F(EvidenceCliTest, LyingRecordDiffersWithItsOwnExitCode) {
  CmdResult r = Verify("--entry 3");
  EXPECT_EQ(r.rc, 14) << r.out << r.err;
  EXPECT_NE(r.out.find("DIFFERS: entry 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- verdict: recorded pass, recomputed fail"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- failure only in the recomputed verdict: evidence.age.expired"), std::string::npos) << r.out;
  r = Verify("--entry 3 --json");
  EXPECT_EQ(r.rc, 14);
  const json j = json::parse(r.out);
  EXPECT_EQ(j["outcome"], "differs");
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["recorded"]["verdict"], "pass");
  EXPECT_EQ(j["recomputed"]["verdict"], "fail");
  EXPECT_GE(j["differences"].size(), 3u);
}

TEST_F(EvidenceCliTest, DamagedArchiveCannotBeEvaluated) {
  const json f0 = EntryFields(0), f1 = EntryFields(1);
  // Entry 0's evidence altered by one bit.
  const fs::path ev = Blob(f0["evidence_sha256"]);
  const auto original = ReadBytes(ev.string());
  auto bytes = original;
  bytes[100] ^= 0x20;
  fs::permissions(ev, fs::perms::owner_write, fs::perm_options::add);
  WriteBytes(ev.string(), bytes);
  CmdResult r = Verify("--entry 0");
  EXPECT_EQ(r.rc, 13) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // no partial result
  EXPECT_NE(r.err.find("could not evaluate entry 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("archived evidence bundle (evidence_sha256)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was altered"), std::string::npos) << r.err;
  r = Verify("--entry 0 --json");
  EXPECT_EQ(r.rc, 13);
  const json j = json::parse(r.out);
  EXPECT_EQ(j["outcome"], "could not evaluate");
  EXPECT_EQ(j["error"]["class"], "authentication failed");
  EXPECT_EQ(j["recomputed"], nullptr);
  // Entries share blobs (the same bytes are one file): put the evidence back, then delete
  // the enrolment bundle.
  WriteBytes(ev.string(), original);
  ASSERT_EQ(Verify("--entry 1").rc, 0);
  fs::remove(Blob(f1["enrolment_sha256"]));
  r = Verify("--entry 1");
  EXPECT_EQ(r.rc, 13) << r.out << r.err;
  EXPECT_NE(r.err.find("archived enrolment bundle (enrolment_sha256)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is missing"), std::string::npos) << r.err;
}

TEST_F(EvidenceCliTest, SwappedPolicyCannotBeEvaluated) {
  const json f = EntryFields(1);
  const fs::path p = Blob(f["policy_digest"]);
  json lax = PolicyJson();
  lax["max_evidence_age_s"] = 86400;  // would turn the fail into a pass
  fs::permissions(p, fs::perms::owner_write, fs::perm_options::add);
  attest_test::WriteFile(p.string(), lax.dump(2) + "\n");
  CmdResult r = Verify("--entry 1");
  EXPECT_EQ(r.rc, 13) << r.out << r.err;
  EXPECT_NE(r.err.find("archived policy (policy_digest)"), std::string::npos) << r.err;
}

TEST_F(EvidenceCliTest, EditedLogIsRefusedBeforeAnyEvidence) {
  const std::string path = (dir_ / "log" / kLogFileName).string();
  auto file = ReadBytes(path);
  auto records = RawRecords(file);
  // Entry 1 rewritten as an acceptance, its record check made valid again.
  for (auto& rec : records) {
    if (rec.type != RecordType::kEntry) continue;
    auto e = ParseEntry(rec.payload);
    ASSERT_TRUE(e.ok());
    if (e->seq != 1) continue;
    Event ev = e->event;
    ev.fields["verdict"] = "accepted";
    ev.fields["checks"] = json::array({{{"check", "evidence.age"}, {"ok", true}, {"reason", "passed"}}});
    rec = MakeRaw(RecordType::kEntry, *SerializeEntry(ev, 1));
  }
  WriteBytes(path, Reassemble(file, records));
  CmdResult r = Verify("--entry 1");
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
}

TEST_F(EvidenceCliTest, RefusesWhatIsNotAnArchivedVerdict) {
  CmdResult r = Verify("--entry 2");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("entry 2 is a host.enrolled event, not an attestation.verdict"), std::string::npos) << r.err;
  r = Verify("--entry 4");
  EXPECT_EQ(r.rc, 6) << r.err;
  EXPECT_NE(r.err.find("the log has 4 entries"), std::string::npos) << r.err;
  EXPECT_EQ(Verify("").rc, 2);
  EXPECT_EQ(Verify("--entry x").rc, 3);
  r = Exec("evidence verify --help", dir_);
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--entry N"), std::string::npos);
}

TEST_F(EvidenceCliTest, StateFileIsCheckedNotAdvanced) {
  EXPECT_EQ(Verify("--entry 0 --state state.json").rc, 6);  // no accepted head yet
  ASSERT_EQ(Exec("verify --log log --key log.pub --state state.json", dir_).rc, 0);
  const auto before = ReadBytes((dir_ / "state.json").string());
  CmdResult r = Verify("--entry 0 --state state.json");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("consistent with the accepted head in --state"), std::string::npos) << r.out;
  EXPECT_EQ(ReadBytes((dir_ / "state.json").string()), before);
}

}  // namespace
}  // namespace enclave::audit
