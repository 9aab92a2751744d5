// The request head as the broker's server reads it (broker/internal/http_request.h),
// without sockets: Beast's parser with the header limits (431 at one byte or one field
// past them, wherever the bytes are split), Content-Length and Transfer-Encoding framing
// (duplicates, conflicts: 400 or 411), and the request rules (Admit: 404, 405, 411, 413,
// 415, the route table with its ids and body limits); the [server] keys of the limits.
#include <gtest/gtest.h>

#include "enclave/broker/config.h"
#include "enclave/broker/internal/http_request.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"

namespace enclave::broker::internal {
namespace {

namespace http = boost::beast::http;

struct Parsed {
  bool head_done = false;
  boost::beast::error_code ec;  // the parse error, if any
  RequestHead head;
  Refusal refusal;  // RefusalForParseError when ec is set
};

// Feeds `bytes` `step` bytes at a time, as the server does: everything not consumed is
// presented again with the next bytes.
Parsed Parse(const std::string& bytes, const HeadLimits& limits, size_t step) {
  RequestParser p(limits);
  Parsed out;
  std::string pending;
  for (size_t at = 0; at < bytes.size() && !p.is_header_done(); at += step) {
    pending += bytes.substr(at, step);
    boost::beast::error_code ec;
    const size_t used = p.Put(boost::asio::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == http::error::need_more) continue;
    if (ec) {
      out.ec = ec;
      out.refusal = RefusalForParseError(p, ec, limits);
      return out;
    }
  }
  out.head_done = p.is_header_done();
  out.head = p.head();
  return out;
}

std::string Get(const std::string& fields) { return "GET /v1/status HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n"; }
std::string Post(const std::string& path, const std::string& fields) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n";
}

TEST(HttpRequestHead, AHeadOfExactlyTheByteLimitPassesOneByteMoreIs431) {
  HeadLimits limits;
  limits.max_header_bytes = 1024;
  const std::string base = Get("X-Pad: \r\n");
  const std::string at_limit = Get("X-Pad: " + std::string(limits.max_header_bytes - base.size(), 'a') + "\r\n");
  ASSERT_EQ(at_limit.size(), limits.max_header_bytes);
  const std::string over = Get("X-Pad: " + std::string(limits.max_header_bytes - base.size() + 1, 'a') + "\r\n");
  for (size_t step : {size_t{1}, size_t{7}, size_t{100}, size_t{1} << 20}) {
    SCOPED_TRACE("step " + std::to_string(step));
    Parsed ok = Parse(at_limit, limits, step);
    EXPECT_TRUE(ok.head_done) << ok.ec.message();
    Parsed refused = Parse(over, limits, step);
    EXPECT_FALSE(refused.head_done);
    EXPECT_EQ(refused.refusal.status, 431);
    EXPECT_EQ(refused.refusal.code, "header_too_large");
    EXPECT_NE(refused.refusal.message.find("1024 bytes"), std::string::npos) << refused.refusal.message;
  }
  // A request line alone past the limit (a long target) is the same.
  Parsed long_target = Parse("GET /" + std::string(2000, 'a') + " HTTP/1.1\r\n\r\n", limits, 512);
  EXPECT_EQ(long_target.refusal.status, 431);
  // Bytes that never end a head: refused once the limit is reached, not buffered on.
  Parsed endless = Parse("GET /v1/status HTTP/1.1\r\nX: " + std::string(1 << 20, 'a'), limits, 4096);
  EXPECT_EQ(endless.refusal.status, 431);
}

TEST(HttpRequestHead, TheFieldCountLimitIs431AndCountsEveryField) {
  HeadLimits limits;
  limits.max_header_fields = 16;
  std::string fields;
  for (int i = 0; i < 15; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";  // + Host = 16
  Parsed ok = Parse(Get(fields), limits, 1 << 20);
  EXPECT_TRUE(ok.head_done);
  EXPECT_EQ(ok.head.fields, 16u);
  Parsed refused = Parse(Get(fields + "X-Host: again\r\n"), limits, 1 << 20);
  EXPECT_EQ(refused.refusal.status, 431);
  EXPECT_NE(refused.refusal.message.find("16 header fields"), std::string::npos) << refused.refusal.message;
  // Repeats of one field count as many.
  std::string same;
  for (int i = 0; i < 17; ++i) same += "Accept: a\r\n";
  EXPECT_EQ(Parse(Get(same), limits, 3).refusal.status, 431);
}

TEST(HttpRequestHead, ContentLengthAndTransferEncodingFraming) {
  const HeadLimits limits;
  auto parse = [&](const std::string& fields) { return Parse(Post("/v1/nonces", fields), limits, 1 << 20); };
  // The same length twice (or as a list) is one length; two different ones are refused.
  for (const char* same : {"Content-Length: 5\r\nContent-Length: 5\r\n", "Content-Length: 5, 5\r\n"}) {
    Parsed p = parse(same);
    ASSERT_TRUE(p.head_done) << same << ": " << p.ec.message();
    EXPECT_EQ(p.head.content_length, 5u);
  }
  Parsed differ = parse("Content-Length: 5\r\nContent-Length: 6\r\n");
  EXPECT_EQ(differ.refusal.status, 400);
  EXPECT_EQ(differ.refusal.code, "invalid_input");
  EXPECT_NE(differ.refusal.message.find("twice"), std::string::npos) << differ.refusal.message;
  for (const char* bad : {"Content-Length: 0x10\r\n", "Content-Length: -1\r\n", "Content-Length: \r\n",
                          "Content-Length: 1 2\r\n", "Content-Length: 99999999999999999999999\r\n"}) {
    Parsed p = parse(bad);
    EXPECT_EQ(p.refusal.status, 400) << bad;
    EXPECT_EQ(p.refusal.message, "Content-Length is not a decimal number") << bad;
  }
  // Transfer-Encoding with Content-Length, in either order: 411 (never framed by TE).
  for (const char* both : {"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                           "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
                           "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"}) {
    Parsed p = parse(both);
    EXPECT_EQ(p.refusal.status, 411) << both;
  }
  // Transfer-Encoding alone, chunked or not, parses; Admit refuses it (below).
  EXPECT_TRUE(parse("Transfer-Encoding: chunked\r\n").head.transfer_encoding);
  EXPECT_TRUE(parse("Transfer-Encoding: gzip\r\nContent-Length: 2\r\n").head.transfer_encoding);
  // Not HTTP: 400 bad_request.
  for (const std::string& junk : {std::string("\x16\x03\x01\x02\x00\r\n\r\n"), std::string("GET / HTTP/2.0\r\n\r\n"),
                                  std::string("GET  / HTTP/1.1\r\n\r\n"), std::string("GET / HTTP/1.1\r\nNo colon\r\n\r\n")}) {
    Parsed p = Parse(junk, limits, 1 << 20);
    EXPECT_EQ(p.refusal.status, 400) << junk;
    EXPECT_EQ(p.refusal.code, "bad_request") << junk;
  }
}

TEST(HttpRequestHead, TheFirstOfEachFieldTheServerReadsIsKept) {
  Parsed p = Parse(Post("/v1/admin/revocations", "content-type: application/json\r\nContent-Type: text/plain\r\n"
                                                 "Authorization: Bearer one\r\nAuthorization: Bearer two\r\n"
                                                 "Expect: 100-continue\r\nContent-Length: 2\r\n"),
                   HeadLimits{}, 9);
  ASSERT_TRUE(p.head_done);
  EXPECT_EQ(p.head.content_type, "application/json");
  EXPECT_EQ(p.head.authorization, "Bearer one");
  EXPECT_EQ(p.head.expect, "100-continue");
  EXPECT_EQ(p.head.method, "POST");
  EXPECT_EQ(p.head.target, "/v1/admin/revocations");
  EXPECT_TRUE(p.head.keep_alive);
  EXPECT_FALSE(Parse(Get("Connection: close\r\n"), HeadLimits{}, 1 << 20).head.keep_alive);
  EXPECT_FALSE(Parse("GET /v1/status HTTP/1.0\r\n\r\n", HeadLimits{}, 1 << 20).head.keep_alive);
}

RequestHead HeadOf(const std::string& method, const std::string& target, std::optional<uint64_t> length,
                   const std::string& type = "application/json") {
  RequestHead h;
  h.method = method;
  h.target = target;
  h.content_length_seen = length.has_value();
  h.content_length = length;
  h.content_type = type;
  return h;
}

TEST(HttpRequestRules, AdmitRefusesInTheDocumentedOrder) {
  constexpr size_t kMax = 64 << 10;
  auto status = [&](const RequestHead& h) {
    Admission a = Admit(h, kMax);
    return a.admitted ? 0 : a.refusal.status;
  };
  EXPECT_EQ(status(HeadOf("GET", "/v1/status", std::nullopt)), 0);
  EXPECT_EQ(status(HeadOf("GET", "/v1/status?probe=1", std::nullopt)), 0);
  EXPECT_EQ(status(HeadOf("GET", "/v1/status", 5)), 400);  // no body on GET
  EXPECT_EQ(status(HeadOf("HEAD", "/v1/status", std::nullopt)), 404);
  EXPECT_EQ(status(HeadOf("GET", "/v1/nonces", 5)), 404);
  EXPECT_EQ(status(HeadOf("PUT", "/v1/nonces", 5)), 405);
  EXPECT_EQ(status(HeadOf("DELETE", "/v1/nothing", std::nullopt)), 405);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nothing", 5)), 404);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", std::nullopt)), 411);
  RequestHead chunked = HeadOf("POST", "/v1/nonces", 5);
  chunked.transfer_encoding = true;
  EXPECT_EQ(status(chunked), 411);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", kMaxNonceRequestBody + 1)), 413);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", kMaxNonceRequestBody + 1, "text/plain")), 413);  // size before type
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", kMaxNonceRequestBody, "text/plain")), 415);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", kMaxNonceRequestBody, "")), 415);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", kMaxNonceRequestBody, "Application/JSON; charset=utf-8")), 0);
  EXPECT_EQ(status(HeadOf("POST", "/v1/nonces", 0)), 0);
  Admission big = Admit(HeadOf("POST", "/v1/attestations", kMax + 1), kMax);
  ASSERT_FALSE(big.admitted);
  EXPECT_EQ(big.refusal.code, "payload_too_large");
  EXPECT_NE(big.refusal.message.find(std::to_string(kMax) + "-byte limit"), std::string::npos) << big.refusal.message;
}

