// Helpers shared by the audit tests: scratch directories, a log with a key, sample events,
// and raw access to a log file's records for tampering.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "enclave/audit/event.h"
#include "enclave/audit/log_writer.h"
#include "enclave/audit/record.h"
#include "enclave/audit/tree_head.h"
#include "enclave/audit/verify.h"
#include "enclave/common/files.h"
#include "../scratch_cleanup.h"

namespace enclave::audit::testing {

namespace fs = std::filesystem;

inline fs::path ScratchDir(const std::string& name) {
  static int counter = 0;
  fs::path dir = fs::temp_directory_path() /
                 ("enclave-audit-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  enclave::testing::RemoveAtExit(dir);
  return dir;
}

inline std::string Digest(char c) { return std::string(64, c); }

// A realistic mix of every event type; `i` varies the ids.
inline Event SampleEvent(uint64_t i) {
  const std::string n = std::to_string(i);
  switch (i % 8) {
    case 0: return HostEnrolled("broker@tenant", "gpu-host-" + n, Digest('a'), Digest('b'));
    case 1:
      return AttestationVerdict("broker@tenant", "gpu-host-" + n, i % 16 != 9,
                                {{"quote.signature", true, "AK signature valid"},
                                 {"pcr.7", i % 16 != 9, i % 16 != 9 ? "secure boot state matches" : "PCR 7 differs"}},
                                Digest('c'), Digest('d'));
    case 2:
      return KeyReleased("broker@tenant", "dataset-" + n, "lease-" + n, "gpu-host-" + n, Digest('c'),
                         "2030-01-01T00:00:00Z");
    case 3: return LeaseRenewed("broker@tenant", "lease-" + n, "gpu-host-" + n, "2030-01-01T01:00:00Z");
    case 4: return Revoked("custodian@tenant", "lease", "lease-" + n, "host left the approved pool");
    case 5: return PolicyActivated("custodian@tenant", "policy-" + n, Digest('e'), "ed25519:" + Digest('f'));
    case 6: return JobStarted("trainer@gpu-host-" + n, Digest('c'), "gpu-host-" + n, {"dataset-" + n});
    default:
      return JobFinished("trainer@gpu-host-" + n, Digest('c'), "gpu-host-" + n, {Digest('1')}, Digest('2'),
                         {{"loss", 0.25}, {"accuracy", 0.91}}, Digest('3'), std::string(128, '4'));
  }
}

struct TestLog {
  fs::path dir;
  LogPublicKey pub;
  std::string key_path;
  std::string log_path() const { return (dir / kLogFileName).string(); }
  LogSigningKey Key() const {
    auto k = LogSigningKey::Load(key_path);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    return std::move(k).value();
  }
};

inline TestLog MakeLog(const std::string& name) {
  TestLog t;
  fs::path base = ScratchDir(name);
  t.dir = base / "log";
  t.key_path = (base / "log.key").string();
  auto key = LogSigningKey::Generate();
  EXPECT_TRUE(key.ok());
  EXPECT_TRUE(key->Save(t.key_path).ok());
  t.pub = key->public_key();
  Status s = LogWriter::Create(t.dir.string(), *key);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

// Appends `count` sample events one at a time (one batch and one tree head each).
inline void AppendSamples(const TestLog& log, uint64_t first, uint64_t count) {
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = first; i < first + count; ++i) {
    auto idx = (*w)->Append(SampleEvent(i));
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    ASSERT_EQ(*idx, i);
  }
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  auto b = ReadWholeFile(path, 1u << 30);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : std::vector<uint8_t>{};
}

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

struct RawRecord {
  RecordType type;
  uint64_t offset;
  std::vector<uint8_t> bytes;    // the whole record
  std::vector<uint8_t> payload;
};

inline std::vector<RawRecord> RawRecords(const std::vector<uint8_t>& file) {
  std::vector<RawRecord> out;
  size_t pos = kFileHeaderSize;
  while (pos < file.size()) {
    RecordParse r = ParseRecord(ByteSpan(file.data() + pos, file.size() - pos));
    EXPECT_EQ(r.outcome, ParseOutcome::kOk) << "at " << pos << ": " << r.error;
    if (r.outcome != ParseOutcome::kOk) break;
    out.push_back({r.record.type, pos, std::vector<uint8_t>(file.begin() + static_cast<long>(pos),
                                                            file.begin() + static_cast<long>(pos + r.record.size)),
                   std::vector<uint8_t>(r.record.payload.begin(), r.record.payload.end())});
    pos += r.record.size;
  }
  return out;
}

inline std::vector<uint8_t> Reassemble(const std::vector<uint8_t>& file, const std::vector<RawRecord>& records) {
  std::vector<uint8_t> out(file.begin(), file.begin() + kFileHeaderSize);
  for (const auto& r : records) out.insert(out.end(), r.bytes.begin(), r.bytes.end());
  return out;
}

inline RawRecord MakeRaw(RecordType type, const std::vector<uint8_t>& payload) {
  RawRecord r{type, 0, {}, payload};
  AppendRecord(type, payload, &r.bytes);
  return r;
}

// A log as the writers before chained tree heads left it: header version 1, a legacy head of
// size 0, then each of `count` sample entries followed by a legacy head.
inline TestLog MakeLegacyLog(const std::string& name, uint64_t count) {
  TestLog t;
  fs::path base = ScratchDir(name);
  t.dir = base / "log";
  t.key_path = (base / "log.key").string();
  auto key = LogSigningKey::Generate();
  EXPECT_TRUE(key.ok());
  EXPECT_TRUE(key->Save(t.key_path).ok());
  t.pub = key->public_key();
  fs::create_directories(t.dir);
  std::vector<uint8_t> bytes = EncodeFileHeader(t.pub.log_id, kLogVersionLegacy);
  std::vector<Hash> leaves;
  uint64_t ms = 1714554000000;
  for (uint64_t i = 0; i <= count; ++i) {
    if (i > 0) {
      Event e = SampleEvent(i - 1);
      e.time = FormatTimestampMs(ms);
      auto entry = SerializeEntry(e, i - 1);
      EXPECT_TRUE(entry.ok()) << entry.status().ToString();
      AppendRecord(RecordType::kEntry, *entry, &bytes);
      leaves.push_back(LeafHash(*entry));
    }
    auto sth = SignTreeHead(*key, TreeHead{i, ms++, RootFromLeafHashes(leaves)});
    EXPECT_TRUE(sth.ok());
    AppendRecord(RecordType::kTreeHead, EncodeTreeHead(*sth), &bytes);
  }
  WriteBytes(t.log_path(), bytes);
  return t;
}

}  // namespace enclave::audit::testing
