// Archived evidence of attestation verdicts: a log with real verdict entries made from
// synthetic evidence (evidence_fixture.h) is re-checked offline. Pass and fail verdicts
// reproduce; a lying record differs; a tampered, swapped or deleted blob and a log edited
// after the fact are each detected with their own outcome and message.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "audit_test_util.h"
#include "enclave/audit/evidence_archive.h"
#include "evidence_fixture.h"

namespace enclave::audit {
namespace {

using namespace testing;
using nlohmann::json;

class EvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = MakeLog("evidence");
    base_ = log_.dir.parent_path();
    policy_path_ = WritePolicy(base_, "policy", PolicyJson());
  }

  std::unique_ptr<LogWriter> Writer() {
    auto w = LogWriter::Open(log_.dir.string(), log_.Key());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return std::move(w).value();
  }
  EvidenceArchive Archive() {
    auto a = EvidenceArchive::Open(log_.dir.string(), true);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return std::move(a).value();
  }

  // Appraises and records `in` as the broker does; returns the entry index.
  uint64_t Record(const VerdictInputs& in, bool expect_pass) {
    auto w = Writer();
    auto r = AppraiseAndRecord(*w, Archive(), in);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return UINT64_MAX;
    EXPECT_EQ(r->verdict.passed(), expect_pass) << r->verdict.appraisal.Summary();
    return r->index;
  }

