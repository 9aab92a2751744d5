#include "enclave/broker/internal/http_request.h"

#include <algorithm>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "enclave/audit/tiles.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"

namespace enclave::broker::internal {
namespace http = boost::beast::http;

RequestParser::RequestParser(const HeadLimits& limits)
    : max_bytes_(limits.max_header_bytes), max_fields_(limits.max_header_fields) {
  header_limit(static_cast<uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  // Beast's default (1 MB) would refuse a larger Content-Length before Admit applies the
  // endpoint's own limit; the body never grows past the Content-Length Admit accepted.
  // (Not boost::none: Beast 1.74 compares the length with the empty optional, and every
  // length is greater.)
  body_limit(UINT64_MAX);
  // One step per put(): the server checks a complete head (Admit) before any body byte.
  eager(false);
}

size_t RequestParser::Put(boost::asio::const_buffer bytes, boost::beast::error_code& ec) {
  if (is_header_done()) return put(bytes, ec);
  const size_t allowance = max_bytes_ - head_bytes_;
  const size_t n = std::min(bytes.size(), allowance);
  const size_t used = put(boost::asio::const_buffer(bytes.data(), n), ec);
  head_bytes_ += used;
  if (ec == http::error::need_more && bytes.size() >= allowance) ec = http::error::header_limit;
  return used;
}

void RequestParser::on_request_impl(http::verb, string_view method, string_view target, int version, error_code&) {
  head_.method.assign(method.data(), method.size());
  head_.target.assign(target.data(), target.size());
  head_.version = version;
}

void RequestParser::on_response_impl(int, string_view, int, error_code& ec) { ec = http::error::bad_version; }

void RequestParser::on_field_impl(http::field name, string_view, string_view value, error_code& ec) {
  if (++head_.fields > max_fields_) {
    too_many_fields_ = true;
    ec = http::error::header_limit;
    return;
  }
  auto keep_first = [&](std::string& out, bool& seen) {
    if (!seen) out.assign(value.data(), value.size());
    seen = true;
  };
  switch (name) {
    case http::field::content_length:
      head_.content_length_seen = true;  // beast checked it is decimal and agrees with any earlier one
      break;
    case http::field::transfer_encoding:
      head_.transfer_encoding = true;
      break;
    case http::field::content_type:
      keep_first(head_.content_type, seen_content_type_);
      break;
    case http::field::authorization:
      keep_first(head_.authorization, seen_authorization_);
      break;
    case http::field::expect:
      keep_first(head_.expect, seen_expect_);
      break;
    default:
      break;
  }
}

void RequestParser::on_header_impl(error_code&) {
  if (const auto length = content_length()) head_.content_length = *length;
  head_.keep_alive = keep_alive();
}

void RequestParser::on_body_init_impl(const boost::optional<uint64_t>& content_length, error_code& ec) {
  // Admit refused every head without a Content-Length within the endpoint's limit, so this
  // reserve is bounded by that limit; a chunked body never gets here (411 first).
  if (!content_length) {
    ec = http::error::bad_transfer_encoding;
    return;
  }
  body_.reserve(static_cast<size_t>(*content_length));
}

size_t RequestParser::on_body_impl(string_view body, error_code&) {
  body_.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_chunk_header_impl(uint64_t, string_view, error_code& ec) {
  ec = http::error::bad_transfer_encoding;
}

size_t RequestParser::on_chunk_body_impl(uint64_t, string_view, error_code& ec) {
  ec = http::error::bad_transfer_encoding;
  return 0;
}

void RequestParser::on_finish_impl(error_code&) {}

Refusal RefusalForParseError(const RequestParser& parser, boost::beast::error_code ec, const HeadLimits& limits) {
  if (parser.too_many_fields())
    return {431, "header_too_large", "the request has more than " + std::to_string(limits.max_header_fields) +
                                         " header fields"};
  if (ec == http::error::header_limit)
    return {431, "header_too_large",
            "the request line and header fields exceed " + std::to_string(limits.max_header_bytes) + " bytes"};
  // Beast refuses Transfer-Encoding after Content-Length (bad_transfer_encoding) and
  // Content-Length after a chunked Transfer-Encoding (bad_content_length): both are a
  // body framed by Transfer-Encoding, which the broker never reads.
  if (ec == http::error::bad_transfer_encoding || (ec == http::error::bad_content_length && parser.head().transfer_encoding))
    return {411, "length_required", "a POST body needs Content-Length (no chunked transfer)"};
  if (ec == http::error::bad_content_length)
    return {400, "invalid_input",
            parser.head().content_length_seen ? "Content-Length is given twice with different values"
                                              : "Content-Length is not a decimal number"};
  return {400, "bad_request", "malformed HTTP request head (" + ec.message() + ")"};
}

namespace {

// A job id in a path: [A-Za-z0-9._:-]{1,128}.
bool IsJobId(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  });
}

// `path` = prefix ID suffix with an ID that `valid` accepts: the ID, or nullopt.
template <typename Valid>
std::optional<std::string_view> Between(std::string_view path, std::string_view prefix, std::string_view suffix,
                                        Valid valid) {
  if (path.size() <= prefix.size() + suffix.size() || !path.starts_with(prefix) || !path.ends_with(suffix))
    return std::nullopt;
  std::string_view id = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  if (!valid(id)) return std::nullopt;
  return id;
}

}  // namespace

size_t BodyLimit(std::string_view path, size_t max_body, Endpoint* endpoint, std::string* id) {
  struct Fixed {
    std::string_view path;
    Endpoint endpoint;
    size_t limit;
  };
  const Fixed fixed[] = {
      {"/v1/enrolments", Endpoint::kEnrol, kMaxEnrolmentBody},
      {"/v1/nonces", Endpoint::kNonce, kMaxNonceRequestBody},
      {"/v1/attestations", Endpoint::kAttest, max_body},
      {"/v1/releases", Endpoint::kRelease, max_body},
      {"/v1/admin/revocations", Endpoint::kAdminRevoke, kMaxAdminBody},
      {"/v1/admin/policies", Endpoint::kAdminPolicies, 2 * kMaxAdminBody},
  };
  size_t limit = 0;
  std::string_view found;
  for (const Fixed& f : fixed) {
    if (path == f.path) {
      *endpoint = f.endpoint;
      limit = f.limit;
    }
  }
  struct WithId {
    std::string_view prefix, suffix;
    bool (*valid)(std::string_view);
    Endpoint endpoint;
    size_t limit;
  };
  const WithId with_id[] = {
      {"/v1/enrolments/", "/activation", IsLowerHexId, Endpoint::kActivate, kMaxActivationBody},
      {"/v1/leases/", "/renewals", IsLowerHexId, Endpoint::kRenew, max_body},
      {"/v1/jobs/", "/rendezvous", IsJobId, Endpoint::kRendezvous, kMaxRendezvousBody},
      {"/v1/jobs/", "/reports", IsJobId, Endpoint::kFinishJob, kMaxJobReportBody},
  };
  for (const WithId& w : with_id) {
    if (auto got = Between(path, w.prefix, w.suffix, w.valid)) {
      *endpoint = w.endpoint;
      found = *got;
      limit = w.limit;
    }
  }
  if (limit == 0) return 0;
  id->assign(found.data(), found.size());
  // [server] max_body_bytes caps every endpoint.
  return std::min(limit, max_body);
}

Admission Admit(const RequestHead& head, size_t max_body) {
  auto refuse = [](int status, std::string code, std::string message) {
    Admission a;
    a.refusal = {status, std::move(code), std::move(message)};
    return a;
  };
  // The path without its query; ids are compared as sent (no percent-decoding).
  const std::string_view target(head.target);
  const std::string_view path = target.substr(0, target.find('?'));
  const bool has_body = head.transfer_encoding || head.content_length.value_or(0) > 0;
  if (head.method == "GET" && path == "/v1/status") {
    if (has_body) return refuse(400, "bad_request", "GET /v1/status takes no body");
    Admission a;
    a.admitted = Admitted{Endpoint::kStatus, "", 0};
    return a;
  }
  // The log as C2SP tlog-tiles: the checkpoint and the canonical tile paths, nothing else.
  constexpr std::string_view kTilesPrefix = "/v1/audit-log/";
  if (head.method == "GET" && path.starts_with(kTilesPrefix)) {
    const std::string_view rel = path.substr(kTilesPrefix.size());
    if (rel != "checkpoint" && !audit::ParseTilePath(rel).ok()) return refuse(404, "not_found", "no such tile");
    if (has_body) return refuse(400, "bad_request", "GET /v1/audit-log/ takes no body");
    Admission a;
    a.admitted = Admitted{Endpoint::kAuditTiles, std::string(rel), 0};
    return a;
  }
  if (head.method != "POST") {
    if (head.method == "GET" || head.method == "HEAD") return refuse(404, "not_found", "no such endpoint");
    return refuse(405, "method_not_allowed", "the API takes POST (GET only for /v1/status and /v1/audit-log/)");
  }
  Admitted admitted;
  const size_t limit = BodyLimit(path, max_body, &admitted.endpoint, &admitted.id);
  if (limit == 0) return refuse(404, "not_found", "no such endpoint");
  if (!head.content_length_seen || !head.content_length || head.transfer_encoding)
    return refuse(411, "length_required", "a POST body needs Content-Length (no chunked transfer)");
  if (*head.content_length > limit)
    return refuse(413, "payload_too_large",
                  "body of " + std::to_string(*head.content_length) + " bytes exceeds this endpoint's " +
                      std::to_string(limit) + "-byte limit");
  if (!IsJsonContentType(head.content_type))
    return refuse(415, "unsupported_media_type", "Content-Type must be application/json");
  admitted.body_bytes = *head.content_length;
  Admission a;
  a.admitted = std::move(admitted);
  return a;
}

}  // namespace enclave::broker::internal
