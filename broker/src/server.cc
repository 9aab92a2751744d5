#include "enclave/broker/server.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include "enclave/broker/internal/http_request.h"
#include "enclave/broker/messages.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::broker {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;
using internal::Endpoint;

// Threads that run the sockets (TLS, parsing, GET /v1/status, refusals). Requests run on
// the `threads` workers, so two are enough to keep status answers and handshakes going
// while one is busy with a TLS handshake or a large body.
constexpr int kIoThreads = 2;
// Requests on one kept-alive connection; the last answer says "Connection: close".
constexpr int kMaxRequestsPerConnection = 100;
// Bytes asked of one read. The read buffer holds at most a head's limit plus one read.
constexpr size_t kReadChunk = 16u << 10;
// After a closing answer: how long the broker keeps reading (and discarding) what the
// client still sends, so that its unread bytes do not make the kernel answer with a
// reset that could destroy the answer before the client reads it.
constexpr auto kLinger = std::chrono::seconds(1);

// `threads` workers run the Service calls. The queue needs no bound of its own: a
// request is queued only while it holds one of the threads + max_queued request slots.
class Workers {
 public:
  void Start(size_t n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
  }
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    ready_.notify_one();
  }
  // Runs what is queued, then joins.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty() || shutdown_; });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        fn();
      } catch (const std::exception& e) {  // std::bad_alloc: the request is lost, not the broker
        std::cerr << "enclave-broker: a worker threw: " << e.what() << "\n";
      }
    }
  }
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
};

struct Answer {
  Reply reply;
  bool www_authenticate = false;
  // A tile or checkpoint (the only answers that are not JSON) and its caching.
  std::string content_type = "application/json";
  std::string cache_control = "";
};

class Connection;

}  // namespace

struct Server::Impl {
  Impl(const ServerConfig& c, Service& s)
      : config(c), service(s), tls(asio::ssl::context::tls_server), acceptor(asio::make_strand(ioc)),
        accept_retry(acceptor.get_executor()) {
    limits.max_header_bytes = c.max_header_bytes;
    limits.max_header_fields = c.max_header_fields;
    free_slots = c.threads + c.max_queued;
    // What `threads` workers reading a body each could hold: the bound on body memory.
    free_body_bytes = c.threads * c.max_body_bytes;
  }

  ~Impl() {
    // Waiting connections go before the io_context their sockets belong to.
    stopping = true;
    slot_waiters.clear();
  }

  void DoAccept();
  void OnAccept(error_code ec, tcp::socket socket);
  void ConnectionGone(const Connection* c, const std::string& peer);
  // A request slot and `body_bytes` of the body budget for `c`, now (true) or later (then
  // c->OnSlot() is posted to it). First come, first served.
  bool AcquireSlot(const std::shared_ptr<Connection>& c, uint64_t body_bytes);
  void ReleaseSlot(uint64_t body_bytes);
  Answer Dispatch(const internal::Admitted& request, std::string_view authorization, std::string_view body,
                  const std::string& peer);
  // POST /v1/releases: `answer` is called once, maybe later from another worker.
  void DispatchRelease(std::string_view body, std::function<void(Answer)> answer);
  // GET /v1/audit-log/<rel>: a file of the log's tiles directory (rel already checked to be
  // "checkpoint" or a canonical tile path).
  Answer AuditTile(const std::string& rel) const;
  void RunIo();

  const ServerConfig config;
  Service& service;
  internal::HeadLimits limits;

  // Declared before the io_context: connections still owned by its handlers when it is
  // destroyed report here.
  std::mutex mu;  // guards the members up to ioc
  bool stopping = false;
  bool accept_paused = false;  // at max_connections: resumed when one closes
  size_t connections = 0;
  std::unordered_map<std::string, size_t> per_peer;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> live;
  size_t free_slots = 0;
  uint64_t free_body_bytes = 0;
  // Owned here: a connection waiting for a slot has no socket operation that would keep it.
  std::deque<std::pair<std::shared_ptr<Connection>, uint64_t>> slot_waiters;

  asio::io_context ioc;
  asio::ssl::context tls;
  tcp::acceptor acceptor;           // on its own strand
  asio::steady_timer accept_retry;  // after a failed accept (out of descriptors)
  int port = 0;
  Workers workers;
};

