// Known-answer tests of both AEAD suites, driven by data files:
//  - tests/data/crypto/*.txt: RFC 8439 and NIST/McGrew-Viega vectors (format in their headers);
//  - Project Wycheproof AeadTest JSON files from a directory named on the command line:
//      crypto_aead_kat_test --wycheproof-dir DIR
//    (CTest runs it on tests/data/crypto/wycheproof_sample/; point it at a checkout of
//    C2SP/wycheproof testvectors_v1/ to run the full upstream sets).
// The runner reports failures as values, so tests of the runner itself can show that a
// wrong vector is caught (a runner that checks nothing would fail them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "crypto_test_util.h"
#include "enclave/crypto/aead.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT
using nlohmann::json;

std::string g_wycheproof_dir;  // --wycheproof-dir, set by main()

enum class Expect { kValid, kInvalid, kAcceptable };

struct AeadCase {
  std::string name;  // file:line [block name] or file tcId N
  std::vector<uint8_t> key, nonce, aad, msg, ct, tag;
  Expect expect = Expect::kValid;
  std::vector<std::string> flags;
};

// What happened to one case. `failure` is empty when the implementation behaved as the
// vector demands.
struct CaseOutcome {
  std::string failure;
  bool opened = false;  // for acceptable cases: which way the implementation went
};

std::string Describe(const Status& s) { return s.ok() ? "OK" : s.ToString(); }

CaseOutcome RunCase(Suite suite, const AeadCase& c) {
  CaseOutcome o;
  auto fail = [&](std::string why) {
    o.failure = c.name + ": " + why;
    return o;
  };
  if (c.key.size() != kAeadKeyBytes) return fail("key is not 32 bytes");
  auto aead_or = Aead::Create(suite, Secret(c.key));
  if (!aead_or.ok()) return fail("Aead::Create: " + aead_or.status().ToString());
  Aead& aead = **aead_or;

  std::vector<uint8_t> sealed_in = c.ct;
  sealed_in.insert(sealed_in.end(), c.tag.begin(), c.tag.end());
  const size_t out_len = sealed_in.size() >= kAeadTagBytes ? sealed_in.size() - kAeadTagBytes : 0;

  if (c.expect == Expect::kValid) {
    if (c.ct.size() != c.msg.size()) return fail("vector: ciphertext and plaintext lengths differ");
    std::vector<uint8_t> sealed(c.msg.size() + kAeadTagBytes, 0xA5);
    Status s = aead.Seal(c.nonce, c.aad, c.msg, sealed);
    if (!s.ok()) return fail("Seal: " + s.ToString());
    if (sealed != sealed_in) {
      return fail("Seal gave " + HexEncode(sealed) + ", expected " + HexEncode(sealed_in));
    }
    std::vector<uint8_t> opened(out_len, 0xA5);
    s = aead.Open(c.nonce, c.aad, sealed_in, opened);
    if (!s.ok()) return fail("Open of a valid vector: " + s.ToString());
    if (opened != c.msg) return fail("Open gave " + HexEncode(opened) + ", expected " + HexEncode(c.msg));
    // Derived negative: the same message with its last tag bit flipped must not open.
    std::vector<uint8_t> bad = sealed_in;
    bad.back() ^= 0x01;
    std::fill(opened.begin(), opened.end(), 0xA5);
    s = aead.Open(c.nonce, c.aad, bad, opened);
    if (s.code() != Code::kAuthFailed) return fail("Open with a flipped tag bit: " + Describe(s));
    if (!AllZero(opened)) return fail("output not wiped after a failed Open");
    o.opened = true;
    return o;
  }

  std::vector<uint8_t> opened(out_len, 0xA5);
  Status s = aead.Open(c.nonce, c.aad, sealed_in, opened);
  if (c.expect == Expect::kInvalid) {
    if (s.code() != Code::kAuthFailed) return fail("invalid vector: Open gave " + Describe(s) + ", expected kAuthFailed");
    if (!AllZero(opened)) return fail("invalid vector: output not wiped after a failed Open");
    return o;
  }
  // Acceptable: either outcome, but an accepted message must decrypt to msg and a
  // rejected one must leave nothing behind.
  if (s.ok()) {
    o.opened = true;
    if (opened != c.msg) return fail("acceptable vector opened to the wrong plaintext");
  } else if (!AllZero(opened)) {
    return fail("acceptable vector rejected but output not wiped");
  }
  return o;
}

