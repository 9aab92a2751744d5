// The bundle formats (attest/bundle.h, docs/formats/evidence.md "Bundles"): round trips,
// and strict parsing: every malformed field is an InvalidInput naming the field.
#include "enclave/attest/bundle.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace enclave::attest {
namespace {

using nlohmann::json;

std::vector<uint8_t> Tpm2b(size_t n, uint8_t fill) {
  std::vector<uint8_t> b = {static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)};
  b.insert(b.end(), n, fill);
  return b;
}
std::vector<uint8_t> Name(uint8_t fill) {
  std::vector<uint8_t> n = {0x00, 0x0B};
  n.insert(n.end(), 32, fill);
  return n;
}

EvidenceBundle SampleEvidence() {
  EvidenceBundle b;
  b.nonce = {1, 2, 3};
  crypto::Digest256 d{};
  d.fill(0x42);
  b.bound_digest = d;
  b.ak_name = Name(0x11);
  b.pcr_selection = *PcrSelection::FromString("sha1:10+sha256:0,7");
  b.attest = {0xFF, 0x54, 0x43, 0x47, 0x80, 0x18};
  b.signature = {0x00, 0x18, 0x00, 0x0B};
  b.pcrs[0x0004][10] = std::vector<uint8_t>(20, 0xAA);
  b.pcrs[0x000B][0] = std::vector<uint8_t>(32, 0x00);
  b.pcrs[0x000B][7] = std::vector<uint8_t>(32, 0x07);
  b.event_log = {0, 1, 2, 3};
  b.ima_log = "10 " + std::string(40, '0') + " ima-ng sha256:00 /bin/\xff\n";  // not UTF-8: hex keeps it
  b.created_at = 1700000000;
  return b;
}

// Parses `doc` after `change`; expects InvalidInput whose message contains `field`.
template <typename Parse>
void ExpectRejected(const std::string& text, Parse parse, const std::string& field) {
  auto r = parse(text);
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message() << " (wanted " << field << ")";
}

TEST(BundleTest, EvidenceRoundTripsExactly) {
  EvidenceBundle b = SampleEvidence();
  std::string text = EncodeEvidenceBundle(b);
  auto back = ParseEvidenceBundle(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, b);
  EXPECT_EQ(EncodeEvidenceBundle(*back), text);
  b.bound_digest.reset();
  b.event_log.clear();
  b.ima_log.clear();
  auto none = ParseEvidenceBundle(EncodeEvidenceBundle(b));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, b);
  EvidenceParts parts = ToEvidenceParts(b);
  EXPECT_EQ(parts.quote.attest, b.attest);
  EXPECT_EQ(parts.quote.pcrs, b.pcrs);
}

TEST(BundleTest, EvidenceRejectsEachMalformedField) {
  const json good = json::parse(EncodeEvidenceBundle(SampleEvidence()));
  auto with = [&](const std::function<void(json&)>& change) {
    json j = good;
    change(j);
    return j.dump();
  };
  auto parse = [](const std::string& t) { return ParseEvidenceBundle(t); };
  ExpectRejected(with([](json& j) { j["extra"] = 1; }), parse, "'extra': unknown key");
  ExpectRejected(with([](json& j) { j.erase("nonce"); }), parse, "'nonce': missing");
  ExpectRejected(with([](json& j) { j["format"] = "enclave-attest evidence v2"; }), parse, "'format'");
  ExpectRejected(with([](json& j) { j["nonce"] = 5; }), parse, "'nonce': must be a string");
  ExpectRejected(with([](json& j) { j["nonce"] = "0g"; }), parse, "'nonce': bad hex");
  ExpectRejected(with([](json& j) { j["nonce"] = ""; }), parse, "'nonce': length 0");
  ExpectRejected(with([](json& j) { j["nonce"] = std::string(66, 'a'); }), parse, "'nonce': length 33");
  ExpectRejected(with([](json& j) { j["bound_digest"] = "00"; }), parse, "'bound_digest': length 1");
  ExpectRejected(with([](json& j) { j["ak_name"] = "000b00"; }), parse, "'ak_name'");
  ExpectRejected(with([](json& j) { j["pcr_selection"] = "sha256:7,0+sha1:10"; }), parse, "'pcr_selection'");
  ExpectRejected(with([](json& j) { j["pcr_selection"] = "sha256:"; }), parse, "'pcr_selection'");
  ExpectRejected(with([](json& j) { j["quote"]["extra"] = "00"; }), parse, "'quote.extra': unknown key");
  ExpectRejected(with([](json& j) { j["quote"].erase("signature"); }), parse, "'quote.signature': missing");
  ExpectRejected(with([](json& j) { j["pcrs"]["sha256"]["8"] = std::string(64, '0'); }), parse,
                 "'pcrs.sha256.8': PCR not in pcr_selection");
  ExpectRejected(with([](json& j) { j["pcrs"]["sha256"].erase("7"); }), parse, "'pcrs.sha256.7': selected PCR missing");
  ExpectRejected(with([](json& j) { j["pcrs"]["sha256"]["07"] = j["pcrs"]["sha256"]["7"]; }), parse, "'pcrs.sha256.07'");
  ExpectRejected(with([](json& j) { j["pcrs"]["sha256"]["7"] = std::string(40, '0'); }), parse,
                 "'pcrs.sha256.7': length 20");
  ExpectRejected(with([](json& j) { j["pcrs"].erase("sha1"); }), parse, "'pcrs.sha1': selected bank missing");
  ExpectRejected(with([](json& j) { j["pcrs"]["sha384"] = json::object(); }), parse, "'pcrs.sha384'");
  ExpectRejected(with([](json& j) { j["created_at"] = -1; }), parse, "'created_at': out of range");
  ExpectRejected(with([](json& j) { j["created_at"] = 1.5; }), parse, "'created_at': must be an integer");
  ExpectRejected(with([](json& j) { j["ima_log"] = "x"; }), parse, "'ima_log': bad hex");
  // Not JSON, not an object, trailing bytes, a duplicated key.
  ExpectRejected("", parse, "not valid JSON");
  ExpectRejected("[]", parse, "not a JSON object");
  ExpectRejected(good.dump() + "x", parse, "not valid JSON");
  std::string dup = good.dump();
  dup.insert(1, "\"nonce\":\"01\",");
  ExpectRejected(dup, parse, "key 'nonce' given twice");
}

