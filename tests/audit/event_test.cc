#include "enclave/audit/event.h"

#include <gtest/gtest.h>

#include "audit_test_util.h"

namespace enclave::audit {
namespace {

using testing::Digest;
using testing::SampleEvent;

std::string Text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

TEST(Event, EveryTypeRoundTrips) {
  for (uint64_t i = 0; i < 16; ++i) {
    Event e = SampleEvent(i);
    e.time = "2024-05-01T12:00:00.250Z";
    ASSERT_TRUE(ValidateEvent(e).ok()) << ValidateEvent(e).ToString();
    auto bytes = SerializeEntry(e, 100 + i);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto parsed = ParseEntry(*bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << " in " << Text(*bytes);
    EXPECT_EQ(parsed->seq, 100 + i);
    EXPECT_EQ(parsed->event.type, e.type);
    EXPECT_EQ(parsed->event.actor, e.actor);
    EXPECT_EQ(parsed->event.fields, e.fields);
    EXPECT_EQ(parsed->time_ms, 1714564800250);
    // Serialization is deterministic: parse + serialize gives the same bytes.
    auto again = SerializeEntry(parsed->event, parsed->seq);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *bytes);
  }
}

TEST(Event, KeyReleasedHasNoPlaceForKeyMaterial) {
  Event e = KeyReleased("broker", "ds-1", "lease-1", "host-1", Digest('c'), "");
  e.time = "2024-05-01T12:00:00Z";
  e.fields["dek"] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  Status s = ValidateEvent(e);
  EXPECT_EQ(s.code(), Code::kInvalidInput);
  EXPECT_NE(s.message().find("unknown field 'dek'"), std::string::npos) << s.message();
}

TEST(Event, RequiredFieldsAndKinds) {
  Event e = KeyReleased("broker", "ds-1", "lease-1", "host-1", Digest('c'), "");
  e.fields.erase("lease_id");
  EXPECT_NE(ValidateEvent(e).message().find("required field 'lease_id'"), std::string::npos);
  e = KeyReleased("broker", "ds-1", "lease-1", "host-1", "not-a-digest", "");
  EXPECT_NE(ValidateEvent(e).message().find("'job_digest'"), std::string::npos);
  e = KeyReleased("broker", "ds 1", "lease-1", "host-1", Digest('c'), "");
  EXPECT_NE(ValidateEvent(e).message().find("'dataset_id'"), std::string::npos);
  e = LeaseRenewed("broker", "lease-1", "host-1", "tomorrow");
  EXPECT_NE(ValidateEvent(e).message().find("'expires'"), std::string::npos);
  e = Revoked("broker", "planet", "x", "why");
  EXPECT_NE(ValidateEvent(e).message().find("'subject'"), std::string::npos);
}

TEST(Event, ControlCharactersRefused) {
  Event e = Revoked("broker", "host", "host-1", "line one\x1b[2Jcleared screen");
  Status s = ValidateEvent(e);
  EXPECT_EQ(s.code(), Code::kInvalidInput);
  EXPECT_NE(s.message().find("control character"), std::string::npos);
}

TEST(Event, VerdictMustAgreeWithChecks) {
  Event accepted_with_failure =
      AttestationVerdict("broker", "h", true, {{"pcr.7", false, "PCR 7 differs"}}, "", "");
  EXPECT_NE(ValidateEvent(accepted_with_failure).message().find("although a check failed"), std::string::npos);
  Event rejected_without_reason = AttestationVerdict("broker", "h", false, {{"pcr.7", true, "ok"}}, "", "");
  EXPECT_FALSE(ValidateEvent(rejected_without_reason).ok());
  Event good = AttestationVerdict("broker", "h", false, {{"pcr.7", false, "PCR 7 differs"}}, "", "");
  EXPECT_TRUE(ValidateEvent(good).ok());
}

TEST(Event, ParseEntryIsStrict) {
  const std::string good =
      R"({"actor":"a","reason":"r","seq":0,"subject":"host","subject_id":"h","time":"2024-01-01T00:00:00Z","type":"revoked","v":1})";
  EXPECT_TRUE(ParseEntry(AsBytes(good)).ok());
  struct Case {
    std::string text, expect;
  } cases[] = {
      {R"({"actor":"a","actor":"b","reason":"r","seq":0,"subject":"host","subject_id":"h","time":"2024-01-01T00:00:00Z","type":"revoked","v":1})",
       "duplicate JSON key 'actor'"},
      {R"({"actor":"a","reason":"r","seq":0,"subject":"host","subject_id":"h","time":"2024-01-01T00:00:00Z","type":"revoked","v":2})",
       "'v' must be 1"},
      {R"({"actor":"a","reason":"r","seq":-1,"subject":"host","subject_id":"h","time":"2024-01-01T00:00:00Z","type":"revoked","v":1})",
       "'seq'"},
      {R"({"actor":"a","reason":"r","seq":0,"subject":"host","subject_id":"h","type":"revoked","v":1})", "'time'"},
      {R"({"actor":"a","reason":"r","seq":0,"subject":"host","subject_id":"h","time":"2024-01-01 00:00:00","type":"revoked","v":1})",
       "RFC 3339"},
      {R"({"actor":"a","seq":0,"type":"launch.missiles","time":"2024-01-01T00:00:00Z","v":1})", "unknown event type"},
      {"[1,2,3]", "not a JSON object"},
      {"{\"a\":" + std::string(20, '[') + std::string(20, ']') + "}", "nested deeper"},
      {"{\"actor\":\"\xff\"}", "not valid JSON"},
      {"", "not valid JSON"},
  };
  for (const auto& c : cases) {
    auto r = ParseEntry(AsBytes(c.text));
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message() << " for " << c.text;
  }
}

TEST(Event, EventFromJsonRefusesLogOwnedFields) {
  auto j = nlohmann::json::parse(R"({"type":"revoked","actor":"a","subject":"host","subject_id":"h","reason":"r","seq":5})");
  auto e = EventFromJson(j);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'seq' is set by the log"), std::string::npos);
}

TEST(Event, Rfc3339) {
  EXPECT_EQ(*ParseRfc3339Utc("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*ParseRfc3339Utc("2000-02-29T23:59:59.5Z"), 951868799500);
  EXPECT_EQ(*ParseRfc3339Utc("2024-05-01T12:00:00.123456Z"), 1714564800123);
  EXPECT_FALSE(ParseRfc3339Utc("2023-02-29T00:00:00Z").ok());
  EXPECT_FALSE(ParseRfc3339Utc("2024-05-01T12:00:00+02:00").ok());
  EXPECT_FALSE(ParseRfc3339Utc("2024-05-01T12:00:00.Z").ok());
  EXPECT_FALSE(ParseRfc3339Utc("2024-13-01T12:00:00Z").ok());
  EXPECT_EQ(FormatTimestampMs(1714564800123), "2024-05-01T12:00:00.123Z");
  // Issue 17 section 1 limits: a fraction has 1 to 9 digits.
  EXPECT_TRUE(ParseRfc3339Utc("2024-05-01T12:00:00.123456789Z").ok());
  auto ten = ParseRfc3339Utc("2024-05-01T12:00:00.1234567890Z");
  ASSERT_FALSE(ten.ok());
  EXPECT_NE(ten.status().message().find("1 to 9 digits"), std::string::npos) << ten.status().message();
}

// Issue 17 section 1: the limits the format document states are the ones enforced, with
// a message naming the field.
TEST(Event, KeyIdReportKeyAndMetricsLimits) {
  auto released = [](const std::string& extra) {
    return R"({"v":1,"seq":0,"type":"key.released","time":"2024-05-01T12:00:00Z","actor":"b","dataset_id":"d",)"
           R"("lease_id":"l","host":"h","job_digest":")" +
           std::string(64, 'a') + "\"" + extra + "}";
  };
  auto message = [](const std::string& text) {
    auto e = ParseEntry(AsBytes(text));
    return e.ok() ? std::string("accepted") : e.status().message();
  };
  EXPECT_EQ(message(released(",\"key_id\":\"" + std::string(32, 'b') + "\"")), "accepted");
  EXPECT_NE(message(released(",\"key_id\":\"" + std::string(31, 'b') + "\"")).find("'key_id' must be a data key id"),
            std::string::npos);
  EXPECT_NE(message(released(",\"key_id\":\"" + std::string(32, 'B') + "\"")).find("32 lower-case hex"),
            std::string::npos);
  EXPECT_NE(message(released(",\"key_id\":\"dek-1\"")).find("key_id"), std::string::npos);
  EXPECT_EQ(message(released(",\"report_key\":\"" + std::string(64, 'c') + "\"")), "accepted");
  EXPECT_NE(message(released(",\"report_key\":\"" + std::string(66, 'c') + "\"")).find("'report_key' must be an Ed25519"),
            std::string::npos);

  auto finished = [](const std::string& metrics) {
    const std::string d = "\"" + std::string(64, 'd') + "\"";
    return R"({"v":1,"seq":0,"type":"job.finished","time":"2024-05-01T12:00:00Z","actor":"t","job_digest":)" + d +
           R"(,"host":"h","dataset_digests":[)" + d + "],\"model_digest\":" + d + ",\"report_digest\":" + d +
           ",\"report_signature\":\"" + std::string(128, '0') + "\",\"metrics\":" + metrics + "}";
  };
  EXPECT_EQ(message(finished(R"({"loss":0.5})")), "accepted");
  EXPECT_NE(message(finished("{}")).find("'metrics' must have 1..1024 members, has 0"), std::string::npos)
      << message(finished("{}"));
  std::string many = "{";
  for (int i = 0; i < 1025; ++i) many += (i ? ",\"m" : "\"m") + std::to_string(i) + "\":1";
  many += "}";
  EXPECT_NE(message(finished(many)).find("has 1025"), std::string::npos) << message(finished(many)).substr(0, 200);
}

}  // namespace
}  // namespace enclave::audit
