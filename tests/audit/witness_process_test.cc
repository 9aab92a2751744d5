// `enclave-audit witness serve` as a real process on loopback (issue 17 section 2): it
// cosigns consistent growth, refuses a rewritten log (the attack: after a checkpoint of
// size N was cosigned the operator cuts the log back and rewrites it), never forgets the
// size it cosigned across SIGKILL, refuses bad proofs and signatures, and speaks HTTP/1.1
// with limits and deadlines. Keys and logs are real files; requests are raw HTTP.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/cosignature.h"
#include "enclave/audit/witness.h"
#include "witness_process.h"

namespace enclave::audit {
namespace {

using namespace testing;

void WriteText(const fs::path& path, const std::string& text) {
  WriteBytes(path.string(), std::vector<uint8_t>(text.begin(), text.end()));
}

// The log as it is now: its leaves and the checkpoint of every chained head.
struct Snapshot {
  std::vector<Hash> leaves;
  std::map<uint64_t, std::string> notes;
  uint64_t size = 0;
};

Snapshot Snap(const TestLog& log) {
  Snapshot s;
  auto v = VerifyLog(log.dir.string(), log.pub);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  if (!v.ok()) return s;
  s.leaves = v->leaf_hashes;
  for (const TreeHeadAt& h : v->tree_heads) s.notes[h.sth.head.tree_size] = *FormatCheckpointNote(log.pub, h.sth);
  s.size = v->latest.head.tree_size;
  return s;
}

std::vector<Hash> ProofOf(const Snapshot& s, uint64_t from, uint64_t to) {
  if (from == 0 || from >= to) return {};
  auto p = ConsistencyProof(s.leaves, from, to);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<Hash>{};
}

std::string Body(uint64_t old, const std::vector<Hash>& proof, const std::string& note) {
  return FormatAddCheckpointRequest({old, proof, note});
}

// Cuts the log file back to the end of its chained head of `size`, as an operator with
// access to the disk can (the writer cannot tell this from a log that never grew).
void CutBackTo(const TestLog& log, uint64_t size) {
  std::vector<uint8_t> file = ReadBytes(log.log_path());
  std::vector<RawRecord> kept;
  for (const RawRecord& r : RawRecords(file)) {
    kept.push_back(r);
    if (r.type == RecordType::kChainedTreeHead && ParseTreeHead(r.payload)->head.tree_size == size) break;
  }
  WriteBytes(log.log_path(), Reassemble(file, kept));
}

// Appends entries that differ from anything written before, one batch each.
void AppendRewritten(const TestLog& log, uint64_t first, uint64_t count) {
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = first; i < first + count; ++i) {
    auto idx = (*w)->Append(Revoked("operator@tenant", "host", "rewritten-" + std::to_string(i), "history rewritten"));
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    ASSERT_EQ(*idx, i);
  }
}

class WitnessProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ScratchDir("witness-proc");
    log_ = MakeLog("witness-proc-log");
    CliRun r = RunAudit({"witness", "keygen", "--name", "witness.test/w1", "--key", Path("w.key")}, dir_.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_FALSE(r.out.empty());
    auto key = WitnessPublicKey::Parse(r.out.substr(0, r.out.size() - 1), "keygen output");
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    witness_key_ = *key;
    WriteText(Path("logs.vkey"), "# the log this witness follows\n" + NoteVerifierKey(log_.pub) + "\n");
    Start();
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string StateFile() const { return Path("state") + "/logs/" + StateFileName(CheckpointOrigin(log_.pub.log_id)); }
  void Start(std::vector<std::string> extra = {}) {
    w_.reset();
    auto w = WitnessProcess::Start(Path("w.key"), Path("state"), Path("logs.vkey"), Path("witness.err"), extra);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    w_ = std::move(*w);
    EXPECT_EQ(w_->verifier_key(), witness_key_.VerifierKey());
  }
  HttpAnswer Submit(uint64_t old, const Snapshot& s, uint64_t size) {
    return PostAddCheckpoint(w_->port(), Body(old, ProofOf(s, old, size), s.notes.at(size)));
  }
  // A 200 answer whose body is the witness's valid cosignature of `note`, made just now.
  void ExpectCosigned(const HttpAnswer& a, const std::string& note) {
    ASSERT_EQ(a.status, 200) << a.raw;
    auto n = ParseNote(note.substr(0, note.find("\n\n") + 1) + "\n" + a.body, "answer");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    auto c = FindCosignature(*n, witness_key_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const int64_t now = ::time(nullptr);
    EXPECT_LE(std::llabs(static_cast<int64_t>(c->timestamp) - now), 60) << "timestamped now";
  }
  void ExpectSize(const HttpAnswer& a, uint64_t size) {
    EXPECT_EQ(a.status, 409) << a.raw;
    EXPECT_EQ(a.content_type, "text/x.tlog.size");
    EXPECT_EQ(a.body, std::to_string(size) + "\n");
  }

  fs::path dir_;
  TestLog log_;
  WitnessPublicKey witness_key_;
  std::unique_ptr<WitnessProcess> w_;
};

TEST_F(WitnessProcessTest, CosignsConsistentGrowth) {
  Snapshot s = Snap(log_);
  ExpectCosigned(Submit(0, s, 0), s.notes.at(0));  // the empty tree, on first use
  AppendSamples(log_, 0, 3);
  s = Snap(log_);
  ExpectCosigned(Submit(0, s, 3), s.notes.at(3));  // from size 0: no proof
  AppendSamples(log_, 3, 4);
  s = Snap(log_);
  ExpectCosigned(Submit(3, s, 7), s.notes.at(7));
  ExpectCosigned(Submit(7, s, 7), s.notes.at(7));  // the same checkpoint again: cosigned again
  ExpectSize(Submit(0, s, 7), 7);                  // a client that does not know the size learns it
  ExpectSize(Submit(3, s, 7), 7);
  AppendSamples(log_, 7, 5);
  s = Snap(log_);
  ExpectCosigned(Submit(7, s, 12), s.notes.at(12));
  EXPECT_EQ(ReadTextFile(StateFile()), s.notes.at(12)) << "the state is the last cosigned checkpoint";
  EXPECT_NE(w_->stderr_text().find("cosigned '" + CheckpointOrigin(log_.pub.log_id) + "' size 12"), std::string::npos);
  EXPECT_EQ(w_->Stop(SIGTERM), 0) << "SIGTERM ends the witness with exit 0";
}

// The attack of issue 17: a checkpoint of size N was cosigned; the operator cuts the log
// back and writes another history, to the same size and beyond. The witness refuses every
// checkpoint of the rewritten log, keeps its state, and keeps the refused (log-signed)
// checkpoints as evidence; the honest continuation is still cosigned.
TEST_F(WitnessProcessTest, RefusesTheRewrittenLogAfterACutBack) {
  AppendSamples(log_, 0, 6);
  Snapshot honest = Snap(log_);
  ExpectCosigned(Submit(0, honest, 6), honest.notes.at(6));
  const std::vector<uint8_t> honest_file = ReadBytes(log_.log_path());

  CutBackTo(log_, 3);
  AppendRewritten(log_, 3, 6);  // sizes 4..9 of another history
  Snapshot forged = Snap(log_);
  ASSERT_EQ(forged.size, 9u);
  ASSERT_NE(forged.notes.at(6), honest.notes.at(6)) << "the rewritten log has another tree of size 6";
  ASSERT_TRUE(VerifyLog(log_.dir.string(), log_.pub).ok()) << "the rewritten log verifies on its own";

  HttpAnswer a = Submit(6, forged, 6);  // the same size, another root
  EXPECT_EQ(a.status, 409) << a.raw;
  EXPECT_NE(a.content_type, "text/x.tlog.size");
  EXPECT_NE(a.body.find("forked"), std::string::npos) << a.body;
  a = Submit(6, forged, 9);  // larger, with a proof from the rewritten log
  EXPECT_EQ(a.status, 422) << a.raw;
  ExpectSize(Submit(3, forged, 9), 6);  // from the cut point: the witness is at 6
  ExpectSize(Submit(0, forged, 9), 6);
  a = Submit(6, forged, 4);  // smaller than what was cosigned
  EXPECT_EQ(a.status, 400) << a.raw;
  ExpectSize(Submit(3, forged, 4), 6);
  EXPECT_EQ(ReadTextFile(StateFile()), honest.notes.at(6)) << "the state was not touched";
  // The two log-signed refusals (same-size fork, bad proof) are kept as evidence.
  size_t kept = 0;
  for (const auto& f : fs::directory_iterator(Path("state") + "/refused")) {
    const std::string body = ReadTextFile(f.path().string());
    EXPECT_TRUE(body == Body(6, {}, forged.notes.at(6)) || body == Body(6, ProofOf(forged, 6, 9), forged.notes.at(9)))
        << f.path();
    ++kept;
  }
  EXPECT_EQ(kept, 2u);
  // After a restart it still remembers.
  ASSERT_TRUE(w_->Restart().ok());
  EXPECT_EQ(Submit(6, forged, 6).status, 409);
  EXPECT_EQ(Submit(6, forged, 9).status, 422);
  // The honest log, restored and grown, is cosigned.
  WriteBytes(log_.log_path(), honest_file);
  AppendSamples(log_, 6, 3);
  Snapshot grown = Snap(log_);
  ExpectCosigned(Submit(6, grown, 9), grown.notes.at(9));
}

// SIGKILL at random moments while a client submits growing checkpoints: after every
// restart the witness's size is the last one it answered 200 for, or the one after it
// (stored, then killed before it answered); never less, never a skip, never a torn file.
TEST_F(WitnessProcessTest, SigkillNeverForgetsTheLastCosignedSize) {
  constexpr uint64_t kEntries = 150;
  AppendSamples(log_, 0, kEntries);
  const Snapshot s = Snap(log_);
  std::mt19937 rng(17);
  uint64_t witness_size = 0;
  int killed_midway = 0;
  for (int round = 0; round < 12 && witness_size < kEntries; ++round) {
    std::atomic<uint64_t> acked{witness_size};
    std::atomic<bool> failed{false};
    std::string failure;
    std::thread client([&] {
      uint64_t cur = witness_size;
      for (uint64_t size = cur + 1; size <= kEntries; ++size) {
        HttpAnswer a = Submit(cur, s, size);
        if (a.status == -1) return;  // killed
        if (a.status != 200) {
          failure = a.raw;
          failed = true;
          return;
        }
        cur = size;
        acked = size;
      }
    });
    // At least one answer in this round, then a kill after a random pause.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (acked == witness_size && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 30)(rng)));
    EXPECT_EQ(w_->Stop(SIGKILL), 128 + SIGKILL);
    client.join();
    ASSERT_FALSE(failed) << failure;
    const uint64_t last_acked = acked;
    ASSERT_TRUE(w_->Restart().ok()) << "restarts after SIGKILL (lock released, state file whole)";
    HttpAnswer a = Submit(0, s, kEntries);
    ASSERT_EQ(a.status, 409) << "round " << round << ": " << a.raw;
    const uint64_t size = std::stoull(a.body);
    EXPECT_TRUE(size == last_acked || size == last_acked + 1)
        << "round " << round << ": answered 200 up to " << last_acked << ", remembers " << size;
    if (last_acked < kEntries) ++killed_midway;
    witness_size = size;
  }
  EXPECT_GE(killed_midway, 3) << "the kills must land while the client is submitting";
}

TEST_F(WitnessProcessTest, RefusesBadProofsAndSignatures) {
  AppendSamples(log_, 0, 10);
  Snapshot s = Snap(log_);
  ExpectCosigned(Submit(0, s, 4), s.notes.at(4));
  std::vector<Hash> p = ProofOf(s, 4, 10);
  ASSERT_GE(p.size(), 2u);
  auto with = [&](std::vector<Hash> proof) { return PostAddCheckpoint(w_->port(), Body(4, proof, s.notes.at(10))); };
  std::vector<Hash> bad = p;
  bad.back()[31] ^= 0x80;
  EXPECT_EQ(with(bad).status, 422);
  bad = p;
  bad.pop_back();
  EXPECT_EQ(with(bad).status, 422);
  bad = p;
  bad.push_back(p[0]);
  EXPECT_EQ(with(bad).status, 422);
  EXPECT_EQ(with({}).status, 422);
  EXPECT_EQ(with(ProofOf(s, 5, 10)).status, 422) << "a proof from another size";
  bad = p;
  std::swap(bad[0], bad[1]);
  EXPECT_EQ(with(bad).status, 422) << "hashes out of order";
  EXPECT_EQ(with(std::vector<Hash>(64, p[0])).status, 400) << "more than 63 lines";
  EXPECT_EQ(PostAddCheckpoint(w_->port(), Body(11, {}, s.notes.at(10))).status, 400) << "old > size";
  // Signatures: a forger's key under the log's name; another log; a damaged signature.
  auto forger = LogSigningKey::Generate();
  const std::string text = s.notes.at(10).substr(0, s.notes.at(10).find("\n\n") + 1);
  const std::string origin = CheckpointOrigin(log_.pub.log_id);
  auto sig = forger->Sign(AsBytes(text));
  const std::string forged = text + "\n" + FormatSignatureLine({origin, NoteKeyHash(origin, forger->public_key().key),
                                                                std::vector<uint8_t>(sig->begin(), sig->end())});
  EXPECT_EQ(PostAddCheckpoint(w_->port(), Body(4, p, forged)).status, 403);
  std::string damaged = s.notes.at(10);
  damaged[damaged.size() - 6] = damaged[damaged.size() - 6] == 'A' ? 'B' : 'A';
  EXPECT_EQ(PostAddCheckpoint(w_->port(), Body(4, p, damaged)).status, 403);
  TestLog other = MakeLog("witness-proc-other");
  EXPECT_EQ(PostAddCheckpoint(w_->port(), Body(0, {}, Snap(other).notes.at(0))).status, 404);
  EXPECT_EQ(PostAddCheckpoint(w_->port(), "old 4\n\nnot a checkpoint\n").status, 400);
  // None of it moved the witness; the right proof is cosigned.
  ExpectCosigned(with(p), s.notes.at(10));
}

TEST_F(WitnessProcessTest, SpeaksHttpWithLimitsAndDeadlines) {
  AppendSamples(log_, 0, 5);
  Snapshot s = Snap(log_);
  const std::string body = Body(0, {}, s.notes.at(2));
  const std::string head = "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n";
  HttpAnswer a = Exchange(w_->port(), "GET /add-checkpoint HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(a.status, 405);
  EXPECT_NE(a.raw.find("\r\nAllow: POST\r\n"), std::string::npos);
  EXPECT_EQ(Exchange(w_->port(), "POST /other HTTP/1.1\r\nHost: w\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .status,
            404);
  EXPECT_EQ(Exchange(w_->port(), head + "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) +
                                     "\r\nConnection: close\r\n\r\n" + body)
                .status,
            415);
  a = Exchange(w_->port(), head + "Content-Length: 40000\r\n\r\n");
  EXPECT_EQ(a.status, 413);
  EXPECT_NE(a.raw.find("Connection: close"), std::string::npos);
  EXPECT_EQ(Exchange(w_->port(), head + "X: " + std::string(9000, 'x') + "\r\n\r\n").status, 431);
  EXPECT_EQ(Exchange(w_->port(), "\x16\x03\x01 not http\r\n\r\n").status, 400) << "a TLS hello is refused";
  // Keep-alive: two requests in one write, a chunked one first; both answered in order.
  std::string chunked = head + "Transfer-Encoding: chunked\r\n\r\n";
  for (size_t i = 0; i < body.size(); i += 50) {
    const std::string piece = body.substr(i, 50);
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    chunked += size + piece + "\r\n";
  }
  chunked += "0\r\n\r\n";
  const std::string body2 = Body(2, ProofOf(s, 2, 5), s.notes.at(5));
  a = Exchange(w_->port(),
               chunked + head + "Content-Length: " + std::to_string(body2.size()) + "\r\nConnection: close\r\n\r\n" + body2);
  ExpectCosigned(a, s.notes.at(2));
  const size_t second = a.raw.find("HTTP/1.1 ", 1);
  ASSERT_NE(second, std::string::npos) << a.raw;
  ExpectCosigned(ParseAnswer(a.raw.substr(second)), s.notes.at(5));
  // Expect: 100-continue: the witness says continue before the body is sent.
  {
    Conn c(w_->port());
    const std::string b = Body(5, {}, s.notes.at(5));
    ASSERT_TRUE(c.Send(head + "Expect: 100-continue\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n"));
    EXPECT_EQ(c.Read("\r\n\r\n", 5000), "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(c.Send(b));
    const std::string& all = c.Read("\r\n\r\n\xe2\x80\x94", 5000);
    const size_t final_answer = all.find("HTTP/1.1 ", 1);
    ASSERT_NE(final_answer, std::string::npos) << all;
    ExpectCosigned(ParseAnswer(all.substr(final_answer)), s.notes.at(5));
  }
  // A request that does not arrive within --timeout gets 408 and the connection ends.
  Start({"--timeout", "1"});
  Conn slow(w_->port());
  ASSERT_TRUE(slow.Send(head + "Content-Length: 100\r\n\r\nold"));
  const auto t0 = std::chrono::steady_clock::now();
  a = ParseAnswer(slow.Read("", 5000));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(a.status, 408);
  EXPECT_TRUE(slow.closed());
  EXPECT_LT(waited, 4.0);
  // An idle keep-alive connection is closed quietly.
  Conn idle(w_->port());
  EXPECT_EQ(idle.Read("", 5000), "");
  EXPECT_TRUE(idle.closed());
}

TEST_F(WitnessProcessTest, KeysAndStartRefusals) {
  const std::string d = dir_.string();
  CliRun r = RunAudit({"witness", "verifier-key", "--key", Path("w.key")}, d);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, witness_key_.VerifierKey() + "\n");
  struct stat st {};
  ASSERT_EQ(::stat(Path("w.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(RunAudit({"witness", "keygen", "--name", "witness.test/w1", "--key", Path("w.key")}, d).rc, 7);
  EXPECT_EQ(RunAudit({"witness", "keygen", "--name", "bad name", "--key", Path("w2.key")}, d).rc, 3);
  auto serve = [&](const std::string& key, const std::string& state, const std::string& listen,
                   const std::string& logs) {
    return RunAudit({"witness", "serve", "--key", key, "--state", state, "--listen", listen, "--log-key", logs}, d);
  };
  // The state directory is taken by the running witness; its port too.
  r = serve(Path("w.key"), Path("state"), "127.0.0.1:0", Path("logs.vkey"));
  EXPECT_EQ(r.rc, 8) << r.err;
  EXPECT_NE(r.err.find("another witness holds"), std::string::npos) << r.err;
  r = serve(Path("w.key"), Path("state2"), "127.0.0.1:" + std::to_string(w_->port()), Path("logs.vkey"));
  EXPECT_EQ(r.rc, 10) << r.err;
  EXPECT_EQ(serve(Path("w.key"), Path("state2"), "localhost", Path("logs.vkey")).rc, 3);
  WriteText(Path("bad.vkey"), "not a key\n");
  EXPECT_EQ(serve(Path("w.key"), Path("state2"), "127.0.0.1:0", Path("bad.vkey")).rc, 3);
  EXPECT_EQ(serve(Path("w.key"), Path("state2"), "127.0.0.1:0", Path("missing.vkey")).rc, 6);
  // A damaged state file: the witness does not start (it would forget what it cosigned).
  Snapshot s = Snap(log_);
  ExpectCosigned(Submit(0, s, 0), s.notes.at(0));
  EXPECT_EQ(w_->Stop(), 0);
  std::vector<uint8_t> state = ReadBytes(StateFile());
  std::vector<uint8_t> damaged = state;
  damaged[damaged.size() - 8] ^= 0x01;
  WriteBytes(StateFile(), damaged);
  r = serve(Path("w.key"), Path("state"), "127.0.0.1:0", Path("logs.vkey"));
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find(StateFile()), std::string::npos) << r.err;
  WriteBytes(StateFile(), state);
  ::chmod(Path("w.key").c_str(), 0644);
  r = serve(Path("w.key"), Path("state"), "127.0.0.1:0", Path("logs.vkey"));
  EXPECT_EQ(r.rc, 5) << r.err;
}

}  // namespace
}  // namespace enclave::audit
