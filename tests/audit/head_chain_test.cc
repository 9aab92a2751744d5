// Chained tree heads (issue 17 section 4): every head names its index and the head before
// it, so that no head can be deleted, duplicated or reordered unseen; logs of the writers
// before the chain (legacy heads) still verify and are chained from the next open on.
#include <gtest/gtest.h>

#include "audit_test_util.h"

namespace enclave::audit {
namespace {

using namespace testing;

void ExpectRefused(const TestLog& log, const std::string& what) {
  auto v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_FALSE(v.ok()) << "went undetected: " << what;
  EXPECT_EQ(v.status().code(), Code::kAuthFailed) << v.status().ToString();
  EXPECT_NE(v.status().message().find(what), std::string::npos) << v.status().message();
}

TEST(TreeHeads, ChainedSignatureInputIsBoundToEveryField) {
  auto key = LogSigningKey::Generate();
  ASSERT_TRUE(key.ok());
  Hash prev{};
  prev[3] = 7;
  TreeHead h{5, 1714564800000, LeafHash(AsBytes("x"))};
  auto sth = SignChainedTreeHead(*key, h, 4, prev);
  ASSERT_TRUE(sth.ok());
  const LogPublicKey& pub = key->public_key();
  EXPECT_TRUE(VerifyTreeHead(pub, *sth).ok());
  auto m = *sth;
  m.head_index = 5;
  EXPECT_EQ(VerifyTreeHead(pub, m).code(), Code::kAuthFailed);
  m = *sth;
  m.previous[0] ^= 1;
  EXPECT_EQ(VerifyTreeHead(pub, m).code(), Code::kAuthFailed);
  m = *sth;
  m.head.tree_size = 6;
  EXPECT_FALSE(VerifyTreeHead(pub, m).ok());
  m = *sth;
  m.checkpoint_signature[10] ^= 1;
  auto bad = VerifyTreeHead(pub, m);
  EXPECT_NE(bad.message().find("checkpoint"), std::string::npos) << bad.ToString();
  // The legacy reading of the same signature fails: the labels differ.
  m = *sth;
  m.chained = false;
  EXPECT_FALSE(VerifyTreeHead(pub, m).ok());
  // The documented signature input, byte for byte.
  std::vector<uint8_t> input = ChainedTreeHeadSignatureInput(pub.log_id, 4, prev, h);
  ASSERT_EQ(input.size(), 31u + 32 + 8 + 32 + 8 + 8 + 32);
  EXPECT_EQ(std::string(input.begin(), input.begin() + 31), std::string("enclave-audit-log/v2/tree-head") + '\0');
  EXPECT_EQ(input[63], 4);        // head_index, little-endian
  EXPECT_EQ(input[71 + 3], 7);    // previous
  EXPECT_EQ(input[103], 5);       // tree_size
  // The record payload round-trips, and its hash is what the next head names.
  const std::vector<uint8_t> payload = EncodeTreeHead(*sth);
  ASSERT_EQ(payload.size(), kChainedTreeHeadPayloadSize);
  auto parsed = ParseTreeHead(payload);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->chained);
  EXPECT_EQ(parsed->head_index, 4u);
  EXPECT_EQ(parsed->previous, prev);
  EXPECT_EQ(EncodeTreeHead(*parsed), payload);
  EXPECT_EQ(TreeHeadRecordHash(*parsed), crypto::Sha256(payload));
  // JSON (state files, proofs) keeps the chain members.
  auto again = SignedTreeHead::FromJson(sth->ToJson(), "test");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(EncodeTreeHead(*again), payload);
  auto partial = sth->ToJson();
  partial.erase("previous");
  EXPECT_EQ(SignedTreeHead::FromJson(partial, "test").status().code(), Code::kInvalidInput);
}

TEST(HeadChain, NewLogsAreVersion2WithChainedHeads) {
  TestLog log = MakeLog("chain-new");
  AppendSamples(log, 0, 3);
  const std::vector<uint8_t> file = ReadBytes(log.log_path());
  ASSERT_GE(file.size(), kFileHeaderSize);
  EXPECT_EQ(file[8], kLogVersion);
  uint64_t heads = 0;
  for (const RawRecord& r : RawRecords(file)) {
    if (r.type == RecordType::kEntry) continue;
    EXPECT_EQ(r.type, RecordType::kChainedTreeHead);
    auto sth = ParseTreeHead(r.payload);
    ASSERT_TRUE(sth.ok());
    EXPECT_EQ(sth->head_index, heads++);
  }
  EXPECT_EQ(heads, 4u);
}

TEST(HeadChain, LegacyLogVerifiesAndIsChainedFromTheNextOpen) {
  TestLog log = MakeLegacyLog("chain-legacy", 4);
  auto v = VerifyLog(log.dir.string(), log.pub);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->latest.chained);
  AuditorState state{log.pub.log_id, v->latest};
  {
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Opening signed a chained head of the same tree: the checkpoint is there at once.
    const SignedTreeHead latest = (*w)->LatestTreeHead();
    EXPECT_TRUE(latest.chained);
    EXPECT_EQ(latest.head_index, 5u);
    EXPECT_EQ(latest.head.tree_size, 4u);
    EXPECT_NE((*w)->LatestCheckpoint().find("\n4\n"), std::string::npos);
    ASSERT_TRUE((*w)->Append(SampleEvent(4)).ok());
  }
  VerifyOptions opts;
  opts.trusted = &state;
  v = VerifyLog(log.dir.string(), log.pub, opts);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tree_heads.size(), 7u);
  EXPECT_TRUE(v->latest.chained);
  EXPECT_EQ(v->latest.head_index, 6u);
}

