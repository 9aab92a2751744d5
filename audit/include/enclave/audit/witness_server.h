// The witness on HTTP/1.1 (C2SP tlog-witness): POST /add-checkpoint, plain HTTP. The
// protocol needs no transport security (requests carry the log's signature, answers are
// the witness's signatures); to reach it over a network, put a TLS terminator in front
// (docs/formats/witness.md, "Transport"). Keep-alive connections, a deadline on every
// request and every answer, at most `threads` connections served at once and
// `max_queued` waiting; others are closed at once.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "enclave/audit/witness.h"
#include "enclave/common/status.h"

namespace enclave::audit {

struct WitnessServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address
  int port = 0;                    // 0: any free port
  int threads = 4;
  int max_queued = 64;
  int read_timeout_s = 10;  // for each request, from its first byte (or from the last answer)
  int write_timeout_s = 10;
  int max_requests_per_connection = 100;
};

class WitnessServer {
 public:
  // Binds and listens; Run() serves.
  static Result<std::unique_ptr<WitnessServer>> Create(Witness& witness, const WitnessServerOptions& options);
  ~WitnessServer();
  int port() const { return port_; }
  // Serves until Stop(); then closes every connection and returns.
  Status Run();
  // From any thread (a signal waiter).
  void Stop();

 private:
  struct Impl;
  WitnessServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace enclave::audit
