// The tamper matrix: every kind of change to a stored log is detected by VerifyLog, with a
// message that says where (file offset, entry index or tree size).
#include <gtest/gtest.h>

#include "audit_test_util.h"

namespace enclave::audit {
namespace {

using namespace testing;

class TamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = MakeLog("tamper");
    AppendSamples(log_, 0, 8);  // records: head(0), e0, head(1), e1, ..., e7, head(8)
    original_ = ReadBytes(log_.log_path());
    records_ = RawRecords(original_);
    ASSERT_EQ(records_.size(), 17u);
    auto v = VerifyLog(log_.dir.string(), log_.pub);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    state_.log_id = log_.pub.log_id;
    state_.tree_head = v->latest;
  }

  const RawRecord& EntryRecord(size_t i) const { return records_[1 + 2 * i]; }

  // Verifies the current file; expects an authentication failure whose message contains
  // every string in `where`.
  void ExpectDetected(const std::vector<std::string>& where, bool with_state = false) {
    VerifyOptions opts;
    if (with_state) opts.trusted = &state_;
    auto v = VerifyLog(log_.dir.string(), log_.pub, opts);
    ASSERT_FALSE(v.ok()) << "tampering went undetected";
    EXPECT_EQ(v.status().code(), Code::kAuthFailed) << v.status().ToString();
    for (const std::string& w : where) {
      EXPECT_NE(v.status().message().find(w), std::string::npos)
          << "message lacks '" << w << "': " << v.status().message();
    }
  }

  void Store(const std::vector<RawRecord>& records) { WriteBytes(log_.log_path(), Reassemble(original_, records)); }

  // Replaces entry i's payload, re-framing it with a valid check (a framing-aware attacker).
  RawRecord Reframed(size_t i, const std::string& from, const std::string& to) {
    std::string text(EntryRecord(i).payload.begin(), EntryRecord(i).payload.end());
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << text;
    text.replace(at, from.size(), to);
    return MakeRaw(RecordType::kEntry, std::vector<uint8_t>(text.begin(), text.end()));
  }

  TestLog log_;
  std::vector<uint8_t> original_;
  std::vector<RawRecord> records_;
  AuditorState state_;
};

TEST_F(TamperTest, OneChangedByteInAnyEntry) {
  for (size_t i = 0; i < 8; ++i) {
    const RawRecord& rec = EntryRecord(i);
    // Every header and check byte, and every third payload byte.
    for (size_t b = 0; b < rec.bytes.size(); b += (b < 12 || b + 8 >= rec.bytes.size()) ? 1 : 3) {
      SCOPED_TRACE("entry " + std::to_string(i) + " byte " + std::to_string(b));
      std::vector<uint8_t> bytes = original_;
      bytes[rec.offset + b] ^= 0x20;
      WriteBytes(log_.log_path(), bytes);
      ExpectDetected({"offset " + std::to_string(rec.offset)});
      if (HasFailure()) return;
    }
  }
}

TEST_F(TamperTest, ChangedEntryWithRecomputedCheckIsCaughtByTheTreeHead) {
  auto recs = records_;
  recs[1 + 2 * 3] = Reframed(3, "gpu-host-3", "gpu-host-9");
  Store(recs);
  ExpectDetected({"offset " + std::to_string(records_[2 * 4].offset), "size 4", "one of entries 3..3",
                  "offsets " + std::to_string(EntryRecord(3).offset)});
}

TEST_F(TamperTest, DeletedEntry) {
  auto recs = records_;
  recs.erase(recs.begin() + 1 + 2 * 3);  // entry 3's record
  Store(recs);
  ExpectDetected({"validly signed tree head of size 4 follows 3 entries"});
  // Deleting the entry together with its tree head: the next entry is out of place.
  recs = records_;
  recs.erase(recs.begin() + 1 + 2 * 3, recs.begin() + 1 + 2 * 3 + 2);
  Store(recs);
  ExpectDetected({"position 3 says seq 4", "offset " + std::to_string(EntryRecord(3).offset)});
}

TEST_F(TamperTest, TwoSwappedEntries) {
  auto recs = records_;
  std::swap(recs[1 + 2 * 2], recs[1 + 2 * 5]);
  Store(recs);
  ExpectDetected({"position 2 says seq 5", "offset " + std::to_string(EntryRecord(2).offset)});
  // With their seq fields rewritten to match their new places, the tree heads catch it.
  recs = records_;
  recs[1 + 2 * 2] = Reframed(5, "\"seq\":5", "\"seq\":2");
  recs[1 + 2 * 5] = Reframed(2, "\"seq\":2", "\"seq\":5");
  Store(recs);
  ExpectDetected({"one of entries 2..2"});
}

