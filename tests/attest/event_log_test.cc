// Event-log parsing and replay: the synthetic logs in tests/data/attest/ against the PCRs
// make_eventlog.py computed with hashlib, and logs built here with a tiny independent
// replay, plus every structural rejection.
#include "enclave/attest/event_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attest_test_util.h"
#include "enclave/common/files.h"

namespace enclave::attest {
namespace {

using namespace attest_test;
using nlohmann::json;

json Expected() {
  auto b = ReadWholeFile(std::string(ENCLAVE_TEST_DATA) + "/attest/synthetic_expected.json", 1 << 20);
  if (!b.ok()) throw std::runtime_error(b.status().ToString());
  return json::parse(b->begin(), b->end());
}

Bytes Data(const std::string& name) {
  auto b = ReadWholeFile(std::string(ENCLAVE_TEST_DATA) + "/attest/" + name, 1 << 20);
  if (!b.ok()) throw std::runtime_error(b.status().ToString());
  return *b;
}

json ToJson(const PcrValues& v) {
  json j = json::object();
  for (const auto& [bank, pcrs] : v) {
    for (const auto& [i, val] : pcrs) j[AlgName(bank)][std::to_string(i)] = HexEncode(val);
  }
  return j;
}

TEST(EventLog, SyntheticCryptoAgileMatchesHashlibReplay) {
  json e = Expected()["crypto_agile"];
  auto log = ParseEventLog(Data("synthetic_crypto_agile.bin"));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->format, LogFormat::kCryptoAgile);
  EXPECT_EQ(log->banks, (std::vector<uint16_t>{alg::kSha1, alg::kSha256, alg::kSha384}));
  EXPECT_EQ(log->events.size(), e["events"].get<size_t>());
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->startup_locality, std::optional<uint8_t>(3));
  EXPECT_EQ(ToJson(r->pcrs), e["pcrs"]);
}

TEST(EventLog, SyntheticLegacyMatchesHashlibReplay) {
  json e = Expected()["legacy_sha1"];
  auto log = ParseEventLog(Data("synthetic_legacy_sha1.bin"));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->format, LogFormat::kLegacySha1);
  EXPECT_EQ(log->events.size(), e["events"].get<size_t>());
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ToJson(r->pcrs), e["pcrs"]);
}

std::vector<LogEvent> Boot() {
  return {{0, 8, StrBytes("crtm version")},          {0, 0x80000008, StrBytes("firmware blob")},
          {7, 0x80000001, StrBytes("SecureBoot=1")}, {7, 4, Bytes(4, 0)},
          {4, 0x80000003, StrBytes("bootx64.efi")},  {18, 5, StrBytes("drtm")}};
}

PcrValues QuotedFrom(const std::vector<LogEvent>& events, int locality = -1) {
  PcrValues q;
  for (auto& [i, v] : TinyReplay(EVP_sha256(), events, locality)) q[alg::kSha256][i] = v;
  q[alg::kSha256][5] = Bytes(32, 0);  // never extended: must be zero
  return q;
}

TEST(EventLog, ReplayAgreesWithTinyReplayAndQuote) {
  auto events = Boot();
  auto log = ParseEventLog(CryptoAgileLog(events));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok());
  for (auto& [i, v] : TinyReplay(EVP_sha1(), events)) EXPECT_EQ(r->pcrs[alg::kSha1][i], v) << i;
  for (auto& [i, v] : TinyReplay(EVP_sha256(), events)) EXPECT_EQ(r->pcrs[alg::kSha256][i], v) << i;
  EXPECT_EQ(r->pcrs[alg::kSha256][18][0], TinyReplay(EVP_sha256(), events)[18][0]);
  Appraisal a = CompareWithQuote(*log, *r, QuotedFrom(events), {});
  EXPECT_TRUE(a.ok()) << a.Summary();
}

TEST(EventLog, ChangedEventIsRejected) {
  auto events = Boot();
  PcrValues quoted = QuotedFrom(events);      // what the TPM holds
  events[2].data = StrBytes("SecureBoot=0");  // the log claims something else
  auto log = ParseEventLog(CryptoAgileLog(events));
  ASSERT_TRUE(log.ok());
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok());
  Appraisal a = CompareWithQuote(*log, *r, quoted, {});
  ASSERT_TRUE(a.Failed("eventlog.pcr.mismatch")) << a.Summary();
  EXPECT_EQ(a.failures()[0].where, "sha256 PCR 7");
  EXPECT_EQ(a.failures().size(), 1u);
}