// ---------------------------------------------------------------------------------------
// The .txt format: '#' comments, '[name]' opens a block, then key/nonce/aad/plaintext/
// ciphertext/tag = hex and result = valid|invalid, each exactly once.

Result<std::vector<AeadCase>> ParseKatText(const std::string& path, std::string_view text) {
  std::vector<AeadCase> out;
  std::map<std::string, std::string> fields;
  std::string block;
  int block_line = 0;
  auto finish = [&]() -> Status {
    if (block.empty()) return OkStatus();
    static const char* kNeeded[] = {"key", "nonce", "aad", "plaintext", "ciphertext", "tag", "result"};
    AeadCase c;
    c.name = path + ":" + std::to_string(block_line) + " [" + block + "]";
    for (const char* f : kNeeded) {
      if (!fields.count(f)) return InvalidInput(c.name + ": missing field '" + f + "'");
    }
    if (fields.size() != std::size(kNeeded)) return InvalidInput(c.name + ": unknown field");
    struct {
      const char* name;
      std::vector<uint8_t>* dst;
    } hex[] = {{"key", &c.key}, {"nonce", &c.nonce}, {"aad", &c.aad},
               {"plaintext", &c.msg}, {"ciphertext", &c.ct}, {"tag", &c.tag}};
    for (auto& h : hex) {
      auto b = HexDecode(fields[h.name]);
      if (!b.ok()) return InvalidInput(c.name + ": field '" + h.name + "': " + b.status().message());
      *h.dst = std::move(b).value();
    }
    if (fields["result"] == "valid") {
      c.expect = Expect::kValid;
    } else if (fields["result"] == "invalid") {
      c.expect = Expect::kInvalid;
    } else {
      return InvalidInput(c.name + ": result must be valid or invalid");
    }
    out.push_back(std::move(c));
    fields.clear();
    block.clear();
    return OkStatus();
  };
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(line_no);
    if (line.front() == '[') {
      if (line.back() != ']') return InvalidInput(where + ": unterminated block name");
      RETURN_IF_ERROR(finish());
      block = line.substr(1, line.size() - 2);
      block_line = line_no;
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos) return InvalidInput(where + ": expected 'name = value'");
    if (block.empty()) return InvalidInput(where + ": field outside a [block]");
    std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    auto trim = [](std::string& s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t") + 1);
    };
    trim(name);
    trim(value);
    if (!fields.emplace(name, value).second) return InvalidInput(where + ": field '" + name + "' repeated");
  }
  RETURN_IF_ERROR(finish());
  return out;
}

Result<std::vector<AeadCase>> ParseKatFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseKatText(path, ss.str());
}

struct KatStats {
  int valid = 0, invalid = 0;
  std::vector<std::string> failures;
};

KatStats RunKatCases(Suite suite, const std::vector<AeadCase>& cases) {
  KatStats st;
  for (const AeadCase& c : cases) {
    (c.expect == Expect::kValid ? st.valid : st.invalid)++;
    CaseOutcome o = RunCase(suite, c);
    if (!o.failure.empty()) st.failures.push_back(o.failure);
  }
  return st;
}

void RunKatFile(Suite suite, const std::string& file) {
  const std::string path = std::string(ENCLAVE_TEST_DATA) + "/crypto/" + file;
  ASSERT_OK_AND_ASSIGN(std::vector<AeadCase> cases, ParseKatFile(path));
  KatStats st = RunKatCases(suite, cases);
  for (const auto& f : st.failures) ADD_FAILURE() << f;
  std::cout << "  " << file << ": " << st.valid << " valid and " << st.invalid << " invalid vectors\n";
  EXPECT_GT(st.valid, 0) << path << ": no valid vectors parsed";
  EXPECT_GT(st.invalid, 0) << path << ": no invalid vectors parsed";
}

TEST(AeadKat, ChaCha20Poly1305Rfc8439) { RunKatFile(Suite::kChaCha20Poly1305, "chacha20poly1305_rfc8439.txt"); }

