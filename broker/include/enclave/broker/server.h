// The HTTPS front of the broker (cpp-httplib over OpenSSL): TLS 1.3 only, the JSON API
// under /v1 (docs/protocol.md), with the limits that keep a hostile client from costing
// more than a bounded share of the broker:
//   - a fixed number of worker threads and a bounded queue of accepted connections (when
//     it is full the acceptor waits, and new connections wait in the kernel's backlog);
//   - read and write timeouts on every socket operation, the TLS handshake included;
//   - POST bodies need Content-Length and Content-Type application/json, and a per-endpoint
//     size limit checked before the body is read (411, 415, 413);
//   - every handler answers JSON; an exception in one is a 500, never a crash.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "enclave/broker/config.h"
#include "enclave/broker/service.h"
#include "enclave/common/status.h"

namespace httplib {
class SSLServer;
}

namespace enclave::broker {

class Server {
 public:
  // Loads the certificate and key, restricts the TLS context to TLS 1.3, and binds.
  static Result<std::unique_ptr<Server>> Create(const ServerConfig& config, Service& service);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  // Serves until Stop(); returns an error when the listener fails.
  Status Run();
  // Safe from another thread (not from a signal handler).
  void Stop();

 private:
  Server() = default;
  void Routes(const ServerConfig& config, Service& service);
  std::unique_ptr<httplib::SSLServer> http_;
  int port_ = 0;
};

}  // namespace enclave::broker
