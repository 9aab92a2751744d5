#include "enclave/audit/witness_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "enclave/audit/internal/witness_http.h"

namespace enclave::audit {
namespace internal {

namespace http = boost::beast::http;

struct HttpRequestReader::Impl {
  std::optional<http::request_parser<http::string_body>> parser;
  void Reset() {
    parser.emplace();
    parser->header_limit(kMaxHeadBytes);
    parser->body_limit(kMaxAddCheckpointBytes);
    parser->eager(true);
  }
};

HttpRequestReader::HttpRequestReader() : impl_(std::make_unique<Impl>()) { impl_->Reset(); }
HttpRequestReader::~HttpRequestReader() = default;

size_t HttpRequestReader::Feed(std::string_view bytes) {
  if (error_status_ != 0 || done() || bytes.empty()) return 0;
  boost::beast::error_code ec;
  const size_t n = impl_->parser->put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec == http::error::need_more) return n;
  if (ec == http::error::header_limit) {
    error_status_ = 431;
    error_ = "the request head is longer than 8 KiB";
  } else if (ec == http::error::body_limit) {
    error_status_ = 413;
    error_ = "the request body is longer than 32 KiB";
  } else if (ec) {
    error_status_ = 400;
    error_ = "not an HTTP/1.1 request: " + ec.message();
  }
  return n;
}

bool HttpRequestReader::header_done() const { return impl_->parser->is_header_done(); }
bool HttpRequestReader::done() const { return impl_->parser->is_done(); }

bool HttpRequestReader::ExpectsContinue() const {
  return header_done() && boost::beast::iequals(impl_->parser->get()[http::field::expect], "100-continue");
}

HttpRequest HttpRequestReader::Take() {
  auto& m = impl_->parser->get();
  HttpRequest r;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.keep_alive = m.keep_alive();
  r.expect_continue = boost::beast::iequals(m[http::field::expect], "100-continue");
  const auto encoding = m[http::field::content_encoding];
  r.content_encoding = !encoding.empty() && !boost::beast::iequals(encoding, "identity");
  r.body = std::move(m.body());
  impl_->Reset();
  return r;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
  }
}

HttpResponse Route(const HttpRequest& request, const std::function<WitnessAnswer(std::string_view)>& add_checkpoint) {
  HttpResponse r;
  if (request.target != "/add-checkpoint") {
    r.status = 404;
    r.body = "not found: this witness serves POST /add-checkpoint only\n";
  } else if (request.method != "POST") {
    r.status = 405;
    r.allow_post = true;
    r.body = "add-checkpoint is a POST\n";
  } else if (request.content_encoding) {
    r.status = 415;
    r.body = "a Content-Encoding is not accepted\n";
  } else {
    WitnessAnswer a = add_checkpoint(request.body);
    r.status = a.status;
    r.content_type = std::move(a.content_type);
    r.body = std::move(a.body);
  }
  return r;
}

std::string SerializeResponse(const HttpResponse& response) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + std::string(ReasonPhrase(response.status)) +
                    "\r\nContent-Type: " + response.content_type +
                    "\r\nContent-Length: " + std::to_string(response.body.size()) + "\r\n";
  if (response.allow_post) out += "Allow: POST\r\n";
  out += response.close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  return out + response.body;
}

}  // namespace internal

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunk = 16 * 1024;

}  // namespace