  RecheckResult Recheck(uint64_t index) {
    auto r = RecheckVerdict(log_.dir.string(), log_.pub, index, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : RecheckResult{};
  }

  json EntryFields(uint64_t index) {
    json fields;
    VerifyOptions o;
    o.on_entry = [&](uint64_t i, uint64_t, ByteSpan, const Entry& e) {
      if (i == index) fields = e.event.fields;
      return OkStatus();
    };
    auto v = VerifyLog(log_.dir.string(), log_.pub, o);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return fields;
  }

  fs::path BlobPath(const std::string& hex) { return log_.dir / "archive" / "sha256" / hex; }

  TestLog log_;
  fs::path base_;
  std::string policy_path_;
  SyntheticHost host_;
};

TEST_F(EvidenceTest, PassVerdictIsArchivedAndReproduced) {
  const uint64_t index = Record(MakeInputs(host_, policy_path_), true);
  ASSERT_EQ(index, 0u);
  const json f = EntryFields(0);
  EXPECT_EQ(f["verdict"], "accepted");
  std::string nonce_hex;
  for (int i = 0; i < 16; ++i) nonce_hex += "42";
  EXPECT_EQ(f["nonce"], nonce_hex);
  EXPECT_EQ(f["nonce_issued_at"], kIssuedAt);
  EXPECT_EQ(f["appraised_at"], kIssuedAt + 30);
  bool seen = false;
  VerifyOptions o;
  o.on_entry = [&](uint64_t, uint64_t, ByteSpan, const Entry& e) {
    seen = true;
    EXPECT_EQ(e.event.time, "2026-01-01T00:00:30.000Z");  // the entry's time is the appraisal time
    return OkStatus();
  };
  ASSERT_TRUE(VerifyLog(log_.dir.string(), log_.pub, o).ok());
  EXPECT_TRUE(seen);
  EXPECT_FALSE(f.contains("last_clock"));
  ASSERT_EQ(f["policy_files"].size(), 1u);
  EXPECT_EQ(f["policy_files"][0]["path"], "../roots/root.pem");
  // Every digest the entry names is a blob holding exactly the bytes that hash to it.
  std::ifstream pf(policy_path_, std::ios::binary);
  const std::string policy_bytes((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(f["policy_digest"], HexEncode(crypto::Sha256(AsBytes(policy_bytes))));
  for (const char* k : {"evidence_sha256", "enrolment_sha256", "policy_digest", "result_sha256"}) {
    const auto bytes = ReadBytes(BlobPath(f[k].get<std::string>()).string());
    EXPECT_EQ(HexEncode(crypto::Sha256(bytes)), f[k]) << k;
  }
  EXPECT_EQ(ReadBytes(BlobPath(f["policy_files"][0]["sha256"]).string()), ReadBytes((base_ / "roots/root.pem").string()));

  RecheckResult r = Recheck(0);
  EXPECT_EQ(r.outcome, RecheckOutcome::kReproduced) << r.not_evaluated.ToString();
  EXPECT_TRUE(r.differences.empty());
  EXPECT_EQ(r.recorded_json, r.recomputed_json);
  EXPECT_EQ(json::parse(r.recomputed_json)["verdict"], "pass");
  EXPECT_EQ(r.log.entries, 1u);
}

TEST_F(EvidenceTest, FailVerdictIsReproducedWithItsFindings) {
  VerdictInputs in = MakeInputs(host_, policy_path_);
  in.context.appraised_at = kIssuedAt + 301;  // one second past the policy's 300 s
  ASSERT_EQ(Record(in, false), 0u);
  const json f = EntryFields(0);
  EXPECT_EQ(f["verdict"], "rejected");
  EXPECT_EQ(f["checks"][0]["check"], "evidence.age.expired");
  EXPECT_EQ(f["checks"][0]["ok"], false);
  RecheckResult r = Recheck(0);
  EXPECT_EQ(r.outcome, RecheckOutcome::kReproduced) << r.not_evaluated.ToString();
  const json v = json::parse(r.recomputed_json);
  EXPECT_EQ(v["verdict"], "fail");
  ASSERT_EQ(v["failures"].size(), 1u);
  EXPECT_EQ(v["failures"][0]["check"], "evidence.age.expired");
  EXPECT_EQ(v["failures"][0]["got"], "301 s");
}

TEST_F(EvidenceTest, RecordedLastClockIsUsedAgain) {
  // The quote's clock (1000) is behind the last accepted one: the verdict fails on the
  // clock, and only a re-check that uses the recorded last clock reproduces that.
  VerdictInputs in = MakeInputs(host_, policy_path_);
  in.context.last_clock = attest::ClockInfo{5000, 5, 2, 1};
  ASSERT_EQ(Record(in, false), 0u);
  const json f = EntryFields(0);
  EXPECT_EQ(f["last_clock"], json({{"clock", 5000}, {"reset_count", 5}, {"restart_count", 2}, {"safe", 1}}));
  RecheckResult r = Recheck(0);
  EXPECT_EQ(r.outcome, RecheckOutcome::kReproduced) << r.not_evaluated.ToString();
  EXPECT_EQ(json::parse(r.recomputed_json)["verdict"], "fail");
  EXPECT_NE(r.recomputed_json.find("clock"), std::string::npos) << r.recomputed_json;
  // And the same evidence without that clock passes: the clock made the difference.
  in.context.last_clock.reset();
  EXPECT_EQ(Record(in, true), 1u);
  EXPECT_EQ(Recheck(1).outcome, RecheckOutcome::kReproduced);
}

TEST_F(EvidenceTest, BoundDigestIsArchivedAndUsed) {
  VerdictInputs in = MakeInputs(host_, policy_path_);
  crypto::Digest256 bound{};
  bound.fill(0x77);
  in.context.bound_digest = bound;
  in.evidence_bundle = host_.EvidenceBundle(in.context.nonce, bound);
  ASSERT_EQ(Record(in, true), 0u);
  EXPECT_EQ(EntryFields(0)["bound_digest"], std::string(64, '7'));
  EXPECT_EQ(Recheck(0).outcome, RecheckOutcome::kReproduced);
}

TEST_F(EvidenceTest, PolicyWithEkRootDirectoryIsLaidOutAgain) {
  json p = PolicyJson();
  p["ek_roots"] = {{"dir", "../roots"}};
  const std::string path = WritePolicy(base_, "dir-policy", p);
  attest_test::WriteFile((base_ / "roots" / "second.pem").string(), attest_test::SelfSignedPem("Second Root"));
  ASSERT_EQ(Record(MakeInputs(host_, path), true), 0u);
  const json f = EntryFields(0);
  ASSERT_EQ(f["policy_files"].size(), 2u);
  EXPECT_EQ(f["policy_files"][0]["path"], "../roots/root.pem");
  EXPECT_EQ(f["policy_files"][1]["path"], "../roots/second.pem");
  EXPECT_EQ(Recheck(0).outcome, RecheckOutcome::kReproduced);
}

// Policies parsed once are kept by the digest of the bytes they came from: the same policy
// text with other bytes under the same root file path is parsed anew, in one process.
TEST_F(EvidenceTest, SamePolicyTextWithAnotherRootFileIsParsedAnew) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  const fs::path root = base_ / "roots" / "root.pem";
  const auto original_root = ReadBytes(root.string());
  attest_test::WriteFile(root.string(), "not a certificate\n");
  {
    auto w = Writer();
    auto r = AppraiseAndRecord(*w, Archive(), MakeInputs(host_, policy_path_));
    ASSERT_FALSE(r.ok()) << "a root file that holds no certificate was not read: a stale parse was used";
    EXPECT_NE(r.status().message().find("root.pem"), std::string::npos) << r.status().ToString();
  }
  WriteBytes(root.string(), original_root);
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 1u);
  EXPECT_EQ(Recheck(1).outcome, RecheckOutcome::kReproduced);
}

TEST_F(EvidenceTest, LyingRecordDiffers) {
  // The broker recorded "pass" for evidence answering another nonce: the recomputation
  // fails on the qualifying data, and the re-check says how the two differ.
  VerdictInputs in = MakeInputs(host_, policy_path_);
  in.evidence_bundle = host_.EvidenceBundle(TestNonce(0x99));
  auto honest = AppraiseFromBytes(in.policy, in.policy_dir, in.evidence_bundle, in.enrolment_bundle, in.context);
  ASSERT_TRUE(honest.ok()) << honest.status().ToString();
  ASSERT_FALSE(honest->passed());
  attest::Verdict forged;
  forged.appraisal.Pass("quote.signature");
  forged.appraisal.Pass("evidence.age");
  {
    auto w = Writer();
    auto idx = RecordAttestationVerdict(*w, Archive(), in, forged);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  }
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kDiffers) << r.not_evaluated.ToString();
  auto has = [&](const std::string& prefix) {
    for (const auto& d : r.differences) {
      if (d.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("verdict: recorded pass, recomputed fail"));
  EXPECT_TRUE(has("failure only in the recomputed verdict: quote.extra_data"));
  EXPECT_TRUE(has("the entry says accepted, the recomputed verdict is fail"));
  EXPECT_TRUE(has("the entry's checks are not the checks of the recomputed verdict"));
}

TEST_F(EvidenceTest, TamperedEvidenceBlobIsNotEvaluated) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  const fs::path blob = BlobPath(EntryFields(0)["evidence_sha256"]);
  auto bytes = ReadBytes(blob.string());
  bytes[bytes.size() / 2] ^= 0x01;
  fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
  WriteBytes(blob.string(), bytes);
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_EQ(r.not_evaluated.code(), Code::kAuthFailed);
  EXPECT_NE(r.not_evaluated.message().find("archived evidence bundle (evidence_sha256)"), std::string::npos)
      << r.not_evaluated.message();
  EXPECT_NE(r.not_evaluated.message().find("was altered"), std::string::npos);
  EXPECT_TRUE(r.recomputed_json.empty());
}

TEST_F(EvidenceTest, SwappedPolicyBlobIsNotEvaluated) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  // Someone puts a laxer policy under the recorded policy's name.
  json lax = PolicyJson();
  lax["max_evidence_age_s"] = 86400;
  const fs::path blob = BlobPath(EntryFields(0)["policy_digest"]);
  fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
  const std::string text = lax.dump(2) + "\n";
  WriteBytes(blob.string(), std::vector<uint8_t>(text.begin(), text.end()));
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_EQ(r.not_evaluated.code(), Code::kAuthFailed);
  EXPECT_NE(r.not_evaluated.message().find("archived policy (policy_digest)"), std::string::npos)
      << r.not_evaluated.message();
}

