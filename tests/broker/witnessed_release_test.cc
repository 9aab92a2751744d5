// Witnessed key release (issue 17 section 2) with real processes: the broker, two
// `enclave-audit witness serve` processes, a swtpm host, enclave-train and enclave-audit.
// A release is answered only with a checkpoint both witnesses cosigned and the inclusion
// proofs of its entries; a witness that is down makes it a 503 (the lease ends, logged);
// a log cut back to erase a release is caught by the witnesses, by the officer holding the
// report's cosigned checkpoint, and by the report's proof of the erased entry.
#include <chrono>
#include <thread>

#include "../audit/witness_process.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/record.h"
#include "release_fixture.h"

namespace enclave::broker {
namespace {

namespace wt = audit::testing;
using namespace std::chrono_literals;

class WitnessedReleaseTest : public ReleaseTest {
 protected:
  // Before the broker starts: its log's verifier key, two witnesses following it, and the
  // policy file (both witnesses, quorum both) that the broker and the officer use.
  Status StartWitnesses(const std::string& dir) {
    ASSIGN_OR_RETURN(audit::LogSigningKey key, audit::LogSigningKey::Load(dir + "/audit.key"));
    testing::WriteText(dir + "/log.vkey", audit::NoteVerifierKey(key.public_key()) + "\n");
    std::string policy = "log " + audit::NoteVerifierKey(key.public_key()) + "\n";
    for (int i = 1; i <= 2; ++i) {
      const std::string n = std::to_string(i);
      wt::CliRun r = wt::RunAudit({"witness", "keygen", "--name", "witness.test/w" + n, "--key", dir + "/w" + n + ".key"},
                                  dir);
      if (r.rc != 0) return Internal("witness keygen: " + r.err);
      ASSIGN_OR_RETURN(auto w, wt::WitnessProcess::Start(dir + "/w" + n + ".key", dir + "/w" + n + ".state",
                                                         dir + "/log.vkey", dir + "/w" + n + ".err"));
      policy += "witness w" + n + " " + w->verifier_key() + " http://127.0.0.1:" + std::to_string(w->port()) + "\n";
      witnesses_.push_back(std::move(w));
    }
    testing::WriteText(dir + "/witnesses.policy", policy + "group both 2 w1 w2\nquorum both\n");
    return OkStatus();
  }
  void WitnessBroker(bool with_sample) {
    settings_.audit_config = "witness_policy = \"witnesses.policy\"\nwitness_wait_ms = 1500\nwitness_timeout_s = 2\n";
    settings_.before_launch = [this, with_sample](const std::string& dir) -> Status {
      RETURN_IF_ERROR(PrepareKeys(dir));
      if (with_sample) RETURN_IF_ERROR(SealSample(dir).status());
      return StartWitnesses(dir);
    };
  }
  audit::WitnessPolicy Policy() {
    auto p = audit::WitnessPolicy::Load(broker_->Path("witnesses.policy"));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return *p;
  }
  // A client that checks every answer's witnesses under the broker's witness policy.
  std::unique_ptr<BrokerClient> WitnessedClient() {
    auto c = Client();
    c->SetWitnessPolicy(Policy());
    return c;
  }
  // A long wait for the quorum (the tests that stop a witness let it answer again first).
  static constexpr char kLongWaitConfig[] =
      "witness_policy = \"witnesses.policy\"\nwitness_wait_ms = 20000\nwitness_timeout_s = 2\n";
  // A job whose release must be witnessed under the broker's witness policy.
  std::string WitnessedJobToml(const std::string& output_dir, const std::string& job_id) {
    std::string job = JobToml(output_dir, job_id);
    job.insert(job.find("[[datasets]]"), "witness_policy = \"" + broker_->Path("witnesses.policy") + "\"\n");
    return job;
  }
  wt::CliRun Audit(std::vector<std::string> args) { return wt::RunAudit(args, work_); }
  std::string AuditKeyFile() {
    const std::string path = work_ + "/audit.pub";
    testing::WriteText(path, audit::NoteVerifierKey(broker_->audit_key()) + "\n");
    return path;
  }
  // A release of `request` that is logged and then waits for its witnesses: w2 is stopped
  // (it keeps its port), the release runs on its own thread, and Start returns once its
  // key.released entries are in the log. Finish lets w2 answer again and joins.
  struct WaitingRelease {
    std::thread thread;
    Result<Release> result = Internal("not answered");
    bool logged = false;
  };
  void StartWaitingRelease(WaitingRelease* w, const std::string& host, const ReleaseRequest& request,
                           const ReleaseKeys& keys, const HostState& state) {
    ASSERT_EQ(::kill(witnesses_[1]->pid(), SIGSTOP), 0);
    const size_t released = CountType(audit::EventType::kKeyReleased);
    w->thread = std::thread([this, w, host, request, &keys, &state] {
      auto other = WitnessedClient();
      w->result = other->RequestRelease(host, request, keys, Quoter(state));
    });
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (CountType(audit::EventType::kKeyReleased) == released && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    w->logged = CountType(audit::EventType::kKeyReleased) > released;
  }
  void FinishWaitingRelease(WaitingRelease* w) {
    ::kill(witnesses_[1]->pid(), SIGCONT);  // the quorum's checkpoint can come now
    if (w->thread.joinable()) w->thread.join();
  }
  // Cuts audit.log back to the end of its last tree head of size <= `size` (what an
  // operator with the disk can do while the broker is stopped).
  void CutLogBackTo(uint64_t size) {
    const std::string path = broker_->Path("audit/audit.log");
    uint64_t cut = 0;
    audit::Hash log_id{};
    audit::ScanEnd end;
    ASSERT_TRUE(audit::ScanLogFile(
                    path, &log_id,
                    [&](const audit::RecordView& rec, uint64_t offset) -> Status {
                      if (rec.type != audit::RecordType::kChainedTreeHead) return OkStatus();
                      auto head = audit::ParseTreeHead(rec.payload);
                      if (head.ok() && head->head.tree_size <= size) cut = offset + rec.size;
                      return OkStatus();
                    },
                    &end)
                    .ok());
    ASSERT_GT(cut, 0u);
    std::filesystem::resize_file(path, cut);
  }

  std::vector<std::unique_ptr<wt::WitnessProcess>> witnesses_;
};

// The release answer's audit_proofs as the fuzz seeds show them: parsed strictly, checked
// for their shape only (hashes and signatures are VerifyWitnessedRelease's).
TEST(ReleaseAnswerProofsTest, ParsedStrictly) {
  const std::string dir = std::string(ENCLAVE_SOURCE_DIR) + "/tests/fuzz/corpus/broker_release/";
  auto parse = [&](const std::string& name) {
    const std::string text = testing::ReadText(dir + name);
    return ParseReleaseGranted(std::string_view(text).substr(1));  // the fuzz target's selector byte
  };
  auto ok = parse("valid-release-granted-witnessed.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->audit_proofs.size(), 2u);
  EXPECT_EQ(ok->audit_proofs[1].leaf_index, 2u);
  EXPECT_TRUE(ParseReleaseGranted(EncodeReleaseGranted(*ok)).ok());
  auto index = parse("invalid-granted-proof-index.json");
  EXPECT_NE(index.status().message().find("proves entry 3, not entry 2"), std::string::npos) << index.status().ToString();
  auto count = parse("invalid-granted-proof-count.json");
  EXPECT_NE(count.status().message().find("audit_proofs"), std::string::npos) << count.status().ToString();
  EXPECT_TRUE(parse("valid-release-granted.json").ok());
}

TEST_F(WitnessedReleaseTest, AReleaseCarriesProofsInACheckpointTheQuorumCosigned) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  auto client = WitnessedClient();
  auto rel = client->RequestRelease(host, Request(), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString() << "\n" << broker_->log();
  ASSERT_EQ(rel->audit_proofs.size(), 1u);
  ASSERT_EQ(rel->witnessed_by.size(), 2u);
  const audit::Proof& proof = rel->audit_proofs[0];
  EXPECT_EQ(proof.leaf_index, rel->audit_index);
  auto checked = audit::VerifyProof(proof, &broker_->audit_key());
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->entry->event.fields["lease_id"], rel->lease.lease_id);
  // The proof is the exchangeable form: enclave-audit verify-proof checks it with the key alone.
  testing::WriteText(work_ + "/proof.json", proof.ToJson().dump(2));
  wt::CliRun v = Audit({"verify-proof", "--proof", work_ + "/proof.json", "--key", AuditKeyFile()});
  EXPECT_EQ(v.rc, 0) << v.out << v.err;

  // A client whose policy wants a witness the broker does not use refuses the answer
  // before it opens a key.
  auto w3 = wt::RunAudit({"witness", "keygen", "--name", "witness.test/w3", "--key", work_ + "/w3.key"}, work_);
  ASSERT_EQ(w3.rc, 0) << w3.err;
  auto w3_vkey = wt::RunAudit({"witness", "verifier-key", "--key", work_ + "/w3.key"}, work_);
  ASSERT_EQ(w3_vkey.rc, 0) << w3_vkey.err;
  std::string strict = testing::ReadText(broker_->Path("witnesses.policy"));
  strict = strict.substr(0, strict.find("group")) + "witness w3 " + w3_vkey.out.substr(0, w3_vkey.out.find('\n')) +
           "\ngroup all3 3 w1 w2 w3\nquorum all3\n";
  auto strict_policy = audit::WitnessPolicy::Parse(strict, "strict");
  ASSERT_TRUE(strict_policy.ok()) << strict_policy.status().ToString();
  client->SetWitnessPolicy(*strict_policy);
  auto refused = client->RequestRelease(host, Request("job-2"), *keys, Quoter(state));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kAuthFailed) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("not by the quorum"), std::string::npos) << refused.status().message();
}

TEST_F(WitnessedReleaseTest, AWitnessDownMakesItA503AfterTheWaitAndTheLeaseEnds) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  ASSERT_TRUE(Client()->RequestRelease(host, Request(), *keys, Quoter(state)).ok()) << broker_->log();
  witnesses_[1]->Stop(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  auto rel = Client()->RequestRelease(host, Request("job-2"), *keys, Quoter(state));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.status().code(), Code::kUnavailable) << rel.status().ToString();
  EXPECT_NE(rel.status().message().find("audit witnesses"), std::string::npos) << rel.status().message();
  EXPECT_NE(broker_->log().find("w2: "), std::string::npos) << broker_->log();
  EXPECT_GE(waited, 1400ms);
  // Logged as released (it was, before the wait), then the lease ended: nothing was sent.
  auto entries = AuditEntries();
  std::string lease_id;
  for (const audit::Entry& e : entries) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "job-2")
      lease_id = e.event.fields["lease_id"];
  }
  ASSERT_FALSE(lease_id.empty());
  ASSERT_EQ(entries.back().event.type, audit::EventType::kRevoked);
  EXPECT_EQ(entries.back().event.fields["subject_id"], lease_id);
  EXPECT_NE(entries.back().event.fields["reason"].get<std::string>().find("release not completed"), std::string::npos);
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--all", "--json"}, "", &out), 0)
      << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  bool ended = false;
  for (const auto& l : j["leases"]) {
    if (l["lease_id"] == lease_id) ended = !l["ended_at"].is_null();
  }
  EXPECT_TRUE(ended) << out;
}

