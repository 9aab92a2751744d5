// The writer: appends, group commit, the writer lock, keys, and recovery of torn tails.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>

#include "audit_test_util.h"

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

TEST(LogRecovery, GarbageAndUnsignedEntriesAtTheTailAreCut) {
  TestLog log = MakeLog("garbage");
  AppendSamples(log, 0, 2);
  const std::vector<uint8_t> acked = ReadBytes(log.log_path());
  std::vector<uint8_t> bytes = acked;
  auto entry = SerializeEntry([] { Event e = SampleEvent(2); e.time = "2024-01-01T00:00:00Z"; return e; }(), 2);
  ASSERT_TRUE(entry.ok());
  AppendRecord(RecordType::kEntry, *entry, &bytes);  // complete, but no tree head
  bytes.insert(bytes.end(), 100, 0);                  // zeros, as after a crash on some file systems
  WriteBytes(log.log_path(), bytes);
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->recovery().dropped_entries, 1u);
  EXPECT_NE((*w)->recovery().detail.find("unreadable record"), std::string::npos) << (*w)->recovery().detail;
  auto idx = (*w)->Append(SampleEvent(7));
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 2u);
  w->reset();
  EXPECT_TRUE(VerifyLog(log.dir.string(), log.pub).ok());
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