TEST(EventLog, ChangedPcrAndUnloggedExtendAreRejected) {
  auto events = Boot();
  auto log = ParseEventLog(CryptoAgileLog(events));
  auto r = ReplayEventLog(*log);
  PcrValues quoted = QuotedFrom(events);
  quoted[alg::kSha256][0][5] ^= 1;
  EXPECT_TRUE(CompareWithQuote(*log, *r, quoted, {}).Failed("eventlog.pcr.mismatch"));
  quoted = QuotedFrom(events);
  quoted[alg::kSha256][5][0] = 1;  // PCR 5 extended without a log entry
  Appraisal a = CompareWithQuote(*log, *r, quoted, {});
  EXPECT_TRUE(a.Failed("eventlog.pcr.unlogged_extend")) << a.Summary();
  EXPECT_TRUE(CompareWithQuote(*log, *r, quoted, {5}).ok());  // unless the policy excludes it
  quoted = QuotedFrom(events);
  quoted[alg::kSha384][0] = Bytes(48, 0);
  EXPECT_TRUE(CompareWithQuote(*log, *r, quoted, {}).Failed("eventlog.bank.missing"));
  EXPECT_TRUE(CompareWithQuote(*log, *r, {}, {}).Failed("eventlog.pcrs.none_compared"));
}

TEST(EventLog, NoActionNeverExtendsAndStartupLocalitySetsPcr0) {
  std::vector<LogEvent> events = {{0, 3, Cat(StrBytes(std::string("StartupLocality", 16)), Bytes{3})},
                                  {2, 3, StrBytes("no action with a digest")},
                                  {0, 8, StrBytes("crtm")}};
  auto log = ParseEventLog(CryptoAgileLog(events));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->startup_locality, std::optional<uint8_t>(3));
  EXPECT_FALSE(r->pcrs[alg::kSha256].count(2));
  EXPECT_EQ(r->pcrs[alg::kSha256][0], TinyReplay(EVP_sha256(), events, 3)[0]);
  EXPECT_NE(r->pcrs[alg::kSha256][0], TinyReplay(EVP_sha256(), events)[0]);
  // Locality after PCR 0 was extended, twice, or not 0/3/4: errors.
  std::vector<LogEvent> late = {events[2], events[0]};
  EXPECT_FALSE(ReplayEventLog(*ParseEventLog(CryptoAgileLog(late))).ok());
  std::vector<LogEvent> twice = {events[0], events[0]};
  EXPECT_FALSE(ReplayEventLog(*ParseEventLog(CryptoAgileLog(twice))).ok());
  std::vector<LogEvent> bad = {{0, 3, Cat(StrBytes(std::string("StartupLocality", 16)), Bytes{2})}};
  EXPECT_FALSE(ReplayEventLog(*ParseEventLog(CryptoAgileLog(bad))).ok());
}

// Real firmware logs EV_NO_ACTION with any pcrIndex (Windows: 0xFFFFFFFF). The type decides
// before the index: such an event parses and is never extended; any other type above 23 fails.
TEST(EventLog, NoActionAtAnyPcrIndexParsesAndIsNeverExtended) {
  std::vector<LogEvent> events = {{0xFFFFFFFFu, 3, StrBytes("no PCR, as Windows logs it")},
                                  {24, 3, StrBytes("index 24")},
                                  {0, 8, StrBytes("crtm")}};
  for (const Bytes& bytes : {CryptoAgileLog(events), LegacyLog(events)}) {
    auto log = ParseEventLog(bytes);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    EXPECT_EQ(log->events[log->format == LogFormat::kCryptoAgile ? 1 : 0].pcr, 0xFFFFFFFFu);
    auto r = ReplayEventLog(*log);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const uint16_t bank = log->format == LogFormat::kCryptoAgile ? alg::kSha256 : alg::kSha1;
    EXPECT_EQ(r->pcrs[bank].size(), 1u);  // only PCR 0
    EXPECT_EQ(r->pcrs[bank][0], TinyReplay(bank == alg::kSha1 ? EVP_sha1() : EVP_sha256(), events)[0]);
  }
  // Any other type keeps the 0..23 rule, and the error names the index and the type.
  for (uint32_t type : {uint32_t{4}, uint32_t{0x80000001}}) {
    std::vector<LogEvent> bad = {{0xFFFFFFFFu, type, Bytes(4, 0)}};
    for (const Bytes& bytes : {CryptoAgileLog(bad), LegacyLog(bad)}) {
      auto log = ParseEventLog(bytes);
      ASSERT_FALSE(log.ok());
      EXPECT_NE(log.status().message().find("pcrIndex 4294967295 is above 23 (" + EventTypeName(type)),
                std::string::npos)
          << log.status().message();
    }
  }
  // StartupLocality belongs in PCR 0 (PFP 10.4.5.3), whatever the parser tolerates.
  std::vector<LogEvent> loc = {{0xFFFFFFFFu, 3, Cat(StrBytes(std::string("StartupLocality", 16)), Bytes{3})}};
  auto log = ParseEventLog(CryptoAgileLog(loc));
  ASSERT_TRUE(log.ok());
  auto r = ReplayEventLog(*log);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("StartupLocality event in PCR 4294967295"), std::string::npos);
}

