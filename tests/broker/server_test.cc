// `enclave-broker serve` as a real process on loopback, with real TLS: TLS 1.3 only, the
// JSON API's refusals (malformed JSON, unknown fields, wrong content types, oversized or
// unsized bodies, unknown endpoints), and hostile connections (silent, slow, truncated
// TLS handshakes, plaintext on the TLS port) that get a 4xx or a closed connection while
// the broker keeps serving; failing starts with a documented exit code. The same refusals
// for the key-release, renewal and admin endpoints, the admin API's bearer token, and a
// release for a nonce the broker never issued (404, nothing logged).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <random>

#include <gtest/gtest.h>

#include "broker_process.h"
#include "enclave/attest/bundle.h"
#include "enclave/audit/verify.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"
#include "enclave/common/bytes.h"

namespace enclave::broker {
namespace {

using testing::BrokerProcess;
using testing::BrokerSettings;

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Seconds until the peer closes `fd` (reads and discards), or -1 after 20 s.
double SecondsUntilClosed(int fd) {
  const auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    if (n < 0) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A TLS client on raw OpenSSL, for what httplib's client will not send.
class RawTls {
 public:
  RawTls(int port, int max_version) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);  // the handshake is what is tested here
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx_, max_version);
    fd_ = Connect(port);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    connected_ = SSL_connect(ssl_) == 1;
  }
  ~RawTls() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  int version() const { return SSL_version(ssl_); }
  void Send(const std::string& bytes) { SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())); }
  // Everything until the peer closes or 20 s pass.
  std::string ReadAll() {
    std::string out;
    char buf[4096];
    for (;;) {
      int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.find("\r\n\r\n") != std::string::npos) {
        // One response is enough: headers and Content-Length body.
        auto p = out.find("Content-Length: ");
        if (p != std::string::npos) {
          size_t len = std::stoul(out.substr(p + 16));
          if (out.size() >= out.find("\r\n\r\n") + 4 + len) break;
        }
      }
    }
    return out;
  }
  int fd() const { return fd_; }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
};

// One raw request on its own TLS connection; the answer's status line and body (empty when
// the broker closed without answering).
std::string RawAnswer(int port, const std::string& request) {
  RawTls t(port, 0);
  if (!t.connected()) return "<no TLS connection>";
  t.Send(request);
  return t.ReadAll();
}

// A POST head (no body) to `path` with `headers` (each ending in \r\n).
std::string Head(const std::string& path, const std::string& headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n";
}

// The four endpoints of key release and administration, with their body limits when the
// broker's max_body_bytes is `max_body` (docs/protocol.md, "Request rules").
constexpr char kLeasePath[] = "/v1/leases/0123456789abcdef0123456789abcdef/renewals";
std::vector<std::pair<std::string, size_t>> ReleaseEndpoints(size_t max_body) {
  return {{"/v1/releases", max_body},
          {kLeasePath, max_body},
          {"/v1/admin/revocations", kMaxAdminBody},
          {"/v1/admin/policies", 2 * kMaxAdminBody}};
}

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  std::vector<uint8_t> b(bytes);
  for (auto& x : b) x = static_cast<uint8_t>(rd());
  return HexEncode(b);
}

// A well-formed evidence bundle (attest/bundle.h) for `nonce_hex`: it parses, but no TPM
// made it and no broker issued its nonce.
std::string EvidenceJson(const std::string& nonce_hex) {
  const std::string zero(64, '0');
  return R"({"format": "enclave-attest evidence v1", "nonce": ")" + nonce_hex +
         R"(", "bound_digest": null, "ak_name": "000b)" + std::string(64, 'b') +
         R"(", "pcr_selection": "sha256:0,1", "pcrs": {"sha256": {"0": ")" + zero + R"(", "1": ")" + zero +
         R"("}}, "quote": {"attest": "ff544347", "signature": "0018000b"}, "event_log": "", "ima_log": "",
         "created_at": 1764460000})";
}

// A release request that passes every field rule, with `evidence`.
std::string ReleaseJson(const std::string& evidence) {
  ReleaseRequest r;
  r.policy_id = "medical";
  r.job.job_id = "job-server-test";
  r.job.job_digest.fill(0x5a);
  r.job.kind = "train";
  r.job.requester = "alice@hospital.example";
  r.job.datasets = {"wdbc"};
  r.job.epochs = 5;
  r.job.world_size = 2;
  r.job.clear_metrics = {"loss"};
  r.workload.executable = {"/usr/local/bin/enclave-train", crypto::Sha256(AsBytes(std::string("trainer")))};
  r.job.workload_digest = WorkloadDigest(r.workload);
  r.rank = 1;
  r.keys = {{"wdbc", {}}};
  r.recipient.fill(0x11);
  r.report_key.fill(0x22);
  r.evidence = evidence;
  return EncodeReleaseRequest(r);
}

// `body` (a JSON object) with one more key.
std::string WithField(const std::string& body, const std::string& key) {
  auto j = nlohmann::json::parse(body);
  j[key] = 1;
  return j.dump();
}

// Entries in the broker's audit log (verified: chain, signatures, schema).
size_t AuditEntryCount(const BrokerProcess& b) {
  size_t n = 0;
  audit::VerifyOptions o;
  o.on_entry = [&](uint64_t, uint64_t, ByteSpan, const audit::Entry&) {
    ++n;
    return OkStatus();
  };
  auto v = audit::VerifyLog(b.Path("audit"), b.audit_key(), o);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return n;
}