TEST(AeadKat, Aes256GcmNist) { RunKatFile(Suite::kAes256Gcm, "aes256gcm_nist.txt"); }

// The vectors of one suite must not pass under the other (guards against a suite mix-up
// in Aead::Create, e.g. both ids mapped to one cipher).
TEST(AeadKat, VectorsFailUnderTheOtherSuite) {
  ASSERT_OK_AND_ASSIGN(auto chacha, ParseKatFile(std::string(ENCLAVE_TEST_DATA) + "/crypto/chacha20poly1305_rfc8439.txt"));
  ASSERT_OK_AND_ASSIGN(auto gcm, ParseKatFile(std::string(ENCLAVE_TEST_DATA) + "/crypto/aes256gcm_nist.txt"));
  int checked = 0;
  for (const auto* set : {&chacha, &gcm}) {
    const Suite other = set == &chacha ? Suite::kAes256Gcm : Suite::kChaCha20Poly1305;
    for (const AeadCase& c : *set) {
      if (c.expect != Expect::kValid) continue;
      EXPECT_FALSE(RunCase(other, c).failure.empty()) << c.name << " passed under " << SuiteName(other);
      ++checked;
    }
  }
  EXPECT_GT(checked, 2);
}

// Tests of the runner: it must catch a wrong answer, and the parser must reject damage.
TEST(AeadKatRunner, CatchesWrongVectors) {
  ASSERT_OK_AND_ASSIGN(auto cases, ParseKatFile(std::string(ENCLAVE_TEST_DATA) + "/crypto/aes256gcm_nist.txt"));
  ASSERT_FALSE(cases.empty());
  AeadCase c = cases[3];  // McGrew-Viega test case 16 (with AAD)
  ASSERT_EQ(c.expect, Expect::kValid);
  ASSERT_TRUE(RunCase(Suite::kAes256Gcm, c).failure.empty());
  AeadCase wrong_tag = c;
  wrong_tag.tag[0] ^= 0x80;
  EXPECT_FALSE(RunCase(Suite::kAes256Gcm, wrong_tag).failure.empty());
  AeadCase wrong_ct = c;
  wrong_ct.ct[5] ^= 0x01;
  EXPECT_FALSE(RunCase(Suite::kAes256Gcm, wrong_ct).failure.empty());
  AeadCase wrong_aad = c;
  wrong_aad.aad.push_back(0);
  EXPECT_FALSE(RunCase(Suite::kAes256Gcm, wrong_aad).failure.empty());
  // A valid vector declared invalid must be reported too.
  AeadCase declared_invalid = c;
  declared_invalid.expect = Expect::kInvalid;
  EXPECT_FALSE(RunCase(Suite::kAes256Gcm, declared_invalid).failure.empty());
  // ... while "acceptable" accepts either outcome.
  AeadCase acceptable = wrong_tag;
  acceptable.expect = Expect::kAcceptable;
  CaseOutcome o = RunCase(Suite::kAes256Gcm, acceptable);
  EXPECT_TRUE(o.failure.empty()) << o.failure;
  EXPECT_FALSE(o.opened);
}

TEST(AeadKatRunner, ParserRejectsDamagedFiles) {
  const std::string good =
      "# c\n[v]\nkey = 00\nnonce = 00\naad =\nplaintext =\nciphertext =\ntag = 00\nresult = valid\n";
  ASSERT_OK_AND_ASSIGN(auto cases, ParseKatText("t", good));
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_TRUE(cases[0].aad.empty());
  EXPECT_EQ(cases[0].key, std::vector<uint8_t>{0});
  std::string missing = good;
  missing.erase(missing.find("tag = 00\n"), 9);
  EXPECT_CODE(ParseKatText("t", missing), Code::kInvalidInput);
  EXPECT_CODE(ParseKatText("t", good + good.substr(4) + "key = 01\n"), Code::kInvalidInput);  // repeated field
  std::string bad_hex = good;
  bad_hex.replace(bad_hex.find("key = 00"), 8, "key = 0g");
  EXPECT_CODE(ParseKatText("t", bad_hex), Code::kInvalidInput);
  std::string bad_result = good;
  bad_result.replace(bad_result.find("valid"), 5, "maybe");
  EXPECT_CODE(ParseKatText("t", bad_result), Code::kInvalidInput);
  EXPECT_CODE(ParseKatText("t", "key = 00\n"), Code::kInvalidInput);  // outside a block
  ASSERT_OK_AND_ASSIGN(auto none, ParseKatText("t", "# only comments\n"));
  EXPECT_TRUE(none.empty());
}