// Other PFP EV_NO_ACTION events (SP800-155 reference-manifest events, a repeated Spec ID
// header) carry digests that must not be extended, in whatever PCR.
TEST(EventLog, OtherSpecIdStyleNoActionEventsAreNotExtended) {
  std::vector<LogEvent> events = {{0, 3, StrBytes(std::string("SP800-155 Event\0vendor", 22))},
                                  {0, 3, StrBytes(std::string("Spec ID Event03\0", 16))},
                                  {0, 8, StrBytes("crtm")},
                                  {7, 3, StrBytes(std::string("NvIndexInstance\0", 16))}};
  auto log = ParseEventLog(CryptoAgileLog(events));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pcrs[alg::kSha256][0], TinyReplay(EVP_sha256(), events)[0]);
  EXPECT_FALSE(r->pcrs[alg::kSha256].count(7));
}

TEST(EventLog, UnknownEventTypesStillExtend) {
  std::vector<LogEvent> events = {{14, 0x0BADCAFE, StrBytes("unknown")}};
  auto r = ReplayEventLog(*ParseEventLog(CryptoAgileLog(events)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pcrs[alg::kSha256][14], TinyReplay(EVP_sha256(), events)[14]);
  EXPECT_EQ(EventTypeName(0x0BADCAFE), "EV_UNKNOWN_0x0badcafe");
}

TEST(EventLog, StructuralRejections) {
  auto events = Boot();
  Bytes good = CryptoAgileLog(events);
  // Every truncation fails (except at an event boundary, which is a shorter valid log).
  size_t failures = 0;
  for (size_t n = 1; n < good.size(); ++n) failures += !ParseEventLog(ByteSpan(good.data(), n)).ok();
  EXPECT_GT(failures, good.size() - 10);
  EXPECT_FALSE(ParseEventLog(Bytes{}).ok());
  // Unknown algorithm id in the header.
  auto r = ParseEventLog(CryptoAgileLog(events, {{0x0004, 20}, {0x0012, 32}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("algorithmId"), std::string::npos) << r.status().message();
  // Known algorithm with the wrong digest size.
  r = ParseEventLog(CryptoAgileLog(events, {{0x000B, 20}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("digestSize"), std::string::npos);
  // Spec ID header size not exact: one extra byte in the event data.
  Bytes loose = good;
  uint32_t size = loose[28] | loose[29] << 8;
  loose[28] = uint8_t(size + 1);
  loose.insert(loose.begin() + 32 + size, 0);
  r = ParseEventLog(loose);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exact"), std::string::npos) << r.status().message();
  // An event whose digest count differs from the header.
  Bytes fewer = good;
  size_t first = 32 + size;
  fewer[first + 8] = 1;
  EXPECT_FALSE(ParseEventLog(fewer).ok());
  // An event with an algorithm not in the header.
  Bytes other = good;
  other[first + 12] = 0x0C;  // first digest's hashAlg low byte: sha1 -> sha384
  r = ParseEventLog(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("event 1"), std::string::npos) << r.status().message();
  // PCR index above 23.
  Bytes high = good;
  high[first] = 24;
  EXPECT_FALSE(ParseEventLog(high).ok());
  // Header not in PCR 0 / not EV_NO_ACTION.
  Bytes hdr = good;
  hdr[4] = 4;
  EXPECT_FALSE(ParseEventLog(hdr).ok());
}

TEST(EventLog, LegacyLogAgreesWithTinyReplay) {
  auto events = Boot();
  auto log = ParseEventLog(LegacyLog(events));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->format, LogFormat::kLegacySha1);
  auto r = ReplayEventLog(*log);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pcrs[alg::kSha1], TinyReplay(EVP_sha1(), events));
  EXPECT_FALSE(r->pcrs.count(alg::kSha256));
}

}  // namespace
}  // namespace enclave::attest