// A fresh folder (`name` then the pid) for a test's own broker, with a self-signed EK
// root that `s` names; "" when the root could not be made.
std::string OwnBrokerDir(const std::string& name, BrokerSettings* s) {
  const std::string dir = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (!testing::MakeSelfSignedCa(dir, "ek-root")) return "";
  s->ek_root_files = {dir + "/ek-root.pem"};
  return dir;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() / ("broker-server-" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    ASSERT_TRUE(testing::MakeSelfSignedCa(*dir_, "ek-root"));
    BrokerSettings s;
    s.ek_root_files = {*dir_ + "/ek-root.pem"};
    s.threads = 4;
    s.max_queued = 4;
    s.read_timeout_s = 2;
    s.max_body_bytes = 64 << 10;
    auto b = BrokerProcess::Start(*dir_ + "/broker", s);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    broker_ = std::move(b).value().release();
  }
  static void TearDownTestSuite() {
    delete broker_;
    broker_ = nullptr;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(broker_, nullptr); }
  void TearDown() override {
    ASSERT_TRUE(broker_->Alive()) << "the broker died: " << broker_->log();
  }
  static std::string ErrorCode(const BrokerProcess::Answer& a) {
    auto j = a.json();
    if (!j.is_object() || !j.contains("error")) return "<no error object: " + a.body + ">";
    return j["error"]["code"].get<std::string>();
  }

  static std::string* dir_;
  static BrokerProcess* broker_;
};
std::string* ServerTest::dir_ = nullptr;
BrokerProcess* ServerTest::broker_ = nullptr;

TEST_F(ServerTest, SpeaksTls13OnlyWithTheConfiguredCertificate) {
  auto status = broker_->Get("/v1/status");
  EXPECT_EQ(status.status, 200);
  EXPECT_EQ(status.json()["status"], "ok");
  RawTls tls13(broker_->port(), 0);
  ASSERT_TRUE(tls13.connected());
  EXPECT_EQ(tls13.version(), TLS1_3_VERSION);
  RawTls tls12(broker_->port(), TLS1_2_VERSION);
  EXPECT_FALSE(tls12.connected()) << "the broker accepted TLS 1.2";
  // A client that does not trust the broker's certificate gets no answer.
  httplib::SSLClient strict("127.0.0.1", broker_->port());
  strict.set_ca_cert_path((*dir_ + "/ek-root.pem").c_str());
  strict.enable_server_certificate_verification(true);
  EXPECT_FALSE(strict.Get("/v1/status"));
}

// A nonce request of the signed form (its quote and signature are not a TPM's: only the
// shape is right) for a host no broker here enrolled.
const std::string kSignedShape =
    "{\"host_id\": \"0123456789abcdef0123456789abcdef\", \"salt\": \"" + std::string(32, '5') +
    "\", \"attest\": \"ff544347\", \"signature\": \"0018\"}";

TEST_F(ServerTest, MalformedJsonAndUnknownFieldsAre400) {
  for (const std::string& body : {std::string("{"), std::string("[]"), std::string("{\"host_id\": 5}"),
                                  std::string("{\"host_id\": \"00\"}"),
                                  std::string("{\"host_id\": \"0123456789abcdef0123456789abcdef\", \"x\": 1}"),
                                  std::string("{\"host_id\": \"a\", \"host_id\": \"b\"}"), std::string("\xff\xfe"),
                                  std::string()}) {
    auto a = broker_->Post("/v1/nonces", body);
    EXPECT_EQ(a.status, 400) << body << " -> " << a.body;
    EXPECT_EQ(ErrorCode(a), "invalid_input") << body;
  }
  for (const char* path : {"/v1/enrolments", "/v1/attestations",
                                  "/v1/enrolments/0123456789abcdef0123456789abcdef/activation"}) {
    auto a = broker_->Post(path, "{\"format\": \"nope\"}");
    EXPECT_EQ(a.status, 400) << path << " -> " << a.body;
    EXPECT_EQ(ErrorCode(a), "invalid_input") << path;
  }
  auto deep = broker_->Post("/v1/attestations", std::string(1 << 14, '[') + std::string(1 << 14, ']'));
  EXPECT_EQ(deep.status, 400) << deep.body;
  EXPECT_NE(deep.body.find("nested deeper"), std::string::npos) << deep.body;
  // The unsigned form of before issue 16 §4: refused, saying what it lacks.
  auto unsigned_request = broker_->Post("/v1/nonces", "{\"host_id\": \"0123456789abcdef0123456789abcdef\"}");
  EXPECT_EQ(unsigned_request.status, 400) << unsigned_request.body;
  EXPECT_NE(unsigned_request.body.find("signed with the host's AK"), std::string::npos) << unsigned_request.body;
  // Well-formed, for a host that is not enrolled.
  auto unknown = broker_->Post("/v1/nonces", kSignedShape);
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(ErrorCode(unknown), "not_found");
}

// Bundles nested deeper than 32 levels are refused by a linear scan before any tree is
// built (16 MiB of '[' used to cost seconds and hundreds of MiB per request); brackets
// inside strings do not count.
TEST(BundleParsing, DeepNestingIsRefusedBeforeATreeIsBuilt) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  for (auto status : {attest::ParseEvidenceBundle(deep).status(), attest::ParseEnrolmentBundle(deep).status()}) {
    EXPECT_EQ(status.code(), Code::kInvalidInput);
    EXPECT_NE(status.message().find("nested deeper than 32 levels"), std::string::npos) << status.ToString();
  }
  const std::string at_limit = std::string(32, '[') + std::string(32, ']');
  EXPECT_EQ(attest::ParseEvidenceBundle(at_limit).status().message().find("nested"), std::string::npos);
  const std::string in_string = "{\"format\": \"" + std::string(100, '[') + "\\\"" + std::string(100, '{') + "\"}";
  const Status s = attest::ParseEvidenceBundle(in_string).status();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("nested"), std::string::npos) << s.ToString();
}

