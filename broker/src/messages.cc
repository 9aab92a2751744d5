#include "enclave/broker/messages.h"

#include <algorithm>
#include <set>

#include "enclave/audit/event.h"
#include "enclave/common/bytes.h"

namespace enclave::broker {
namespace {

using json = nlohmann::json;

Status ExactKeys(const json& j, std::string_view what, const std::set<std::string>& keys) {
  for (const auto& [k, v] : j.items()) {
    if (!keys.count(k)) return InvalidInput(std::string(what) + ": unknown field '" + k + "'");
  }
  for (const auto& k : keys) {
    if (!j.contains(k)) return InvalidInput(std::string(what) + ": missing field '" + k + "'");
  }
  return OkStatus();
}

Result<std::string> Str(const json& j, std::string_view what, const std::string& key) {
  const json& v = j.at(key);
  if (!v.is_string()) return InvalidInput(std::string(what) + ": field '" + key + "' must be a string");
  return v.get<std::string>();
}

Result<int64_t> Int(const json& j, std::string_view what, const std::string& key) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) return InvalidInput(std::string(what) + ": field '" + key + "' must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return InvalidInput(std::string(what) + ": field '" + key + "' is out of range");
  return v.get<int64_t>();
}

Result<std::string> HostId(const json& j, std::string_view what) {
  ASSIGN_OR_RETURN(std::string id, Str(j, what, "host_id"));
  if (!IsLowerHexId(id)) return InvalidInput(std::string(what) + ": field 'host_id' must be 32 lowercase hex digits");
  return id;
}

// Lower-case hex of min..max bytes.
Result<std::vector<uint8_t>> LowerHexBytes(const json& j, std::string_view what, const std::string& key, size_t min,
                                           size_t max) {
  ASSIGN_OR_RETURN(std::string hex, Str(j, what, key));
  const bool lower = std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  auto bytes = HexDecode(hex);
  if (!lower || !bytes.ok() || bytes->size() < min || bytes->size() > max) {
    const std::string size = min == max ? std::to_string(min) : std::to_string(min) + ".." + std::to_string(max);
    return InvalidInput(std::string(what) + ": field '" + key + "' must be " + size + " bytes of lower-case hex");
  }
  return std::move(bytes).value();
}

}  // namespace

bool IsLowerHexId(std::string_view s) {
  if (s.size() != kIdHexChars) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsJsonContentType(std::string_view value) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  std::string_view type = trim(value.substr(0, value.find(';')));
  constexpr std::string_view kJson = "application/json";
  if (type.size() != kJson.size()) return false;
  for (size_t i = 0; i < kJson.size(); ++i) {
    char c = type[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kJson[i]) return false;
  }
  return true;
}

Result<json> ParseObject(std::string_view body, std::string_view what) {
  ASSIGN_OR_RETURN(json j, audit::ParseStrictJson(body, what));
  if (!j.is_object()) return InvalidInput(std::string(what) + ": not a JSON object");
  return j;
}

Result<NonceRequest> ParseNonceRequest(std::string_view body) {
  constexpr std::string_view kWhat = "nonce request";
  ASSIGN_OR_RETURN(json j, ParseObject(body, kWhat));
  // The one field of the unsigned form first, so that such a request is told what it lacks.
  if (j.contains("host_id") && j.size() == 1)
    return InvalidInput("nonce request: missing fields 'salt', 'attest' and 'signature': a nonce request must be "
                        "signed with the host's AK (docs/protocol.md, \"Signed nonce requests\")");
  RETURN_IF_ERROR(ExactKeys(j, kWhat, {"host_id", "salt", "attest", "signature"}));
  NonceRequest r;
  ASSIGN_OR_RETURN(r.host_id, HostId(j, kWhat));
  ASSIGN_OR_RETURN(r.signed_request.salt,
                   LowerHexBytes(j, kWhat, "salt", attest::kNonceRequestSaltBytes, attest::kNonceRequestSaltBytes));
  ASSIGN_OR_RETURN(r.signed_request.attest, LowerHexBytes(j, kWhat, "attest", 1, 1024));
  ASSIGN_OR_RETURN(r.signed_request.signature, LowerHexBytes(j, kWhat, "signature", 1, 1024));
  return r;
}

std::string EncodeNonceRequest(const NonceRequest& r) {
  return json{{"host_id", r.host_id},
              {"salt", HexEncode(r.signed_request.salt)},
              {"attest", HexEncode(r.signed_request.attest)},
              {"signature", HexEncode(r.signed_request.signature)}}
      .dump();
}

std::string EncodeNonceIssued(const NonceIssued& n) {
  return json{{"nonce", HexEncode(n.nonce)},         {"host_id", n.host_id},
              {"issued_at", n.issued_at},            {"expires_at", n.expires_at},
              {"pcr_selection", n.pcr_selection}}
      .dump();
}

Result<NonceIssued> ParseNonceIssued(std::string_view body) {
  constexpr std::string_view kWhat = "nonce answer";
  ASSIGN_OR_RETURN(json j, ParseObject(body, kWhat));
  RETURN_IF_ERROR(ExactKeys(j, kWhat, {"nonce", "host_id", "issued_at", "expires_at", "pcr_selection"}));
  NonceIssued n;
  ASSIGN_OR_RETURN(std::string hex, Str(j, kWhat, "nonce"));
  auto nonce = HexDecode(hex);
  if (!nonce.ok() || nonce->size() != kNonceBytes)
    return InvalidInput(std::string(kWhat) + ": field 'nonce' must be 32 bytes of hex");
  n.nonce = std::move(nonce).value();
  ASSIGN_OR_RETURN(n.host_id, HostId(j, kWhat));
  ASSIGN_OR_RETURN(n.issued_at, Int(j, kWhat, "issued_at"));
  ASSIGN_OR_RETURN(n.expires_at, Int(j, kWhat, "expires_at"));
  ASSIGN_OR_RETURN(n.pcr_selection, Str(j, kWhat, "pcr_selection"));
  return n;
}

std::string EncodeEnrolmentChallenge(const EnrolmentChallenge& c) {
  // The challenge bundle is our own encoder's output: valid JSON by construction.
  return json{{"challenge_id", c.challenge_id},
              {"host_id", c.host_id},
              {"expires_at", c.expires_at},
              {"challenge", json::parse(c.challenge_bundle)}}
      .dump();
}

Result<EnrolmentChallenge> ParseEnrolmentChallenge(std::string_view body) {
  constexpr std::string_view kWhat = "enrolment answer";
  ASSIGN_OR_RETURN(json j, ParseObject(body, kWhat));
  RETURN_IF_ERROR(ExactKeys(j, kWhat, {"challenge_id", "host_id", "expires_at", "challenge"}));
  EnrolmentChallenge c;
  ASSIGN_OR_RETURN(c.challenge_id, Str(j, kWhat, "challenge_id"));
  if (!IsLowerHexId(c.challenge_id))
    return InvalidInput(std::string(kWhat) + ": field 'challenge_id' must be 32 lowercase hex digits");
  ASSIGN_OR_RETURN(c.host_id, HostId(j, kWhat));
  ASSIGN_OR_RETURN(c.expires_at, Int(j, kWhat, "expires_at"));
  if (!j.at("challenge").is_object()) return InvalidInput(std::string(kWhat) + ": field 'challenge' must be an object");
  c.challenge_bundle = j.at("challenge").dump();
  return c;
}

std::string EncodeError(std::string_view code, std::string_view message) {
  return json{{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace enclave::broker
