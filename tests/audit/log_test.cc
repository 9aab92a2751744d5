// The writer: appends, group commit, the writer lock, keys, and recovery of torn tails.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <thread>

#include "audit_test_util.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/audit/proof.h"

namespace enclave::audit {
namespace {

using namespace testing;

TEST(LogKeys, SigningKeyRoundTripAndModeCheck) {
  fs::path dir = ScratchDir("keys");
  auto key = LogSigningKey::Generate();
  ASSERT_TRUE(key.ok());
  const std::string path = (dir / "log.key").string();
  ASSERT_TRUE(key->Save(path).ok());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(key->Save(path).code(), Code::kAlreadyExists);
  auto loaded = LogSigningKey::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->public_key().key, key->public_key().key);
  // The same message signs identically (Ed25519 is deterministic) and verifies.
  auto s1 = key->Sign(AsBytes("m")), s2 = loaded->Sign(AsBytes("m"));
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(*s1, *s2);

  ::chmod(path.c_str(), 0644);
  auto refused = LogSigningKey::Load(path);
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("chmod 600"), std::string::npos);

  const std::string pub = (dir / "log.pub").string();
  ASSERT_TRUE(key->public_key().Save(pub, false).ok());
  auto p = LogPublicKey::Load(pub);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->log_id, key->public_key().log_id);
}

// Every place of `doc` (the document itself, each member and array item, at any depth).
void Pointers(const nlohmann::json& j, const nlohmann::json::json_pointer& at,
              std::vector<nlohmann::json::json_pointer>* out) {
  out->push_back(at);
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) Pointers(it.value(), at / it.key(), out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) Pointers(j[i], at / i, out);
  }
}

// `check` on every variant of a valid document with one place replaced by a value of each
// JSON type, or removed. Counts the variants.
size_t ForEachTypeConfusion(const nlohmann::json& doc, const std::function<void(const nlohmann::json&)>& check) {
  using nlohmann::json;
  const std::vector<json> values = {nullptr, true, false, 0, 1, -1, 1.5, 1e300, "x", "", json::array(),
                                    json::array({1, "a"}), json::object(), json{{"format", 1}}};
  std::vector<json::json_pointer> where;
  Pointers(doc, json::json_pointer(), &where);
  size_t n = 0;
  for (const auto& p : where) {
    for (const json& v : values) {
      json m = doc;
      m[p] = v;
      check(m);
      ++n;
    }
    if (!p.empty() && doc.at(p.parent_pointer()).is_object()) {
      json m = doc;
      m.at(p.parent_pointer()).erase(p.back());
      check(m);
      ++n;
    }
  }
  return n;
}