TEST_F(ServerTest, WrongContentTypesOversizedAndUnsizedBodiesAndUnknownEndpointsAre4xx) {
  const std::string ok_body = kSignedShape;
  for (const char* type : {"text/plain", "application/jsonx", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x"}) {
    auto a = broker_->Post("/v1/nonces", ok_body, type);
    EXPECT_EQ(a.status, 415) << type;
    EXPECT_EQ(ErrorCode(a), "unsupported_media_type");
  }
  EXPECT_EQ(broker_->Post("/v1/nonces", ok_body, "Application/JSON; charset=utf-8").status, 404);

  auto big = broker_->Post("/v1/nonces", "{\"host_id\": \"" + std::string(8000, 'a') + "\"}");
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(ErrorCode(big), "payload_too_large");
  // The broker answers 413 from the headers and closes; a client still sending its body may
  // see the connection reset before it reads the answer. Either way: refused, not served.
  auto huge = broker_->Post("/v1/attestations", std::string(100 << 10, ' '));
  EXPECT_TRUE(huge.status == 413 || huge.status == -1) << huge.status;

  EXPECT_EQ(broker_->Post("/v1/nothing", ok_body).status, 404);
  EXPECT_EQ(broker_->Get("/v1/nonces").status, 404);
  EXPECT_EQ(broker_->Get("/").status, 404);
  EXPECT_EQ(broker_->Post("/v1/enrolments/XYZ/activation", ok_body).status, 404);
  // Uppercase hex is not a challenge id (docs/protocol.md): no such path, as for leases.
  EXPECT_EQ(broker_->Post("/v1/enrolments/0123456789ABCDEF0123456789ABCDEF/activation", ok_body).status, 404);
  auto put = broker_->Client()->Put("/v1/nonces", ok_body, "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_NE(put->body.find("method_not_allowed"), std::string::npos) << put->body;

  // Chunked bodies and a claimed length far past the limit, on a raw TLS connection.
  {
    RawTls t(broker_->port(), 0);
    ASSERT_TRUE(t.connected());
    t.Send("POST /v1/nonces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
           "\r\n5\r\n{\"a\":\r\n0\r\n\r\n");
    std::string r = t.ReadAll();
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 411") << r;
  }
  {
    RawTls t(broker_->port(), 0);
    ASSERT_TRUE(t.connected());
    t.Send("POST /v1/attestations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: 99999999999\r\n\r\n{");
    std::string r = t.ReadAll();
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 413") << r;
  }
}

TEST_F(ServerTest, SilentSlowAndTruncatedClientsAreCutOffAndOthersAreStillServed) {
  std::vector<int> silent;
  // More silent connections than workers plus queue: each holds a worker until the read
  // timeout (2 s) closes it.
  for (int i = 0; i < 12; ++i) silent.push_back(Connect(broker_->port()));
  // Truncated TLS handshakes: a ClientHello record header that promises more than comes.
  for (int i = 0; i < 5; ++i) {
    int fd = Connect(broker_->port());
    const char hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    ASSERT_EQ(::send(fd, hello, sizeof(hello) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello) - 1));
    ::close(fd);
  }
  // Plaintext HTTP on the TLS port.
  int plain = Connect(broker_->port());
  const std::string get = "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(plain, get.data(), get.size(), MSG_NOSIGNAL), 0);
  // A TLS client that stops in the middle of its headers.
  RawTls slow(broker_->port(), 0);
  ASSERT_TRUE(slow.connected());
  slow.Send("POST /v1/nonces HTTP/1.1\r\nHost: x\r\nContent-");

  const auto t0 = std::chrono::steady_clock::now();
  auto ok = broker_->Get("/v1/status");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ok.status, 200) << "a good client was not served behind silent ones";
  EXPECT_LT(waited, 15.0);

  for (int fd : silent) {
    double s = SecondsUntilClosed(fd);
    EXPECT_GE(s, 0) << "a silent connection was left open";
    ::close(fd);
  }
  EXPECT_GE(SecondsUntilClosed(plain), 0) << "plaintext on the TLS port was not closed";
  ::close(plain);
  EXPECT_GE(SecondsUntilClosed(slow.fd()), 0) << "a client stalled mid-headers was not closed";
  EXPECT_EQ(broker_->Get("/v1/status").status, 200);
}

// ---- key release, renewal and administration ------------------------------------------

