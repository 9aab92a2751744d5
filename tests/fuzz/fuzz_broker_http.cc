// libFuzzer target: the bytes a client sends on one connection to the broker's server,
// read as broker/src/server.cc reads them (broker/internal/http_request.h): Beast's
// request parser with small head limits (512 bytes, 12 fields), fed in pieces whose size
// the first input byte picks, every head through Admit, and the admitted bodies read, one
// request after another until a refusal ends the connection.
// Invariants: no crash, leak or out-of-bounds read; a head is never complete past its byte
// or field limit; every refusal is one of the documented statuses with a code; an admitted
// request has a route, a body within the endpoint's limit, and exactly that many body bytes;
// a GET of the audit log's tiles names the checkpoint or a tile path in canonical form.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <boost/beast/http/error.hpp>

#include "enclave/audit/tiles.h"
#include "enclave/broker/internal/http_request.h"

using namespace enclave::broker::internal;

namespace {

constexpr size_t kMaxBody = 4096;

void Require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = data[0] == 0 ? size : 1 + data[0] % 64;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  HeadLimits limits;
  limits.max_header_bytes = 512;
  limits.max_header_fields = 12;

  std::string pending;  // read but not consumed, as the server's buffer
  size_t at = 0;
  for (int requests = 0; requests < 100; ++requests) {
    RequestParser parser(limits);
    size_t head_bytes = 0;
    bool admitted_checked = false;
    Admitted admitted;
    for (;;) {
      if (parser.is_header_done() && !admitted_checked) {
        admitted_checked = true;
        Require(head_bytes <= limits.max_header_bytes);
        Require(parser.head().fields <= limits.max_header_fields);
        Admission a = Admit(parser.head(), kMaxBody);
        if (!a.admitted) {
          const int s = a.refusal.status;
          Require(s == 400 || s == 404 || s == 405 || s == 411 || s == 413 || s == 415);
          Require(!a.refusal.code.empty() && !a.refusal.message.empty());
          return 0;  // the connection closes
        }
        admitted = *a.admitted;
        if (admitted.endpoint == Endpoint::kStatus) {
          Require(admitted.body_bytes == 0 && parser.is_done());
        } else if (admitted.endpoint == Endpoint::kAuditTiles) {
          // A GET without a body, for the checkpoint or a tile path in canonical form.
          Require(admitted.body_bytes == 0 && parser.is_done() && parser.head().method == "GET");
          auto tile = enclave::audit::ParseTilePath(admitted.id);
          Require(admitted.id == "checkpoint" || (tile.ok() && enclave::audit::TilePath(*tile) == admitted.id));
        } else {
          Endpoint e;
          std::string id;
          const std::string path = parser.head().target.substr(0, parser.head().target.find('?'));
          const size_t limit = BodyLimit(path, kMaxBody, &e, &id);
          Require(limit > 0 && limit <= kMaxBody && e == admitted.endpoint && id == admitted.id);
          Require(admitted.body_bytes <= limit);
        }
      }
      if (parser.is_done()) {
        Require(admitted_checked && parser.body().size() == admitted.body_bytes);
        break;  // the next request
      }
      if (pending.empty()) {
        if (at >= input.size()) return 0;  // the client stopped sending
        pending += input.substr(at, step);
        at += step;
      }
      boost::beast::error_code ec;
      const size_t used = parser.Put(boost::asio::buffer(pending), ec);
      Require(used <= pending.size());
      if (!parser.is_header_done() || !admitted_checked) head_bytes += used;
      pending.erase(0, used);
      if (ec == boost::beast::http::error::need_more) {
        if (at >= input.size()) return 0;
        pending += input.substr(at, step);
        at += step;
        continue;
      }
      if (ec) {
        Require(!admitted_checked || parser.is_header_done());
        const Refusal r = RefusalForParseError(parser, ec, limits);
        Require(r.status == 400 || r.status == 411 || r.status == 431);
        Require(!r.code.empty() && !r.message.empty());
        if (parser.too_many_fields()) Require(r.status == 431);
        return 0;
      }
    }
  }
  return 0;
}
