// broker.toml parsing: the shipped example parses, relative paths resolve against the
// file's folder, and every kind of mistake is refused with the key named. Also the strict
// parsers of the broker's own messages.
#include "enclave/broker/config.h"

#include <gtest/gtest.h>

#include "enclave/broker/messages.h"

namespace enclave::broker {
namespace {

const std::string kMinimal = R"(
[server]
certificate = "tls/c.pem"
private_key = "/abs/k.pem"
[store]
path = "s.db"
[keystore]
path = "k.keystore"
[audit]
dir = "audit"
signing_key = "audit/log.key"
[attestation]
policy = "../policies/p.json"
)";

TEST(BrokerConfig, TheShippedExampleParses) {
  auto c = LoadBrokerConfig(std::string(ENCLAVE_SOURCE_DIR) + "/examples/broker/broker.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.port, 8443);
  EXPECT_EQ(c->actor, "broker@tenant");
  EXPECT_EQ(c->attestation_policy, std::string(ENCLAVE_SOURCE_DIR) + "/policies/swtpm.json");
  ASSERT_EQ(c->policy_signers.size(), 1u);
  EXPECT_EQ(c->policy_signers[0], std::string(ENCLAVE_SOURCE_DIR) + "/examples/broker/officer.pub");
  EXPECT_TRUE(c->export_key.empty());
  EXPECT_EQ(c->admin_token_file, std::string(ENCLAVE_SOURCE_DIR) + "/examples/broker/admin.token");
  EXPECT_EQ(c->nonces_per_minute, 600);
  EXPECT_EQ(c->archive_max_bytes, int64_t{16} << 30);
  EXPECT_EQ(c->archive_min_free_bytes, int64_t{1} << 30);
}

TEST(BrokerConfig, ResourceLimitsAreRangeChecked) {
  const std::string base = "[server]\ncertificate = \"c\"\nprivate_key = \"k\"\n[store]\npath = \"s\"\n"
                           "[keystore]\npath = \"k\"\n";
  const std::string audit = "[audit]\ndir = \"a\"\nsigning_key = \"a.key\"\n";
  const std::string att = "[attestation]\npolicy = \"p.json\"\n";
  EXPECT_TRUE(ParseBrokerConfig(base + audit + att + "nonces_per_minute = 1\n", "/etc/b").ok());
  EXPECT_EQ(ParseBrokerConfig(base + audit + att + "nonces_per_minute = 0\n", "/etc/b").status().code(),
            Code::kInvalidInput);
  EXPECT_EQ(ParseBrokerConfig(base + audit + "archive_max_bytes = 0\n" + att, "/etc/b").status().code(),
            Code::kInvalidInput);
  EXPECT_EQ(ParseBrokerConfig(base + audit + "archive_min_free_bytes = -1\n" + att, "/etc/b").status().code(),
            Code::kInvalidInput);
  auto ok = ParseBrokerConfig(base + audit + "archive_max_bytes = 1000\narchive_min_free_bytes = 0\n" + att, "/etc/b");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->archive_max_bytes, 1000);
  EXPECT_EQ(ok->archive_min_free_bytes, 0);
}

TEST(BrokerConfig, ReleaseAndAdminTablesAreStrict) {
  const std::string base = "[server]\ncertificate = \"c\"\nprivate_key = \"k\"\n[store]\npath = \"s\"\n"
                           "[keystore]\npath = \"k\"\n[audit]\ndir = \"a\"\nsigning_key = \"a.key\"\n"
                           "[attestation]\npolicy = \"p.json\"\n";
  auto ok = ParseBrokerConfig(base + "[release]\npolicy_signers = [\"o1.pub\", \"/abs/o2.pub\"]\n", "/etc/b");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->policy_signers, (std::vector<std::string>{"/etc/b/o1.pub", "/abs/o2.pub"}));
  EXPECT_TRUE(ok->admin_token_file.empty());
  auto bad = ParseBrokerConfig(base + "[release]\npolicy_signers = \"o1.pub\"\n", "/etc/b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("release.policy_signers"), std::string::npos);
  bad = ParseBrokerConfig(base + "[admin]\ntoken = \"x\"\n", "/etc/b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("admin.token"), std::string::npos);
  bad = ParseBrokerConfig(base + "[admin]\n", "/etc/b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("admin.token_file"), std::string::npos);
}

TEST(BrokerConfig, DefaultsAndPathsRelativeToTheFile) {
  auto c = ParseBrokerConfig(kMinimal, "/etc/broker");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.listen, "127.0.0.1");
  EXPECT_EQ(c->server.port, 8443);
  EXPECT_EQ(c->server.threads, 16u);
  EXPECT_EQ(c->server.max_body_bytes, size_t{16} << 20);
  EXPECT_EQ(c->server.certificate, "/etc/broker/tls/c.pem");
  EXPECT_EQ(c->server.private_key, "/abs/k.pem");
  EXPECT_EQ(c->store_path, "/etc/broker/s.db");
  EXPECT_EQ(c->attestation_policy, "/etc/policies/p.json");
  EXPECT_EQ(c->nonce_ttl_s, 60);
  EXPECT_EQ(c->actor, "broker");
  EXPECT_FALSE(c->serve_tiles);  // the audit log's tiles are served only when asked
  auto served = ParseBrokerConfig(std::string(kMinimal).replace(kMinimal.find("[attestation]"), 13,
                                                                "serve_tiles = true\n[attestation]"),
                                  "/etc/broker");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_TRUE(served->serve_tiles);
}

TEST(BrokerConfig, MistakesAreRefusedNamingTheKey) {
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {kMinimal + "[extra]\n", "unknown key 'extra'"},
      {"[server]\ncertificate = \"c\"\nprivate_key = \"k\"\nbogus = 1\n", "unknown key 'server.bogus'"},
      {kMinimal.substr(0, kMinimal.find("[store]")), "missing table [store]"},
      {"store = 1\n" + std::string(kMinimal).replace(kMinimal.find("[store]"), 21, ""), "'store' must be a table"},
      {std::string(kMinimal).replace(kMinimal.find("path = \"s.db\""), 13, "path = 5"), "'store.path' must be a string"},
      {std::string(kMinimal).replace(kMinimal.find("path = \"s.db\""), 13, "path = \"\""), "'store.path' is empty"},
      {std::string(kMinimal).replace(kMinimal.find("[store]"), 7, "port = 70000\n[store]"), "'server.port' = 70000"},
      {std::string(kMinimal).replace(kMinimal.find("[store]"), 7, "threads = 0\n[store]"), "'server.threads' = 0"},
      {std::string(kMinimal).replace(kMinimal.find("[store]"), 7, "threads = \"4\"\n[store]"),
       "'server.threads' must be an integer"},
      {kMinimal + "nonce_ttl_s = 0\n", "'attestation.nonce_ttl_s' = 0"},
      {std::string(kMinimal).replace(kMinimal.find("signing_key"), 11, "signing_kex"), "unknown key 'audit.signing_kex'"},
      {std::string(kMinimal).replace(kMinimal.find("[attestation]"), 13, "serve_tiles = 1\n[attestation]"),
       "'audit.serve_tiles' must be true or false"},
      {"[server\n", "line 1"},
  };
  for (const auto& c : cases) {
    auto r = ParseBrokerConfig(c.text, "/x");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), Code::kInvalidInput);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << r.status().message();
  }
  auto missing = LoadBrokerConfig("/nonexistent/broker.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST(BrokerMessages, NonceRequestsAreStrict) {
  const std::string id = "0123456789abcdef0123456789abcdef", salt = std::string(32, '0') ;
  auto body = [&](const std::string& host, const std::string& s, const std::string& attest, const std::string& sig) {
    return "{\"host_id\":\"" + host + "\",\"salt\":\"" + s + "\",\"attest\":\"" + attest +
           "\",\"signature\":\"" + sig + "\"}";
  };
  auto ok = ParseNonceRequest(body(id, salt, "ff54", "0018"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->host_id, id);
  EXPECT_EQ(ok->signed_request.salt, std::vector<uint8_t>(16, 0));
  EXPECT_EQ(ok->signed_request.attest, (std::vector<uint8_t>{0xff, 0x54}));
  EXPECT_EQ(ok->signed_request.signature, (std::vector<uint8_t>{0x00, 0x18}));
  auto again = ParseNonceRequest(EncodeNonceRequest(*ok));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->host_id, ok->host_id);
  EXPECT_EQ(again->signed_request.attest, ok->signed_request.attest);
  // The unsigned form is told what it lacks.
  auto unsigned_request = ParseNonceRequest("{\"host_id\":\"" + id + "\"}");
  ASSERT_FALSE(unsigned_request.ok());
  EXPECT_NE(unsigned_request.status().message().find("signed with the host's AK"), std::string::npos);
  for (const std::string& bad :
       {std::string(R"({})"), body("0123456789ABCDEF0123456789ABCDEF", salt, "ff54", "0018"),
        body(id.substr(1), salt, "ff54", "0018"), body(id, salt.substr(2), "ff54", "0018"),
        body(id, salt + "00", "ff54", "0018"), body(id, std::string(32, 'A'), "ff54", "0018"),
        body(id, salt, "", "0018"), body(id, salt, "ff5", "0018"), body(id, salt, "FF54", "0018"),
        body(id, salt, "ff54", ""), body(id, salt, std::string(2050, 'a'), "0018"),
        std::string(R"({"host_id":null})"), body(id, salt, "ff54", "0018").insert(1, "\"more\":1,"),
        body(id, salt, "ff54", "0018") + " x", std::string(R"("0123456789abcdef")")}) {
    auto r = ParseNonceRequest(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << bad;
  }
}

TEST(BrokerMessages, ContentTypes) {
  EXPECT_TRUE(IsJsonContentType("application/json"));
  EXPECT_TRUE(IsJsonContentType("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(IsJsonContentType(" application/json ;x=y"));
  EXPECT_FALSE(IsJsonContentType(""));
  EXPECT_FALSE(IsJsonContentType("application/json-seq"));
  EXPECT_FALSE(IsJsonContentType("text/json"));
  EXPECT_FALSE(IsJsonContentType("application/jsonx; charset=utf-8"));
}

TEST(BrokerMessages, NonceAnswersRoundTrip) {
  NonceIssued n{std::vector<uint8_t>(32, 0xab), "0123456789abcdef0123456789abcdef", 10, 70, "sha256:0,1"};
  auto back = ParseNonceIssued(EncodeNonceIssued(n));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->nonce, n.nonce);
  EXPECT_EQ(back->expires_at, 70);
  EXPECT_EQ(back->pcr_selection, "sha256:0,1");
  n.nonce.resize(31);
  EXPECT_FALSE(ParseNonceIssued(EncodeNonceIssued(n)).ok());
}

}  // namespace
}  // namespace enclave::broker
