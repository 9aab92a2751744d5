// `enclave-broker serve` as a real process on loopback, with real TLS: TLS 1.3 only, the
// JSON API's refusals (malformed JSON, unknown fields, wrong content types, oversized or
// unsized bodies, unknown endpoints), and hostile connections (silent, slow, truncated
// TLS handshakes, plaintext on the TLS port) that get a 4xx or a closed connection while
// the broker keeps serving; failing starts with a documented exit code.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include "broker_process.h"

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
  // Well-formed, for a host that is not enrolled.
  auto unknown = broker_->Post("/v1/nonces", "{\"host_id\": \"0123456789abcdef0123456789abcdef\"}");
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(ErrorCode(unknown), "not_found");
}

TEST_F(ServerTest, WrongContentTypesOversizedAndUnsizedBodiesAndUnknownEndpointsAre4xx) {
  const std::string ok_body = "{\"host_id\": \"0123456789abcdef0123456789abcdef\"}";
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

TEST(ServerStart, AWrongPassphraseABadConfigAndAMissingAuditLogStopTheStartWithDocumentedCodes) {
  const std::string dir = std::filesystem::temp_directory_path() / ("broker-start-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(testing::MakeSelfSignedCa(dir, "ek-root"));
  BrokerSettings s;
  s.ek_root_files = {dir + "/ek-root.pem"};
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
