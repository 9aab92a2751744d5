// The compliance report: content (counts, who used which dataset, measurements, policies
// in force), time filtering, HTML escaping of attacker-influenced text, and refusal to
// report from a log that does not verify, and the one verdict: with and without consistency
// checked, with and without a witness quorum (no report when it is not met). The events are
// tests/data/audit/report_events.jsonl.
#include "enclave/audit/report.h"

#include <gtest/gtest.h>

#include <fstream>

#include "audit_test_util.h"
#include "local_witnesses.h"

namespace enclave::audit {
namespace {

using namespace testing;
using nlohmann::json;

constexpr uint64_t kGenerated = 1714600000000;  // fixed, so the output is reproducible

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = MakeLog("report");
    std::ifstream in(std::string(ENCLAVE_TEST_DATA) + "/audit/report_events.jsonl");
    ASSERT_TRUE(in.good());
    WriterOptions wo;
    uint64_t clock = 1714550000000;
    wo.clock_ms = [&clock] { return clock += 1000; };
    auto w = LogWriter::Open(log_.dir.string(), log_.Key(), wo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      auto j = ParseStrictJson(line, "report_events.jsonl");
      ASSERT_TRUE(j.ok()) << j.status().ToString();
      auto e = EventFromJson(*j);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      ASSERT_TRUE((*w)->Append(*e).ok());
      ++entries_;
    }
    ASSERT_EQ(entries_, 14u);
  }

  json Build(std::optional<std::string> from = {}, std::optional<std::string> to = {}) {
    ReportOptions o;
    o.generated_at_ms = kGenerated;
    if (from) o.from_ms = *ParseRfc3339Utc(*from);
    if (to) o.to_ms = *ParseRfc3339Utc(*to);
    auto r = BuildReport(log_.dir.string(), log_.pub, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json();
  }

  TestLog log_;
  uint64_t entries_ = 0;
};

TEST_F(ReportTest, WholeLogContent) {
  json r = Build();
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["format"], "enclave-audit-compliance-report");
  EXPECT_EQ(r["generated_at"], "2024-05-01T21:46:40.000Z");
  const json& s = r["summary"];
  EXPECT_EQ(s["entries_in_period"], 14);
  EXPECT_EQ(s["jobs"], 1);
  EXPECT_EQ(s["datasets"], 2);
  EXPECT_EQ(s["hosts"], 2);
  EXPECT_EQ(s["key_releases"], 2);
  EXPECT_EQ(s["leases"], 1);
  EXPECT_EQ(s["lease_renewals"], 1);
  // Who ran the job: the entry's requester, null for an entry without one.
  EXPECT_EQ(r["key_releases"][0]["requester"], "alice@hospital.example");
  EXPECT_TRUE(r["key_releases"][1]["requester"].is_null());
  EXPECT_NE(RenderReportHtml(r).find("alice@hospital.example"), std::string::npos);
  EXPECT_EQ(s["failed_attestations"], 2);
  EXPECT_EQ(s["revocations"], 2);
  EXPECT_EQ(s["by_type"]["attestation.verdict"], 3);

  // The log's own verification status.
  EXPECT_EQ(r["log"]["verified"], true);
  EXPECT_EQ(r["log"]["entries"], 14);
  EXPECT_EQ(r["log"]["tree_heads"], 15);  // the empty head, then one per append
  EXPECT_EQ(r["log"]["latest_tree_head"]["tree_size"], 14);
  EXPECT_EQ(r["log"]["log_id"], HexEncode(log_.pub.log_id));
  EXPECT_EQ(r["log"]["consistency"]["checked"], false);

