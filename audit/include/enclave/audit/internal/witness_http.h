// The witness's HTTP/1.1 requests apart from the sockets, so that a test and a fuzz target
// reach them: Boost.Beast's request parser with the witness's limits (an 8 KiB head, a body
// of at most kMaxAddCheckpointBytes, chunked or not, never decompressed), and the routing
// of a complete request (docs/formats/witness.md, "HTTP"). Internal to audit/: only
// witness_server.cc, the tests and the fuzz target include it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "enclave/audit/witness.h"

namespace enclave::audit::internal {

inline constexpr size_t kMaxHeadBytes = 8192;

struct HttpRequest {
  std::string method;
  std::string target;
  std::string body;
  bool keep_alive = false;
  bool expect_continue = false;  // "Expect: 100-continue"
  bool content_encoding = false;  // a Content-Encoding other than identity
};

// Bytes of one connection go in as they arrive; a request comes out when complete.
class HttpRequestReader {
 public:
  HttpRequestReader();
  ~HttpRequestReader();
  // Parses from `bytes`; returns how many were used (the rest belongs to a later call).
  size_t Feed(std::string_view bytes);
  bool header_done() const;
  bool done() const;
  // The head is in and asks for "100 Continue" before the body is sent.
  bool ExpectsContinue() const;
  // The status of a refusal once the bytes cannot be a request within the limits
  // (400, 413, 431), else 0.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // After done(): the request; the reader is then ready for the next one.
  HttpRequest Take();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int error_status_ = 0;
  std::string error_;
};

struct HttpResponse {
  int status = 500;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  bool close = false;  // the connection ends after this answer
  bool allow_post = false;  // 405: an "Allow: POST" field
};

// POST /add-checkpoint goes to `add_checkpoint`; anything else is refused (404, 405, 415).
HttpResponse Route(const HttpRequest& request, const std::function<WitnessAnswer(std::string_view)>& add_checkpoint);
std::string SerializeResponse(const HttpResponse& response);
std::string_view ReasonPhrase(int status);

}  // namespace enclave::audit::internal