TEST(HttpRequestRules, TheRouteTableItsIdsAndBodyLimits) {
  constexpr size_t kMax = 16u << 20;
  const std::string hex(32, 'a');
  struct Case {
    std::string path;
    Endpoint endpoint;
    std::string id;
    size_t limit;
  };
  const std::vector<Case> routes = {
      {"/v1/enrolments", Endpoint::kEnrol, "", kMaxEnrolmentBody},
      {"/v1/enrolments/" + hex + "/activation", Endpoint::kActivate, hex, kMaxActivationBody},
      {"/v1/nonces", Endpoint::kNonce, "", kMaxNonceRequestBody},
      {"/v1/attestations", Endpoint::kAttest, "", kMax},
      {"/v1/releases", Endpoint::kRelease, "", kMax},
      {"/v1/leases/" + hex + "/renewals", Endpoint::kRenew, hex, kMax},
      {"/v1/jobs/job-1.a:b_c/rendezvous", Endpoint::kRendezvous, "job-1.a:b_c", kMaxRendezvousBody},
      {"/v1/jobs/" + std::string(128, 'j') + "/reports", Endpoint::kFinishJob, std::string(128, 'j'), kMaxJobReportBody},
      {"/v1/admin/revocations", Endpoint::kAdminRevoke, "", kMaxAdminBody},
      {"/v1/admin/policies", Endpoint::kAdminPolicies, "", 2 * kMaxAdminBody},
  };
  for (const Case& c : routes) {
    Endpoint e = Endpoint::kStatus;
    std::string id = "unset";
    EXPECT_EQ(BodyLimit(c.path, kMax, &e, &id), c.limit) << c.path;
    EXPECT_EQ(e, c.endpoint) << c.path;
    EXPECT_EQ(id, c.id) << c.path;
    // max_body_bytes caps every endpoint.
    EXPECT_EQ(BodyLimit(c.path, 4096, &e, &id), std::min<size_t>(c.limit, 4096)) << c.path;
  }
  for (const std::string& path : std::vector<std::string>{
           "/v1/enrolments/" + std::string(32, 'A') + "/activation", "/v1/enrolments/" + hex.substr(1) + "/activation",
        "/v1/leases/" + hex + "0/renewals", "/v1/leases//renewals", "/v1/leases/" + hex.substr(0, 31) + "%20/renewals",
        "/v1/jobs//rendezvous", "/v1/jobs/" + std::string(129, 'j') + "/rendezvous", "/v1/jobs/a/b/reports",
        "/v1/jobs/a b/reports", "/v1/nonces/", "/v1/status", "/V1/nonces", ""}) {
    Endpoint e;
    std::string id;
    EXPECT_EQ(BodyLimit(path, kMax, &e, &id), 0u) << path;
  }
}