TEST_F(EvidenceTest, DeletedBlobIsNotEvaluated) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  const json f = EntryFields(0);
  fs::remove(BlobPath(f["enrolment_sha256"]));
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_EQ(r.not_evaluated.code(), Code::kNotFound);
  EXPECT_NE(r.not_evaluated.message().find("archived enrolment bundle (enrolment_sha256)"), std::string::npos)
      << r.not_evaluated.message();
  EXPECT_NE(r.not_evaluated.message().find("is missing"), std::string::npos);
}

TEST_F(EvidenceTest, MissingPolicyFileIsNotEvaluated) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  fs::remove(BlobPath(EntryFields(0)["policy_files"][0]["sha256"]));
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_NE(r.not_evaluated.message().find("archived policy file '../roots/root.pem'"), std::string::npos)
      << r.not_evaluated.message();
}

TEST_F(EvidenceTest, UnparseableArchivedInputsAreNotEvaluated) {
  // A broker that archived inputs it never could have judged: the blobs are intact, but
  // the policy (an unknown key) and, in a second entry, the evidence do not parse.
  json bad_policy = PolicyJson();
  bad_policy["max_age"] = 1;
  VerdictInputs in = MakeInputs(host_, WritePolicy(base_, "unknown-key", bad_policy));
  attest::Verdict some;
  some.appraisal.Pass("quote.signature");
  {
    auto w = Writer();
    ASSERT_TRUE(RecordAttestationVerdict(*w, Archive(), in, some).ok());
    VerdictInputs in2 = MakeInputs(host_, policy_path_);
    in2.evidence_bundle = "not json";
    ASSERT_TRUE(RecordAttestationVerdict(*w, Archive(), in2, some).ok());
  }
  RecheckResult r = Recheck(0);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_EQ(r.not_evaluated.code(), Code::kInvalidInput);
  EXPECT_NE(r.not_evaluated.message().find("recomputing the verdict: policy"), std::string::npos)
      << r.not_evaluated.message();
  EXPECT_NE(r.not_evaluated.message().find("max_age"), std::string::npos) << r.not_evaluated.message();
  r = Recheck(1);
  ASSERT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_NE(r.not_evaluated.message().find("recomputing the verdict: evidence bundle"), std::string::npos)
      << r.not_evaluated.message();
}