struct WitnessServer::Impl {
  Impl(Witness& w, const WitnessServerOptions& o) : witness(w), options(o) {}
  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake[0] >= 0) ::close(wake[0]);
    if (wake[1] >= 0) ::close(wake[1]);
  }

  // Waits until fd is ready for `events` or the deadline passes or Stop() was called.
  bool WaitFor(int fd, short events, Clock::time_point deadline) {
    for (;;) {
      if (stopping) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p[2] = {{fd, events, 0}, {wake[0], POLLIN, 0}};
      const int n = ::poll(p, 2, static_cast<int>(std::min<long long>(left, 1000)));
      if (n < 0 && errno != EINTR) return false;
      if (n > 0 && (p[1].revents & POLLIN)) return false;
      if (n > 0 && p[0].revents != 0) return true;
    }
  }

  bool WriteAll(int fd, const std::string& data) {
    const auto deadline = Clock::now() + std::chrono::seconds(options.write_timeout_s);
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLOUT, deadline)) continue;
      return false;
    }
    return true;
  }

  // After a closing answer: stop sending, and read what the client still sends for a
  // moment, so that unread bytes do not make the kernel reset the connection before the
  // client has read the answer.
  void Linger(int fd) {
    ::shutdown(fd, SHUT_WR);
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    char buf[4096];
    while (WaitFor(fd, POLLIN, deadline)) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    }
  }

  void Serve(int fd) {
    internal::HttpRequestReader reader;
    std::string pending;
    int served = 0;
    bool sent_continue = false;
    auto deadline = Clock::now() + std::chrono::seconds(options.read_timeout_s);
    char buf[kReadChunk];
    while (!stopping) {
      if (!pending.empty()) pending.erase(0, reader.Feed(pending));
      if (reader.error_status() != 0) {
        internal::HttpResponse r;
        r.status = reader.error_status();
        r.body = reader.error() + "\n";
        r.close = true;
        if (WriteAll(fd, internal::SerializeResponse(r))) Linger(fd);
        return;
      }
      if (reader.done()) {
        internal::HttpRequest req = reader.Take();
        sent_continue = false;
        internal::HttpResponse r =
            internal::Route(req, [this](std::string_view body) { return witness.AddCheckpoint(body); });
        r.close = !req.keep_alive || ++served >= options.max_requests_per_connection || stopping;
        if (!WriteAll(fd, internal::SerializeResponse(r))) return;
        if (r.close) return Linger(fd);
        deadline = Clock::now() + std::chrono::seconds(options.read_timeout_s);
        continue;  // the next request may already be in `pending`
      }
      if (reader.ExpectsContinue() && !sent_continue) {
        if (!WriteAll(fd, "HTTP/1.1 100 Continue\r\n\r\n")) return;
        sent_continue = true;
      }
      if (!WaitFor(fd, POLLIN, deadline)) {
        // Silence between requests ends the connection quietly; inside one, with a 408.
        if (!pending.empty() || reader.header_done()) {
          internal::HttpResponse r;
          r.status = 408;
          r.body = "the request did not arrive in time\n";
          r.close = true;
          if (WriteAll(fd, internal::SerializeResponse(r))) Linger(fd);
        }
        return;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return;
      pending.append(buf, static_cast<size_t>(n));
    }
  }

  void Work() {
    for (;;) {
      int fd = -1;
      {
        std::unique_lock<std::mutex> lock(mu);
        ready.wait(lock, [&] { return !queue.empty() || stopping; });
        if (stopping) return;
        fd = queue.front();
        queue.pop_front();
      }
      Serve(fd);
      ::close(fd);
    }
  }

  Witness& witness;
  const WitnessServerOptions options;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable ready;
  std::deque<int> queue;
};

Result<std::unique_ptr<WitnessServer>> WitnessServer::Create(Witness& witness, const WitnessServerOptions& options) {
  if (options.threads < 1 || options.threads > 256 || options.max_queued < 0 || options.read_timeout_s < 1 ||
      options.write_timeout_s < 1 || options.max_requests_per_connection < 1 || options.port < 0 ||
      options.port > 65535) {
    return InvalidInput("witness server options out of range");
  }
  auto impl = std::make_unique<Impl>(witness, options);
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET;
  if (auto* a4 = reinterpret_cast<sockaddr_in*>(&addr); ::inet_pton(AF_INET, options.host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(options.port));
    len = sizeof(sockaddr_in);
  } else if (auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
             ::inet_pton(AF_INET6, options.host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(options.port));
    len = sizeof(sockaddr_in6);
    family = AF_INET6;
  } else {
    return InvalidInput("--listen: '" + options.host + "' is not an IPv4 or IPv6 address");
  }
  impl->listen_fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return ErrnoStatus("socket", errno);
  const int one = 1;
  ::setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const std::string where = options.host + ":" + std::to_string(options.port);
  if (::bind(impl->listen_fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Unavailable("cannot listen on " + where + ": " + std::strerror(errno));
  }
  if (::listen(impl->listen_fd, 128) != 0) return Unavailable("listen on " + where + ": " + std::strerror(errno));
  if (::getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoStatus("getsockname", errno);
  }
  const int port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  if (::pipe2(impl->wake, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  return std::unique_ptr<WitnessServer>(new WitnessServer(std::move(impl), port));
}

WitnessServer::WitnessServer(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}
WitnessServer::~WitnessServer() = default;

void WitnessServer::Stop() {
  impl_->stopping = true;
  // Never read: the pipe stays readable and wakes every poll.
  (void)!::write(impl_->wake[1], "x", 1);
  impl_->ready.notify_all();
}

Status WitnessServer::Run() {
  Impl& s = *impl_;
  std::vector<std::thread> workers;
  for (int i = 0; i < s.options.threads; ++i) workers.emplace_back([&s] { s.Work(); });
  Status result;
  while (!s.stopping) {
    pollfd p[2] = {{s.listen_fd, POLLIN, 0}, {s.wake[0], POLLIN, 0}};
    const int n = ::poll(p, 2, 1000);
    if (n < 0 && errno != EINTR) {
      result = ErrnoStatus("poll", errno);
      break;
    }
    if (n <= 0 || !(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(s.listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // out of descriptors: let some close
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.queue.size() >= static_cast<size_t>(s.options.max_queued)) {
      ::close(fd);  // too many waiting: the client retries
      continue;
    }
    s.queue.push_back(fd);
    s.ready.notify_one();
  }
  Stop();
  for (auto& t : workers) t.join();
  for (int fd : s.queue) ::close(fd);
  s.queue.clear();
  return result;
}

}  // namespace enclave::audit