namespace {

// One client connection, on its own strand: TLS handshake, then requests one after the
// other (keep-alive). Every read, write and wait has a deadline on `timer_`; when it
// passes, the pending socket operation is cancelled and the handler sees timed_out_.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& server, tcp::socket socket, std::string peer)
      : server_(server),
        stream_(std::move(socket), server.tls),
        timer_(stream_.get_executor()),
        buffer_(server.config.max_header_bytes + kReadChunk),
        peer_(std::move(peer)),
        accepted_at_(Clock::now()) {}
  ~Connection() { server_.ConnectionGone(this, peer_); }

  asio::any_io_executor executor() { return stream_.get_executor(); }

  void Start() {
    phase_ = Phase::kHandshake;
    Arm(std::min(Clock::now() + Seconds(server_.config.read_timeout_s), HeadDeadlineOfFirstRequest()));
    stream_.async_handshake(asio::ssl::stream_base::server, [self = shared_from_this()](error_code ec) {
      self->Disarm();
      if (self->closed_) return;
      if (ec || self->timed_out_) return self->Close();
      self->ReadRequest();
    });
  }

  // Posted by Server::Stop: a connection waiting for a request closes now; one in the
  // middle of a request finishes it, and its answer closes the connection.
  void OnStop() {
    if (closed_) return;
    if (phase_ == Phase::kHandshake || phase_ == Phase::kIdle ||
        (phase_ == Phase::kHead && buffer_.size() == 0 && requests_ == 0))
      Close();
  }

  // Posted when a request slot is handed to this connection.
  void OnSlot() {
    holds_slot_ = true;
    if (closed_) return ReleaseSlotIfHeld();
    StartBody();
  }

  void OnAnswer(Answer a) {
    ReleaseSlotIfHeld();
    if (closed_) return;
    std::string headers = a.www_authenticate ? "WWW-Authenticate: Bearer\r\n" : "";
    if (!a.cache_control.empty()) headers += "Cache-Control: " + a.cache_control + "\r\n";
    Send(a.reply.status, a.reply.body, headers, a.content_type);
  }

 private:
  enum class Phase { kHandshake, kIdle, kHead, kWaitSlot, kBody, kWork, kWrite, kClosing };

  static Clock::duration Seconds(int s) { return std::chrono::seconds(s); }
  Clock::time_point HeadDeadlineOfFirstRequest() const {
    return accepted_at_ + Seconds(server_.config.header_timeout_s);
  }