TEST_F(EvidenceTest, LogEditedAfterTheFactFailsVerification) {
  // A rejection rewritten as an acceptance, with a correct record check: only the Merkle
  // tree and the signed tree heads can tell, and the re-check refuses the whole log.
  VerdictInputs in = MakeInputs(host_, policy_path_);
  in.context.appraised_at = kIssuedAt + 301;
  ASSERT_EQ(Record(in, false), 0u);
  const auto file = ReadBytes(log_.log_path());
  auto records = RawRecords(file);
  bool edited = false;
  for (auto& rec : records) {
    if (rec.type != RecordType::kEntry) continue;
    auto entry = ParseEntry(rec.payload);
    ASSERT_TRUE(entry.ok());
    Event e = entry->event;
    e.fields["verdict"] = "accepted";
    e.fields["checks"] = json::array({{{"check", "evidence.age"}, {"ok", true}, {"reason", "passed"}}});
    auto bytes = SerializeEntry(e, entry->seq);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    rec = MakeRaw(RecordType::kEntry, *bytes);
    edited = true;
  }
  ASSERT_TRUE(edited);
  WriteBytes(log_.log_path(), Reassemble(file, records));
  auto r = RecheckVerdict(log_.dir.string(), log_.pub, 0, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAuthFailed) << r.status().ToString();
}

TEST_F(EvidenceTest, OtherEntriesAreRefused) {
  AppendSamples(log_, 0, 1);  // entry 0: host.enrolled
  auto w = Writer();
  ASSERT_TRUE(w->Append(AttestationVerdict("broker", "h1", true, {{"quote.signature", true, "ok"}}, "", "")).ok());
  w.reset();
  auto not_verdict = RecheckVerdict(log_.dir.string(), log_.pub, 0, nullptr);
  ASSERT_FALSE(not_verdict.ok());
  EXPECT_EQ(not_verdict.status().code(), Code::kInvalidInput);
  EXPECT_NE(not_verdict.status().message().find("host.enrolled"), std::string::npos);
  auto past_end = RecheckVerdict(log_.dir.string(), log_.pub, 2, nullptr);
  ASSERT_FALSE(past_end.ok());
  EXPECT_EQ(past_end.status().code(), Code::kNotFound);
  // A verdict written without its inputs (the schema before archiving) cannot be recomputed.
  RecheckResult r = Recheck(1);
  EXPECT_EQ(r.outcome, RecheckOutcome::kNotEvaluated);
  EXPECT_EQ(r.not_evaluated.code(), Code::kFailedPrecondition);
  EXPECT_NE(r.not_evaluated.message().find("archives no evidence"), std::string::npos);
}

TEST_F(EvidenceTest, RecheckAgainstAcceptedStateDetectsRollback) {
  ASSERT_EQ(Record(MakeInputs(host_, policy_path_), true), 0u);
  const auto before = ReadBytes(log_.log_path());
  AppendSamples(log_, 1, 1);
  auto v = VerifyLog(log_.dir.string(), log_.pub);
  ASSERT_TRUE(v.ok());
  const AuditorState state{log_.pub.log_id, v->latest};
  // With the state: the current log is consistent and the verdict reproduces.
  auto ok = RecheckVerdict(log_.dir.string(), log_.pub, 0, &state);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->outcome, RecheckOutcome::kReproduced);
  // Rolled back to before the auditor's head: refused, though the shorter log is valid.
  WriteBytes(log_.log_path(), before);
  auto rolled = RecheckVerdict(log_.dir.string(), log_.pub, 0, &state);
  ASSERT_FALSE(rolled.ok());
  EXPECT_EQ(rolled.status().code(), Code::kAuthFailed) << rolled.status().ToString();
}