TEST(HttpLimitsConfig, DefaultsAndRangesOfTheServerKeys) {
  const std::string rest = "certificate = \"c\"\nprivate_key = \"k\"\n[store]\npath = \"s\"\n"
                           "[keystore]\npath = \"k\"\n[audit]\ndir = \"a\"\nsigning_key = \"a.key\"\n"
                           "[attestation]\npolicy = \"p.json\"\n";
  auto defaults = ParseBrokerConfig("[server]\n" + rest, "/x");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  const ServerConfig& d = defaults->server;
  EXPECT_EQ(d.max_header_bytes, 8192u);
  EXPECT_EQ(d.max_header_fields, 64u);
  EXPECT_EQ(d.header_timeout_s, 10);
  EXPECT_EQ(d.body_timeout_s, 60);
  EXPECT_EQ(d.max_connections, 256u);
  EXPECT_EQ(d.max_connections_per_peer, 32u);
  auto set = ParseBrokerConfig("[server]\nmax_header_bytes = 1024\nmax_header_fields = 8\nheader_timeout_s = 1\n"
                               "body_timeout_s = 3600\nmax_connections = 1\nmax_connections_per_peer = 65536\n" + rest,
                               "/x");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->server.max_header_bytes, 1024u);
  EXPECT_EQ(set->server.max_header_fields, 8u);
  EXPECT_EQ(set->server.header_timeout_s, 1);
  EXPECT_EQ(set->server.body_timeout_s, 3600);
  EXPECT_EQ(set->server.max_connections, 1u);
  EXPECT_EQ(set->server.max_connections_per_peer, 65536u);
  for (const std::string& bad :
       {std::string("max_header_bytes = 1023"), std::string("max_header_bytes = 1048577"),
        std::string("max_header_fields = 7"), std::string("max_header_fields = 1025"),
        std::string("header_timeout_s = 0"), std::string("header_timeout_s = 301"), std::string("body_timeout_s = 0"),
        std::string("body_timeout_s = 3601"), std::string("max_connections = 0"),
        std::string("max_connections = 65537"), std::string("max_connections_per_peer = 0"),
        std::string("max_connections_per_peer = \"8\"")}) {
    auto r = ParseBrokerConfig("[server]\n" + bad + "\n" + rest, "/x");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("'server." + bad.substr(0, bad.find(' ')) + "'"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace enclave::broker::internal
