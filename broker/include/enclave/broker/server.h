// The HTTPS front of the broker (Boost.Beast's HTTP/1.1 parser over Boost.Asio and
// OpenSSL): TLS 1.3 only, the JSON API under /v1 (docs/protocol.md), with the limits that
// keep a hostile client from costing more than a bounded share of the broker
// (docs/protocol.md, "HTTP limits"):
//   - connections: at most max_connections in all (then the broker stops accepting and new
//     ones wait in the kernel's backlog) and max_connections_per_peer per client address
//     (more are closed at once);
//   - a head (request line and fields) of at most max_header_bytes and max_header_fields
//     (431); it must arrive within header_timeout_s of the connection (TLS handshake
//     included) or of its first byte on a kept-alive connection, however slowly it
//     trickles; every read and write times out (read_timeout_s, write_timeout_s), an
//     idle kept-alive connection after keep_alive_s, a body after body_timeout_s;
//   - POST bodies need Content-Length and Content-Type application/json and a
//     per-endpoint size limit, checked before the body is read (411, 415, 413); a refusal
//     before the body closes the connection;
//   - connections wait for their next bytes without a thread: a few I/O threads serve
//     them all and answer GET /v1/status themselves; at most threads + max_queued
//     requests past their head are in the broker at once (bodies being read, waiting for
//     or run by one of `threads` workers), the next ones wait with their body unread;
//   - every handler answers JSON; an exception in one is a 500, never a crash.
#pragma once

#include <memory>

#include "enclave/broker/config.h"
#include "enclave/broker/service.h"
#include "enclave/common/status.h"

namespace enclave::broker {

class Server {
 public:
  // Loads the certificate and key, restricts the TLS context to TLS 1.3, and binds.
  static Result<std::unique_ptr<Server>> Create(const ServerConfig& config, Service& service);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Serves until Stop(); returns an error when the listener fails.
  Status Run();
  // Safe from another thread (not from a signal handler), and more than once: stops
  // accepting, closes idle connections, lets the requests in flight finish; Run returns
  // once they have.
  void Stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace enclave::broker