// Issue 17 section 4: every tree-head record matters. Before heads were chained, a log with
// any head deleted (the first, of size 0, included) or duplicated still verified, because
// each head was only checked against the entries before it.
TEST_F(TamperTest, DeletedTreeHeadIsDetectedWhereverItWas) {
  // records_: head(0) e0 head(1) e1 ... e7 head(8); head(k) is records_[2k].
  for (size_t k = 0; k < 8; ++k) {  // the last head's deletion leaves entry 7 unsigned (see ForgedAppendedEntry)
    SCOPED_TRACE("deleting the head of size " + std::to_string(k));
    auto recs = records_;
    recs.erase(recs.begin() + static_cast<long>(2 * k));
    Store(recs);
    // Found at the record that now stands where the head was expected: entry 0 for the
    // first head, else the next head, which no longer follows the right number of heads.
    const uint64_t at = k == 0 ? records_[0].offset : records_[2 * k + 2].offset - records_[2 * k].bytes.size();
    ExpectDetected({"offset " + std::to_string(at)});
    if (HasFailure()) return;
  }
}

TEST_F(TamperTest, DuplicatedTreeHeadIsDetectedWhereverItWas) {
  for (size_t k = 0; k <= 8; ++k) {
    SCOPED_TRACE("duplicating the head of size " + std::to_string(k));
    auto recs = records_;
    recs.insert(recs.begin() + static_cast<long>(2 * k + 1), records_[2 * k]);
    Store(recs);
    ExpectDetected({"offset " + std::to_string(records_[2 * k].offset + records_[2 * k].bytes.size())});
    if (HasFailure()) return;
  }
}

TEST_F(TamperTest, TreeHeadMovedAcrossAnEntryIsDetected) {
  // The head of size 3 and entry 3 trade places: e2 e3 head(3) head(4)...
  auto recs = records_;
  std::swap(recs[2 * 3], recs[2 * 3 + 1]);
  Store(recs);
  ExpectDetected({"offset " + std::to_string(records_[2 * 3].offset + records_[2 * 3 + 1].bytes.size())});
}

TEST_F(TamperTest, TruncationAtARecordBoundaryNeedsTheStateToBeSeen) {
  auto recs = records_;
  recs.resize(1 + 2 * 5);  // ends with the head of size 5: a valid, shorter log
  Store(recs);
  EXPECT_TRUE(VerifyLog(log_.dir.string(), log_.pub).ok()) << "a clean prefix verifies on its own";
  ExpectDetected({"rollback or truncation", "has 5 entries", "accepted 8 entries", "entries 5..7 are gone"},
                 /*with_state=*/true);
}

TEST_F(TamperTest, TruncationInsideARecord) {
  std::vector<uint8_t> bytes(original_.begin(), original_.end() - 30);
  WriteBytes(log_.log_path(), bytes);
  ExpectDetected({"offset " + std::to_string(records_.back().offset), "not a valid record"});
}

// Review finding: a log cut inside its 48-byte header was "malformed input" (exit 3) even
// for an auditor whose state says the log held 8 entries. With a state, every file too short
// to hold the accepted tree is truncation, whatever its length.
TEST_F(TamperTest, TruncationAtAnyLengthIsTamperingGivenAState) {
  const uint64_t min_bytes = MinLogBytesForTreeSize(8);
  ASSERT_EQ(min_bytes, kFileHeaderSize + 8 * (kRecordOverhead + 1) + kTreeHeadRecordSize);
  // Every length up to a little past the bound, then a sample.
  for (size_t len = 0; len < original_.size(); len += len < min_bytes + 64 ? 1 : 41) {
    SCOPED_TRACE("cut to " + std::to_string(len) + " bytes");
    WriteBytes(log_.log_path(), std::vector<uint8_t>(original_.begin(), original_.begin() + static_cast<long>(len)));
    if (len < min_bytes) {
      ExpectDetected({"rollback or truncation", "the file is " + std::to_string(len) + " bytes", "8 entries"},
                     /*with_state=*/true);
    } else {
      ExpectDetected({}, /*with_state=*/true);
    }
    if (HasFatalFailure() || HasNonfatalFailure()) break;
    if (len < kFileHeaderSize) {
      auto alone = VerifyLog(log_.dir.string(), log_.pub);
      EXPECT_EQ(alone.status().code(), Code::kInvalidInput) << "without a state a cut header is malformed input";
    }
  }
  // The state is checked first: one for another log is malformed input, not truncation.
  WriteBytes(log_.log_path(), std::vector<uint8_t>(original_.begin(), original_.begin() + 20));
  AuditorState other = state_;
  other.log_id[0] ^= 1;
  VerifyOptions opts;
  opts.trusted = &other;
  EXPECT_EQ(VerifyLog(log_.dir.string(), log_.pub, opts).status().code(), Code::kInvalidInput);
}