  // The job, its datasets, hosts and outcome.
  const json& job = r["jobs"][0];
  EXPECT_EQ(job["job_digest"], "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
  EXPECT_EQ(job["status"], "finished");
  EXPECT_EQ(job["datasets"], json({"cardiology-2023", "oncology-2022"}));
  EXPECT_EQ(job["key_releases"], 2);
  EXPECT_EQ(job["failed_attestations"], 1);
  EXPECT_EQ(job["started"]["index"], 6);
  EXPECT_EQ(job["finished"]["index"], 10);
  EXPECT_DOUBLE_EQ(job["metrics"]["auroc"].get<double>(), 0.912);

  // Datasets and by whom: a key release and the job start, both on gpu-07.dc1.
  const json& cardio = r["datasets"][0];
  EXPECT_EQ(cardio["dataset_id"], "cardiology-2023");
  EXPECT_EQ(cardio["key_releases"], 1);
  ASSERT_EQ(cardio["uses"].size(), 2u);
  EXPECT_EQ(cardio["uses"][0]["event"], "key.released");
  EXPECT_EQ(cardio["uses"][0]["host"], "gpu-07.dc1");
  EXPECT_EQ(cardio["uses"][0]["lease_id"], "lease-0001");
  EXPECT_EQ(cardio["uses"][1]["event"], "job.started");
  EXPECT_EQ(cardio["uses"][1]["actor"], "trainer@gpu-07.dc1");

  // Hosts: enrolment, verdict counts, the measurements of the last verdict, revocation.
  const json& h7 = r["hosts"][0];
  EXPECT_EQ(h7["host"], "gpu-07.dc1");
  EXPECT_EQ(h7["enrolled"]["index"], 2);
  EXPECT_EQ(h7["attestations_accepted"], 1);
  EXPECT_EQ(h7["attestations_rejected"], 1);
  EXPECT_EQ(h7["last_verdict"]["verdict"], "accepted");
  ASSERT_EQ(h7["measurements"].size(), 3u);
  EXPECT_EQ(h7["measurements"][1]["check"], "pcr.0-7");
  const json& h8 = r["hosts"][1];
  EXPECT_EQ(h8["host"], "gpu-08.dc2");
  EXPECT_TRUE(h8["enrolled"].is_null());
  EXPECT_EQ(h8["revoked"]["index"], 11);

  // Policies: version 1 superseded by version 2; the data-use policy still in force.
  ASSERT_EQ(r["policies"].size(), 3u);
  EXPECT_EQ(r["policies"][0]["version"], 1);
  EXPECT_EQ(r["policies"][0]["superseded"]["index"], 9);
  EXPECT_EQ(r["policies"][0]["in_force_at_end"], false);
  EXPECT_EQ(r["policies"][2]["version"], 2);
  EXPECT_EQ(r["policies"][2]["in_force_at_end"], true);

  // The lease: two releases, one renewal, revoked.
  const json& lease = r["leases"][0];
  EXPECT_EQ(lease["lease_id"], "lease-0001");
  EXPECT_EQ(lease["releases"], 2);
  EXPECT_EQ(lease["first_release"]["index"], 5);
  EXPECT_EQ(lease["last_release"]["index"], 7);
  EXPECT_EQ(lease["renewals"].size(), 1u);
  EXPECT_EQ(lease["expires"], "2024-05-01T11:30:00Z");
  EXPECT_EQ(lease["revoked"]["index"], 13);

  // Failed attestations name the failing checks only.
  ASSERT_EQ(r["failed_attestations"].size(), 2u);
  EXPECT_EQ(r["failed_attestations"][0]["failed_checks"].size(), 1u);
  EXPECT_EQ(r["failed_attestations"][0]["failed_checks"][0]["check"], "pcr.4");
  EXPECT_EQ(r["revocations"][1]["subject"], "lease");
}

TEST_F(ReportTest, TimeFilter) {
  // [09:30, 12:00): key releases, the job start, the renewal, policy version 2.
  json r = Build("2024-05-01T09:30:00Z", "2024-05-01T12:00:00Z");
  const json& s = r["summary"];
  EXPECT_EQ(s["entries_in_period"], 5);
  EXPECT_EQ(s["first_index"], 5);
  EXPECT_EQ(s["last_index"], 9);
  EXPECT_EQ(s["key_releases"], 2);
  EXPECT_EQ(s["failed_attestations"], 0);
  EXPECT_EQ(s["revocations"], 0);
  EXPECT_EQ(r["period"]["from"], "2024-05-01T09:30:00.000Z");
  EXPECT_EQ(r["jobs"][0]["status"], "started");  // finished at 12:00, outside
  // Context from before the period: the enrolment at 09:00 and both policies activated
  // earlier are reported (attestation-policy v1 was in force until 11:00).
  EXPECT_EQ(r["hosts"][0]["enrolled"]["index"], 2);
  EXPECT_EQ(r["hosts"][0]["attestations_accepted"], 0);  // the verdicts were before 09:30
  EXPECT_EQ(r["policies"].size(), 3u);
  EXPECT_EQ(r["policies"][0]["activated_in_period"], false);
  // From 11:30 on, version 1 (superseded at 11:00) is no longer in force.
  json later = Build("2024-05-01T11:30:00Z");
  EXPECT_EQ(later["policies"].size(), 2u);
  EXPECT_EQ(later["summary"]["entries_in_period"], 4);
  EXPECT_EQ(later["leases"][0]["releases"], 0) << "released before the period";
  EXPECT_EQ(later["leases"][0]["datasets"].size(), 2u) << "but known from the context";
  // An empty or inverted period is refused.
  ReportOptions o;
  o.from_ms = 10;
  o.to_ms = 10;
  EXPECT_EQ(BuildReport(log_.dir.string(), log_.pub, o).status().code(), Code::kInvalidInput);
}

TEST_F(ReportTest, HtmlEscapesEverythingFromEntries) {
  const std::string html = RenderReportHtml(Build());
  // The hostile actor and reason appear, escaped; no markup of theirs survives.
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
  EXPECT_NE(html.find("CISO Jane Roe &lt;ciso@hospital.example&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  // Self-contained: no script, no external resource, and a CSP that would block both.
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  for (const char* external : {"http://", "https://", "<link", "@import", "url(", "<iframe", "<object"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
  EXPECT_NE(html.find("@media print"), std::string::npos);
  EXPECT_NE(html.find(">VERIFIED<"), std::string::npos);
  EXPECT_NE(html.find("gpu-07.dc1"), std::string::npos);
  EXPECT_NE(html.find("cardiology-2023"), std::string::npos);

  // The renderer escapes every field, also those the entry schema restricts today (host
  // names are ids): a hostile host name in the document comes out as text.
  json doc = Build();
  doc["hosts"][0]["host"] = "<script>alert(1)</script>";
  doc["key_releases"][0]["host"] = "\"><svg onload=alert(3)>";
  doc["jobs"][0]["hosts"][0] = "<b>x</b>";
  doc["log"]["log_path"] = "/tmp/<x>";
  const std::string hostile = RenderReportHtml(doc);
  EXPECT_EQ(hostile.find("<script"), std::string::npos);
  EXPECT_EQ(hostile.find("<svg"), std::string::npos);
  EXPECT_EQ(hostile.find("<b>x"), std::string::npos);
  EXPECT_EQ(hostile.find("<x>"), std::string::npos);
  EXPECT_NE(hostile.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(hostile.find("&quot;&gt;&lt;svg onload=alert(3)&gt;"), std::string::npos);
  EXPECT_EQ(HtmlEscape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
}

TEST_F(ReportTest, RefusesALogThatDoesNotVerify) {
  std::vector<uint8_t> bytes = ReadBytes(log_.log_path());
  auto recs = RawRecords(bytes);
  // A framing-aware forger changes the host of entry 5 and fixes the record check.
  std::string text(recs[1 + 2 * 5].payload.begin(), recs[1 + 2 * 5].payload.end());
  text.replace(text.find("gpu-07.dc1"), 10, "gpu-99.dc1");
  recs[1 + 2 * 5] = MakeRaw(RecordType::kEntry, std::vector<uint8_t>(text.begin(), text.end()));
  WriteBytes(log_.log_path(), Reassemble(bytes, recs));
  ReportOptions o;
  auto r = BuildReport(log_.dir.string(), log_.pub, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAuthFailed);
  EXPECT_NE(r.status().message().find("one of entries 5..5"), std::string::npos) << r.status().message();
}

// Counts the non-overlapping occurrences of `needle`.
size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + needle.size())) ++n;
  return n;
}

TEST_F(ReportTest, OneVerdictWithoutStateOrWitnesses) {
  json r = Build();
  const json& v = r["verdict"];
  EXPECT_EQ(v["verified"], true);
  EXPECT_EQ(v["entries"], 14);
  EXPECT_EQ(v["tree_size"], 14);
  EXPECT_EQ(v["consistency"]["checked"], false);
  EXPECT_TRUE(v["consistency"]["against_tree_size"].is_null());
  EXPECT_EQ(v["witnesses"]["required"], false);
  EXPECT_TRUE(v["witnesses"]["met"].is_null());
  EXPECT_TRUE(v["witnesses"]["policy_file"].is_null());
  EXPECT_TRUE(r["log"]["witnessed"].is_null());
  EXPECT_EQ(v["text"],
            "Verified: 14 entries, signed tree head size 14. Consistency not checked: no saved auditor state was "
            "given (--state). Witness quorum not required: no witness policy was given (--witness-policy).");
  // One box says it all, in one colour: no second status, no warning line beside it.
  const std::string html = RenderReportHtml(r);
  EXPECT_EQ(Count(html, "class=\"status\""), 1u);
  EXPECT_EQ(Count(html, ">VERIFIED<"), 1u);
  EXPECT_EQ(html.find("class=\"warn\""), std::string::npos);
  EXPECT_NE(html.find("Verified: 14 entries, signed tree head size 14"), std::string::npos);
  EXPECT_NE(html.find(">not checked<"), std::string::npos);
  EXPECT_NE(html.find(">not required<"), std::string::npos);
}

TEST_F(ReportTest, ConsistencyWithTheAuditorState) {
  auto v = VerifyLog(log_.dir.string(), log_.pub);
  ASSERT_TRUE(v.ok());
  AuditorState st{log_.pub.log_id, v->tree_heads[10].sth};  // the auditor saw 9 entries
  ReportOptions o;
  o.trusted = &st;
  o.state_path = "auditor.json";
  auto r = BuildReport(log_.dir.string(), log_.pub, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["log"]["consistency"]["checked"], true);
  EXPECT_EQ((*r)["log"]["consistency"]["previously_accepted"]["tree_size"], 10);
  EXPECT_NE(RenderReportHtml(*r).find("auditor.json"), std::string::npos);
  // The verdict says against which saved head.
  const json& c = (*r)["verdict"]["consistency"];
  EXPECT_EQ(c["checked"], true);
  EXPECT_EQ(c["against_tree_size"], 10);
  EXPECT_EQ(c["state_file"], "auditor.json");
  EXPECT_EQ(c["summary"], "Consistency checked: the log extends the tree head of size 10 saved in auditor.json.");
  EXPECT_EQ((*r)["verdict"]["witnesses"]["required"], false);
  const std::string html = RenderReportHtml(*r);
  EXPECT_NE(html.find(">checked<"), std::string::npos);
  EXPECT_EQ(html.find(">not checked<"), std::string::npos);
}

class ReportWitnessTest : public ReportTest {
 protected:
  Result<json> BuildWitnessed(const std::string& quorum_lines, const AuditorState* state = nullptr) {
    auto p = WitnessPolicy::Parse(witnesses_.PolicyText(log_, quorum_lines), "policy");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    policy_ = std::move(*p);
    ReportOptions o;
    o.generated_at_ms = kGenerated;
    o.witness_policy = &*policy_;
    o.witness_policy_path = "witnesses.policy";
    o.trusted = state;
    if (state) o.state_path = "auditor.json";
    return BuildReport(log_.dir.string(), log_.pub, o);
  }
  LocalWitnesses witnesses_{2};
  std::optional<WitnessPolicy> policy_;
};

TEST_F(ReportWitnessTest, QuorumMetAndConsistencyChecked) {
  witnesses_.Cosign(log_, {0, 1});
  auto v = VerifyLog(log_.dir.string(), log_.pub);
  ASSERT_TRUE(v.ok());
  AuditorState st{log_.pub.log_id, v->tree_heads[10].sth};
  auto r = BuildWitnessed("group both 2 w1 w2\nquorum both\n", &st);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const json& w = (*r)["verdict"]["witnesses"];
  EXPECT_EQ(w["policy_file"], "witnesses.policy");
  EXPECT_EQ(w["required"], true);
  EXPECT_EQ(w["met"], true);
  EXPECT_EQ(w["quorum"], "2 of {w1, w2}");
  EXPECT_EQ(w["tree_size"], 14);
  EXPECT_EQ(w["cosigned_by"], json({"w1", "w2"}));
  EXPECT_EQ(w["unwitnessed_entries"], 0);
  EXPECT_EQ((*r)["verdict"]["text"],
            "Verified: 14 entries, signed tree head size 14. Consistency checked: the log extends the tree head of "
            "size 10 saved in auditor.json. Witness quorum 2 of {w1, w2} met: tree size 14 cosigned by w1, w2.");
  // The log section has what `verify --json` calls "witnessed".
  const json& lw = (*r)["log"]["witnessed"];
  EXPECT_EQ(lw["cosigned_checkpoint"], log_.dir.string() + "/cosigned-checkpoint");
  EXPECT_EQ(lw["cosigned_by"][1]["cosigner"], "witness.test/w2");
  EXPECT_EQ(lw["cosigned_by"][0]["timestamp"], 1714600000);
  const std::string html = RenderReportHtml(*r);
  EXPECT_NE(html.find(">quorum met<"), std::string::npos);
  EXPECT_NE(html.find(">checked<"), std::string::npos);
  EXPECT_NE(html.find("witness.test/w1"), std::string::npos);
  EXPECT_EQ(Count(html, "class=\"status\""), 1u);
}

TEST_F(ReportWitnessTest, QuorumMetOnAnOlderTreeNamesTheUnwitnessedEntries) {
  witnesses_.Cosign(log_, {1});
  AppendSamples(log_, 14, 2);  // after the cosigned checkpoint
  auto r = BuildWitnessed("group one any w1 w2\nquorum one\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const json& w = (*r)["verdict"]["witnesses"];
  EXPECT_EQ((*r)["verdict"]["tree_size"], 16);
  EXPECT_EQ(w["tree_size"], 14);
  EXPECT_EQ(w["cosigned_by"], json({"w2"}));
  EXPECT_EQ(w["unwitnessed_entries"], 2);
  EXPECT_EQ(w["summary"],
            "Witness quorum 1 of {w1, w2} met: tree size 14 cosigned by w2. The 2 entries after it are signed by the "
            "log only.");
  EXPECT_EQ((*r)["log"]["witnessed"]["not_cosigned_by"], json({"w1"}));
}

TEST_F(ReportWitnessTest, QuorumNoneRequiresNoCosignature) {
  witnesses_.Cosign(log_, {});
  auto r = BuildWitnessed("quorum none\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const json& w = (*r)["verdict"]["witnesses"];
  EXPECT_EQ(w["required"], false);
  EXPECT_EQ(w["met"], true);
  EXPECT_EQ(w["summary"], "Witness quorum not required: the witness policy witnesses.policy has quorum none.");
}

TEST_F(ReportWitnessTest, NoReportWhenTheQuorumIsNotMet) {
  witnesses_.Cosign(log_, {0});
  auto r = BuildWitnessed("group both 2 w1 w2\nquorum both\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAuthFailed);
  EXPECT_NE(r.status().message().find("is cosigned by {w1}; the witness policy requires 2 of {w1, w2}"),
            std::string::npos)
      << r.status().message();
  // No cosigned checkpoint at all: nothing is witnessed, as `verify` says.
  fs::remove(log_.dir / "cosigned-checkpoint");
  r = BuildWitnessed("group both 2 w1 w2\nquorum both\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("nothing of the log is witnessed"), std::string::npos);
}

}  // namespace
}  // namespace enclave::audit