TEST_F(EvidenceTest, UnevaluableInputsAreNotRecorded) {
  VerdictInputs in = MakeInputs(host_, policy_path_);
  in.evidence_bundle = "{\"format\":\"enclave-attest evidence v1\"}";
  auto w = Writer();
  auto r = AppraiseAndRecord(*w, Archive(), in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("evidence bundle"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(w->LatestTreeHead().head.tree_size, 0u);
  // An EK root named by absolute path cannot be laid out again: refused before anything is written.
  json p = PolicyJson();
  p["ek_roots"] = {{"files", {(base_ / "roots/root.pem").string()}}};
  in = MakeInputs(host_, WritePolicy(base_, "absolute", p));
  r = AppraiseAndRecord(*w, Archive(), in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();
  EXPECT_EQ(w->LatestTreeHead().head.tree_size, 0u);
}

TEST(EvidenceArchiveTest, WriteOnceAndDigestChecked) {
  const fs::path dir = ScratchDir("archive");
  auto a = EvidenceArchive::Open(dir.string(), true);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string blob = "some evidence";
  auto d = a->Put(AsBytes(blob));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(a->PathFor(*d), (dir / "archive/sha256" / HexEncode(crypto::Sha256(AsBytes(blob)))).string());
  EXPECT_TRUE(a->Put(AsBytes(blob)).ok());  // the same bytes again: fine
  auto got = a->Get(*d);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::string(got->begin(), got->end()), blob);
  // An altered blob is never overwritten, and never read back as good.
  fs::permissions(a->PathFor(*d), fs::perms::owner_write, fs::perm_options::add);
  WriteBytes(a->PathFor(*d), {'x'});
  EXPECT_EQ(a->Get(*d).status().code(), Code::kAuthFailed);
  EXPECT_EQ(a->Put(AsBytes(blob)).status().code(), Code::kAuthFailed);
  crypto::Digest256 absent{};
  EXPECT_EQ(a->Get(absent).status().code(), Code::kNotFound);
}

// Concurrent writers of overlapping blobs (as verdicts share their host's enrolment and
// the policy): every blob lands once with the right digest, and no temporary file is left.
TEST(EvidenceArchiveTest, ConcurrentPutAllStoresEveryBlobOnce) {
  const fs::path dir = ScratchDir("archive-all");
  auto a = EvidenceArchive::Open(dir.string(), true);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  constexpr int kThreads = 8, kRounds = 20;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::string shared = "shared " + std::to_string(r % 3);
        const std::string own = "own " + std::to_string(t) + "/" + std::to_string(r);
        const std::vector<ByteSpan> blobs = {AsBytes(shared), AsBytes(own), AsBytes(shared)};
        auto d = a->PutAll(blobs);
        if (!d.ok() || d->size() != 3 || (*d)[0] != crypto::Sha256(AsBytes(shared)) ||
            (*d)[1] != crypto::Sha256(AsBytes(own)) || (*d)[2] != (*d)[0]) {
          failures[t] = d.ok() ? "wrong digests" : d.status().ToString();
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "archive/sha256")) {
    ++files;
    EXPECT_EQ(e.path().filename().string().size(), 64u) << e.path();  // a blob, not a temporary file
  }
  EXPECT_EQ(files, static_cast<size_t>(3 + kThreads * kRounds));
  const std::string own = "own 5/7";
  auto got = a->Get(crypto::Sha256(AsBytes(own)));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::string(got->begin(), got->end()), own);
}