  void Arm(Clock::time_point deadline) {
    const uint64_t generation = ++timer_generation_;
    timed_out_ = false;
    timer_.expires_at(deadline);
    timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || generation != self->timer_generation_ || self->closed_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->stream_.lowest_layer().cancel(ignored);
    });
  }
  void Disarm() {
    ++timer_generation_;
    timer_.cancel();
  }

  // The next request: its head is read, then checked (Admit) before its body is read.
  void ReadRequest() {
    if (Stopping()) return Close();
    parser_.emplace(server_.limits);
    if (buffer_.size() > 0) {  // pipelined: the next head is already here
      phase_ = Phase::kHead;
      head_deadline_ = Clock::now() + Seconds(server_.config.header_timeout_s);
      return Parse();
    }
    if (requests_ == 0) {
      phase_ = Phase::kHead;
      head_deadline_ = HeadDeadlineOfFirstRequest();
    } else {
      phase_ = Phase::kIdle;
    }
    Read();
  }

  void Read() {
    const auto now = Clock::now();
    const auto per_read = now + Seconds(server_.config.read_timeout_s);
    switch (phase_) {
      case Phase::kIdle:
        Arm(now + Seconds(server_.config.keep_alive_s));
        break;
      case Phase::kHead:
        Arm(std::min(per_read, head_deadline_));
        break;
      default:  // kBody
        Arm(std::min(per_read, body_deadline_));
        break;
    }
    const size_t room = buffer_.max_size() - buffer_.size();
    // Never reached (a head is refused at max_header_bytes, below the buffer's size), but a
    // full buffer must not become a loop of empty reads.
    if (room == 0) return Refuse({431, "header_too_large", "the request head does not fit the read buffer"});
    stream_.async_read_some(buffer_.prepare(std::min(room, kReadChunk)),
                            [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(error_code ec, size_t n) {
    Disarm();
    if (closed_) return;
    buffer_.commit(n);
    if (timed_out_) {
      timed_out_ = false;
      // Nothing of a request yet: an idle or silent connection just ends. Part of a
      // request: it is refused (400) and the connection closes.
      if (phase_ == Phase::kIdle || (phase_ == Phase::kHead && buffer_.size() == 0)) return Close();
      const bool head = phase_ == Phase::kHead;
      const bool deadline = Clock::now() >= (head ? head_deadline_ : body_deadline_);
      std::string what = head ? "the request head" : "the request body";
      what += deadline ? " did not arrive within " +
                             std::to_string(head ? server_.config.header_timeout_s : server_.config.body_timeout_s) +
                             " s"
                       : " stalled for " + std::to_string(server_.config.read_timeout_s) + " s";
      return Refuse({400, "bad_request", what});
    }
    if (ec) return Close();  // the client went away (or broke TLS) mid-request: nothing to answer
    if (phase_ == Phase::kIdle) {
      phase_ = Phase::kHead;
      head_deadline_ = Clock::now() + Seconds(server_.config.header_timeout_s);
    }
    Parse();
  }

  // Feeds the buffer to the parser until it needs more bytes, has a head to check, or
  // has the whole request.
  void Parse() {
    for (;;) {
      if (phase_ == Phase::kHead && parser_->is_header_done()) return OnHead();
      if (parser_->is_done()) return OnRequest();
      if (buffer_.size() == 0) return Read();
      boost::beast::error_code ec;
      const size_t used = parser_->Put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) return Read();
      if (ec) {
        if (phase_ == Phase::kHead) return Refuse(internal::RefusalForParseError(*parser_, ec, server_.limits));
        return Refuse({400, "bad_request", "malformed request body framing (" + ec.message() + ")"});
      }
    }
  }

  void OnHead() {
    const internal::RequestHead& head = parser_->head();
    internal::Admission a = internal::Admit(head, server_.config.max_body_bytes);
    if (!a.admitted) return Refuse(a.refusal);
    request_ = std::move(*a.admitted);
    keep_alive_ = head.keep_alive;
    // Answered here, without a worker or a slot: liveness checks never wait for requests.
    if (request_.endpoint == Endpoint::kStatus) return Send(200, R"({"status":"ok","api":"v1"})", "");
    phase_ = Phase::kWaitSlot;
    if (server_.AcquireSlot(shared_from_this(), request_.body_bytes)) {
      holds_slot_ = true;
      StartBody();
    }
  }

  void StartBody() {
    phase_ = Phase::kBody;
    body_deadline_ = Clock::now() + Seconds(server_.config.body_timeout_s);
    std::string expect = parser_->head().expect;
    for (char& c : expect) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (expect != "100-continue" || parser_->is_done()) return Parse();
    // The client waits for this before it sends the body (RFC 9110, 10.1.1).
    out_ = "HTTP/1.1 100 Continue\r\n\r\n";
    Arm(Clock::now() + Seconds(server_.config.write_timeout_s));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](error_code ec, size_t) {
      self->Disarm();
      if (self->closed_) return;
      if (ec || self->timed_out_) return self->Close();
      self->Parse();
    });
  }

  // The whole request is here: a worker runs it, the answer comes back to this strand.
  void OnRequest() {
    phase_ = Phase::kWork;
    server_.workers.Post([self = shared_from_this(), work = asio::make_work_guard(server_.ioc),
                          request = request_, authorization = parser_->head().authorization,
                          body = std::move(parser_->body())]() mutable {
      // The work guard keeps the server running until the answer is posted, also for a
      // release answered later (after its witnesses), from another worker.
      auto answer = [self, work](Answer a) mutable {
        asio::post(self->executor(), [self, a = std::move(a)]() mutable { self->OnAnswer(std::move(a)); });
        work.reset();
      };
      if (request.endpoint == Endpoint::kRelease) return self->server_.DispatchRelease(body, std::move(answer));
      answer(self->server_.Dispatch(request, authorization, body, self->peer_));
    });
  }

  void Refuse(const internal::Refusal& r) {
    close_after_ = true;
    Send(r.status, EncodeError(r.code, r.message), "");
  }

  void Send(int status, std::string_view body, std::string_view extra_headers,
            std::string_view content_type = "application/json") {
    ReleaseSlotIfHeld();
    parser_.reset();
    ++requests_;
    if (!keep_alive_ || requests_ >= kMaxRequestsPerConnection || Stopping()) close_after_ = true;
    const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
    out_ = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) +
           "\r\nContent-Type: " + std::string(content_type) + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
    out_ += extra_headers;
    if (close_after_) out_ += "Connection: close\r\n";
    out_ += "\r\n";
    out_ += body;
    phase_ = Phase::kWrite;
    Arm(Clock::now() + Seconds(server_.config.write_timeout_s));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](error_code ec, size_t) {
      self->Disarm();
      if (self->closed_) return;
      self->out_ = std::string();
      if (ec || self->timed_out_) return self->Close();
      if (self->close_after_) return self->Linger();
      self->keep_alive_ = false;
      self->ReadRequest();
    });
  }

  // After a closing answer: TLS close_notify (without waiting for the client's), FIN,
  // then read and discard for up to kLinger until the client closes too.
  void Linger() {
    phase_ = Phase::kClosing;
    // As if the client's close_notify had come: SSL_shutdown sends ours and is done.
    SSL_set_shutdown(stream_.native_handle(), SSL_RECEIVED_SHUTDOWN);
    Arm(Clock::now() + std::min<Clock::duration>(Seconds(server_.config.write_timeout_s), kLinger));
    stream_.async_shutdown([self = shared_from_this()](error_code) {
      self->Disarm();
      if (self->closed_) return;
      if (self->timed_out_) return self->Close();
      error_code ignored;
      self->stream_.lowest_layer().shutdown(tcp::socket::shutdown_send, ignored);
      self->Arm(Clock::now() + kLinger);
      self->Drain();
    });
  }
  void Drain() {
    buffer_.clear();
    stream_.next_layer().async_read_some(buffer_.prepare(std::min(buffer_.max_size(), kReadChunk)),
                                         [self = shared_from_this()](error_code ec, size_t) {
                                           if (self->closed_) return;
                                           if (ec || self->timed_out_) return self->Close();
                                           self->Drain();
                                         });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    Disarm();
    ReleaseSlotIfHeld();
    error_code ignored;
    stream_.lowest_layer().close(ignored);
  }

  void ReleaseSlotIfHeld() {
    if (!holds_slot_) return;
    holds_slot_ = false;
    server_.ReleaseSlot(request_.body_bytes);
  }

  bool Stopping() {
    std::lock_guard<std::mutex> lock(server_.mu);
    return server_.stopping;
  }

  Server::Impl& server_;
  asio::ssl::stream<tcp::socket> stream_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  bool timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<internal::RequestParser> parser_;
  internal::Admitted request_;
  const std::string peer_;
  const Clock::time_point accepted_at_;
  Clock::time_point head_deadline_, body_deadline_;
  Phase phase_ = Phase::kHandshake;
  int requests_ = 0;
  bool keep_alive_ = false;
  bool close_after_ = false;
  bool holds_slot_ = false;
  bool closed_ = false;
  std::string out_;
};

