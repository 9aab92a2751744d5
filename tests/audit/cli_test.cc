// enclave-audit end to end: the documented exit codes and outputs of every verb.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "audit_test_util.h"
#include "local_witnesses.h"

namespace enclave::audit {
namespace {

using namespace testing;

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

const char* kEvents[] = {
    R"({"type":"policy.activated","actor":"custodian","time":"2024-05-01T08:00:00Z","policy_id":"p1","policy_digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","signer":"ciso"})",
    R"({"type":"host.enrolled","actor":"broker","time":"2024-05-01T09:00:00Z","host":"gpu-07"})",
    R"({"type":"attestation.verdict","actor":"broker","time":"2024-05-01T09:05:00Z","host":"gpu-07","verdict":"rejected","checks":[{"check":"pcr.4","ok":false,"reason":"boot loader not in policy"}]})",
    R"({"type":"key.released","actor":"broker","time":"2024-05-01T09:30:00Z","dataset_id":"cardio","lease_id":"lease-1","host":"gpu-07","job_digest":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"})",
    R"({"type":"job.started","actor":"trainer","time":"2024-05-01T09:31:00Z","job_digest":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789","host":"gpu-07","datasets":["cardio","oncology"]})",
    R"({"type":"key.released","actor":"broker","time":"2024-05-01T10:00:00Z","dataset_id":"oncology","lease_id":"lease-2","host":"gpu-08","job_digest":"9999999999999999999999999999999999999999999999999999999999999999"})",
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ScratchDir("cli");
    CmdResult r = Exec("init --log log --signing-key log.key --public-key log.pub", dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::ofstream f(dir_ / "events.jsonl");
    for (const char* e : kEvents) f << e << "\n";
    f.close();
    r = Exec("append --log log --signing-key log.key --events-file events.jsonl --json", dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["appended"].size(), 6u);
  }
  size_t Shown(const std::string& filters) {
    CmdResult r = Exec("show --log log --key log.pub --json " + filters, dir_);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? nlohmann::json::parse(r.out)["entries"].size() : 999;
  }
  fs::path dir_;
};