TEST_F(ServerTest, ReleaseAndRenewalBodiesThatDoNotParseAre400NamingTheField) {
  const std::string evidence = EvidenceJson(RandomHex(kNonceBytes));
  for (const std::string& path : {std::string("/v1/releases"), std::string(kLeasePath)}) {
    for (const std::string& body : {std::string("{"), std::string("[]"), std::string("\xff\xfe"), std::string(),
                                    std::string("{\"evidence\": {}, \"evidence\": {}}"),
                                    std::string("{\"evidence\": \"not an object\"}")}) {
      auto a = broker_->Post(path, body);
      EXPECT_EQ(a.status, 400) << path << " " << body << " -> " << a.body;
      EXPECT_EQ(ErrorCode(a), "invalid_input") << path << " " << body;
    }
  }
  // Every field in place but one more: the answer names it.
  const std::string release = ReleaseJson(evidence);
  ASSERT_TRUE(ParseReleaseRequest(release).ok());
  auto a = broker_->Post("/v1/releases", WithField(release, "extra_release_field"));
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(ErrorCode(a), "invalid_input");
  EXPECT_NE(a.body.find("extra_release_field"), std::string::npos) << a.body;
  // Nested: an unknown key in the job object.
  auto j = nlohmann::json::parse(release);
  j["job"]["gpu_count"] = 8;
  a = broker_->Post("/v1/releases", j.dump());
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_NE(a.body.find("gpu_count"), std::string::npos) << a.body;
  // A rank outside the job.
  j = nlohmann::json::parse(release);
  j["rank"] = 2;
  a = broker_->Post("/v1/releases", j.dump());
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_NE(a.body.find("rank"), std::string::npos) << a.body;

  const std::string renewal = EncodeRenewalRequest({evidence});
  a = broker_->Post(kLeasePath, WithField(renewal, "extra_renewal_field"));
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(ErrorCode(a), "invalid_input");
  EXPECT_NE(a.body.find("extra_renewal_field"), std::string::npos) << a.body;
}

TEST_F(ServerTest, ReleaseAndAdminEndpointsRefuseWrongContentTypesAndLengths) {
  const int port = broker_->port();
  for (const auto& [path, limit] : ReleaseEndpoints(64 << 10)) {
    for (const char* type : {"text/plain", "application/jsonx", "application/x-www-form-urlencoded"}) {
      auto a = broker_->Post(path, "{}", type);
      EXPECT_EQ(a.status, 415) << path << " " << type;
      EXPECT_EQ(ErrorCode(a), "unsupported_media_type") << path;
    }
    // No Content-Type at all.
    std::string r = RawAnswer(port, Head(path, "Content-Length: 2\r\n") + "{}");
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 415") << path << ": " << r;
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nContent-Length: 0x10\r\n"));
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 400") << path << ": " << r;
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nContent-Length: -1\r\n"));
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 400") << path << ": " << r;
  }
}

TEST_F(ServerTest, ReleaseAndAdminEndpointsRefuseOversizedUnsizedAndChunkedBodies) {
  const int port = broker_->port();
  for (const auto& [path, limit] : ReleaseEndpoints(64 << 10)) {
    std::string r;
    // A claimed length one past the endpoint's limit, refused from the headers alone.
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nContent-Length: " + std::to_string(limit + 1) +
                                       "\r\n") +
                            "{");
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 413") << path << ": " << r;
    EXPECT_NE(r.find("payload_too_large"), std::string::npos) << r;
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nContent-Length: 99999999999\r\n"));
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 413") << path << ": " << r;
    // No Content-Length; chunked (with or without a length as well).
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\n"));
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 411") << path << ": " << r;
    EXPECT_NE(r.find("length_required"), std::string::npos) << r;
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n") +
                            "2\r\n{}\r\n0\r\n\r\n");
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 411") << path << ": " << r;
    r = RawAnswer(port, Head(path, "Content-Type: application/json\r\nContent-Length: 2\r\n"
                                   "Transfer-Encoding: chunked\r\n") +
                            "2\r\n{}\r\n0\r\n\r\n");
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 411") << path << ": " << r;
  }
  // A body that really is over the limit of the release endpoint (64 KiB here).
  auto huge = broker_->Post("/v1/releases", std::string((64 << 10) + 1, ' '));
  EXPECT_TRUE(huge.status == 413 || huge.status == -1) << huge.status;
}

TEST_F(ServerTest, ABadLeaseIdInTheRenewalPathIs404) {
  const std::string body = EncodeRenewalRequest({EvidenceJson(RandomHex(kNonceBytes))});
  for (const std::string& id :
       {std::string("0123456789ABCDEF0123456789ABCDEF"), std::string("0123456789abcdef0123456789abcde"),
        std::string("0123456789abcdef0123456789abcdef0"), std::string("0123456789abcdef0123456789abcdeg"),
        std::string("0123456789abcdef%2023456789abcdef"), std::string("XYZ"), std::string(),
        std::string("../../v1/releases/0123456789abcd")}) {
    auto a = broker_->Post("/v1/leases/" + id + "/renewals", body);
    EXPECT_EQ(a.status, 404) << id << " -> " << a.body;
    EXPECT_EQ(ErrorCode(a), "not_found") << id;
  }
  EXPECT_EQ(broker_->Post("/v1/leases/0123456789abcdef0123456789abcdef", body).status, 404);
  EXPECT_EQ(broker_->Post("/v1/leases/0123456789abcdef0123456789abcdef/renewals/x", body).status, 404);
  EXPECT_EQ(broker_->Post("/v1/leases", body).status, 404);
  EXPECT_EQ(broker_->Get(kLeasePath).status, 404);
}

