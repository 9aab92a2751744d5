// `enclave-audit verify --witness-policy` (issue 17 section 2, part 3): the newest checkpoint
// an auditor accepts is the newest one cosigned by the policy's quorum; the verdict names the
// witnesses; a log rewritten after it was witnessed fails, as does a cosigned checkpoint with
// too few or forged cosignatures. Real witness processes cosign; the auditor runs the CLI.
#include <gtest/gtest.h>

#include "enclave/audit/witness_client.h"
#include "witness_fixture.h"

namespace enclave::audit {
namespace {

using namespace testing;

class WitnessVerifyTest : public TwoWitnessesTest {
 protected:
  void SetUp() override {
    TwoWitnessesTest::SetUp();
    pub_ = Path("log.pub");
    ASSERT_TRUE(log_.pub.Save(pub_, true).ok());
    cosigned_ = log_.dir.string() + "/cosigned-checkpoint";
  }
  CliRun Cli(std::vector<std::string> args) { return RunAudit(args, dir_.string()); }
  CliRun Cosign() {
    return Cli({"cosign", "--log", log_.dir.string(), "--key", pub_, "--witness-policy", Path("policy")});
  }
  CliRun Verify(std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"verify", "--log", log_.dir.string(), "--key", pub_, "--witness-policy",
                                  Path("policy")};
    a.insert(a.end(), more.begin(), more.end());
    return Cli(a);
  }
  std::string pub_, cosigned_;
};

TEST_F(WitnessVerifyTest, AcceptsTheNewestCheckpointTheQuorumCosigned) {
  AppendSamples(log_, 0, 6);
  Policy("group both 2 w1 w2\nquorum both\n");
  ASSERT_EQ(Cosign().rc, 0);
  CliRun r = Verify({"--json", "--state", Path("auditor.json")});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& w = j["witnessed"];
  EXPECT_EQ(w["tree_size"], 6);
  EXPECT_EQ(w["quorum"], "2 of {w1, w2}");
  ASSERT_EQ(w["cosigned_by"].size(), 2u);
  EXPECT_EQ(w["cosigned_by"][0]["name"], "w1");
  EXPECT_EQ(w["cosigned_by"][1]["cosigner"], "witness.test/w2");
  EXPECT_EQ(w["unwitnessed_entries"], 0);
  // Two more entries, not cosigned yet: still verified, but the accepted head (and the
  // auditor's state) stays at the witnessed 6.
  AppendSamples(log_, 6, 2);
  r = Verify({"--json", "--state", Path("auditor.json")});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["latest_tree_head"]["tree_size"], 8);
  EXPECT_EQ(j["accepted_tree_head"]["tree_size"], 6);
  EXPECT_EQ(j["witnessed"]["unwitnessed_entries"], 2);
  auto state = AuditorState::Load(Path("auditor.json"));
  ASSERT_TRUE(state.ok() && state->has_value());
  EXPECT_EQ((*state)->tree_head.head.tree_size, 6u);
  r = Verify();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("cosigned by w1 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the 2 entries after it are signed by the log only"), std::string::npos) << r.out;
  ASSERT_EQ(Cosign().rc, 0);
  r = Verify({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["witnessed"]["tree_size"], 8);
  // 1 of 2 with one witness gone: accepted, and the verdict names who did not cosign.
  witnesses_[1]->Stop();
  AppendSamples(log_, 8, 1);
  Policy("group one any w1 w2\nquorum one\n");
  ASSERT_EQ(Cosign().rc, 0);
  r = Verify({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = nlohmann::json::parse(r.out)["witnessed"];
  EXPECT_EQ(j["tree_size"], 9);
  EXPECT_EQ(j["cosigned_by"].size(), 1u);
  EXPECT_EQ(j["not_cosigned_by"], nlohmann::json::array({"w2"}));
  // ... but not under a policy that needs both.
  Policy("group both 2 w1 w2\nquorum both\n");
  r = Verify();
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("is cosigned by {w1}; the witness policy requires 2 of {w1, w2}"), std::string::npos) << r.err;
}

// The attack of issue 17, caught by the auditor: after a checkpoint of size N was cosigned,
// the operator cuts the log back and rewrites it (to the same size, beyond it, or short of
// it). The rewritten log verifies on its own, but not against the witnessed checkpoint.
TEST_F(WitnessVerifyTest, TheRewrittenLogFailsAgainstTheWitnessedCheckpoint) {
  AppendSamples(log_, 0, 6);
  Policy("quorum w1\n");
  ASSERT_EQ(Cosign().rc, 0);
  const std::vector<uint8_t> honest = ReadBytes(log_.log_path());
  for (const auto& [keep, add] : std::vector<std::pair<uint64_t, int>>{{3, 3}, {3, 6}, {3, 1}, {2, 0}}) {
    WriteBytes(log_.log_path(), honest);
    CutBackAndRewrite(log_, keep, add);
    const std::string what = "cut to " + std::to_string(keep) + ", rewritten to " + std::to_string(keep + add);
    EXPECT_EQ(Cli({"verify", "--log", log_.dir.string(), "--key", pub_}).rc, 0) << what << ": verifies alone";
    CliRun r = Verify();
    EXPECT_EQ(r.rc, 4) << what << ": " << r.err;
    const bool shorter = keep + add < 6;
    EXPECT_NE(r.err.find(shorter ? "the log was cut back after it was witnessed"
                                 : "the log was rewritten after it was witnessed (a fork)"),
              std::string::npos)
        << what << ": " << r.err;
  }
  WriteBytes(log_.log_path(), honest);
  EXPECT_EQ(Verify().rc, 0);
}

TEST_F(WitnessVerifyTest, RefusesForgedAndMissingCosignatures) {
  AppendSamples(log_, 0, 3);
  Policy("group both 2 w1 w2\nquorum both\n");
  ASSERT_EQ(Cosign().rc, 0);
  const std::string good = ReadTextFile(cosigned_);
  auto with = [&](const std::string& text) {
    WriteBytes(cosigned_, std::vector<uint8_t>(text.begin(), text.end()));
    return Verify();
  };
  // A cosignature line with one signature bit changed: the whole note is refused.
  const size_t last = good.rfind("\xe2\x80\x94");
  std::string forged = good;
  const size_t pos = good.size() - 10;
  forged[pos] = forged[pos] == 'A' ? 'B' : 'A';
  ASSERT_GT(pos, last);
  CliRun r = with(forged);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("the cosignature of witness witness.test/w2 does not verify"), std::string::npos) << r.err;
  // Cosignature lines dropped: too few for the quorum.
  r = with(good.substr(0, last));
  EXPECT_EQ(r.rc, 4) << r.err;
  r = with(good.substr(0, good.rfind("\xe2\x80\x94", last - 1)));
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("cosigned by no witness of the policy"), std::string::npos) << r.err;
  // A cosignature of another checkpoint pasted under this one does not count.
  AppendSamples(log_, 3, 1);
  ASSERT_EQ(Cosign().rc, 0);
  const std::string newer = ReadTextFile(cosigned_);
  r = with(good.substr(0, last) + newer.substr(newer.rfind("\xe2\x80\x94")));
  EXPECT_EQ(r.rc, 4) << r.err;
  // No file: nothing is witnessed (6); the log's signature is required (4); the policy must
  // list this log when it lists logs (3).
  ::unlink(cosigned_.c_str());
  EXPECT_EQ(Verify().rc, 6);
  std::string unsigned_note = newer;
  const size_t log_line = unsigned_note.find("\n\n") + 2;
  unsigned_note.erase(log_line, unsigned_note.find('\n', log_line) + 1 - log_line);
  r = with(unsigned_note);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("no signature by the log key"), std::string::npos) << r.err;
  WriteBytes(cosigned_, std::vector<uint8_t>(newer.begin(), newer.end()));
  EXPECT_EQ(Verify().rc, 0);
  TestLog other = MakeLog("witness-verify-other");
  std::string policy = ReadTextFile(Path("policy"));
  policy.replace(policy.find(NoteVerifierKey(log_.pub)), NoteVerifierKey(log_.pub).size(), NoteVerifierKey(other.pub));
  WriteBytes(Path("policy"), std::vector<uint8_t>(policy.begin(), policy.end()));
  r = Verify();
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(Cli({"verify", "--log", log_.dir.string(), "--key", pub_, "--cosigned", cosigned_}).rc, 3)
      << "--cosigned needs --witness-policy";
}

}  // namespace
}  // namespace enclave::audit