TEST_F(CliTest, VerifyAdvancesTheStateAndDetectsTampering) {
  CmdResult r = Exec("verify --log log --key log.pub --state st.json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("OK: "), std::string::npos);
  EXPECT_NE(r.out.find("trusted on first use"), std::string::npos);
  r = Exec("verify --log log --key log.pub --state st.json --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["entries"], 6);
  EXPECT_EQ(j["previously_accepted"]["tree_size"], 6);

  // Flip one byte inside the entry of index 3: exit code 4 and the offset in the message.
  std::vector<uint8_t> bytes = ReadBytes((dir_ / "log" / kLogFileName).string());
  auto recs = RawRecords(bytes);
  bytes[recs[1 + 2 * 3].offset + 40] ^= 0x04;
  WriteBytes((dir_ / "log" / kLogFileName).string(), bytes);
  r = Exec("verify --log log --key log.pub --state st.json --json", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("offset " + std::to_string(recs[1 + 2 * 3].offset)), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ok"], false);
  // show refuses a log that does not verify.
  EXPECT_EQ(Exec("show --log log --key log.pub", dir_).rc, 4);
}

TEST_F(CliTest, ShowFilters) {
  EXPECT_EQ(Shown(""), 6u);
  EXPECT_EQ(Shown("--host gpu-07"), 4u);
  EXPECT_EQ(Shown("--dataset oncology"), 2u);  // the job that used it, and its key release
  EXPECT_EQ(Shown("--job abcdef01"), 2u);
  EXPECT_EQ(Shown("--job sha256:abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"), 2u);
  EXPECT_EQ(Shown("--type key.released"), 2u);
  EXPECT_EQ(Shown("--since 2024-05-01T09:05:00Z --until 2024-05-01T09:31:00Z"), 2u);
  CmdResult table = Exec("show --log log --key log.pub --host gpu-07", dir_);
  ASSERT_EQ(table.rc, 0);
  EXPECT_NE(table.out.find("REJECTED (pcr.4: boot loader not in policy)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("4 of 6 entries shown"), std::string::npos) << table.out;
  EXPECT_EQ(Exec("show --log log --key log.pub --since yesterday", dir_).rc, 3);
  EXPECT_EQ(Exec("show --log log --key log.pub --type nope", dir_).rc, 3);
}

TEST_F(CliTest, ProveAndVerifyProof) {
  CmdResult r = Exec("prove --log log --key log.pub --entry 3 --out p3.json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = Exec("verify-proof --proof p3.json --key log.pub --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["entry"]["dataset_id"], "cardio");
  EXPECT_EQ(j["tree_size"], 6);
  EXPECT_EQ(j["signed"], true);
  // Against an older signed tree head, and one that does not exist.
  EXPECT_EQ(Exec("prove --log log --key log.pub --entry 3 --tree-size 4 --out p3-4.json", dir_).rc, 0);
  EXPECT_EQ(Exec("verify-proof --proof p3-4.json --key log.pub", dir_).rc, 0);
  EXPECT_EQ(Exec("prove --log log --key log.pub --entry 3 --tree-size 3", dir_).rc, 3);
  EXPECT_EQ(Exec("prove --log log --key log.pub --entry 6", dir_).rc, 6);

  // A doctored entry in the proof, or another log's key: exit code 4.
  std::ifstream in(dir_ / "p3.json");
  auto proof = nlohmann::json::parse(in);
  std::string entry = proof["entry"];
  entry.replace(entry.find("cardio"), 6, "cardia");
  proof["entry"] = entry;
  std::ofstream(dir_ / "doctored.json") << proof.dump();
  r = Exec("verify-proof --proof doctored.json --key log.pub", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("inclusion proof"), std::string::npos) << r.err;
  ASSERT_EQ(Exec("init --log other --signing-key o.key --public-key o.pub", dir_).rc, 0);
  EXPECT_EQ(Exec("verify-proof --proof p3.json --key o.pub", dir_).rc, 4);
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST_F(CliTest, ConsistencyProofsAndCheckpoints) {
  // Issue 17 section 1: consistency proofs leave the verifier, in the same form as inclusion.
  CmdResult r = Exec("prove --log log --key log.pub --consistency 2 5 --out c.json --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto c = ReadJson(dir_ / "c.json");
  EXPECT_EQ(c["proof"], "consistency");
  EXPECT_EQ(c["old_size"], 2);
  EXPECT_EQ(c["new_size"], 5);
  r = Exec("verify-proof --proof c.json --key log.pub --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["signed"], true);
  // The log's checkpoint of size 5 is the proof's new checkpoint, and the verifier key
  // file works wherever LOG.pub does.
  r = Exec("checkpoint --log log --key log.pub --tree-size 5", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, c["new_checkpoint"].get<std::string>());
  ASSERT_EQ(Exec("verifier-key --key log.pub --out log.vkey", dir_).rc, 0);
  EXPECT_EQ(Exec("verify-proof --proof c.json --key log.vkey", dir_).rc, 0);
  EXPECT_EQ(Exec("verify --log log --key log.vkey", dir_).rc, 0);
  // NEW defaults to the latest head; 0 is consistent with everything (empty path).
  ASSERT_EQ(Exec("prove --log log --key log.pub --consistency 0 --out c0.json", dir_).rc, 0);
  EXPECT_TRUE(ReadJson(dir_ / "c0.json")["path"].empty());
  EXPECT_EQ(ReadJson(dir_ / "c0.json")["new_size"], 6);
  EXPECT_EQ(Exec("verify-proof --proof c0.json --key log.pub", dir_).rc, 0);
  EXPECT_EQ(Exec("prove --log log --key log.pub --consistency 5 2", dir_).rc, 3);
  EXPECT_EQ(Exec("prove --log log --key log.pub --consistency 2 9", dir_).rc, 6);

  auto write = [&](const char* name, const nlohmann::json& j) { std::ofstream(dir_ / name) << j.dump(); };
  // A wrong hash in the path, roots that the checkpoints do not sign, a checkpoint of
  // another size, no checkpoint: 4.
  auto bad = c;
  std::string h = bad["path"][0];
  h[0] = h[0] == '0' ? '1' : '0';
  bad["path"][0] = h;
  write("bad-path.json", bad);
  r = Exec("verify-proof --proof bad-path.json --key log.pub", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("consistency proof from size 2 to 5 does not verify"), std::string::npos) << r.err;
  EXPECT_EQ(Exec("verify-proof --proof bad-path.json --unsigned", dir_).rc, 4);
  bad = c;
  std::swap(bad["old_checkpoint"], bad["new_checkpoint"]);
  write("swapped.json", bad);
  r = Exec("verify-proof --proof swapped.json --key log.pub", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("old_checkpoint is for the tree of size 5"), std::string::npos) << r.err;
  bad = c;
  bad.erase("old_checkpoint");
  write("nocp.json", bad);
  EXPECT_EQ(Exec("verify-proof --proof nocp.json --key log.pub", dir_).rc, 4);
  EXPECT_EQ(Exec("verify-proof --proof nocp.json --unsigned", dir_).rc, 0) << "hashes alone still hold";
  // A note whose signature line was altered: 4; unknown members, upper-case hex: 3.
  bad = c;
  std::string note = bad["new_checkpoint"];
  note[note.size() - 6] = note[note.size() - 6] == 'A' ? 'B' : 'A';
  bad["new_checkpoint"] = note;
  write("badsig.json", bad);
  EXPECT_EQ(Exec("verify-proof --proof badsig.json --key log.pub", dir_).rc, 4);
  bad = c;
  bad["extra"] = 1;
  write("extra.json", bad);
  EXPECT_EQ(Exec("verify-proof --proof extra.json --key log.pub", dir_).rc, 3);
  bad = c;
  std::string root = bad["old_root"];
  std::transform(root.begin(), root.end(), root.begin(), ::toupper);
  bad["old_root"] = root;
  write("upper.json", bad);
  EXPECT_EQ(Exec("verify-proof --proof upper.json --key log.pub", dir_).rc, 3);
  EXPECT_EQ(Exec("verify-proof --proof c.json", dir_).rc, 3) << "neither --key nor --unsigned";
}

// RFC 6962 proofs of any log, as bare leaf hashes: the Certificate Transparency reference
// vectors (tests/data/audit/rfc6962_ct_vectors.txt) written as proof files and checked by the
// real binary, each also with one hash changed.
TEST_F(CliTest, VerifyProofChecksRfc6962VectorsAsBareLeafHashes) {
  std::ifstream in(std::string(ENCLAVE_TEST_DATA) + "/audit/rfc6962_ct_vectors.txt");
  ASSERT_TRUE(in.good());
  std::vector<Hash> leaves;
  std::map<uint64_t, std::string> roots;
  std::vector<nlohmann::json> proofs;
  std::string line;
  auto list = [](const std::string& p) {
    nlohmann::json a = nlohmann::json::array();
    if (p == "-") return a;
    std::stringstream ss(p);
    std::string h;
    while (std::getline(ss, h, ',')) a.push_back(h);
    return a;
  };
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ss(line);
    std::string kind, a, b, c;
    ss >> kind >> a >> b >> c;
    if (kind == "leaf") {
      auto bytes = HexDecode(b == "-" ? "" : b);
      ASSERT_TRUE(bytes.ok());
      leaves.push_back(LeafHash(*bytes));
    } else if (kind == "root") {
      roots[std::stoull(a)] = b;
    } else if (kind == "inclusion") {
      const uint64_t index = std::stoull(a), size = std::stoull(b);
      proofs.push_back({{"format", "enclave-audit-proof"}, {"version", 1}, {"proof", "inclusion"},
                        {"leaf_index", index}, {"leaf_hash", HexEncode(leaves.at(index))}, {"tree_size", size},
                        {"root", roots.at(size)}, {"path", list(c)}});
    } else if (kind == "consistency") {
      const uint64_t m = std::stoull(a), n = std::stoull(b);
      proofs.push_back({{"format", "enclave-audit-proof"}, {"version", 1}, {"proof", "consistency"}, {"old_size", m},
                        {"old_root", roots.at(m)}, {"new_size", n}, {"new_root", roots.at(n)}, {"path", list(c)}});
    }
  }
  ASSERT_EQ(proofs.size(), 10u) << "6 inclusion and 4 consistency vectors";
  size_t changed = 0;
  for (size_t i = 0; i < proofs.size(); ++i) {
    SCOPED_TRACE(proofs[i].dump());
    std::ofstream(dir_ / "v.json") << proofs[i].dump();
    CmdResult r = Exec("verify-proof --unsigned --proof v.json --json", dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["signed"], false);
    if (proofs[i]["path"].empty()) continue;
    auto bad = proofs[i];
    std::string h = bad["path"].back();
    h[5] = h[5] == 'a' ? 'b' : 'a';
    bad["path"].back() = h;
    std::ofstream(dir_ / "v.json") << bad.dump();
    EXPECT_EQ(Exec("verify-proof --unsigned --proof v.json", dir_).rc, 4);
    ++changed;
  }
  EXPECT_EQ(changed, 8u) << "the vectors 0 in 1 and 1 -> 1 have empty paths";
}

TEST_F(CliTest, ReportIsWrittenOnlyFromAVerifiedLog) {
  CmdResult r = Exec("report --log log --key log.pub --out r.html --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["summary"]["key_releases"], 2);
  std::ifstream html_in(dir_ / "r.html");
  std::stringstream html;
  html << html_in.rdbuf();
  EXPECT_NE(html.str().find(">VERIFIED<"), std::string::npos);
  EXPECT_NE(html.str().find("oncology"), std::string::npos);
  // JSON: same content; the period filters.
  r = Exec("report --log log --key log.pub --out r.json --format json --from 2024-05-01T09:30:00Z "
           "--to 2024-05-01T10:00:00Z",
           dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream json_in(dir_ / "r.json");
  auto j = nlohmann::json::parse(json_in);
  EXPECT_EQ(j["format"], "enclave-audit-compliance-report");
  EXPECT_EQ(j["summary"]["entries_in_period"], 2);
  EXPECT_EQ(j["log"]["verified"], true);
  // Refuses to overwrite without --force; bad options.
  EXPECT_EQ(Exec("report --log log --key log.pub --out r.html", dir_).rc, 7);
  EXPECT_EQ(Exec("report --log log --key log.pub --out x.html --from yesterday", dir_).rc, 3);
  EXPECT_EQ(Exec("report --log log --key log.pub --out x.html --format pdf", dir_).rc, 3);
  EXPECT_EQ(Exec("report --log log --key log.pub --out x.html --from 2024-05-02T00:00:00Z --to 2024-05-01T00:00:00Z",
                 dir_).rc,
            3);

  // Tampered log: exit 4, no new report, the old one untouched even with --force, no temporaries.
  std::vector<uint8_t> bytes = ReadBytes((dir_ / "log" / kLogFileName).string());
  auto recs = RawRecords(bytes);
  bytes[recs[1 + 2 * 3].offset + 40] ^= 0x04;
  WriteBytes((dir_ / "log" / kLogFileName).string(), bytes);
  r = Exec("report --log log --key log.pub --out fresh.html", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("offset " + std::to_string(recs[1 + 2 * 3].offset)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "fresh.html"));
  EXPECT_EQ(Exec("report --log log --key log.pub --out r.html --force", dir_).rc, 4);
  std::ifstream again(dir_ / "r.html");
  std::stringstream kept;
  kept << again.rdbuf();
  EXPECT_EQ(kept.str(), html.str());
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name.find("fresh") == std::string::npos && name.find(".tmp") == std::string::npos) << name;
  }
}

// `report --witness-policy/--cosigned` are verify's flags with verify's checks and exit
// codes; a quorum not met writes no report.
TEST_F(CliTest, ReportWithAWitnessPolicyExitsAsVerifyDoes) {
  TestLog log;
  log.dir = dir_ / "log";
  auto pub = LogPublicKey::Load((dir_ / "log.pub").string());
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  log.pub = *pub;
  LocalWitnesses witnesses(2);
  const std::string text = witnesses.PolicyText(log, "group both 2 w1 w2\nquorum both\n");
  WriteBytes((dir_ / "policy").string(), std::vector<uint8_t>(text.begin(), text.end()));
  const std::string flags = " --log log --key log.pub --witness-policy policy";

  EXPECT_EQ(Exec("verify" + flags, dir_).rc, 6) << "no cosigned checkpoint yet";
  EXPECT_EQ(Exec("report" + flags + " --out r.html", dir_).rc, 6);
  witnesses.Cosign(log, {0});  // one of the two
  EXPECT_EQ(Exec("verify" + flags, dir_).rc, 4);
  CmdResult r = Exec("report" + flags + " --out r.html", dir_);
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("the witness policy requires 2 of {w1, w2}"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));
  EXPECT_EQ(Exec("report --log log --key log.pub --cosigned x --out r.html", dir_).rc, 3);
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));

  // Both cosigned, in a file named by --cosigned: the report states the quorum met.
  witnesses.Cosign(log, {0, 1}, (dir_ / "both.note").string());
  r = Exec("report" + flags + " --cosigned both.note --out r.json --format json --json", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out)["verdict"]["witnesses"];
  EXPECT_EQ(out["met"], true);
  EXPECT_EQ(out["cosigned_by"], nlohmann::json({"w1", "w2"}));
  EXPECT_EQ(out["policy_file"], "policy");
  std::ifstream in(dir_ / "r.json");
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["verdict"], nlohmann::json::parse(r.out)["verdict"]);
  EXPECT_EQ(doc["log"]["witnessed"]["cosigned_checkpoint"], "both.note");
  r = Exec("report" + flags + " --cosigned both.note --out r.html", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Witness quorum 2 of {w1, w2} met: tree size 6 cosigned by w1, w2."), std::string::npos)
      << r.out;
}

TEST_F(CliTest, UsageAndInputErrors) {
  EXPECT_EQ(Exec("verify --log log", dir_).rc, 2);
  EXPECT_EQ(Exec("frobnicate", dir_).rc, 2);
  EXPECT_EQ(Exec("verify --log missing --key log.pub", dir_).rc, 6);
  CmdResult r = Exec(R"(append --log log --signing-key log.key --event '{"type":"key.released","actor":"b","dataset_id":"d","lease_id":"l","host":"h","job_digest":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789","dek":"00ff"}')",
               dir_);
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("unknown field 'dek'"), std::string::npos) << r.err;
  EXPECT_EQ(Exec("init --log log --signing-key log.key --public-key log.pub", dir_).rc, 7);
  EXPECT_EQ(Exec("verify --log log --key log.pub", dir_).rc, 0) << "failed commands must leave the log intact";
}

// Review finding (data loss): after the last byte of the log (the latest tree head's check)
// changed, `append` cut the acknowledged batch, reused its index and signed a new head, and
// the rewritten log verified. Now `append` refuses with exit 4, one line naming the offset,
// and leaves the log as it was, so `verify --state` still has the evidence.
TEST_F(CliTest, AppendRefusesALogWhoseLastTreeHeadIsDamaged) {
  ASSERT_EQ(Exec("verify --log log --key log.pub --state st.json", dir_).rc, 0);
  const std::string path = (dir_ / "log" / kLogFileName).string();
  std::vector<uint8_t> bytes = ReadBytes(path);
  const uint64_t head_offset = RawRecords(bytes).back().offset;
  bytes.back() ^= 0x01;
  WriteBytes(path, bytes);
  const std::string event =
      R"('{"type":"revoked","actor":"admin","subject":"host","subject_id":"gpu-07","reason":"left the pool"}')";
  CmdResult r = Exec("append --log log --signing-key log.key --event " + event, dir_);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("offset " + std::to_string(head_offset)), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("unacknowledged bytes"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(ReadBytes(path), bytes) << "the damaged log must be left as it was";
  EXPECT_EQ(Exec("verify --log log --key log.pub --state st.json", dir_).rc, 4);
  EXPECT_EQ(Exec("verify --log log --key log.pub", dir_).rc, 4);
  // A torn tail (a crash mid-append) is still recovered, and `append` says so.
  bytes.back() ^= 0x01;
  const size_t acked = bytes.size();
  bytes.insert(bytes.end(), {'E', 'A', 'R', '1', 1, 0, 0, 0, 200, 0, 0, 0, '{', '"'});
  WriteBytes(path, bytes);
  r = Exec("append --log log --signing-key log.key --event " + event, dir_);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("recovered the log: cut 14 unacknowledged bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("appended 1 entry ([6])"), std::string::npos) << r.out;
  EXPECT_GT(ReadBytes(path).size(), acked);
  EXPECT_EQ(Exec("verify --log log --key log.pub --state st.json", dir_).rc, 0);
}

// Found with the tlog-tiles limit: an entry longer than a record may hold was written, and
// the log could not be opened or verified again. `append` now refuses the whole file, naming
// the line, before it appends anything (exit 3); the log stays as it was and still verifies.
TEST_F(CliTest, AppendRefusesAnEventTooLongForTheLogBeforeAppendingAny) {
  std::string datasets;
  for (int i = 0; i < 300; ++i) datasets += (i ? "," : "") + ("\"ds-" + std::to_string(i) + "-" + std::string(240, 'd') + "\"");
  {
    std::ofstream f(dir_ / "long.jsonl");
    f << R"({"type":"revoked","actor":"admin","subject":"host","subject_id":"gpu-07","reason":"left the pool"})" << "\n";
    f << R"({"type":"job.started","actor":"trainer","job_digest":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789","host":"gpu-07","datasets":[)"
      << datasets << "]}\n";
  }
  const std::vector<uint8_t> before = ReadBytes((dir_ / "log" / kLogFileName).string());
  CmdResult r = Exec("append --log log --signing-key log.key --events-file long.jsonl", dir_);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("long.jsonl:2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exceeds the log's limit of 65535 bytes"), std::string::npos) << r.err;
  EXPECT_EQ(ReadBytes((dir_ / "log" / kLogFileName).string()), before) << "nothing may be appended";
  EXPECT_EQ(Exec("verify --log log --key log.pub", dir_).rc, 0);
  EXPECT_EQ(Exec("append --log log --signing-key log.key --events-file events.jsonl", dir_).rc, 0);
}

// Review finding: members of the wrong JSON type in a key, state or proof file aborted
// enclave-audit (uncaught nlohmann::json::type_error, exit 134). They are malformed input: 3.
TEST_F(CliTest, WrongJsonTypesInInputFilesAreInvalidInputNotACrash) {
  ASSERT_EQ(Exec("prove --log log --key log.pub --entry 3 --out p3.json", dir_).rc, 0);
  ASSERT_EQ(Exec("verify --log log --key log.pub --state st.json", dir_).rc, 0);
  std::ofstream(dir_ / "badproof.json") << R"({"format": ["x"]})";
  std::ofstream(dir_ / "badstate.json") << R"({"format": 1, "version": 1})";
  std::ofstream(dir_ / "badkey.pub") << R"({"format": 1})";
  std::ofstream(dir_ / "badalg.pub") << R"({"format": "enclave-audit-log-public-key", "version": 1, "algorithm": {}})";
  for (const std::string& args : {
           std::string("verify-proof --proof badproof.json --key log.pub"),
           std::string("verify --log log --key log.pub --state badstate.json"),
           std::string("verify --log log --key badkey.pub"),
           std::string("verify --log log --key badalg.pub"),
           std::string("verify-proof --proof p3.json --key badkey.pub"),
           std::string("report --log log --key log.pub --out r.html --state badstate.json"),
           std::string("evidence verify --log log --key log.pub --entry 2 --state badstate.json"),
       }) {
    CmdResult r = Exec(args + " --json", dir_);
    EXPECT_EQ(r.rc, 3) << args << ": " << r.err;
    EXPECT_NE(r.err.find("invalid input"), std::string::npos) << args << ": " << r.err;
  }
}

// Review finding: a log cut inside its 48-byte header gave exit 3 (malformed input) even
// with a state that had accepted a larger log. With a state, any log too short to hold the
// accepted tree is truncation: exit 4, for every length.
TEST_F(CliTest, LogCutInsideItsHeaderIsTamperingGivenAState) {
  ASSERT_EQ(Exec("verify --log log --key log.pub --state st.json", dir_).rc, 0);
  const std::string path = (dir_ / "log" / kLogFileName).string();
  const std::vector<uint8_t> full = ReadBytes(path);
  for (size_t len : {size_t{0}, size_t{1}, size_t{20}, size_t{47}, size_t{48}, size_t{100}, full.size() - 1}) {
    SCOPED_TRACE("cut to " + std::to_string(len) + " bytes");
    WriteBytes(path, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(len)));
    CmdResult r = Exec("verify --log log --key log.pub --state st.json --no-update", dir_);
    EXPECT_EQ(r.rc, 4) << r.err;
    EXPECT_EQ(Exec("report --log log --key log.pub --out r.html --state st.json", dir_).rc, 4);
  }
  WriteBytes(path, std::vector<uint8_t>(full.begin(), full.begin() + 20));
  CmdResult r = Exec("verify --log log --key log.pub --state st.json", dir_);
  EXPECT_NE(r.err.find("rollback or truncation: the file is 20 bytes"), std::string::npos) << r.err;
  // Without a state nothing says how long the log was: a header cut short is malformed input.
  EXPECT_EQ(Exec("verify --log log --key log.pub", dir_).rc, 3);
}

}  // namespace
}  // namespace enclave::audit
