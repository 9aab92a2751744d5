// The log's side of the witness protocol (issue 17 section 2, part 2) against real witness
// processes on loopback: RequestCosignature finds each witness's size through 409, proves
// consistency from it and checks the cosignature with the witness's key; CosignCheckpoint
// gathers a policy's quorum; `enclave-audit cosign` writes the cosigned checkpoint only then.
#include <gtest/gtest.h>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/witness_client.h"
#include "enclave/audit/witness_policy.h"
#include "witness_fixture.h"

namespace enclave::audit {
namespace {

using namespace testing;

using WitnessClientTest = TwoWitnessesTest;

TEST_F(WitnessClientTest, LearnsTheWitnessSizeAndProvesConsistencyFromIt) {
  const WitnessPolicy policy = Policy("quorum w1\n");
  const PolicyWitness& w1 = policy.witnesses()[0];
  AppendSamples(log_, 0, 5);
  Latest l = Now();
  uint64_t old = 3;  // a wrong guess: the witness has cosigned nothing yet
  auto c = RequestCosignature(w1, l.note, l.leaves, &old);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(old, 0u) << "the size the witness reported";
  auto note = ParseNote(l.note + c->line, "cosigned");
  ASSERT_TRUE(note.ok());
  EXPECT_TRUE(FindCosignature(*note, w1.key).ok());
  AppendSamples(log_, 5, 6);
  l = Now();
  old = 0;  // a client that does not know: 409, then a proof from 5 to 11
  c = RequestCosignature(w1, l.note, l.leaves, &old);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(old, 5u);
  EXPECT_NE(witnesses_[0]->stderr_text().find("refused '" + CheckpointOrigin(log_.pub.log_id) + "' size 11: 409"),
            std::string::npos);
  // The answer is checked against the configured key: w2's key with w1's URL is refused.
  PolicyWitness mislabelled = policy.witnesses()[1];
  mislabelled.url = w1.url;
  old = 11;
  auto wrong = RequestCosignature(mislabelled, l.note, l.leaves, &old);
  EXPECT_EQ(wrong.status().code(), Code::kUnavailable) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find("no cosignature by witness witness.test/w2"), std::string::npos);
  // URLs the client does not send to.
  for (const char* url : {"ftp://127.0.0.1:1", "http://user@127.0.0.1:1", "http://[::1]:1", "http://127.0.0.1:0",
                          "http://127.0.0.1:65536", "http://:80", "http://127.0.0.1:1/a?b", ""}) {
    PolicyWitness bad = w1;
    bad.url = url;
    old = 11;
    EXPECT_EQ(RequestCosignature(bad, l.note, l.leaves, &old).status().code(), Code::kInvalidInput) << url;
  }
}

// A 200 answer must be signature lines alone. A blank line (or other text) before a line
// would make the parsed note's text the checkpoint's plus more, and a witness could sign
// that instead: such a line does not verify on the checkpoint, so it must count for
// nothing, nor spoil the cosigned checkpoint of the others. A bad answer is unavailable,
// not a refusal of the log.
TEST_F(WitnessClientTest, AnAnswerThatIsNotSignatureLinesAloneCountsForNothing) {
  AppendSamples(log_, 0, 3);
  const Latest l = Now();
  auto rogue_key = WitnessSigningKey::Generate("witness.test/rogue");
  ASSERT_TRUE(rogue_key.ok());
  auto note = ParseNote(l.note, "checkpoint");
  ASSERT_TRUE(note.ok());
  // Lines signed over the texts that "\n" + line and "x\n\n" + line would give the note.
  auto over = [&](const std::string& text) {
    auto line = rogue_key->Cosign(text, 1700000000);
    EXPECT_TRUE(line.ok());
    return *line;
  };
  const std::string proper = over(note->text);
  const std::vector<std::string> bodies = {"\n" + over(note->text + "\n"), "x\n\n" + over(note->text + "\nx\n"),
                                          proper + "\n" + proper, "not a signature line\n"};
  for (const std::string& body : bodies) {
    ScriptedHttpServer rogue(200, body);
    PolicyWitness w{"rogue", rogue_key->public_key(), rogue.url()};
    uint64_t old = 0;
    auto c = RequestCosignature(w, l.note, l.leaves, &old);
    ASSERT_FALSE(c.ok()) << "accepted the answer " << body;
    EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
    // With the policy's witnesses: the quorum is the honest ones', their note verifies.
    const std::string text = "log " + NoteVerifierKey(log_.pub) + "\nwitness w1 " + witnesses_[0]->verifier_key() +
                             " " + Url(0) + "\nwitness rogue " + rogue_key->public_key().VerifierKey() + " " +
                             rogue.url() + "\ngroup any-one 1 w1 rogue\nquorum any-one\n";
    auto policy = WitnessPolicy::Parse(text, "policy");
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    CosignResult r = CosignCheckpoint(*policy, l.note, l.leaves, 0);
    ASSERT_TRUE(r.quorum);
    ASSERT_EQ(r.outcomes.size(), 2u);
    EXPECT_TRUE(r.outcomes[0].status.ok()) << r.outcomes[0].status.ToString();
    EXPECT_EQ(r.outcomes[1].status.code(), Code::kUnavailable) << r.outcomes[1].status.ToString();
    auto cosigned = ParseNote(r.cosigned_note, "cosigned");
    ASSERT_TRUE(cosigned.ok()) << cosigned.status().ToString();
    EXPECT_TRUE(PolicyCosignatures(*policy, *cosigned).ok()) << r.cosigned_note;
  }
  // The proper answer, for contrast, is taken.
  ScriptedHttpServer honest(200, proper);
  uint64_t old = 0;
  EXPECT_TRUE(RequestCosignature(PolicyWitness{"rogue", rogue_key->public_key(), honest.url()}, l.note, l.leaves, &old)
                  .ok());
}

TEST_F(WitnessClientTest, QuorumWithAWitnessDownAndRefusalsOfARewrittenLog) {
  AppendSamples(log_, 0, 4);
  Latest l = Now();
  CosignResult r = CosignCheckpoint(Policy("group both 2 w1 w2\nquorum both\n"), l.note, l.leaves, 0);
  ASSERT_EQ(r.outcomes.size(), 2u);
  EXPECT_TRUE(r.quorum);
  for (const WitnessOutcome& o : r.outcomes) EXPECT_TRUE(o.status.ok()) << o.name << ": " << o.status.ToString();
  auto note = ParseNote(r.cosigned_note, "cosigned");
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  auto by = PolicyCosignatures(Policy("quorum none\n"), *note);
  ASSERT_TRUE(by.ok());
  EXPECT_EQ(by->size(), 2u);
  EXPECT_TRUE(VerifyCheckpointNote(r.cosigned_note, log_.pub, "cosigned").ok()) << "still the log's checkpoint";
  // w2 down: 1 of 2 is met, 2 of 2 is not; the failure says unavailable.
  const std::vector<std::string> urls = {Url(0), "http://127.0.0.1:" + std::to_string(DeadPort())};
  AppendSamples(log_, 4, 1);
  l = Now();
  r = CosignCheckpoint(Policy("group both 2 w1 w2\nquorum both\n", urls), l.note, l.leaves, 4);
  EXPECT_FALSE(r.quorum);
  EXPECT_EQ(r.outcomes[1].status.code(), Code::kUnavailable) << r.outcomes[1].status.ToString();
  r = CosignCheckpoint(Policy("group one any w1 w2\nquorum one\n", urls), l.note, l.leaves, 4);
  EXPECT_TRUE(r.quorum);
  // The log cut back to 2 and rewritten to 6: both witnesses refuse, as a fork.
  const std::vector<uint8_t> file = ReadBytes(log_.log_path());
  CutBackAndRewrite(log_, 2, 4);
  l = Now();
  r = CosignCheckpoint(Policy("group one any w1 w2\nquorum one\n"), l.note, l.leaves, 0);
  EXPECT_FALSE(r.quorum);
  // w1 is at 5 (422: the proof from 5 does not hold), w2 at 4 (the same).
  for (const WitnessOutcome& o : r.outcomes) {
    EXPECT_EQ(o.status.code(), Code::kAuthFailed) << o.name << ": " << o.status.ToString();
    EXPECT_NE(o.status.message().find("not consistent with what it cosigned"), std::string::npos);
  }
  // Cut below what a witness has cosigned: the client says so before asking.
  WriteBytes(log_.log_path(), file);
  CutBackAndRewrite(log_, 2, 0);
  l = Now();
  uint64_t old = 5;
  auto c = RequestCosignature(Policy("quorum w1\n").witnesses()[0], l.note, l.leaves, &old);
  EXPECT_EQ(c.status().code(), Code::kAuthFailed);
  EXPECT_NE(c.status().message().find("the log was cut back"), std::string::npos) << c.status().ToString();
}

TEST_F(WitnessClientTest, CosignVerbWritesTheFileOnlyWithTheQuorum) {
  AppendSamples(log_, 0, 3);
  const std::string pub = log_.dir.parent_path().string() + "/log.pub";
  ASSERT_TRUE(log_.pub.Save(pub, true).ok());
  Policy("group both 2 w1 w2\nquorum both\n");
  const std::string d = dir_.string(), logdir = log_.dir.string(), out = logdir + "/cosigned-checkpoint";
  CliRun r = RunAudit({"cosign", "--log", logdir, "--key", pub, "--witness-policy", Path("policy"), "--json"}, d);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["tree_size"], 3);
  EXPECT_EQ(j["witnesses"].size(), 2u);
  const std::string first = ReadTextFile(out);
  EXPECT_EQ(first, j["cosigned_checkpoint"].get<std::string>());
  auto note = ParseNote(first, "file");
  ASSERT_TRUE(note.ok());
  EXPECT_EQ(note->signatures.size(), 3u) << "the log's signature and two cosignatures";
  // Grown, with a witness down: the quorum is not met, exit 10, the file is kept.
  AppendSamples(log_, 3, 2);
  witnesses_[1]->Stop();
  r = RunAudit({"cosign", "--log", logdir, "--key", pub, "--witness-policy", Path("policy"), "--timeout", "2"}, d);
  EXPECT_EQ(r.rc, 10) << r.err;
  EXPECT_EQ(ReadTextFile(out), first);
  // Rewritten: refused as inconsistent, exit 4, the file is kept.
  CutBackAndRewrite(log_, 1, 4);
  Policy("quorum w1\n");
  r = RunAudit({"cosign", "--log", logdir, "--key", pub, "--witness-policy", Path("policy")}, d);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("not consistent with what it cosigned"), std::string::npos) << r.err;
  EXPECT_EQ(ReadTextFile(out), first);
  // w2 lost its state (it then trusts the next checkpoint on first use) and cosigns the
  // rewritten log, which w1 refuses: a quorum of one is met and the file is written, but the
  // fork w1 saw makes cosign exit 4.
  witnesses_[1]->Stop();
  fs::remove_all(Path("state2"));
  auto w2 = WitnessProcess::Start(Path("w2.key"), Path("state2"), Path("log.vkey"), Path("w2.err"));
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  witnesses_[1] = std::move(*w2);
  Policy("group one any w1 w2\nquorum one\n");
  r = RunAudit({"cosign", "--log", logdir, "--key", pub, "--witness-policy", Path("policy")}, d);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("the quorum cosigned, but a witness refused"), std::string::npos) << r.err;
  const std::string written = ReadTextFile(out);
  EXPECT_NE(written, first);
  auto rewritten = ParseNote(written, "file");
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(rewritten->signatures.size(), 2u) << "the log's signature and w2's cosignature";
}

}  // namespace
}  // namespace enclave::audit