// A release waiting for its witnesses holds no worker: with one worker thread and a round
// at most every second, a nonce asked for while a logged release waits is answered first.
TEST_F(WitnessedReleaseTest, AReleaseWaitingForWitnessesHoldsNoWorker) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  settings_.threads = 1;
  settings_.audit_config = "witness_policy = \"witnesses.policy\"\nwitness_wait_ms = 8000\nwitness_timeout_s = 2\n"
                           "witness_interval_ms = 1000\n";
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  auto client = WitnessedClient();
  ASSERT_TRUE(client->RequestRelease(host, Request("job-a"), *keys, Quoter(state)).ok()) << broker_->log();
  // A round has just ended: the next starts a second from now at the earliest.
  const size_t released = CountType(audit::EventType::kKeyReleased);
  std::chrono::steady_clock::time_point release_answered{};
  std::thread waiting([&] {
    auto other = WitnessedClient();
    auto r = other->RequestRelease(host, Request("job-b"), *keys, Quoter(state));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    release_answered = std::chrono::steady_clock::now();
  });
  // Once job-b's key.released entry is logged, its release waits for that round.
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (CountType(audit::EventType::kKeyReleased) == released && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  ASSERT_GT(CountType(audit::EventType::kKeyReleased), released);
  auto nonce = client->Nonce(host);
  const auto nonce_answered = std::chrono::steady_clock::now();
  waiting.join();
  ASSERT_TRUE(nonce.ok()) << nonce.status().ToString();
  EXPECT_LT(nonce_answered, release_answered) << "the nonce waited for the release's witnesses: a worker was held";
}