TEST_F(TamperTest, ForgedAppendedEntry) {
  Event e = SampleEvent(2);
  e.time = "2030-01-01T00:00:00Z";
  auto payload = SerializeEntry(e, 8);
  ASSERT_TRUE(payload.ok());
  auto recs = records_;
  recs.push_back(MakeRaw(RecordType::kEntry, *payload));
  Store(recs);
  ExpectDetected({"entries 8..8", "from offset " + std::to_string(original_.size()),
                  "not covered by any signed tree head"});

  // ... and with a tree head signed by some other key.
  std::vector<Hash> leaves;
  auto v = VerifyLog(log_.dir.string(), log_.pub, {});  // fails, but we only need the leaves: recompute
  for (size_t i = 0; i < 8; ++i) leaves.push_back(LeafHash(EntryRecord(i).payload));
  leaves.push_back(LeafHash(*payload));
  auto forger = LogSigningKey::Generate();
  auto last = ParseTreeHead(records_.back().payload);
  ASSERT_TRUE(last.ok());
  auto sth = SignChainedTreeHead(*forger, TreeHead{9, NowMs(), RootFromLeafHashes(leaves)}, 9,
                                 TreeHeadRecordHash(*last));
  ASSERT_TRUE(sth.ok());
  recs.push_back(MakeRaw(RecordType::kChainedTreeHead, EncodeTreeHead(*sth)));
  Store(recs);
  ExpectDetected({"offset " + std::to_string(original_.size() + recs[recs.size() - 2].bytes.size()),
                  "tree head of size 9", "signature does not verify"});
}

TEST_F(TamperTest, ConsistentForkAfterTheAuditorSawTheOriginal) {
  // The log key holder rewrites history: same key, entry 3 different, every tree head
  // validly signed, and longer than what the auditor saw.
  fs::remove_all(log_.dir);
  auto key = log_.Key();
  ASSERT_TRUE(LogWriter::Create(log_.dir.string(), key).ok());
  {
    auto w = LogWriter::Open(log_.dir.string(), log_.Key());
    ASSERT_TRUE(w.ok());
    for (uint64_t i = 0; i < 10; ++i) {
      Event e = SampleEvent(i == 3 ? 11 : i);  // entry 3: a lease renewal that never happened
      ASSERT_TRUE((*w)->Append(e).ok());
    }
  }
  auto alone = VerifyLog(log_.dir.string(), log_.pub);
  ASSERT_TRUE(alone.ok()) << "the fork is internally consistent: " << alone.status().ToString();
  ExpectDetected({"fork", "first 8 entries hash to", "size 8", "presented two histories"}, /*with_state=*/true);
}

TEST_F(TamperTest, RollbackToAnOlderCopy) {
  const std::vector<uint8_t> older = Reassemble(original_, {records_.begin(), records_.begin() + 1 + 2 * 6});
  AppendSamples(log_, 8, 2);
  auto v = VerifyLog(log_.dir.string(), log_.pub);
  ASSERT_TRUE(v.ok());
  state_.tree_head = v->latest;  // the auditor saw 10 entries
  WriteBytes(log_.log_path(), older);
  ExpectDetected({"rollback or truncation", "has 6 entries", "accepted 10 entries"}, /*with_state=*/true);
}

TEST_F(TamperTest, ReplacedTreeHeadSignature) {
  std::vector<uint8_t> bytes = original_;
  const RawRecord& head = records_[2 * 4];  // the head of size 4
  std::vector<uint8_t> payload = head.payload;
  payload[8 + 8 + 8 + 32 + 32 + 5] ^= 0x01;  // inside the chain signature
  auto recs = records_;
  recs[2 * 4] = MakeRaw(RecordType::kChainedTreeHead, payload);
  Store(recs);
  ExpectDetected({"offset " + std::to_string(head.offset), "tree head of size 4", "Ed25519 signature does not verify"});
  payload = head.payload;
  payload[kChainedTreeHeadPayloadSize - 3] ^= 0x01;  // inside the checkpoint signature
  recs[2 * 4] = MakeRaw(RecordType::kChainedTreeHead, payload);
  Store(recs);
  ExpectDetected({"offset " + std::to_string(head.offset), "checkpoint (signed note) signature does not verify"});
}

TEST_F(TamperTest, WrongPublicKey) {
  auto other = LogSigningKey::Generate();
  auto v = VerifyLog(log_.dir.string(), other->public_key());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kAuthFailed);
  EXPECT_NE(v.status().message().find("wrong key"), std::string::npos) << v.status().message();
}

TEST_F(TamperTest, UntouchedLogVerifiesWithState) {
  VerifyOptions opts;
  opts.trusted = &state_;
  auto v = VerifyLog(log_.dir.string(), log_.pub, opts);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(v->previously_accepted.has_value());
  EXPECT_EQ(v->previously_accepted->head.tree_size, 8u);
}

}  // namespace
}  // namespace enclave::audit
