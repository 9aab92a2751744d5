// The HTTP request head as the broker's server reads it (broker/src/server.cc), apart
// from the sockets so that a unit test and a fuzz target reach it: Boost.Beast's
// request parser with the header limits of [server], and the rules a head must pass
// before its body is read (docs/protocol.md, "Request rules", "HTTP limits").
// Internal to broker/: only server.cc and the tests include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>

namespace enclave::broker::internal {

struct HeadLimits {
  size_t max_header_bytes = 8192;  // request line and fields, CRLFs included
  size_t max_header_fields = 64;
};

// What the broker keeps of a head: method, target and the four fields it reads (the
// first of each). Every other field is counted and dropped, so a head never costs more
// than the bytes of it the read buffer holds (at most max_header_bytes).
struct RequestHead {
  std::string method;
  std::string target;
  int version = 11;
  size_t fields = 0;
  bool content_length_seen = false;
  std::optional<uint64_t> content_length;
  bool transfer_encoding = false;
  bool keep_alive = false;  // the client's wish (HTTP version, Connection); set with the head
  std::string content_type, authorization, expect;
};

// Beast's parser with a field count, a body kept in a std::string, and no body limit of
// its own: the endpoint's limit is checked by Admit before the body is read.
class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  explicit RequestParser(const HeadLimits& limits);

  // put() with the head's byte limit made exact: Beast 1.74 applies header_limit to the
  // request line and to the fields separately when a head arrives in one piece (up to
  // twice the limit), so no more than the head's remaining allowance is presented to it,
  // and a head that does not end within it is header_limit. Call this, never put().
  size_t Put(boost::asio::const_buffer bytes, boost::beast::error_code& ec);

  const RequestHead& head() const { return head_; }
  std::string& body() { return body_; }
  bool too_many_fields() const { return too_many_fields_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb, string_view method, string_view target, int version,
                       error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<uint64_t>& content_length, error_code& ec) override;
  size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(uint64_t, string_view, error_code& ec) override;
  size_t on_chunk_body_impl(uint64_t, string_view, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  size_t max_bytes_;
  size_t max_fields_;
  size_t head_bytes_ = 0;  // consumed before the head was complete
  RequestHead head_;
  std::string body_;
  bool too_many_fields_ = false;
  bool seen_content_type_ = false, seen_authorization_ = false, seen_expect_ = false;
};

// A refusal: the HTTP status, the error code and message of the JSON body (EncodeError).
struct Refusal {
  int status = 0;
  std::string code;
  std::string message;
};

// The answer to a head the parser stopped on with `ec` (431, 411, 400).
Refusal RefusalForParseError(const RequestParser& parser, boost::beast::error_code ec, const HeadLimits& limits);

enum class Endpoint {
  kStatus,
  kEnrol,
  kActivate,
  kNonce,
  kAttest,
  kRelease,
  kRenew,
  kRendezvous,
  kFinishJob,
  kAdminRevoke,
  kAdminPolicies,
  kAuditTiles,  // GET /v1/audit-log/<checkpoint or tile path>; the id is that path
};

// A head that passed every rule: where it goes, the id in its path ("" for none), and
// the length of its body (≤ the endpoint's limit).
struct Admitted {
  Endpoint endpoint = Endpoint::kStatus;
  std::string id;
  uint64_t body_bytes = 0;
};

// The request rules, in the order docs/protocol.md lists them: method, path, length,
// size, type. Exactly one of the two results is set.
struct Admission {
  std::optional<Admitted> admitted;
  Refusal refusal;
};
Admission Admit(const RequestHead& head, size_t max_body_bytes);

// The body limit of the POST endpoint at `path` (no query), 0 for an unknown path; the
// id in the path goes to *id.
size_t BodyLimit(std::string_view path, size_t max_body_bytes, Endpoint* endpoint, std::string* id);

}  // namespace enclave::broker::internal