// The lease of `job_id`'s first key.released entry, as `enclave-broker leases --all --json` shows it.
nlohmann::json LeaseOfJob(const BrokerProcess& broker, const std::vector<audit::Entry>& entries,
                          const std::string& job_id) {
  std::string lease_id;
  for (const audit::Entry& e : entries) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == job_id && lease_id.empty())
      lease_id = e.event.fields["lease_id"];
  }
  std::string out;
  if (BrokerProcess::RunBroker({"leases", "--config", broker.config(), "--all", "--json"}, "", &out) != 0) return {};
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object()) return {};
  for (const auto& l : j["leases"]) {
    if (l["lease_id"] == lease_id) return l;
  }
  return {};
}

// A revocation acknowledged while a logged release waits for its witnesses holds: when
// the quorum's checkpoint then comes, the release sends nothing (403), its lease is marked
// undelivered, and the audit log says the release was not completed.
TEST_F(WitnessedReleaseTest, ARevocationWhileTheReleaseWaitsForWitnessesSendsNothing) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  settings_.audit_config = kLongWaitConfig;
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  auto client = WitnessedClient();
  ASSERT_TRUE(client->RequestRelease(host, Request("job-a"), *keys, Quoter(state)).ok()) << broker_->log();
  WaitingRelease waiting;
  ASSERT_NO_FATAL_FAILURE(StartWaitingRelease(&waiting, host, Request("job-b"), *keys, state));
  const BrokerProcess::Answer rev = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "job-b", "test"}));
  FinishWaitingRelease(&waiting);
  ASSERT_TRUE(waiting.logged) << broker_->log();
  const Result<Release>& rel = waiting.result;
  ASSERT_EQ(rev.status, 200) << rev.body;
  EXPECT_EQ(rev.json()["leases_ended"], 1) << rev.body;
  ASSERT_FALSE(rel.ok()) << "keys were sent after the revocation of their job was acknowledged";
  EXPECT_EQ(rel.status().code(), Code::kPermissionDenied) << rel.status().ToString();
  EXPECT_NE(broker_->log().find("while the release waited for its witnesses; nothing was sent"), std::string::npos)
      << broker_->log();
  const auto entries = AuditEntries();
  ASSERT_EQ(entries.back().event.type, audit::EventType::kRevoked);
  EXPECT_NE(entries.back().event.fields["reason"].get<std::string>().find("ended while the release waited for its witnesses"),
            std::string::npos)
      << entries.back().event.fields.dump();
  const nlohmann::json lease = LeaseOfJob(*broker_, entries, "job-b");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(entries.back().event.fields["subject_id"], lease["lease_id"]);
  EXPECT_EQ(lease["undelivered"], true) << lease.dump();
  EXPECT_EQ(lease["end_reason"], "job revoked: test") << lease.dump();
}