TEST_F(ServerTest, AdminEndpointsAre404WithoutAnAdminTable) {
  const std::string revoke = EncodeRevocationRequest({"job", "job-x", "test"});
  const std::string activate = EncodePolicyActivation({"{}", "x"});
  for (const auto& [path, body] : {std::pair{std::string("/v1/admin/revocations"), revoke},
                                   std::pair{std::string("/v1/admin/policies"), activate}}) {
    auto a = broker_->Post(path, body);
    EXPECT_EQ(a.status, 404) << path << " -> " << a.body;
    EXPECT_EQ(ErrorCode(a), "not_found");
    // Any token: there is no admin API to authenticate to.
    auto r = broker_->Client()->Post(path.c_str(), {{"Authorization", "Bearer " + std::string(40, 'a')}}, body,
                                     "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << r->body;
    EXPECT_FALSE(r->has_header("WWW-Authenticate"));
  }
}

TEST_F(ServerTest, ReleaseOrRenewalForANonceNeverIssuedIs404AndLogsNothing) {
  const size_t before = AuditEntryCount(*broker_);
  const std::string evidence = EvidenceJson(RandomHex(kNonceBytes));
  ASSERT_TRUE(attest::ParseEvidenceBundle(evidence).ok()) << attest::ParseEvidenceBundle(evidence).status().ToString();
  auto a = broker_->Post("/v1/releases", ReleaseJson(evidence));
  EXPECT_EQ(a.status, 404) << a.body;
  EXPECT_EQ(ErrorCode(a), "not_found");
  EXPECT_EQ(a.json().count("audit_index"), 0u) << a.body;
  a = broker_->Post(kLeasePath, EncodeRenewalRequest({EvidenceJson(RandomHex(kNonceBytes))}));
  EXPECT_EQ(a.status, 404) << a.body;
  EXPECT_EQ(ErrorCode(a), "not_found");
  // A nonce of another length than the broker issues is not even looked up.
  a = broker_->Post("/v1/releases", ReleaseJson(EvidenceJson(RandomHex(16))));
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(AuditEntryCount(*broker_), before) << "a refused release was logged";
}

TEST_F(ServerTest, AClientStalledMidHeadersOfAReleaseIsCutOffWhileOthersAreServed) {
  RawTls slow(broker_->port(), 0);
  ASSERT_TRUE(slow.connected());
  slow.Send("POST /v1/releases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Len");
  const auto t0 = std::chrono::steady_clock::now();
  // Others are served meanwhile, on the same endpoint too.
  EXPECT_EQ(broker_->Get("/v1/status").status, 200);
  auto a = broker_->Post("/v1/releases", "{");
  EXPECT_EQ(a.status, 400) << a.body;
  const double served = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(served, 1.5) << "a stalled client held up the others";
  // Its read times out (read_timeout_s = 2): it is refused with a 400 at once...
  const std::string refused = slow.ReadAll();
  const double answered = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(refused.substr(0, 12), "HTTP/1.1 400") << refused;
  EXPECT_LT(answered, 2 + 1.0) << "the stalled read did not time out after read_timeout_s";
  // ...and disconnected. cpp-httplib 0.11 answers that 400 with "Keep-Alive" and then waits
  // keep_alive_s (2 here) for a next request before it closes, so the connection ends
  // after read_timeout_s + keep_alive_s, not read_timeout_s.
  const double closed = SecondsUntilClosed(slow.fd());
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(closed, 0) << "a client stalled mid-headers was not closed";
  EXPECT_LT(total, 2 + 2 + 1.0) << "not closed after read_timeout_s + keep_alive_s";
  EXPECT_EQ(broker_->Get("/v1/status").status, 200);
}

// A broker with the admin API ([admin] token_file).
class AdminServerTest : public ::testing::Test {
 protected:
  static constexpr char kToken[] = "server-test-admin-token-0123456789abcdef";
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() / ("broker-admin-" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    ASSERT_TRUE(testing::MakeSelfSignedCa(*dir_, "ek-root"));
    BrokerSettings s;
    s.ek_root_files = {*dir_ + "/ek-root.pem"};
    s.read_timeout_s = 2;
    s.max_body_bytes = 64 << 10;
    s.extra_config = "\n[admin]\ntoken_file = \"admin.token\"\n";
    s.before_launch = [](const std::string& dir) {
      testing::WriteText(dir + "/admin.token", std::string(kToken) + "\n");
      if (::chmod((dir + "/admin.token").c_str(), 0600) != 0) return ErrnoStatus("chmod admin.token", errno);
      return OkStatus();
    };
    auto b = BrokerProcess::Start(*dir_ + "/broker", s);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    broker_ = std::move(b).value().release();
  }
  static void TearDownTestSuite() {
    delete broker_;
    broker_ = nullptr;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(broker_, nullptr); }
  void TearDown() override { ASSERT_TRUE(broker_->Alive()) << "the broker died: " << broker_->log(); }

  // POST with an Authorization header (none when `authorization` is empty).
  static httplib::Result PostAdmin(const std::string& path, const std::string& body, const std::string& authorization) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return broker_->Client()->Post(path.c_str(), h, body, "application/json");
  }
  static std::string ErrorCode(const std::string& body) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("error")) return "<no error object: " + body + ">";
    return j["error"]["code"].get<std::string>();
  }

  static std::string* dir_;
  static BrokerProcess* broker_;
};
std::string* AdminServerTest::dir_ = nullptr;
BrokerProcess* AdminServerTest::broker_ = nullptr;

TEST_F(AdminServerTest, NoOrAWrongBearerTokenIs401WithWwwAuthenticate) {
  const std::string revoke = EncodeRevocationRequest({"job", "job-x", "test"});
  const std::string activate = EncodePolicyActivation({"{}", "x"});
  const std::string token(kToken);
  const size_t before = AuditEntryCount(*broker_);
  for (const auto& [path, body] : {std::pair{std::string("/v1/admin/revocations"), revoke},
                                   std::pair{std::string("/v1/admin/policies"), activate}}) {
    for (const std::string& auth :
         {std::string(), std::string("Bearer "), std::string("Bearer wrong-token-wrong-token-wrong-token"),
          "Bearer " + token + "x", "Bearer " + token.substr(0, token.size() - 1), "Basic " + token, token}) {
      auto r = PostAdmin(path, body, auth);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path << " with '" << auth << "' -> " << r->body;
      EXPECT_EQ(ErrorCode(r->body), "unauthenticated") << path;
      EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer") << path << " with '" << auth << "'";
      EXPECT_EQ(r->body.find(token), std::string::npos) << "the answer echoes the token";
    }
  }
  EXPECT_NE(broker_->log().find("refused an admin request"), std::string::npos) << broker_->log();
  EXPECT_EQ(broker_->log().find(token), std::string::npos) << "the token is in the broker's log";
  EXPECT_EQ(AuditEntryCount(*broker_), before) << "an unauthenticated admin request changed the audit log";
}