// ---------------------------------------------------------------------------------------
// Wycheproof AeadTest JSON.

struct WycheproofStats {
  int files = 0, groups = 0, run = 0, valid = 0, invalid = 0, acceptable = 0, acceptable_opened = 0;
  int skipped_tests = 0;
  std::vector<std::string> skip_reasons;  // one line per skipped group or file
  std::vector<std::string> failures;
};

Result<std::vector<uint8_t>> HexField(const json& t, const char* field, const std::string& where) {
  auto it = t.find(field);
  if (it == t.end() || !it->is_string()) return InvalidInput(where + ": missing string '" + field + "'");
  auto b = HexDecode(it->get<std::string>());
  if (!b.ok()) return InvalidInput(where + ": field '" + field + "': " + b.status().message());
  return std::move(b).value();
}

// Runs one AeadTest document; a malformed document is an error, not a skip.
Status RunWycheproofDoc(const json& doc, const std::string& name, WycheproofStats* st) {
  if (!doc.is_object() || !doc.contains("algorithm") || !doc["algorithm"].is_string())
    return InvalidInput(name + ": no 'algorithm'");
  const std::string alg = doc["algorithm"].get<std::string>();
  Suite suite;
  if (alg == "AES-GCM") {
    suite = Suite::kAes256Gcm;
  } else if (alg == "CHACHA20-POLY1305") {
    suite = Suite::kChaCha20Poly1305;
  } else {
    st->skip_reasons.push_back(name + ": algorithm " + alg + " is not one of this project's suites");
    return OkStatus();
  }
  auto groups = doc.find("testGroups");
  if (groups == doc.end() || !groups->is_array()) return InvalidInput(name + ": no 'testGroups' array");
  ++st->files;
  int tests_in_file = 0;
  for (size_t gi = 0; gi < groups->size(); ++gi) {
    const json& g = (*groups)[gi];
    const std::string gwhere = name + " group " + std::to_string(gi);
    for (const char* f : {"keySize", "ivSize", "tagSize"}) {
      if (!g.contains(f) || !g[f].is_number_integer()) return InvalidInput(gwhere + ": missing integer '" + f + "'");
    }
    if (!g.contains("tests") || !g["tests"].is_array()) return InvalidInput(gwhere + ": no 'tests' array");
    const json& tests = g["tests"];
    tests_in_file += static_cast<int>(tests.size());
    ++st->groups;
    const int key_bits = g["keySize"].get<int>(), iv_bits = g["ivSize"].get<int>(), tag_bits = g["tagSize"].get<int>();
    std::string reason;
    if (key_bits != 256) reason += " keySize " + std::to_string(key_bits) + " != 256;";
    if (iv_bits != 96) reason += " ivSize " + std::to_string(iv_bits) + " != 96;";
    if (tag_bits != 128) reason += " tagSize " + std::to_string(tag_bits) + " != 128;";
    if (!reason.empty()) {
      st->skipped_tests += static_cast<int>(tests.size());
      st->skip_reasons.push_back(gwhere + " (" + alg + ", " + std::to_string(tests.size()) +
                                 " tests) skipped:" + reason);
      continue;
    }
    for (const json& t : tests) {
      if (!t.contains("tcId") || !t["tcId"].is_number_integer()) return InvalidInput(gwhere + ": test without tcId");
      AeadCase c;
      c.name = name + " tcId " + std::to_string(t["tcId"].get<int>());
      ASSIGN_OR_RETURN(c.key, HexField(t, "key", c.name));
      ASSIGN_OR_RETURN(c.nonce, HexField(t, "iv", c.name));
      ASSIGN_OR_RETURN(c.aad, HexField(t, "aad", c.name));
      ASSIGN_OR_RETURN(c.msg, HexField(t, "msg", c.name));
      ASSIGN_OR_RETURN(c.ct, HexField(t, "ct", c.name));
      ASSIGN_OR_RETURN(c.tag, HexField(t, "tag", c.name));
      if (t.contains("flags") && t["flags"].is_array()) {
        for (const json& f : t["flags"])
          if (f.is_string()) c.flags.push_back(f.get<std::string>());
      }
      const std::string result = t.value("result", "");
      if (result == "valid") {
        c.expect = Expect::kValid;
        ++st->valid;
      } else if (result == "invalid") {
        c.expect = Expect::kInvalid;
        ++st->invalid;
      } else if (result == "acceptable") {
        c.expect = Expect::kAcceptable;
        ++st->acceptable;
      } else {
        return InvalidInput(c.name + ": result '" + result + "' is not valid|invalid|acceptable");
      }
      // The group sizes are promises about every test in it.
      if (c.key.size() * 8 != static_cast<size_t>(key_bits) || c.nonce.size() * 8 != static_cast<size_t>(iv_bits))
        return InvalidInput(c.name + ": key or iv size disagrees with its group");
      CaseOutcome o = RunCase(suite, c);
      ++st->run;
      if (!o.failure.empty()) {
        std::string flags;
        for (const auto& f : c.flags) flags += " " + f;
        st->failures.push_back(o.failure + (flags.empty() ? "" : " [flags:" + flags + "]"));
      }
      if (c.expect == Expect::kAcceptable && o.opened) ++st->acceptable_opened;
    }
  }
  if (doc.contains("numberOfTests") && doc["numberOfTests"].is_number_integer() &&
      doc["numberOfTests"].get<int>() != tests_in_file) {
    return InvalidInput(name + ": numberOfTests says " + std::to_string(doc["numberOfTests"].get<int>()) +
                        " but the groups hold " + std::to_string(tests_in_file));
  }
  return OkStatus();
}

