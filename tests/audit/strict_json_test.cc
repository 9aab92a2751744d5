// The strict entry parser (audit/src/strict_json.h), which verification runs on every
// entry instead of nlohmann::json: case by case, and differentially against nlohmann::json
// on mutated entries, so the two never disagree about what is JSON.
#include <gtest/gtest.h>

#include <random>

#include "audit_test_util.h"
#include "strict_json.h"

namespace enclave::audit {
namespace {

using internal::JsonDoc;
using namespace testing;

bool StrictOk(std::string_view text) {
  JsonDoc doc;
  return doc.Parse(text, "t").ok();
}

// nlohmann's verdict plus the rules the strict parser adds (no duplicate key, depth <= 8,
// no byte-order mark).
bool NlohmannStrictOk(const std::string& text) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) return false;
  bool duplicate = false;
  std::vector<std::vector<std::string>> keys;
  int depth = 0, max_depth = 0;
  nlohmann::json::parser_callback_t cb = [&](int d, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) max_depth = std::max(max_depth, d + 1);
    if (ev == E::object_start) keys.emplace_back();
    if (ev == E::object_end && !keys.empty()) keys.pop_back();
    if (ev == E::key && !keys.empty()) {
      const std::string k = parsed.get<std::string>();
      for (const auto& s : keys.back()) duplicate = duplicate || s == k;
      keys.back().push_back(k);
    }
    (void)depth;
    return true;
  };
  auto j = nlohmann::json::parse(text, cb, /*allow_exceptions=*/false);
  return !j.is_discarded() && !duplicate && max_depth <= internal::kMaxJsonDepth;
}

TEST(StrictJson, AcceptsWhatRfc8259Allows) {
  for (const char* t : {"{}", "[]", " {\"a\" : [1, -0, 0.5, 1e3, 1E-3, -2.5e+7, true, false, null]} \n",
                        R"({"s":"\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t"})", "{\"\xc3\xa9\":\"\xf0\x9f\x98\x80\"}",
                        R"({"a":{"a":{"a":{"a":{"a":{"a":{"a":[1]}}}}}}})", "0", "\"x\""}) {
    EXPECT_TRUE(StrictOk(t)) << t;
    EXPECT_TRUE(NlohmannStrictOk(t)) << t;
  }
  JsonDoc doc;
  ASSERT_TRUE(doc.Parse(R"({"s":"caf\u00e9 \ud83d\ude00","k":"plain"})", "t").ok());
  EXPECT_EQ(doc.node(doc.Find(0, "s")).text, "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(doc.node(doc.Find(0, "k")).text, "plain");
}

TEST(StrictJson, RefusesWhatRfc8259OrTheLogForbids) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"", "end of input"},
      {"{", "expected a member name"},
      {"{\"a\":1,}", "expected a member name"},
      {"[1,]", "invalid value"},
      {"{\"a\":01}", "expected ',' or '}'"},  // leading zero: "0", then a stray digit
      {"{\"a\":1.}", "digits must follow '.'"},
      {"{\"a\":1e}", "exponent"},
      {"{\"a\":NaN}", "invalid value"},
      {"{\"a\":tru}", "invalid literal"},
      {"{'a':1}", "member name"},
      {"{\"a\":1} x", "unexpected bytes"},
      {"\xEF\xBB\xBF{}", "invalid value"},  // no byte-order mark
      {"{\"a\":\"\x01\"}", "control character"},
      {"{\"a\":\"\xc0\xaf\"}", "invalid UTF-8"},          // overlong '/'
      {"{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8"},      // UTF-8-encoded surrogate
      {"{\"a\":\"\xf4\x90\x80\x80\"}", "invalid UTF-8"},  // > U+10FFFF
      {"{\"a\":\"\xe2\x82\"}", "invalid UTF-8"},          // cut short
      {R"({"a":"\ud800"})", "unpaired high surrogate"},
      {R"({"a":"\ud800\u0041"})", "unpaired high surrogate"},
      {R"({"a":"\udc00"})", "unpaired low surrogate"},
      {R"({"a":"\x"})", "invalid escape"},
      {R"({"a":"\u12G4"})", "invalid \\u escape"},
      {R"({"a":1,"a":2})", "duplicate JSON key 'a'"},
      {R"({"a":1,"\u0061":2})", "duplicate JSON key 'a'"},  // the same key, escaped
      {R"({"x":{"b":1,"b":1}})", "duplicate JSON key 'b'"},
      {"[[[[[[[[[1]]]]]]]]]", "nested deeper than 8"},
  };
  for (const auto& c : cases) {
    JsonDoc doc;
    Status s = doc.Parse(c.text, "t");
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message() << " for " << c.text;
    EXPECT_FALSE(NlohmannStrictOk(c.text)) << "the reference accepts " << c.text;
  }
}