// The client's IP address (an IPv4 address mapped into IPv6 counts as the IPv4 one).
std::string PeerOf(const tcp::socket& socket) {
  error_code ec;
  const tcp::endpoint ep = socket.remote_endpoint(ec);
  if (ec) return "?";
  asio::ip::address a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  return a.to_string();
}

}  // namespace

void Server::Impl::DoAccept() {
  acceptor.async_accept(asio::make_strand(ioc),
                        [this](error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void Server::Impl::OnAccept(error_code ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // Stop()
  if (ec) {
    // Out of descriptors or memory, or a connection reset before it was accepted: try
    // again shortly rather than spin or stop listening.
    if (ec != asio::error::connection_aborted)
      std::cerr << "enclave-broker: accept: " << ec.message() << "\n";
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](error_code e) {
      if (!e) DoAccept();
    });
    return;
  }
  std::string peer = PeerOf(socket);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return;  // the socket closes here
    size_t& from_peer = per_peer[peer];
    if (from_peer >= config.max_connections_per_peer) {
      // Closed before any TLS: the cheapest answer to an address that already holds its share.
      error_code ignored;
      socket.close(ignored);
      DoAccept();
      return;
    }
    ++from_peer;
    ++connections;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // an answer is two TLS records: no 40 ms delayed-ACK wait
  auto c = std::make_shared<Connection>(*this, std::move(socket), std::move(peer));
  bool more;
  {
    std::lock_guard<std::mutex> lock(mu);
    live[c.get()] = c;
    more = connections < config.max_connections;
    accept_paused = !more;
  }
  asio::post(c->executor(), [c] { c->Start(); });
  if (more) DoAccept();
}

void Server::Impl::ConnectionGone(const Connection* c, const std::string& peer) {
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    --connections;
    auto it = per_peer.find(peer);
    if (it != per_peer.end() && --it->second == 0) per_peer.erase(it);
    live.erase(c);
    if (accept_paused && !stopping && connections < config.max_connections) {
      accept_paused = false;
      resume = true;
    }
  }
  if (resume) asio::post(acceptor.get_executor(), [this] { DoAccept(); });
}