TEST(BundleTest, EnrolmentChallengeResponseAndClockRoundTripAndAreStrict) {
  EnrolmentBundle e;
  e.ek_public = Tpm2b(10, 0xE0);
  e.ek_certificates = {{0x01C00002, {0x30, 0x82}}, {0x01C00016, {0x30, 0x81}}};
  e.ak_public = Tpm2b(8, 0xA0);
  e.ak_name = Name(0x22);
  e.created_at = 5;
  auto e2 = ParseEnrolmentBundle(EncodeEnrolmentBundle(e));
  ASSERT_TRUE(e2.ok()) << e2.status().ToString();
  EXPECT_EQ(*e2, e);
  const json ej = json::parse(EncodeEnrolmentBundle(e));
  auto pe = [](const std::string& t) { return ParseEnrolmentBundle(t); };
  json j = ej;
  j["ek_public"] = "00050000";  // TPM2B size 5, 2 bytes
  ExpectRejected(j.dump(), pe, "'ek_public': is not a TPM2B");
  j = ej;
  j["ek_certificates"][0]["nv_index"] = "0x1c00002";
  ExpectRejected(j.dump(), pe, "'ek_certificates[0].nv_index'");
  j = ej;
  j["ek_certificates"][1]["nv_index"] = "0x01c00002";
  ExpectRejected(j.dump(), pe, "'ek_certificates[1].nv_index': index given twice");
  j = ej;
  j["ek_certificates"][0]["x"] = 1;
  ExpectRejected(j.dump(), pe, "'ek_certificates[0].x': unknown key");

  ChallengeBundle c;
  c.ak_name = Name(0x33);
  c.credential_blob = Tpm2b(68, 1);
  c.encrypted_secret = Tpm2b(256, 2);
  c.secret_sha256.fill(3);
  c.enrolment_sha256.fill(4);
  c.created_at = 6;
  auto c2 = ParseChallengeBundle(EncodeChallengeBundle(c));
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_EQ(*c2, c);
  json cj = json::parse(EncodeChallengeBundle(c));
  cj["secret_sha256"] = "00";
  ExpectRejected(cj.dump(), [](const std::string& t) { return ParseChallengeBundle(t); }, "'secret_sha256': length 1");

  ActivationResponse r{Name(0x44), {9, 9, 9}};
  auto r2 = ParseActivationResponse(EncodeActivationResponse(r));
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(*r2, r);
  json rj = json::parse(EncodeActivationResponse(r));
  rj["secret"] = "";
  ExpectRejected(rj.dump(), [](const std::string& t) { return ParseActivationResponse(t); }, "'secret': length 0");

  ClockInfo k{123456, 7, 8, 1};
  auto k2 = ParseClockState(EncodeClockState(k));
  ASSERT_TRUE(k2.ok()) << k2.status().ToString();
  EXPECT_EQ(k2->clock, 123456u);
  EXPECT_EQ(k2->reset_count, 7u);
  EXPECT_EQ(k2->restart_count, 8u);
  json kj = json::parse(EncodeClockState(k));
  kj["safe"] = 2;
  ExpectRejected(kj.dump(), [](const std::string& t) { return ParseClockState(t); }, "'safe': out of range");
  kj = json::parse(EncodeClockState(k));
  kj["reset_count"] = 4294967296LL;
  ExpectRejected(kj.dump(), [](const std::string& t) { return ParseClockState(t); }, "'reset_count': out of range");
}

}  // namespace
}  // namespace enclave::attest