// The same when the job ends while a rank's release waits: rank 0's report is logged, so
// the job's key is never issued again, and rank 1's waiting release sends nothing.
TEST_F(WitnessedReleaseTest, AJobThatEndsWhileARankWaitsForWitnessesSendsThatRankNothing) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  settings_.audit_config = kLongWaitConfig;
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  auto client = WitnessedClient();
  auto rank0 = client->RequestRelease(host, Request("job-w", 0, 2), *keys, Quoter(state));
  ASSERT_TRUE(rank0.ok()) << rank0.status().ToString() << "\n" << broker_->log();
  std::string job_digest;
  for (const audit::Entry& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "job-w")
      job_digest = e.event.fields["job_digest"];
  }
  ASSERT_EQ(job_digest.size(), 64u);
  WaitingRelease waiting;
  ASSERT_NO_FATAL_FAILURE(StartWaitingRelease(&waiting, host, Request("job-w", 1, 2), *keys, state));
  // Rank 0 reports: the job ends (its report is logged).
  const std::string report = nlohmann::json{{"job", {{"sha256", job_digest}}},
                                            {"lease", {{"lease_id", rank0->lease.lease_id}}},
                                            {"datasets", {{{"sha256", std::string(64, 'a')}}}},
                                            {"model_export", {{"sha256", std::string(64, 'b')}}}}
                                 .dump();
  auto sig = keys->SignReport(ReportSignatureInput(report));
  ASSERT_TRUE(sig.ok());
  const BrokerProcess::Answer reported =
      broker_->Post("/v1/jobs/job-w/reports", EncodeJobReport({rank0->lease.lease_id, report, *sig}));
  FinishWaitingRelease(&waiting);
  ASSERT_TRUE(waiting.logged) << broker_->log();
  const Result<Release>& rank1 = waiting.result;
  ASSERT_EQ(reported.status, 200) << reported.body;
  ASSERT_FALSE(rank1.ok()) << "the job key was sent after the job's report ended it";
  EXPECT_EQ(rank1.status().code(), Code::kPermissionDenied) << rank1.status().ToString();
  EXPECT_NE(broker_->log().find("job 'job-w' ended (its report was logged) while the release waited"),
            std::string::npos)
      << broker_->log();
  const nlohmann::json lease = LeaseOfJob(*broker_, AuditEntries(), "job-w");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["lease_id"], rank0->lease.lease_id) << "the first key.released entry of the job is rank 0's";
}