// Review finding: json::value("format", "") throws when "format" is not a string, and the
// exception aborted enclave-audit (exit 134). Key files, auditor states and inclusion
// proofs are untrusted input: a member of any wrong type, or a missing one, is a clean
// error (invalid input or unsupported), never an exception.
TEST(UntrustedJson, WrongMemberTypesInKeyStateAndProofAreErrorsNotExceptions) {
  using nlohmann::json;
  TestLog log = MakeLog("jsontypes");
  AppendSamples(log, 0, 3);
  auto proof = ProveEntry(log.dir.string(), log.pub, 1, std::nullopt);
  ASSERT_TRUE(proof.ok()) << proof.status().ToString();
  auto v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_TRUE(v.ok());
  const AuditorState state{log.pub.log_id, v->latest};
  const fs::path dir = log.dir.parent_path();
  auto expect_clean = [](const Status& s, const json& m) {
    if (s.ok()) return;
    EXPECT_TRUE(s.code() == Code::kInvalidInput || s.code() == Code::kUnsupported || s.code() == Code::kAuthFailed)
        << m.dump() << ": " << s.ToString();
  };
  size_t n = 0;
  n += ForEachTypeConfusion(log.pub.ToJson(), [&](const json& m) {
    EXPECT_NO_THROW({
      auto k = LogPublicKey::FromJson(m, "key");
      expect_clean(k.status(), m);
    }) << m.dump();
  });
  n += ForEachTypeConfusion(state.ToJson(), [&](const json& m) {
    const std::string path = (dir / "state.json").string();
    std::ofstream(path, std::ios::trunc) << m.dump();
    EXPECT_NO_THROW({
      auto s = AuditorState::Load(path);
      expect_clean(s.status(), m);
    }) << m.dump();
  });
  n += ForEachTypeConfusion(proof->ToJson(), [&](const json& m) {
    EXPECT_NO_THROW({
      auto b = InclusionBundle::FromJson(m, "proof");
      expect_clean(b.status(), m);
      if (b.ok()) expect_clean(VerifyInclusionBundle(*b, log.pub).status(), m);
    }) << m.dump();
  });
  EXPECT_GT(n, 300u);
  // audit-log.md section 7: a version that is not the integer 1 is unsupported, also 1.0,
  // 1e0 and -1 (JSON readers that compare numbers by value would take the first two).
  auto section8 = ProveInclusion(log.dir.string(), log.pub, 1, std::nullopt);
  ASSERT_TRUE(section8.ok()) << section8.status().ToString();
  ASSERT_TRUE(Proof::FromJson(section8->ToJson(), "proof").ok());
  for (const char* version : {"1.0", "1e0", "-1", "2", "\"1\""}) {
    json key = log.pub.ToJson(), st = state.ToJson(), pr = proof->ToJson(), p8 = section8->ToJson();
    for (json* m : {&key, &st, &pr, &p8}) (*m)["version"] = json::parse(version);
    EXPECT_EQ(Proof::FromJson(p8, "proof").status().code(), Code::kUnsupported) << version;
    EXPECT_EQ(LogPublicKey::FromJson(key, "key").status().code(), Code::kUnsupported) << version;
    const std::string path = (dir / "state.json").string();
    std::ofstream(path, std::ios::trunc) << st.dump();
    EXPECT_EQ(AuditorState::Load(path).status().code(), Code::kUnsupported) << version;
    EXPECT_EQ(InclusionBundle::FromJson(pr, "proof").status().code(), Code::kUnsupported) << version;
  }
  // The reviewer's three files, through the loaders.
  const std::string key_path = (dir / "badkey.pub").string();
  std::ofstream(key_path) << R"({"format":1})";
  EXPECT_EQ(LogPublicKey::Load(key_path).status().code(), Code::kInvalidInput);
  const std::string state_path = (dir / "badstate.json").string();
  std::ofstream(state_path) << R"({"format":1,"version":1})";
  EXPECT_EQ(AuditorState::Load(state_path).status().code(), Code::kInvalidInput);
  EXPECT_EQ(InclusionBundle::FromJson(json::parse(R"({"format":["x"]})"), "proof").status().code(),
            Code::kInvalidInput);
}

// The reader of an attestation verdict's archived inputs takes an Entry: an Entry that did
// not come through the entry schema must not make it throw either.
TEST(UntrustedJson, VerdictRecordFromEntryNeverThrows) {
  using nlohmann::json;
  const std::string d(64, 'a');
  Entry e;
  e.seq = 0;
  e.event.type = EventType::kAttestationVerdict;
  e.event.actor = "broker";
  e.event.fields = json{{"host", "gpu-1"},
                        {"verdict", "accepted"},
                        {"checks", json::array({json{{"check", "quote"}, {"ok", true}, {"reason", "passed"}}})},
                        {"evidence_sha256", d},
                        {"enrolment_sha256", d},
                        {"policy_digest", "sha256:" + d},
                        {"policy_files", json::array({json{{"path", "roots/ek.pem"}, {"sha256", d}}})},
                        {"nonce", "00ff"},
                        {"nonce_issued_at", uint64_t{1700000000}},
                        {"appraised_at", uint64_t{1700000001}},
                        {"result_sha256", d},
                        {"last_clock", json{{"clock", uint64_t{5}}, {"reset_count", uint64_t{0}}, {"restart_count", uint64_t{0}}, {"safe", uint64_t{1}}}}};
  auto base = VerdictRecordFromEntry(e);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_TRUE(base->context.last_clock.has_value());
  EXPECT_EQ(base->context.last_clock->safe, 1);
  const json fields = e.event.fields;
  const size_t n = ForEachTypeConfusion(fields, [&](const json& m) {
    Entry x = e;
    x.event.fields = m;
    EXPECT_NO_THROW({
      auto r = VerdictRecordFromEntry(x);
      if (!r.ok()) {
        EXPECT_TRUE(r.status().code() == Code::kInvalidInput || r.status().code() == Code::kFailedPrecondition)
            << m.dump() << ": " << r.status().ToString();
      }
    }) << m.dump();
  });
  EXPECT_GT(n, 200u);
}