bool Server::Impl::AcquireSlot(const std::shared_ptr<Connection>& c, uint64_t body_bytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (slot_waiters.empty() && free_slots > 0 && free_body_bytes >= body_bytes) {
    --free_slots;
    free_body_bytes -= body_bytes;
    return true;
  }
  slot_waiters.emplace_back(c, body_bytes);
  return false;
}

void Server::Impl::ReleaseSlot(uint64_t body_bytes) {
  std::vector<std::shared_ptr<Connection>> next;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++free_slots;
    free_body_bytes += body_bytes;
    while (!slot_waiters.empty() && free_slots > 0 && free_body_bytes >= slot_waiters.front().second) {
      --free_slots;
      free_body_bytes -= slot_waiters.front().second;
      next.push_back(std::move(slot_waiters.front().first));
      slot_waiters.pop_front();
    }
  }
  for (auto& c : next) asio::post(c->executor(), [c] { c->OnSlot(); });
}

Answer Server::Impl::Dispatch(const internal::Admitted& r, std::string_view authorization, std::string_view body,
                              const std::string& peer) {
  try {
    switch (r.endpoint) {
      case Endpoint::kEnrol:
        return {service.Enrol(body)};
      case Endpoint::kActivate:
        return {service.Activate(r.id, body)};
      case Endpoint::kNonce:
        return {service.IssueNonce(body, peer)};
      case Endpoint::kAttest:
        return {service.Attest(body)};
      case Endpoint::kRelease:  // DispatchRelease
        break;
      case Endpoint::kRenew:
        return {service.Renew(r.id, body)};
      case Endpoint::kRendezvous:
        return {service.Rendezvous(r.id, body)};
      case Endpoint::kFinishJob:
        return {service.FinishJob(r.id, body)};
      case Endpoint::kAdminRevoke:
      case Endpoint::kAdminPolicies: {
        // Administration: a bearer token whose SHA-256 the broker holds, compared in constant time.
        const auto& admin = config.admin_token_sha256;
        if (!admin) return {{404, EncodeError("not_found", "this broker has no admin API ([admin] token_file)")}};
        // The scheme name is case-insensitive (RFC 7235); the token is compared exactly.
        std::string scheme(authorization.substr(0, 7));
        for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const std::string token = scheme == "bearer " ? std::string(authorization.substr(7)) : std::string();
        const crypto::Digest256 got = crypto::Sha256(AsBytes(token));
        if (token.empty() || !crypto::ConstantTimeEquals(got, *admin)) {
          std::cerr << "enclave-broker: refused an admin request without a valid token\n";
          return {{401, EncodeError("unauthenticated", "a valid admin bearer token is required")}, true};
        }
        return {r.endpoint == Endpoint::kAdminRevoke ? service.AdminRevoke(body) : service.AdminActivatePolicy(body)};
      }
      case Endpoint::kAuditTiles:
        return AuditTile(r.id);
      case Endpoint::kStatus:
        break;
    }
  } catch (...) {
    std::cerr << "enclave-broker: a handler threw\n";
  }
  return {{500, EncodeError("internal", "the broker could not complete the request")}};
}

void Server::Impl::DispatchRelease(std::string_view body, std::function<void(Answer)> answer) {
  auto answered = std::make_shared<std::atomic<bool>>(false);
  auto once = [answer, answered](Answer a) {
    if (!answered->exchange(true)) answer(std::move(a));
  };
  try {
    service.Release(
        body, [once](Reply r) { once(Answer{std::move(r)}); },
        [this](std::function<void()> fn) { workers.Post(std::move(fn)); });
  } catch (...) {
    std::cerr << "enclave-broker: a handler threw\n";
    once(Answer{{500, EncodeError("internal", "the broker could not complete the request")}});
  }
}