TEST_F(AdminServerTest, WithTheTokenMalformedBodiesAre400NamingTheField) {
  const std::string auth = "Bearer " + std::string(kToken);
  const std::string revoke = EncodeRevocationRequest({"job", "job-x", "test"});
  const std::string activate = EncodePolicyActivation({"{}", "x"});
  for (const auto& [path, body, field] :
       {std::tuple{std::string("/v1/admin/revocations"), revoke, std::string("extra_revocation_field")},
        std::tuple{std::string("/v1/admin/policies"), activate, std::string("extra_policy_field")}}) {
    for (const std::string& bad : {std::string("{"), std::string("[]"), std::string("\xff"), std::string(),
                                   std::string("{\"kind\": \"job\", \"kind\": \"host\"}"), std::string("{}")}) {
      auto r = PostAdmin(path, bad, auth);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 400) << path << " " << bad << " -> " << r->body;
      EXPECT_EQ(ErrorCode(r->body), "invalid_input") << path << " " << bad;
    }
    auto r = PostAdmin(path, WithField(body, field), auth);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(ErrorCode(r->body), "invalid_input");
    EXPECT_NE(r->body.find(field), std::string::npos) << r->body;
    // The request rules come before the token check, with or without a token.
    for (const std::string& a : {auth, std::string()}) {
      httplib::Headers h;
      if (!a.empty()) h.emplace("Authorization", a);
      auto wrong_type = broker_->Client()->Post(path.c_str(), h, body, "text/plain");
      ASSERT_TRUE(wrong_type);
      EXPECT_EQ(wrong_type->status, 415) << path;
    }
  }
  // Out-of-range values of a revocation, with the field named.
  for (const auto& [body, field] :
       {std::pair{EncodeRevocationRequest({"user", "job-x", "test"}), std::string("kind")},
        std::pair{EncodeRevocationRequest({"host", "job-x", "test"}), std::string("id")},
        std::pair{EncodeRevocationRequest({"job", "job-x", ""}), std::string("reason")},
        std::pair{EncodeRevocationRequest({"job", "job-x", "a\nb"}), std::string("reason")}}) {
    auto r = PostAdmin("/v1/admin/revocations", body, auth);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    EXPECT_NE(r->body.find("'" + field + "'"), std::string::npos) << r->body;
  }
}