Status RunWycheproofDir(const std::string& dir, WycheproofStats* st) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    json doc = json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return InvalidInput(p.string() + ": not JSON");
    // Only AeadTest documents; other Wycheproof files in the same directory are skipped.
    const std::string schema = doc.is_object() ? doc.value("schema", "") : "";
    if (schema.find("aead_test_schema") == std::string::npos) {
      st->skip_reasons.push_back(p.filename().string() + ": schema '" + schema + "' is not an AEAD test");
      continue;
    }
    RETURN_IF_ERROR(RunWycheproofDoc(doc, p.filename().string(), st));
  }
  return OkStatus();
}

void PrintStats(const WycheproofStats& st) {
  std::cout << "  wycheproof: " << st.files << " files, " << st.groups << " groups, " << st.run << " tests run ("
            << st.valid << " valid, " << st.invalid << " invalid, " << st.acceptable << " acceptable of which "
            << st.acceptable_opened << " opened), " << st.skipped_tests << " tests skipped\n";
  for (const auto& r : st.skip_reasons) std::cout << "  skipped: " << r << "\n";
}

TEST(Wycheproof, FromCommandLineDir) {
  if (g_wycheproof_dir.empty()) GTEST_SKIP() << "no --wycheproof-dir given";
  WycheproofStats st;
  ASSERT_OK(RunWycheproofDir(g_wycheproof_dir, &st));
  PrintStats(st);
  for (const auto& f : st.failures) ADD_FAILURE() << f;
  EXPECT_GT(st.files, 0) << g_wycheproof_dir << ": no Wycheproof AEAD file of a supported algorithm";
  EXPECT_GT(st.run, 0) << g_wycheproof_dir << ": no test vector was run";
}

// The checked-in sample runs in every build, with or without the flag.
TEST(Wycheproof, SampleDir) {
  WycheproofStats st;
  ASSERT_OK(RunWycheproofDir(std::string(ENCLAVE_TEST_DATA) + "/crypto/wycheproof_sample", &st));
  PrintStats(st);
  for (const auto& f : st.failures) ADD_FAILURE() << f;
  EXPECT_EQ(st.files, 2);
  EXPECT_GT(st.valid, 0);
  EXPECT_GT(st.invalid, 0);
  EXPECT_EQ(st.skipped_tests, 0);
}