TEST(TreeHeads, SignatureInputIsBoundToEveryField) {
  auto key = LogSigningKey::Generate();
  ASSERT_TRUE(key.ok());
  TreeHead h{5, 1714564800000, LeafHash(AsBytes("x"))};
  auto sth = SignTreeHead(*key, h);
  ASSERT_TRUE(sth.ok());
  EXPECT_TRUE(VerifyTreeHead(key->public_key(), *sth).ok());
  auto m = *sth;
  m.head.tree_size = 6;
  EXPECT_EQ(VerifyTreeHead(key->public_key(), m).code(), Code::kAuthFailed);
  m = *sth;
  m.head.timestamp_ms += 1;
  EXPECT_FALSE(VerifyTreeHead(key->public_key(), m).ok());
  m = *sth;
  m.head.root[0] ^= 1;
  EXPECT_FALSE(VerifyTreeHead(key->public_key(), m).ok());
  auto other = LogSigningKey::Generate();
  EXPECT_FALSE(VerifyTreeHead(other->public_key(), *sth).ok());
  // The documented signature input, byte for byte.
  std::vector<uint8_t> input = TreeHeadSignatureInput(key->public_key().log_id, h);
  ASSERT_EQ(input.size(), 31u + 32 + 8 + 8 + 32);
  EXPECT_EQ(std::string(input.begin(), input.begin() + 31), std::string("enclave-audit-log/v1/tree-head") + '\0');
  EXPECT_EQ(input[63], 5);  // tree_size, little-endian
  auto parsed = ParseTreeHead(EncodeTreeHead(*sth));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->signature, sth->signature);
  EXPECT_EQ(parsed->head.root, sth->head.root);
}

TEST(LogWriter, AppendsVerifyAndSurviveReopen) {
  TestLog log = MakeLog("basic");
  AppendSamples(log, 0, 20);
  auto v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->entries, 20u);
  EXPECT_EQ(v->tree_heads.size(), 21u);  // the empty head, then one per append
  EXPECT_EQ(v->latest.head.tree_size, 20u);
  AppendSamples(log, 20, 5);  // reopen and continue
  v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->entries, 25u);
}

TEST(LogWriter, RefusesInvalidEventsWithoutHarm) {
  TestLog log = MakeLog("invalid");
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok());
  Event bad = SampleEvent(2);
  bad.fields["secret"] = "x";
  EXPECT_EQ((*w)->Append(bad).status().code(), Code::kInvalidInput);
  auto idx = (*w)->Append(SampleEvent(3));
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 0u);
}

TEST(LogWriter, SecondWriterIsLockedOut) {
  TestLog log = MakeLog("lock");
  auto w1 = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w1.ok());
  auto w2 = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_FALSE(w2.ok());
  EXPECT_EQ(w2.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(w2.status().message().find("another writer holds the log's lock"), std::string::npos);
  w1->reset();
  EXPECT_TRUE(LogWriter::Open(log.dir.string(), log.Key()).ok());
}

TEST(LogWriter, WrongKeyRefused) {
  TestLog log = MakeLog("wrongkey");
  auto other = LogSigningKey::Generate();
  auto w = LogWriter::Open(log.dir.string(), std::move(*other));
  EXPECT_EQ(w.status().code(), Code::kPermissionDenied);
}