// A release that ended with a 503 sent no key: the same job can be released again (its
// undelivered lease does not count as the job's last lease having ended).
TEST_F(WitnessedReleaseTest, AJobWhoseOnlyReleaseWasNotCompletedCanBeReleasedAgain) {
  HostState state = State("host");
  WitnessBroker(/*with_sample=*/false);
  // A round stuck on the stopped witness gives up after 1 s, well within the wait, so the
  // retry after SIGCONT has its quorum in time on a loaded machine.
  settings_.audit_config = "witness_policy = \"witnesses.policy\"\nwitness_wait_ms = 3000\nwitness_timeout_s = 1\n";
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  auto client = WitnessedClient();
  ASSERT_EQ(::kill(witnesses_[1]->pid(), SIGSTOP), 0);
  auto first = client->RequestRelease(host, Request("job-r"), *keys, Quoter(state));
  ::kill(witnesses_[1]->pid(), SIGCONT);
  ASSERT_FALSE(first.ok());
  ASSERT_EQ(first.status().code(), Code::kUnavailable) << first.status().ToString();
  const nlohmann::json lease = LeaseOfJob(*broker_, AuditEntries(), "job-r");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["undelivered"], true) << lease.dump();
  EXPECT_EQ(lease["active"], false) << lease.dump();
  auto again = client->RequestRelease(host, Request("job-r"), *keys, Quoter(state));
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << broker_->log();
  EXPECT_EQ(again->lease.job_id, "job-r");
  EXPECT_NE(again->lease.lease_id, lease["lease_id"]);
}