Answer Server::Impl::AuditTile(const std::string& rel) const {
  if (config.tiles_dir.empty()) {
    return {{404, EncodeError("not_found", "this broker does not serve its audit log's tiles ([audit] serve_tiles)")}};
  }
  // A full bundle of 256 entries of at most 65,535 bytes each.
  constexpr size_t kMaxTileFile = 256 * (2 + 65535);
  auto bytes = ReadWholeFile(config.tiles_dir + "/" + rel, kMaxTileFile);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return {{404, EncodeError("not_found", "no such tile")}};
    std::cerr << "enclave-broker: reading tile " << rel << ": " << bytes.status().message() << "\n";
    return {{500, EncodeError("internal", "the tile could not be read")}};
  }
  Answer a{{200, std::string(bytes->begin(), bytes->end())}};
  // tlog-tiles: the checkpoint changes with every batch, tiles and bundles never do.
  if (rel == "checkpoint") {
    a.content_type = "text/plain; charset=utf-8";
    a.cache_control = "no-cache";
  } else {
    a.content_type = "application/octet-stream";
    a.cache_control = "public, max-age=31536000, immutable";
  }
  return a;
}

void Server::Impl::RunIo() {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      // A handler that throws (std::bad_alloc) costs its connection, not the broker.
      std::cerr << "enclave-broker: an I/O handler threw: " << e.what() << "\n";
    }
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

int Server::port() const { return impl_->port; }

Result<std::unique_ptr<Server>> Server::Create(const ServerConfig& config, Service& service) try {
  auto impl = std::make_unique<Impl>(config, service);
  SSL_CTX* ctx = impl->tls.native_handle();
  if (SSL_CTX_use_certificate_chain_file(ctx, config.certificate.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, config.private_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1)
    return InvalidInput("TLS: could not load certificate " + config.certificate + " and key " + config.private_key +
                        " (PEM, key matching the certificate)");
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 || SSL_CTX_set_max_proto_version(ctx, 0) != 1)
    return Internal("SSL_CTX_set_min_proto_version(TLS1_3_VERSION) failed");
  // Stateless servers need no TLS session resumption; it would only widen the surface.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION);
  // OpenSSL's record buffers are freed while a connection waits (idle keep-alive, slow clients).
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

  auto cannot_listen = [&config] {
    return Unavailable("cannot listen on " + config.listen + ":" + std::to_string(config.port) +
                       " (the port is in use, or the address is not this host's)");
  };
  error_code ec;
  tcp::resolver resolver(impl->ioc);
  auto endpoints = resolver.resolve(config.listen, std::to_string(config.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return cannot_listen();
  tcp::acceptor& a = impl->acceptor;
  // The first address of `listen` that binds. SO_REUSEADDR only: a restart can bind while
  // old connections are in TIME_WAIT, but a port another process listens on fails with
  // EADDRINUSE (exit 10). Never SO_REUSEPORT, with which a second broker would bind the
  // same port and take a share of the connections.
  for (const auto& entry : endpoints) {
    error_code ignored;
    if (a.is_open()) a.close(ignored);
    a.open(entry.endpoint().protocol(), ec);
    if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) a.bind(entry.endpoint(), ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) break;
  }
  if (ec) return cannot_listen();
  impl->port = a.local_endpoint(ec).port();
  if (ec || impl->port <= 0) return cannot_listen();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
} catch (const std::exception& e) {
  return Internal(std::string("HTTPS server setup failed: ") + e.what());
}

Status Server::Run() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopping) return OkStatus();
  }
  s.workers.Start(s.config.threads);
  asio::post(s.acceptor.get_executor(), [&s] { s.DoAccept(); });
  std::vector<std::thread> io;
  for (int i = 1; i < kIoThreads; ++i) io.emplace_back([&s] { s.RunIo(); });
  s.RunIo();
  for (auto& t : io) t.join();
  s.workers.Shutdown();
  return OkStatus();
}

void Server::Stop() {
  Impl& s = *impl_;
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    for (auto& [ptr, weak] : s.live) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  asio::post(s.acceptor.get_executor(), [&s] {
    error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
  });
  for (auto& c : live) asio::post(c->executor(), [c] { c->OnStop(); });
}

}  // namespace enclave::broker