TEST(LogWriter, GroupCommitBatchesConcurrentAppenders) {
  TestLog log = MakeLog("group");
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok());
  constexpr int kThreads = 8, kPerThread = 50;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto idx = (*w)->Append(SampleEvent(static_cast<uint64_t>(t * kPerThread + i)));
        if (idx.ok()) got[t].push_back(*idx);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<bool> seen(kThreads * kPerThread, false);
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), static_cast<size_t>(kPerThread));
    for (uint64_t i : g) {
      ASSERT_LT(i, seen.size());
      EXPECT_FALSE(seen[i]) << "index " << i << " given twice";
      seen[i] = true;
    }
  }
  const WriterStats stats = (*w)->stats();
  EXPECT_EQ(stats.appended, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LT(stats.batches, stats.appended) << "concurrent appends were never batched";
  auto v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->entries, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(v->tree_heads.size(), stats.batches + 1);
}

// Cut the file at every byte inside the last batch (as a crash during its write would):
// the writer must recover to exactly the previous, acknowledged state.
TEST(LogRecovery, TornTailAtEveryOffsetIsCutBackToTheLastTreeHead) {
  TestLog log = MakeLog("torn");
  AppendSamples(log, 0, 3);
  const std::vector<uint8_t> acked = ReadBytes(log.log_path());
  AppendSamples(log, 3, 1);
  const std::vector<uint8_t> full = ReadBytes(log.log_path());
  ASSERT_GT(full.size(), acked.size());
  for (size_t cut = acked.size(); cut < full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    WriteBytes(log.log_path(), std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(cut)));
    if (cut > acked.size()) {
      auto v = VerifyLog(log.dir.string(), log.pub);
      ASSERT_FALSE(v.ok()) << "a torn tail must not verify";
      EXPECT_EQ(v.status().code(), Code::kAuthFailed);
    }
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ((*w)->recovery().truncated_bytes, cut - acked.size());
    EXPECT_EQ((*w)->LatestTreeHead().head.tree_size, 3u);
    w->reset();
    EXPECT_EQ(ReadBytes(log.log_path()), acked);
  }
}

// What a crash can leave: complete entries whose batch never got its head, then one record
// cut short by the end of the file. Both are cut; the next append reuses their indexes.
TEST(LogRecovery, UnsignedEntriesAndATornRecordAtTheTailAreCut) {
  TestLog log = MakeLog("unsigned");
  AppendSamples(log, 0, 2);
  const std::vector<uint8_t> acked = ReadBytes(log.log_path());
  std::vector<uint8_t> bytes = acked;
  for (uint64_t seq : {2, 3}) {
    auto entry = SerializeEntry([&] { Event e = SampleEvent(seq); e.time = "2024-01-01T00:00:00Z"; return e; }(), seq);
    ASSERT_TRUE(entry.ok());
    std::vector<uint8_t> rec;
    AppendRecord(RecordType::kEntry, *entry, &rec);
    if (seq == 3) rec.resize(rec.size() - 9);  // the second is torn: 9 bytes short of its declared end
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  WriteBytes(log.log_path(), bytes);
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->recovery().dropped_entries, 1u);
  EXPECT_EQ((*w)->recovery().truncated_bytes, bytes.size() - acked.size());
  EXPECT_NE((*w)->recovery().detail.find("torn record"), std::string::npos) << (*w)->recovery().detail;
  auto idx = (*w)->Append(SampleEvent(7));
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 2u);
  w->reset();
  EXPECT_TRUE(VerifyLog(log.dir.string(), log.pub).ok());
}