TEST(HeadChain, LegacyLogWithoutItsFirstHeadOrWithADuplicatedHeadIsRefused) {
  TestLog log = MakeLegacyLog("chain-legacy-gaps", 3);
  const std::vector<uint8_t> file = ReadBytes(log.log_path());
  const auto recs = RawRecords(file);  // head(0) e0 head(1) e1 head(2) e2 head(3)
  ASSERT_EQ(recs.size(), 7u);
  auto cut = recs;
  cut.erase(cut.begin());
  WriteBytes(log.log_path(), Reassemble(file, cut));
  ExpectRefused(log, "offset 48: the log does not begin with the signed tree head of size 0");
  for (size_t k : {0u, 2u, 6u}) {
    auto dup = recs;
    dup.insert(dup.begin() + static_cast<long>(k + 1), recs[k]);
    WriteBytes(log.log_path(), Reassemble(file, dup));
    ExpectRefused(log, "offset " + std::to_string(recs[k].offset + recs[k].bytes.size()) +
                           ": a legacy tree head with no entry since the one before it");
  }
  // The writer judges the same way: it refuses to continue such a log.
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), Code::kAuthFailed);
  EXPECT_NE(w.status().message().find("duplicated tree head"), std::string::npos) << w.status().message();
}

TEST(HeadChain, LegacyHeadAfterAChainedOneOrInAVersion2LogIsRefused) {
  TestLog log = MakeLegacyLog("chain-mixed", 2);
  ASSERT_TRUE(LogWriter::Open(log.dir.string(), log.Key()).ok());  // adds the chained head of size 2
  const std::vector<uint8_t> file = ReadBytes(log.log_path());
  const auto recs = RawRecords(file);  // head(0) e0 head(1) e1 legacy head(2) chained head(2)
  ASSERT_EQ(recs.size(), 6u);
  ASSERT_TRUE(VerifyLog(log.dir.string(), log.pub).ok());
  auto swapped = recs;
  std::swap(swapped[4], swapped[5]);
  WriteBytes(log.log_path(), Reassemble(file, swapped));
  ExpectRefused(log, "chained tree head says it is head 3 but follows 2 tree head(s)");
  // With the chained head gone, the legacy one still cannot stand after... nothing: drop the
  // chained head instead and mark the file version 2: legacy heads are not allowed there.
  auto legacy_only = recs;
  legacy_only.pop_back();
  std::vector<uint8_t> v2 = Reassemble(file, legacy_only);
  v2[8] = static_cast<uint8_t>(kLogVersion);
  WriteBytes(log.log_path(), v2);
  ExpectRefused(log, "offset 48: a legacy (type 2) tree head in a version 2 log");
}

TEST(HeadChain, WriterRefusesALogWithADeletedHead) {
  TestLog log = MakeLog("chain-writer");
  AppendSamples(log, 0, 3);  // head(0) e0 head(1) e1 head(2) e2 head(3)
  const std::vector<uint8_t> file = ReadBytes(log.log_path());
  auto recs = RawRecords(file);
  ASSERT_EQ(recs.size(), 7u);
  recs.erase(recs.begin() + 2);  // head(1)
  WriteBytes(log.log_path(), Reassemble(file, recs));
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_FALSE(w.ok()) << "the writer continued a log with a deleted tree head";
  EXPECT_EQ(w.status().code(), Code::kAuthFailed);
  EXPECT_NE(w.status().message().find("says it is head 2 but follows 1"), std::string::npos) << w.status().message();
  EXPECT_EQ(ReadBytes(log.log_path()), Reassemble(file, recs)) << "the file was changed";
}

}  // namespace
}  // namespace enclave::audit