json MiniDoc(const std::string& alg, int key_bits, const std::string& result, const AeadCase& c) {
  json t = {{"tcId", 1},
            {"comment", ""},
            {"flags", json::array({"Test"})},
            {"key", HexEncode(c.key)},
            {"iv", HexEncode(c.nonce)},
            {"aad", HexEncode(c.aad)},
            {"msg", HexEncode(c.msg)},
            {"ct", HexEncode(c.ct)},
            {"tag", HexEncode(c.tag)},
            {"result", result}};
  return {{"algorithm", alg},
          {"schema", "aead_test_schema_v1.json"},
          {"numberOfTests", 1},
          {"testGroups", json::array({{{"keySize", key_bits},
                                       {"ivSize", 96},
                                       {"tagSize", 128},
                                       {"type", "AeadTest"},
                                       {"tests", json::array({t})}}})}};
}

TEST(WycheproofRunner, CountsSkipsAndCatchesFailures) {
  ASSERT_OK_AND_ASSIGN(auto cases, ParseKatFile(std::string(ENCLAVE_TEST_DATA) + "/crypto/chacha20poly1305_rfc8439.txt"));
  ASSERT_FALSE(cases.empty());
  const AeadCase& c = cases[0];
  {
    WycheproofStats st;
    ASSERT_OK(RunWycheproofDoc(MiniDoc("CHACHA20-POLY1305", 256, "valid", c), "ok", &st));
    EXPECT_EQ(st.run, 1);
    EXPECT_TRUE(st.failures.empty());
  }
  {
    WycheproofStats st;  // declared invalid but it is a valid message: must be a failure
    ASSERT_OK(RunWycheproofDoc(MiniDoc("CHACHA20-POLY1305", 256, "invalid", c), "bad", &st));
    EXPECT_EQ(st.failures.size(), 1u);
  }
  {
    WycheproofStats st;  // valid ChaCha vector run as AES-GCM: must be a failure
    ASSERT_OK(RunWycheproofDoc(MiniDoc("AES-GCM", 256, "valid", c), "wrong-alg", &st));
    EXPECT_EQ(st.failures.size(), 1u);
  }
  {
    WycheproofStats st;
    json doc = MiniDoc("CHACHA20-POLY1305", 256, "acceptable", c);
    ASSERT_OK(RunWycheproofDoc(doc, "acc", &st));
    EXPECT_EQ(st.acceptable, 1);
    EXPECT_EQ(st.acceptable_opened, 1);
    EXPECT_TRUE(st.failures.empty());
  }
  {
    WycheproofStats st;  // a 128-bit key group is skipped with its reason, and counted
    AeadCase short_key = c;
    short_key.key.resize(16);
    ASSERT_OK(RunWycheproofDoc(MiniDoc("AES-GCM", 128, "valid", short_key), "k128", &st));
    EXPECT_EQ(st.run, 0);
    EXPECT_EQ(st.skipped_tests, 1);
    ASSERT_EQ(st.skip_reasons.size(), 1u);
    EXPECT_NE(st.skip_reasons[0].find("keySize 128"), std::string::npos);
  }
  {
    WycheproofStats st;  // numberOfTests disagreeing with the groups means a broken parse
    json doc = MiniDoc("CHACHA20-POLY1305", 256, "valid", c);
    doc["numberOfTests"] = 2;
    EXPECT_CODE(RunWycheproofDoc(doc, "count", &st), Code::kInvalidInput);
  }
  {
    WycheproofStats st;  // a missing field is an error, not a silent skip
    json doc = MiniDoc("CHACHA20-POLY1305", 256, "valid", c);
    doc["testGroups"][0]["tests"][0].erase("tag");
    EXPECT_CODE(RunWycheproofDoc(doc, "missing", &st), Code::kInvalidInput);
  }
}

}  // namespace
}  // namespace enclave::crypto

// Own main: strips --wycheproof-dir DIR (or --wycheproof-dir=DIR) before GoogleTest sees
// the arguments.
int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--wycheproof-dir") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "--wycheproof-dir needs a directory\n");
        return 2;
      }
      enclave::crypto::g_wycheproof_dir = argv[++i];
      continue;
    }
    if (a.rfind("--wycheproof-dir=", 0) == 0) {
      enclave::crypto::g_wycheproof_dir = std::string(a.substr(17));
      continue;
    }
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  ::testing::InitGoogleTest(&n, args.data());
  return RUN_ALL_TESTS();
}