// Review finding: a one-byte change in the last, acknowledged batch made the writer cut the
// whole batch as a "torn tail" and reuse its indexes. A complete record that fails its check
// is not what a crash leaves: whatever byte of the last batch (entry or tree head) changes,
// the writer refuses to open and leaves every byte where it was.
TEST(LogRecovery, AnyChangedByteInTheLastAcknowledgedBatchIsRefusedNotCut) {
  TestLog log = MakeLog("lastbatch");
  AppendSamples(log, 0, 3);
  const std::vector<uint8_t> original = ReadBytes(log.log_path());
  auto recs = RawRecords(original);
  ASSERT_EQ(recs.size(), 7u);  // head(0), e0, head(1), e1, head(2), e2, head(3)
  const uint64_t batch_start = recs[5].offset;
  size_t refused = 0;
  for (uint64_t at = batch_start; at < original.size(); ++at) {
    for (uint8_t flip : {0x01, 0x80}) {
      SCOPED_TRACE("byte " + std::to_string(at) + " ^ " + std::to_string(flip));
      std::vector<uint8_t> bytes = original;
      bytes[at] ^= flip;
      WriteBytes(log.log_path(), bytes);
      auto w = LogWriter::Open(log.dir.string(), log.Key());
      ASSERT_FALSE(w.ok()) << "the writer accepted a log whose acknowledged tail was changed";
      EXPECT_EQ(w.status().code(), Code::kAuthFailed) << w.status().ToString();
      const std::string& msg = w.status().message();
      EXPECT_TRUE(msg.find("offset " + std::to_string(recs[5].offset)) != std::string::npos ||
                  msg.find("offset " + std::to_string(recs[6].offset)) != std::string::npos)
          << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
      ASSERT_EQ(ReadBytes(log.log_path()), bytes) << "the writer must not touch a damaged log";
      ++refused;
    }
  }
  EXPECT_EQ(refused, 2 * (original.size() - batch_start));
  // The reviewer's case exactly: the last byte (the head's check). Restored, all is well.
  WriteBytes(log.log_path(), original);
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->recovery().truncated_bytes, 0u);
  EXPECT_EQ((*w)->LatestTreeHead().head.tree_size, 3u);
}

// Bytes that are not a prefix of a record (zeros, garbage) after the last tree head are not
// a crash's torn write of this writer: refused, never cut.
TEST(LogRecovery, ZerosOrGarbageAfterTheLastTreeHeadAreRefused) {
  TestLog log = MakeLog("garbage");
  AppendSamples(log, 0, 2);
  const std::vector<uint8_t> acked = ReadBytes(log.log_path());
  auto entry = SerializeEntry([] { Event e = SampleEvent(2); e.time = "2024-01-01T00:00:00Z"; return e; }(), 2);
  ASSERT_TRUE(entry.ok());
  std::vector<uint8_t> with_entry = acked;
  AppendRecord(RecordType::kEntry, *entry, &with_entry);  // complete, but no tree head
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> tails = {
      {"zeros", std::vector<uint8_t>(100, 0)},
      {"one zero byte", std::vector<uint8_t>(1, 0)},
      {"bad magic", {'E', 'A', 'R', '2'}},
      {"bad type", {'E', 'A', 'R', '1', 7}},
      {"bad length", {'E', 'A', 'R', '1', 2, 0, 0, 0, 111, 0, 0, 0}},
  };
  for (const auto& base : {acked, with_entry}) {
    for (const auto& [name, tail] : tails) {
      SCOPED_TRACE(name + (base.size() > acked.size() ? " after an unsigned entry" : ""));
      std::vector<uint8_t> bytes = base;
      bytes.insert(bytes.end(), tail.begin(), tail.end());
      WriteBytes(log.log_path(), bytes);
      auto w = LogWriter::Open(log.dir.string(), log.Key());
      ASSERT_FALSE(w.ok());
      EXPECT_EQ(w.status().code(), Code::kAuthFailed);
      EXPECT_NE(w.status().message().find("offset " + std::to_string(base.size())), std::string::npos)
          << w.status().message();
      EXPECT_EQ(ReadBytes(log.log_path()), bytes);
    }
  }
}

TEST(LogRecovery, DamageBeforeValidRecordsIsNotTruncated) {
  TestLog log = MakeLog("middamage");
  AppendSamples(log, 0, 5);
  std::vector<uint8_t> bytes = ReadBytes(log.log_path());
  auto recs = RawRecords(bytes);
  bytes[recs[3].offset + 20] ^= 0x01;  // inside entry 1's payload; valid records follow
  WriteBytes(log.log_path(), bytes);
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not a torn tail; refusing to truncate"), std::string::npos)
      << w.status().message();
  EXPECT_EQ(ReadBytes(log.log_path()), bytes) << "the writer must not touch a damaged log";
}

}  // namespace
}  // namespace enclave::audit