#if defined(ENCLAVE_TRAIN_BIN) && defined(ENCLAVE_ATTEST_BIN)
// The attack of issue 17: a release is logged, then the operator stops the broker, cuts
// the log back to before it and goes on. Caught three ways.
TEST_F(WitnessedReleaseTest, ALogCutBackToEraseAReleaseIsCaughtThreeWays) {
  WitnessBroker(/*with_sample=*/true);
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("train-host", &host));
  testing::WriteText(work_ + "/job.toml", WitnessedJobToml(work_ + "/trained", "train-job"));
  std::vector<std::string> run = {"run", "--job", work_ + "/job.toml", "--event-log=", ImaLogFlag(), "--json"};
  run.insert(run.end(), host.begin(), host.end());
  std::string out;
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out), 0) << out << broker_->log();
  auto report = nlohmann::json::parse(testing::ReadText(work_ + "/trained/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  const nlohmann::json& lease = report["lease"];
  ASSERT_EQ(lease["audit_proofs"].size(), 1u) << lease.dump();
  EXPECT_EQ(lease["witnessed_by"], nlohmann::json::array({"w1", "w2"}));
  const uint64_t released_at = lease["audit_index"].get<uint64_t>();
  testing::WriteText(work_ + "/report-proof.json", lease["audit_proofs"][0].dump());
  testing::WriteText(work_ + "/report-checkpoint", lease["audit_proofs"][0]["checkpoint"].get<std::string>());
  const std::string key = AuditKeyFile(), policy = broker_->Path("witnesses.policy");
  const std::vector<std::string> officer = {"verify",           "--log",      broker_->Path("audit"), "--key", key,
                                            "--witness-policy", policy,       "--cosigned",
                                            work_ + "/report-checkpoint"};
  wt::CliRun before = Audit(officer);
  ASSERT_EQ(before.rc, 0) << before.out << before.err;

  // The cut: back to the head before the release, then the broker goes on.
  ASSERT_EQ(broker_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(CutLogBackTo(released_at));
  ASSERT_TRUE(broker_->Restart().ok());
  for (const audit::Entry& e : AuditEntries()) ASSERT_LT(e.seq, released_at) << "the release is erased";

  // 1. The witnesses refuse the rewritten log: the next release gets no keys.
  testing::WriteText(work_ + "/job2.toml", WitnessedJobToml(work_ + "/trained2", "train-job-2"));
  run[2] = work_ + "/job2.toml";
  EXPECT_NE(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out), 0) << out;
  EXPECT_NE(out.find("audit witnesses"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/trained2/report.json"));
  EXPECT_NE(broker_->log().find("NOT cosigned by a quorum"), std::string::npos) << broker_->log();
  // 2. The officer holding the report's cosigned checkpoint sees that the log forked.
  wt::CliRun after = Audit(officer);
  EXPECT_NE(after.rc, 0) << after.out;
  EXPECT_NE(after.err.find("report-checkpoint"), std::string::npos) << after.err;
  // 3. The report still proves the erased entry: signed by the log key, in a tree the
  // witnesses cosigned, which the log on disk no longer holds.
  wt::CliRun proof = Audit({"verify-proof", "--proof", work_ + "/report-proof.json", "--key", key, "--json"});
  EXPECT_EQ(proof.rc, 0) << proof.out << proof.err;
  EXPECT_NE(proof.out.find(lease["lease_id"].get<std::string>()), std::string::npos) << proof.out;
}
#endif

}  // namespace
}  // namespace enclave::broker