// A refusal before the body is read (404, 405, 411, 413, 415, bad Content-Length) closes
// the connection: the unread body, here a whole request for a nonce, must not be parsed as
// the next request of a kept-alive connection (request smuggling).
TEST_F(ServerTest, ARefusalBeforeTheBodyClosesTheConnectionSoTheBodyIsNeverASecondRequest) {
  const std::string inner_body = R"({"host_id":"0123456789abcdef0123456789abcdef"})";
  const std::string inner = "POST /v1/nonces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(inner_body.size()) + "\r\n\r\n" + inner_body;
  const std::string big = inner + std::string(5000 - inner.size(), ' ');  // over the 4096-byte nonce limit
  struct Case {
    std::string name, head, body;
    int status;
  };
  const std::vector<Case> cases = {
      {"415", Head("/v1/nonces", "Content-Type: text/plain\r\nContent-Length: " + std::to_string(inner.size()) + "\r\n"),
       inner, 415},
      {"413", Head("/v1/nonces", "Content-Type: application/json\r\nContent-Length: " + std::to_string(big.size()) + "\r\n"),
       big, 413},
      {"404", Head("/v1/nothing", "Content-Type: application/json\r\nContent-Length: " + std::to_string(inner.size()) + "\r\n"),
       inner, 404},
      {"405", "PUT /v1/nonces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(inner.size()) + "\r\n\r\n",
       inner, 405},
      {"404 GET", "GET /v1/nonces HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(inner.size()) + "\r\n\r\n",
       inner, 404},
  };
  for (const Case& c : cases) {
    for (bool together : {false, true}) {
      SCOPED_TRACE(c.name + (together ? ", head and body in one write" : ", body after the answer"));
      RawTls t(broker_->port(), 0);
      ASSERT_TRUE(t.connected());
      if (together) {
        t.Send(c.head + c.body);  // one TLS record: the body is already read into OpenSSL
      } else {
        t.Send(c.head);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the refusal is decided on the head
        t.Send(c.body);
      }
      std::string all = t.ReadAll();
      // Everything else the broker sends on this connection, until it closes it.
      for (std::string more = t.ReadAll(); !more.empty(); more = t.ReadAll()) all += more;
      EXPECT_EQ(all.rfind("HTTP/1.1 " + std::to_string(c.status), 0), 0u) << all;
      EXPECT_NE(all.find("Connection: close"), std::string::npos) << all;
      // Exactly one answer: the smuggled nonce request got none (it would be a 404 "not
      // enrolled", or a 201 for an enrolled host).
      size_t answers = 0;
      for (size_t p = all.find("HTTP/1.1 "); p != std::string::npos; p = all.find("HTTP/1.1 ", p + 1)) ++answers;
      EXPECT_EQ(answers, 1u) << all;
      EXPECT_EQ(all.find("not enrolled"), std::string::npos) << all;
    }
  }
  // A request that is answered keeps the connection (keep-alive still works).
  RawTls t(broker_->port(), 0);
  ASSERT_TRUE(t.connected());
  t.Send("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(t.ReadAll().rfind("HTTP/1.1 200", 0), 0u);
  t.Send("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(t.ReadAll().rfind("HTTP/1.1 200", 0), 0u);
}

// A second broker on a port another broker listens on does not start (exit 10): without
// SO_REUSEPORT the bind fails, so two brokers never share a port's connections.
TEST(ServerStart, ASecondBrokerOnABoundPortExits10) {
  BrokerSettings s;
  const std::string dir = OwnBrokerDir("broker-port-", &s);
  ASSERT_FALSE(dir.empty());
  auto first = BrokerProcess::Start(dir + "/a", s);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  {
    // Another broker (its own audit log and store), prepared, then pointed at the port.
    auto other = BrokerProcess::Start(dir + "/b", s);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    EXPECT_EQ((*other)->Stop(SIGTERM), 0);
  }
  const std::string config = dir + "/b/broker.toml";
  std::string toml = testing::ReadText(config);
  const size_t at = toml.find("port = 0");
  ASSERT_NE(at, std::string::npos) << toml;
  toml.replace(at, 8, "port = " + std::to_string((*first)->port()));
  testing::WriteText(config, toml);
  std::string out;
  // timeout(1) ends a second broker that did bind (exit 124) rather than hang the test.
  const int rc = BrokerProcess::RunProgram("/usr/bin/timeout", {"15", ENCLAVE_BROKER_BIN, "serve", "--config", config,
                                                                "--passphrase-fd", "3"},
                                           testing::kPassphrase, &out);
  EXPECT_EQ(rc, 10) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
  EXPECT_TRUE((*first)->Alive());
  // Once the first broker is gone, the port is free again at once (SO_REUSEADDR: its
  // closed connections in TIME_WAIT do not block a restart); timeout(1) stops it (124).
  EXPECT_EQ((*first)->Get("/v1/status").status, 200);
  EXPECT_EQ((*first)->Stop(SIGTERM), 0);
  EXPECT_EQ(BrokerProcess::RunProgram("/usr/bin/timeout", {"3", ENCLAVE_BROKER_BIN, "serve", "--config", config,
                                                           "--passphrase-fd", "3"},
                                      testing::kPassphrase, &out),
            124)
      << out;
  EXPECT_NE(out.find("listening"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(ServerStart, AWrongPassphraseABadConfigAndAMissingAuditLogStopTheStartWithDocumentedCodes) {
  BrokerSettings s;
  const std::string dir = OwnBrokerDir("broker-start-", &s);
  ASSERT_FALSE(dir.empty());
  {
    auto b = BrokerProcess::Start(dir + "/b", s);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    // A second broker on the same audit log is kept out by the log's writer lock.
    std::string second;
    EXPECT_EQ(BrokerProcess::RunBroker({"serve", "--config", (*b)->config(), "--passphrase-fd", "3"},
                                       testing::kPassphrase, &second),
              8)
        << second;
    EXPECT_TRUE((*b)->Alive());
    EXPECT_EQ((*b)->Stop(SIGTERM), 0) << "SIGTERM is a clean stop";
  }
  // Stopped right after it starts listening, again and again: never a hang.
  for (int i = 0; i < 5; ++i) {
    auto b = BrokerProcess::Start(dir + "/b", s);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ((*b)->Stop(i % 2 ? SIGINT : SIGTERM), 0) << (*b)->log();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
  std::string out;
  const std::string config = dir + "/b/broker.toml";
  EXPECT_EQ(BrokerProcess::RunBroker({"serve", "--config", config, "--passphrase-fd", "3"}, "wrong passphrase!!", &out),
            5)
      << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;
  // The store survived the stop and opens read-only for the administrator.
  EXPECT_EQ(BrokerProcess::RunBroker({"hosts", "--config", config}, "", &out), 0) << out;
  EXPECT_NE(out.find("0 host(s)"), std::string::npos) << out;

  testing::WriteText(dir + "/b/bad.toml", testing::ReadText(config) + "\n[extra]\nkey = 1\n");
  EXPECT_EQ(BrokerProcess::RunBroker({"serve", "--config", dir + "/b/bad.toml", "--passphrase-fd", "3"},
                                     testing::kPassphrase, &out),
            3)
      << out;
  EXPECT_NE(out.find("unknown key 'extra'"), std::string::npos) << out;

  // A policy naming its EK roots by absolute path cannot be archived with the verdicts.
  const std::string policy = testing::ReadText(dir + "/b/policy.json");
  std::string absolute = policy;
  absolute.replace(absolute.find("\"ek-roots/0.pem\""), 16, "\"" + dir + "/b/ek-roots/0.pem\"");
  testing::WriteText(dir + "/b/policy.json", absolute);
  EXPECT_EQ(BrokerProcess::RunBroker({"serve", "--config", config, "--passphrase-fd", "3"}, testing::kPassphrase, &out),
            9)
      << out;
  EXPECT_NE(out.find("absolute path"), std::string::npos) << out;
  testing::WriteText(dir + "/b/policy.json", policy);

  std::filesystem::rename(dir + "/b/audit", dir + "/b/audit-moved");
  EXPECT_EQ(BrokerProcess::RunBroker({"serve", "--config", config, "--passphrase-fd", "3"}, testing::kPassphrase, &out),
            6)
      << out;
  EXPECT_NE(out.find("audit log"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace enclave::broker

namespace enclave::broker {
namespace {

// The audit log as C2SP tlog-tiles under /v1/audit-log/ (docs/protocol.md; audit-log.md
// section 13): the exact files of DIR/tiles, only canonical tile paths, only when enabled.
TEST(ServerTiles, ServesTheLogsTilesReadOnlyWhenEnabled) {
  BrokerSettings s;
  const std::string dir = OwnBrokerDir("broker-tiles-", &s);
  ASSERT_FALSE(dir.empty());
  s.audit_config = "serve_tiles = true\n";
  // 300 entries before the broker starts: a full tile, partial ones and bundles.
  s.before_launch = [](const std::string& d) -> Status {
    ASSIGN_OR_RETURN(audit::LogSigningKey key, audit::LogSigningKey::Load(d + "/audit.key"));
    ASSIGN_OR_RETURN(std::unique_ptr<audit::LogWriter> w, audit::LogWriter::Open(d + "/audit", std::move(key)));
    for (int i = 0; i < 300; ++i) {
      RETURN_IF_ERROR(w->Append(audit::Revoked("custodian@tenant", "lease", "lease-" + std::to_string(i), "test"))
                          .status());
    }
    return OkStatus();
  };
  auto b = BrokerProcess::Start(dir + "/b", s);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::string tiles = (*b)->Path("audit/tiles");
  for (const char* rel : {"checkpoint", "tile/0/000", "tile/0/001.p/44", "tile/0/001.p/7", "tile/1/000.p/1",
                          "tile/entries/000", "tile/entries/001.p/44"}) {
    auto r = (*b)->Client()->Get((std::string("/v1/audit-log/") + rel).c_str());
    ASSERT_TRUE(r) << rel;
    EXPECT_EQ(r->status, 200) << rel << ": " << r->body;
    EXPECT_EQ(r->body, testing::ReadText(tiles + "/" + rel)) << rel;
    const bool is_checkpoint = std::string(rel) == "checkpoint";
    EXPECT_EQ(r->get_header_value("Content-Type"),
              is_checkpoint ? "text/plain; charset=utf-8" : "application/octet-stream") << rel;
    EXPECT_EQ(r->get_header_value("Cache-Control"), is_checkpoint ? "no-cache" : "public, max-age=31536000, immutable");
  }
  auto cp = (*b)->Get("/v1/audit-log/checkpoint");
  EXPECT_EQ(cp.body.rfind("enclave-audit-log/", 0), 0u) << cp.body;
  EXPECT_NE(cp.body.find("\n300\n"), std::string::npos) << cp.body;
  // Not a tile, not canonical, not there, or trying to leave the folder: 404, nothing read.
  for (const char* path : {"/v1/audit-log/tile/0/002", "/v1/audit-log/tile/0/x000/001", "/v1/audit-log/tile/0/001.p/45",
                           "/v1/audit-log/tile/0/../../audit.key", "/v1/audit-log/", "/v1/audit-log/tiles",
                           "/v1/audit-log/tile/entries/000.p/0", "/v1/audit-log//checkpoint"}) {
    EXPECT_EQ((*b)->Get(path).status, 404) << path;
  }
  EXPECT_EQ((*b)->Post("/v1/audit-log/checkpoint", "{}").status, 404);
  EXPECT_TRUE((*b)->Alive()) << (*b)->log();
}

// A 4 MiB body made of distinct member names (350,000 of them) is refused within the
// client's read timeout: the strict parser compares a large object's names by sorting
// them once, not each with all before it (n^2/2 comparisons: minutes here, more at the
// default 16 MiB limit, a worker held per request before any authentication).
TEST(LargeBodies, ABodyOfManyDistinctMembersIsRefusedPromptlyAndADuplicateAmongThemIsFound) {
  BrokerSettings s;
  const std::string dir = OwnBrokerDir("broker-large-", &s);
  ASSERT_FALSE(dir.empty());
  s.max_body_bytes = 16u << 20;
  auto b = BrokerProcess::Start(dir + "/b", s);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::string body = "{";
  char member[32];
  for (int i = 0; body.size() < (4u << 20) - 64; ++i) {
    std::snprintf(member, sizeof member, "\"%07x\":0,", i);
    body += member;
  }
  const std::string distinct = body.substr(0, body.size() - 1) + "}";
  const std::string repeated = body + "\"0000000\":1}";  // the first name again, at the end
  for (const std::string& path : {std::string("/v1/releases"), std::string(kLeasePath)}) {
    auto a = (*b)->Post(path, distinct);
    EXPECT_EQ(a.status, 400) << path << ": " << a.body;  // -1: no answer within 30 s
    EXPECT_NE(a.body.find("\"invalid_input\""), std::string::npos) << a.body;
    a = (*b)->Post(path, repeated);
    EXPECT_EQ(a.status, 400) << path << ": " << a.body;
    EXPECT_NE(a.body.find("duplicate JSON key '0000000'"), std::string::npos) << a.body;
  }
  EXPECT_TRUE((*b)->Alive()) << (*b)->log();
  b->reset();
  std::filesystem::remove_all(dir);
}

TEST_F(ServerTest, TheAuditLogsTilesAre404UnlessEnabled) {
  auto r = broker_->Get("/v1/audit-log/checkpoint");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("serve_tiles"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace enclave::broker
