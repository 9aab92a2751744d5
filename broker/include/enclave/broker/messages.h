// The broker's own JSON messages (docs/protocol.md). Bodies that are attestation bundles
// (enrolment bundle, activation response, evidence bundle) are parsed by attest/bundle.h;
// this file holds everything else a client sends, and the responses. Parsing is strict
// (audit::ParseStrictJson: RFC 8259, no duplicate keys, bounded depth; then exactly the
// listed keys with the listed types) and errors are InvalidInput naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/attest/request_signature.h"
#include "enclave/common/status.h"

namespace enclave::broker {

// 16 random bytes as 32 lowercase hex digits: challenge ids.
inline constexpr size_t kIdHexChars = 32;
// A host id: the first 16 bytes of SHA-256(EK TPM2B_PUBLIC), 32 lowercase hex digits.
inline constexpr size_t kHostIdHexChars = 32;
inline constexpr size_t kNonceBytes = 32;

// Per-endpoint body limits (the server's max_body_bytes bounds the evidence endpoint).
inline constexpr size_t kMaxEnrolmentBody = 256u << 10;
inline constexpr size_t kMaxActivationBody = 16u << 10;
inline constexpr size_t kMaxNonceRequestBody = 4u << 10;

// True for exactly 32 lowercase hex digits.
bool IsLowerHexId(std::string_view s);

// A Content-Type header value that names JSON: "application/json", optionally followed
// by parameters ("; charset=utf-8"); case-insensitive type, nothing else.
bool IsJsonContentType(std::string_view value);

// POST /v1/nonces: {"host_id": HOSTID, "salt": HEX, "attest": HEX, "signature": HEX}, the
// request signed with the host's AK (attest/request_signature.h, docs/protocol.md).
struct NonceRequest {
  std::string host_id;
  attest::SignedNonceRequest signed_request;
};
Result<NonceRequest> ParseNonceRequest(std::string_view body);
std::string EncodeNonceRequest(const NonceRequest& request);

// 201 answer of POST /v1/nonces.
struct NonceIssued {
  std::vector<uint8_t> nonce;  // kNonceBytes
  std::string host_id;
  int64_t issued_at = 0;
  int64_t expires_at = 0;
  std::string pcr_selection;  // the PCRs the quote must cover, "sha256:0,1,2+sha1:10"
};
std::string EncodeNonceIssued(const NonceIssued& n);
Result<NonceIssued> ParseNonceIssued(std::string_view body);

// 201 answer of POST /v1/enrolments: the challenge bundle (attest/bundle.h) as a JSON
// object under "challenge".
struct EnrolmentChallenge {
  std::string challenge_id;
  std::string host_id;
  int64_t expires_at = 0;
  std::string challenge_bundle;  // attest::EncodeChallengeBundle text
};
std::string EncodeEnrolmentChallenge(const EnrolmentChallenge& c);
Result<EnrolmentChallenge> ParseEnrolmentChallenge(std::string_view body);

// Error answers: {"error": {"code": CODE, "message": TEXT}} (+ "audit_index" when the
// decision was logged). CODE is the canonical code name ("invalid_input", ...).
std::string EncodeError(std::string_view code, std::string_view message);

// Test and fuzz hook: the strict JSON object parser every message here uses.
Result<nlohmann::json> ParseObject(std::string_view body, std::string_view what);

}  // namespace enclave::broker
