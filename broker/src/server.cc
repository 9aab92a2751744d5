#include "enclave/broker/server.h"

#include <openssl/ssl.h>

#include <sys/socket.h>

#include <cctype>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <thread>

#include <httplib.h>

#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::broker {
namespace {

// httplib's ThreadPool queues without bound; this one blocks the acceptor instead, so at
// most `threads` requests run and `max_queued` accepted connections wait.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [&] { return queue_.size() < max_queued_ || shutdown_; });
    if (shutdown_) return;  // never reached: httplib stops accepting before shutdown()
    queue_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    ready_.notify_all();
    space_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty() || shutdown_; });
        if (queue_.empty()) return;  // shut down, queue drained
        fn = std::move(queue_.front());
        queue_.pop_front();
        space_.notify_one();
      }
      fn();
    }
  }
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> workers_;
  bool shutdown_ = false;
};

void Send(httplib::Response& res, const Reply& reply) {
  res.status = reply.status;
  res.set_content(reply.body, "application/json");
}

void SendError(httplib::Response& res, int status, std::string_view code, std::string_view message) {
  res.status = status;
  res.set_content(EncodeError(code, message), "application/json");
}

// A refusal before the body was read must end the connection: the unread body would
// otherwise be parsed as the next request (request smuggling). cpp-httplib 0.11 keeps a
// connection open whatever the response's Connection header says, so the connection is
// marked (SSL ex_data), the answer says "Connection: close", the logger (which runs once
// the answer is written) shuts the socket down, and nothing more read on a marked
// connection (plaintext OpenSSL may already hold) is ever routed.
int ClosingIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
bool Closing(const httplib::Request& req) {
  return req.ssl != nullptr && SSL_get_ex_data(req.ssl, ClosingIndex()) != nullptr;
}
void RefuseUnread(const httplib::Request& req, httplib::Response& res, int status, std::string_view code,
                  std::string_view message) {
  SendError(res, status, code, message);
  res.set_header("Connection", "close");
  static char mark;
  if (req.ssl != nullptr) SSL_set_ex_data(const_cast<SSL*>(req.ssl), ClosingIndex(), &mark);
}