// Objects of more than 32 members have their names checked once they close (sorted): a
// repeated name is found wherever its two places are, escaped or not, and nested.
TEST(StrictJson, LargeObjectsFindEveryDuplicateName) {
  auto object = [](int members, int dup_first, int dup_second, bool escaped) {
    std::string text = "{";
    for (int i = 0; i < members; ++i) {
      const std::string name = i == dup_second ? "k" + std::to_string(dup_first) : "k" + std::to_string(i);
      text += (i ? "," : "") + ("\"" + (escaped && i == dup_second ? "\\u006b" + name.substr(1) : name) + "\":" +
                                std::to_string(i));
    }
    return text + "}";
  };
  for (int members : {32, 33, 40, 1000}) {
    JsonDoc doc;
    EXPECT_TRUE(doc.Parse(object(members, -1, -1, false), "t").ok()) << members;
    for (auto [first, second] : {std::pair{0, 1}, {0, 31}, {0, 32}, {5, 32}, {31, 32}, {32, 33}, {0, members - 1},
                                 {members - 2, members - 1}}) {
      if (second >= members || first >= second) continue;
      for (bool escaped : {false, true}) {
        const std::string text = object(members, first, second, escaped);
        Status st = doc.Parse(text, "t");
        ASSERT_FALSE(st.ok()) << members << " members, k" << first << " at " << first << " and " << second;
        EXPECT_NE(st.message().find("duplicate JSON key 'k" + std::to_string(first) + "'"), std::string::npos)
            << st.message();
        EXPECT_FALSE(NlohmannStrictOk(text));
        Status nested = doc.Parse("{\"outer\":[" + text + "]}", "t");
        EXPECT_FALSE(nested.ok()) << members << " members, nested";
      }
    }
  }
}

TEST(StrictJson, NumbersHaveNlohmannsMeaning) {
  uint64_t u = 0;
  EXPECT_TRUE(internal::JsonUnsigned("0", &u));
  EXPECT_TRUE(internal::JsonUnsigned("18446744073709551615", &u));
  EXPECT_EQ(u, UINT64_MAX);
  EXPECT_FALSE(internal::JsonUnsigned("18446744073709551616", &u));  // nlohmann: a float
  for (const char* t : {"-0", "-1", "1.0", "1e2"}) {
    EXPECT_FALSE(internal::JsonUnsigned(t, &u)) << t;
    EXPECT_FALSE(nlohmann::json::parse(t).is_number_unsigned()) << t;
  }
  double d = 0;
  EXPECT_TRUE(internal::JsonFiniteNumber("-2.5e-3", &d));
  EXPECT_DOUBLE_EQ(d, -2.5e-3);
  EXPECT_FALSE(internal::JsonFiniteNumber("1e400", &d));
  // Entries: v must be the unsigned integer 1, seq an unsigned integer.
  const std::string tail =
      R"(,"subject":"host","subject_id":"h","reason":"r","time":"2024-01-01T00:00:00Z","type":"revoked","actor":"a"})";
  EXPECT_TRUE(CheckEntry(AsBytes(R"({"v":1,"seq":0)" + tail)).ok());
  EXPECT_FALSE(CheckEntry(AsBytes(R"({"v":1.0,"seq":0)" + tail)).ok());
  EXPECT_FALSE(CheckEntry(AsBytes(R"({"v":1,"seq":-0)" + tail)).ok());
  EXPECT_FALSE(CheckEntry(AsBytes(R"({"v":1,"seq":0e0)" + tail)).ok());
}

// Every sample entry, mutated at random (byte flips, insertions and deletions of JSON
// punctuation, UTF-8 fragments and escapes): the strict parser accepts exactly what
// nlohmann::json accepts under the log's extra rules, and CheckEntry agrees with ParseEntry.
TEST(StrictJson, AgreesWithNlohmannOnMutatedEntries) {
  std::mt19937_64 rng(20240501);
  const std::vector<std::string> pieces = {"{", "}", "[", "]", ",", ":", "\"", "\\", "\\u", "\\ud83d", "\\ude00",
                                           "0",  "-", ".", "e", "1", " ", "\xc3", "\xa9", "\xed\xa0\x80", "\xff",
                                           "true", "null", "\"seq\":1", "\"v\":1", "\\\"", "\x01"};
  int accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    Event e = SampleEvent(static_cast<uint64_t>(round % 16));
    e.time = "2024-05-01T12:00:00Z";
    auto bytes = SerializeEntry(e, static_cast<uint64_t>(round));
    ASSERT_TRUE(bytes.ok());
    std::string text(bytes->begin(), bytes->end());
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations && !text.empty(); ++m) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = static_cast<char>(text[at] ^ (1u << (rng() % 8))); break;
        case 1: text.insert(at, pieces[rng() % pieces.size()]); break;
        default: text.erase(at, 1 + rng() % 4); break;
      }
    }
    const bool strict = StrictOk(text);
    ASSERT_EQ(strict, NlohmannStrictOk(text)) << "disagreement on: " << text;
    auto checked = CheckEntry(AsBytes(text));
    auto parsed = ParseEntry(AsBytes(text));
    ASSERT_EQ(checked.ok(), parsed.ok()) << text << "\n" << checked.status().ToString() << "\n"
                                         << parsed.status().ToString();
    if (parsed.ok()) {
      EXPECT_EQ(checked->seq, parsed->seq);
      EXPECT_EQ(checked->time_ms, parsed->time_ms);
      // A valid entry must serialize again: the writer and the readers share one schema.
      EXPECT_TRUE(SerializeEntry(parsed->event, parsed->seq).ok()) << text;
    }
    (strict ? accepted : refused)++;
  }
  // The mutations must exercise both sides.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace enclave::audit
