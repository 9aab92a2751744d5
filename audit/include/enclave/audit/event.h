// Typed audit events. Every log entry is one JSON object (docs/formats/audit-log.md,
// "Entries"):
//   {"v":1,"seq":N,"type":T,"time":"2024-05-01T12:00:00.000Z","actor":A, <fields of T>}
// Each type has a closed set of fields (unknown fields are refused), so no field can carry
// key material; strings may not contain control characters; duplicate keys are refused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::audit {

enum class EventType : uint8_t {
  kHostEnrolled,        // "host.enrolled"
  kAttestationVerdict,  // "attestation.verdict"
  kKeyReleased,         // "key.released"
  kLeaseRenewed,        // "lease.renewed"
  kRevoked,             // "revoked"
  kPolicyActivated,     // "policy.activated"
  kJobStarted,          // "job.started"
  kJobFinished,         // "job.finished"
  kReleaseRefused,      // "release.refused"
};

std::string_view EventTypeName(EventType type);
Result<EventType> ParseEventType(std::string_view name);
std::vector<std::string_view> AllEventTypeNames();

struct Event {
  EventType type = EventType::kHostEnrolled;
  std::string time;  // RFC 3339 UTC ("...Z"); empty: the writer stamps the append time
  std::string actor;
  nlohmann::json fields = nlohmann::json::object();  // the type's own fields
};

// One stored entry: the event plus its position.
struct Entry {
  uint64_t seq = 0;
  int64_t time_ms = 0;  // `event.time` parsed
  Event event;
};

struct CheckOutcome {
  std::string check;   // e.g. "quote.signature", "pcr.7", "ima.policy"
  bool ok = false;
  std::string reason;  // why it failed, or what was checked
};

// Builders for the broker (each result still passes ValidateEvent before it is logged).
Event HostEnrolled(std::string actor, std::string host, std::string ek_cert_sha256, std::string ak_public_sha256);
Event AttestationVerdict(std::string actor, std::string host, bool accepted, std::vector<CheckOutcome> checks,
                         std::string job_digest, std::string policy_digest);
Event KeyReleased(std::string actor, std::string dataset_id, std::string lease_id, std::string host,
                  std::string job_digest, std::string expires);
Event LeaseRenewed(std::string actor, std::string lease_id, std::string host, std::string expires);
// A key release the data-use policy (or the job's identity) refused after the evidence
// passed; `reason` lists every broken rule.
Event ReleaseRefused(std::string actor, std::string host, std::string job_id, std::string job_digest,
                     std::vector<std::string> datasets, std::string policy_id, std::string policy_digest,
                     std::string reason);
Event Revoked(std::string actor, std::string subject, std::string subject_id, std::string reason);
Event PolicyActivated(std::string actor, std::string policy_id, std::string policy_digest, std::string signer);
Event JobStarted(std::string actor, std::string job_digest, std::string host, std::vector<std::string> datasets);
Event JobFinished(std::string actor, std::string job_digest, std::string host, std::vector<std::string> dataset_digests,
                  std::string model_digest, std::map<std::string, double> metrics, std::string report_digest,
                  std::string report_signature);

// Checks the fields against the type's schema; the message names the field.
Status ValidateEvent(const Event& event);

// The entry bytes for position `seq`: compact JSON, keys in byte order.
Result<std::vector<uint8_t>> SerializeEntry(const Event& event, uint64_t seq);
// What verification needs of an entry. CheckEntry applies every check ParseEntry applies
// (RFC 8259, UTF-8, no duplicate keys, nesting depth <= 8, v = 1, the type's closed schema)
// to the bytes in one pass, without building a JSON tree: verification calls it for every
// entry of the log.
struct EntrySummary {
  uint64_t seq = 0;
  int64_t time_ms = 0;
  EventType type = EventType::kHostEnrolled;
};
Result<EntrySummary> CheckEntry(ByteSpan bytes);
// CheckEntry, then the entry as a tree (the fuzzed parser). Accepts exactly what CheckEntry accepts.
Result<Entry> ParseEntry(ByteSpan bytes);
// An event from JSON given by a user (enclave-audit append): {"type","actor",["time"],fields...}.
Result<Event> EventFromJson(const nlohmann::json& j);

// Strict JSON parsing shared with the state and proof files: no duplicate keys, depth limit.
Result<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view where);

// "YYYY-MM-DDTHH:MM:SS[.fraction]Z" -> Unix milliseconds.
Result<int64_t> ParseRfc3339Utc(std::string_view text);

}  // namespace enclave::audit