TEST(EvidenceSchemaTest, ArchivedFieldsComeAsASet) {
  Event e = AttestationVerdict("broker", "h1", true, {{"quote.signature", true, "passed"}}, "", std::string(64, 'a'));
  e.fields["evidence_sha256"] = std::string(64, 'b');
  Status s = ValidateEvent(e);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lacks field 'enrolment_sha256'"), std::string::npos) << s.message();
  e.fields["enrolment_sha256"] = std::string(64, 'c');
  e.fields["policy_files"] = json::array({{{"path", "../roots/root.pem"}, {"sha256", std::string(64, 'd')}}});
  e.fields["nonce"] = "00ff";
  e.fields["nonce_issued_at"] = 1;
  e.fields["appraised_at"] = 2;
  e.fields["result_sha256"] = std::string(64, 'e');
  EXPECT_TRUE(ValidateEvent(e).ok()) << ValidateEvent(e).ToString();
  e.fields["last_clock"] = {{"clock", 1}, {"reset_count", 0}, {"restart_count", 0}, {"safe", 2}};
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["last_clock"]["safe"] = 1;
  e.fields["last_clock"]["extra"] = 1;
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["last_clock"].erase("extra");
  e.fields["last_clock"]["reset_count"] = 4294967296ull;
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["last_clock"]["reset_count"] = 4294967295ull;
  EXPECT_TRUE(ValidateEvent(e).ok());
  e.fields["nonce"] = "abc";  // odd length
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["nonce"] = std::string(66, 'a');  // 33 bytes
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["nonce"] = "00ff";
  e.fields["policy_files"] = json::array();
  EXPECT_FALSE(ValidateEvent(e).ok());
  e.fields["policy_files"] = json::array({{{"path", "a b"}, {"sha256", std::string(64, 'd')}}});
  EXPECT_FALSE(ValidateEvent(e).ok());
  // Without the archived set, last_clock means nothing and is refused.
  Event old = AttestationVerdict("broker", "h1", true, {{"quote.signature", true, "passed"}}, "", "");
  old.fields["last_clock"] = {{"clock", 1}, {"reset_count", 0}, {"restart_count", 0}, {"safe", 1}};
  EXPECT_FALSE(ValidateEvent(old).ok());
}

TEST(EvidenceSchemaTest, ArchivedPaths) {
  for (const char* good : {"root.pem", "../roots/root.pem", "../../a/b.pem", "ek-roots/vendor_1.der"}) {
    EXPECT_TRUE(CheckArchivedPath(good).ok()) << good;
  }
  for (const char* bad : {"", "/etc/root.pem", "./root.pem", "a/./b", "a/../b", "a//b", "a/", "..", "../..",
                          "a b", "a\\b"}) {
    EXPECT_FALSE(CheckArchivedPath(bad).ok()) << bad;
  }
}

TEST(EvidenceSchemaTest, VerdictJsonReadsBack) {
  attest::Verdict v;
  v.appraisal.Pass("quote.signature");
  v.appraisal.Fail("pcr.value.not_allowed", "sha256 PCR 0", "one of [aa]", "bb");
  auto d = ParseVerdictJson(attest::VerdictJson(v));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->pass);
  EXPECT_EQ(d->passed, std::vector<std::string>{"quote.signature"});
  ASSERT_EQ(d->failures.size(), 1u);
  EXPECT_EQ(d->failures[0].got, "bb");
  EXPECT_FALSE(ParseVerdictJson(R"({"verdict":"pass","passed":[],"failures":[]})").ok());  // pass needs a check
  EXPECT_FALSE(ParseVerdictJson(R"({"verdict":"pass","passed":["a"],"failures":[],"x":1})").ok());
  EXPECT_FALSE(ParseVerdictJson(R"({"verdict":"pass","passed":["a"],"passed":["b"],"failures":[]})").ok());
  EXPECT_FALSE(ParseVerdictJson(R"({"verdict":"fail","passed":[],"failures":[{"check":"c","where":"","expected":""}]})").ok());
}

TEST(EvidenceSchemaTest, ChecksFromVerdictFitTheEntry) {
  attest::Verdict v;
  for (int i = 0; i < 100; ++i) v.appraisal.Pass("check." + std::to_string(i));
  v.appraisal.Fail("ima.file.digest_not_allowed", "line 3 /usr/bin/x\x01y", std::string(5000, 'e'), "\xff\xfe");
  auto checks = ChecksFromVerdict(v);
  ASSERT_EQ(checks.size(), 64u);
  EXPECT_FALSE(checks[0].ok);  // failures first
  EXPECT_LE(checks[0].reason.size(), 512u);
  Event e = AttestationVerdict("broker", "h1", v.passed(), checks, "", "");
  EXPECT_TRUE(ValidateEvent(e).ok()) << ValidateEvent(e).ToString();
  EXPECT_EQ(ChecksFromVerdict(attest::Verdict{}).front().check, "appraisal.empty");
}

}  // namespace
}  // namespace enclave::audit