// httplib's default socket options set SO_REUSEPORT, with which a second broker would bind
// the same port and take a share of the connections. SO_REUSEADDR only: a restart can bind
// while old connections are in TIME_WAIT, but a port another process listens on fails
// with EADDRINUSE (exit 10).
void ListenSocketOptions(int sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// The body limit of a POST route, 0 for an unknown path.
size_t BodyLimit(const std::string& path, size_t max_body) {
  if (path == "/v1/enrolments") return kMaxEnrolmentBody;
  if (path == "/v1/nonces") return kMaxNonceRequestBody;
  if (path == "/v1/attestations" || path == "/v1/releases") return max_body;
  if (path == "/v1/admin/revocations") return kMaxAdminBody;
  if (path == "/v1/admin/policies") return 2 * kMaxAdminBody;
  constexpr std::string_view kJobs = "/v1/jobs/";
  constexpr std::string_view kRendezvous = "/rendezvous";
  if (path.size() > kJobs.size() + kRendezvous.size() && path.size() <= kJobs.size() + 128 + kRendezvous.size() &&
      path.starts_with(kJobs) && path.ends_with(kRendezvous))
    return kMaxRendezvousBody;
  constexpr std::string_view kReports = "/reports";
  if (path.size() > kJobs.size() + kReports.size() && path.size() <= kJobs.size() + 128 + kReports.size() &&
      path.starts_with(kJobs) && path.ends_with(kReports))
    return kMaxJobReportBody;
  constexpr std::string_view kLeases = "/v1/leases/";
  constexpr std::string_view kRenewals = "/renewals";
  if (path.size() == kLeases.size() + kIdHexChars + kRenewals.size() && path.starts_with(kLeases) &&
      path.ends_with(kRenewals))
    return max_body;
  constexpr std::string_view kPrefix = "/v1/enrolments/";
  constexpr std::string_view kSuffix = "/activation";
  if (path.size() == kPrefix.size() + kIdHexChars + kSuffix.size() && path.starts_with(kPrefix) &&
      path.ends_with(kSuffix))
    return kMaxActivationBody;
  return 0;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(const ServerConfig& config, Service& service) {
  std::unique_ptr<Server> s(new Server());
  s->http_ = std::make_unique<httplib::SSLServer>(config.certificate.c_str(), config.private_key.c_str());
  if (!s->http_->is_valid())
    return InvalidInput("TLS: could not load certificate " + config.certificate + " and key " + config.private_key +
                        " (PEM, key matching the certificate)");
  SSL_CTX* ctx = s->http_->ssl_context();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 || SSL_CTX_set_max_proto_version(ctx, 0) != 1)
    return Internal("SSL_CTX_set_min_proto_version(TLS1_3_VERSION) failed");
  // Stateless servers need no TLS session resumption; it would only widen the surface.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);

  const size_t threads = config.threads, queued = config.max_queued;
  s->http_->new_task_queue = [threads, queued] { return new BoundedPool(threads, queued); };
  s->http_->set_read_timeout(config.read_timeout_s, 0);
  s->http_->set_write_timeout(config.write_timeout_s, 0);
  s->http_->set_keep_alive_timeout(config.keep_alive_s);
  s->http_->set_keep_alive_max_count(100);
  s->http_->set_payload_max_length(config.max_body_bytes);
  // An answer is two TLS records; without TCP_NODELAY the second waits for the client's
  // delayed ACK (about 40 ms on Linux).
  s->http_->set_tcp_nodelay(true);
  s->http_->set_socket_options(ListenSocketOptions);
  s->Routes(config, service);

  s->port_ = config.port == 0 ? s->http_->bind_to_any_port(config.listen.c_str())
                              : (s->http_->bind_to_port(config.listen.c_str(), config.port) ? config.port : -1);
  if (s->port_ <= 0)
    return Unavailable("cannot listen on " + config.listen + ":" + std::to_string(config.port) +
                       " (the port is in use, or the address is not this host's)");
  return s;
}

void Server::Routes(const ServerConfig& config, Service& service) {
  const size_t max_body = config.max_body_bytes;
  // Before the body is read: method, length, type. Every refusal here leaves the body
  // unread, so it also closes the connection: the unread body must never be parsed as the
  // next request on a kept-alive connection (request smuggling).
  http_->set_pre_routing_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    // Bytes that followed a refused head on this connection: never a request.
    if (Closing(req)) {
      RefuseUnread(req, res, 400, "bad_request", "the connection is closing");
      return R::Handled;
    }
    if (req.method == "GET" && req.path == "/v1/status") return R::Unhandled;
    if (req.method != "POST") {
      if (req.method == "GET" || req.method == "HEAD") {
        RefuseUnread(req, res, 404, "not_found", "no such endpoint");
      } else {
        RefuseUnread(req, res, 405, "method_not_allowed", "the API takes POST (GET only for /v1/status)");
      }
      return R::Handled;
    }
    const size_t limit = BodyLimit(req.path, max_body);
    if (limit == 0) {
      RefuseUnread(req, res, 404, "not_found", "no such endpoint");
      return R::Handled;
    }
    if (!req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) {
      RefuseUnread(req, res, 411, "length_required", "a POST body needs Content-Length (no chunked transfer)");
      return R::Handled;
    }
    const std::string length = req.get_header_value("Content-Length");
    size_t n = 0;
    bool ok = !length.empty() && length.size() <= 12;
    for (char c : length) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) n = n * 10 + static_cast<size_t>(c - '0');
    }
    if (!ok) {
      RefuseUnread(req, res, 400, "invalid_input", "Content-Length is not a decimal number");
      return R::Handled;
    }
    if (n > limit) {
      RefuseUnread(req, res, 413, "payload_too_large",
                   "body of " + std::to_string(n) + " bytes exceeds this endpoint's " + std::to_string(limit) +
                       "-byte limit");
      return R::Handled;
    }
    if (!IsJsonContentType(req.get_header_value("Content-Type"))) {
      RefuseUnread(req, res, 415, "unsupported_media_type", "Content-Type must be application/json");
      return R::Handled;
    }
    return R::Unhandled;
  });
  http_->Get("/v1/status", [](const httplib::Request&, httplib::Response& res) {
    Send(res, {200, R"({"status":"ok","api":"v1"})"});
  });
  http_->Post("/v1/enrolments", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.Enrol(req.body));
  });
  http_->Post(R"(/v1/enrolments/([0-9a-f]{32})/activation)",
              [&service](const httplib::Request& req, httplib::Response& res) {
                Send(res, service.Activate(req.matches[1], req.body));
              });
  http_->Post("/v1/nonces", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.IssueNonce(req.body));
  });
  http_->Post("/v1/attestations", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.Attest(req.body));
  });
  http_->Post("/v1/releases", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.Release(req.body));
  });
  http_->Post(R"(/v1/leases/([0-9a-f]{32})/renewals)", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.Renew(req.matches[1], req.body));
  });
  http_->Post(R"(/v1/jobs/([A-Za-z0-9._:-]{1,128})/rendezvous)",
              [&service](const httplib::Request& req, httplib::Response& res) {
                Send(res, service.Rendezvous(req.matches[1], req.body));
              });
  http_->Post(R"(/v1/jobs/([A-Za-z0-9._:-]{1,128})/reports)", [&service](const httplib::Request& req, httplib::Response& res) {
    Send(res, service.FinishJob(req.matches[1], req.body));
  });
  // Administration: a bearer token whose SHA-256 the broker holds, compared in constant time.
  const auto admin = config.admin_token_sha256;
  auto authorized = [admin](const httplib::Request& req, httplib::Response& res) {
    if (!admin) {
      SendError(res, 404, "not_found", "this broker has no admin API ([admin] token_file)");
      return false;
    }
    const std::string h = req.get_header_value("Authorization");
    // The scheme name is case-insensitive (RFC 7235); the token is compared exactly.
    std::string scheme = h.substr(0, 7);
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string token = scheme == "bearer " ? h.substr(7) : std::string();
    const crypto::Digest256 got = crypto::Sha256(AsBytes(token));
    if (token.empty() || !crypto::ConstantTimeEquals(got, *admin)) {
      std::cerr << "enclave-broker: refused an admin request without a valid token\n";
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, 401, "unauthenticated", "a valid admin bearer token is required");
      return false;
    }
    return true;
  };
  http_->Post("/v1/admin/revocations", [&service, authorized](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) Send(res, service.AdminRevoke(req.body));
  });
  http_->Post("/v1/admin/policies", [&service, authorized](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) Send(res, service.AdminActivatePolicy(req.body));
  });
  // Runs after each answer is written: a connection marked by RefuseUnread is shut down
  // (the answer already queued is still delivered, then FIN), so nothing more is read.
  http_->set_logger([](const httplib::Request& req, const httplib::Response&) {
    if (Closing(req)) ::shutdown(SSL_get_fd(req.ssl), SHUT_RDWR);
  });
  http_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      const int status = res.status;
      SendError(res, status, status == 413 ? "payload_too_large" : status == 404 ? "not_found" : "bad_request",
                "request refused");
    }
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    std::cerr << "enclave-broker: a handler threw\n";
    SendError(res, 500, "internal", "the broker could not complete the request");
  });
}

Server::~Server() = default;

Status Server::Run() {
  if (!http_->listen_after_bind()) return Unavailable("the HTTPS listener stopped with an error");
  return OkStatus();
}

void Server::Stop() { http_->stop(); }

}  // namespace enclave::broker
