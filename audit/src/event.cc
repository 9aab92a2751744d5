#include "enclave/audit/event.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iterator>

#include "enclave/audit/record.h"
#include "enclave/audit/tree_head.h"
#include "strict_json.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

constexpr size_t kMaxIdLength = 256;
constexpr size_t kMaxTextLength = 2048;
constexpr size_t kMaxArray = 1024;

enum class Kind {
  kId,          // 1..256 of [A-Za-z0-9._:@/+=-]
  kText,        // 1..2048 UTF-8 characters, no control characters
  kDigest,      // "sha256:" + 64 lower-case hex digits, or 64 hex digits
  kTime,        // RFC 3339 UTC
  kVerdict,     // "accepted" | "rejected"
  kSubject,     // "host" | "lease" | "job" | "dataset" | "policy"
  kChecks,      // array of {"check":id,"ok":bool,"reason":text}
  kIdList,      // array of ids
  kDigestList,  // array of digests
  kMetrics,     // object id -> finite number
  kSignature,   // 128 hex digits (Ed25519)
  kKeyId,       // 32 lower-case hex digits (a 16-byte data key id)
  kPublicKey,   // 64 lower-case hex digits (an Ed25519 public key)
  kUint,        // non-negative integer
  kNonce,       // 2..64 lower-case hex digits, an even number (1..32 bytes)
  kClock,       // {"clock":u64,"reset_count":u32,"restart_count":u32,"safe":0|1}
  kFileList,    // array of 1..64 {"path":id,"sha256":digest}
};

struct FieldSpec {
  const char* name;
  Kind kind;
  bool required;
};

struct TypeSpec {
  EventType type;
  const char* name;
  std::vector<FieldSpec> fields;
};

const std::vector<TypeSpec>& Specs() {
  static const std::vector<TypeSpec> specs = {
      {EventType::kHostEnrolled,
       "host.enrolled",
       {{"host", Kind::kId, true}, {"ek_cert_sha256", Kind::kDigest, false}, {"ak_public_sha256", Kind::kDigest, false}}},
      {EventType::kAttestationVerdict,
       "attestation.verdict",
       {{"host", Kind::kId, true},
        {"verdict", Kind::kVerdict, true},
        {"checks", Kind::kChecks, true},
        {"job_digest", Kind::kDigest, false},
        {"policy_digest", Kind::kDigest, false},
        // The archived inputs of the appraisal (docs/formats/audit-log.md, "Archived
        // evidence"): all of them or none, see ValidateFields.
        {"evidence_sha256", Kind::kDigest, false},
        {"enrolment_sha256", Kind::kDigest, false},
        {"policy_files", Kind::kFileList, false},
        {"nonce", Kind::kNonce, false},
        {"bound_digest", Kind::kDigest, false},
        {"nonce_issued_at", Kind::kUint, false},
        {"appraised_at", Kind::kUint, false},
        {"last_clock", Kind::kClock, false},
        {"result_sha256", Kind::kDigest, false}}},
      {EventType::kKeyReleased,
       "key.released",
       {{"dataset_id", Kind::kId, true},
        {"lease_id", Kind::kId, true},
        {"host", Kind::kId, true},
        {"job_digest", Kind::kDigest, true},
        {"expires", Kind::kTime, false},
        // The broker's release decisions (docs/protocol.md): which job, which key, under
        // which data-use policy.
        {"job_id", Kind::kId, false},
        {"key_id", Kind::kKeyId, false},
        {"policy_id", Kind::kId, false},
        {"policy_digest", Kind::kDigest, false},
        {"report_key", Kind::kPublicKey, false},
        // Who asked, with which approved code (the workload digest the policy approved).
        {"requester", Kind::kText, false},
        {"workload", Kind::kDigest, false}}},
      {EventType::kLeaseRenewed,
       "lease.renewed",
       {{"lease_id", Kind::kId, true},
        {"host", Kind::kId, true},
        {"expires", Kind::kTime, true},
        {"reattest_by", Kind::kTime, false}}},
      {EventType::kRevoked,
       "revoked",
       {{"subject", Kind::kSubject, true}, {"subject_id", Kind::kId, true}, {"reason", Kind::kText, true}}},
      {EventType::kPolicyActivated,
       "policy.activated",
       {{"policy_id", Kind::kId, true},
        {"policy_digest", Kind::kDigest, true},
        {"signer", Kind::kText, true},
        {"version", Kind::kUint, false}}},
      {EventType::kJobStarted,
       "job.started",
       {{"job_digest", Kind::kDigest, true},
        {"host", Kind::kId, true},
        {"datasets", Kind::kIdList, true},
        {"dataset_digests", Kind::kDigestList, false}}},
      {EventType::kJobFinished,
       "job.finished",
       {{"job_digest", Kind::kDigest, true},
        {"host", Kind::kId, true},
        {"dataset_digests", Kind::kDigestList, true},
        {"model_digest", Kind::kDigest, true},
        {"metrics", Kind::kMetrics, false},
        {"report_digest", Kind::kDigest, true},
        {"report_signature", Kind::kSignature, true},
        {"outcome", Kind::kId, false}}},
      {EventType::kReleaseRefused,
       "release.refused",
       {{"host", Kind::kId, true},
        {"job_id", Kind::kId, true},
        {"job_digest", Kind::kDigest, true},
        {"datasets", Kind::kIdList, true},
        {"policy_id", Kind::kId, true},
        {"policy_digest", Kind::kDigest, false},
        {"reason", Kind::kText, true},
        {"requester", Kind::kText, false},
        {"workload", Kind::kDigest, false}}},
  };
  return specs;
}

const TypeSpec& SpecFor(EventType type) {
  for (const TypeSpec& s : Specs()) {
    if (s.type == type) return s;
  }
  return Specs().front();  // unreachable: every enumerator has a spec
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-';
}

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The schema checks run on the strict parser's nodes (strict_json.h): the one definition
// of a valid entry, for the writer (ValidateEvent) and for every reader.
using internal::JsonDoc;
using JKind = JsonDoc::Kind;

Status NotString(const std::string& field) { return InvalidInput("field '" + field + "' must be a string"); }

Status CheckIdText(std::string_view s, const std::string& field) {
  if (s.empty() || s.size() > kMaxIdLength) {
    return InvalidInput("field '" + field + "' must be 1.." + std::to_string(kMaxIdLength) + " characters");
  }
  for (char c : s) {
    if (!IsIdChar(c)) {
      return InvalidInput("field '" + field + "' may hold only letters, digits and . _ : @ / + = -");
    }
  }
  return OkStatus();
}

Status CheckTextText(std::string_view s, const std::string& field) {
  if (s.empty() || s.size() > kMaxTextLength) {
    return InvalidInput("field '" + field + "' must be 1.." + std::to_string(kMaxTextLength) + " bytes");
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return InvalidInput("field '" + field + "' contains a control character");
  }
  if (!internal::ValidUtf8(s)) return InvalidInput("field '" + field + "' is not valid UTF-8");
  return OkStatus();
}

Status CheckTimeText(std::string_view s, const std::string& field) {
  auto t = ParseRfc3339Utc(s);
  if (!t.ok()) return InvalidInput("field '" + field + "': " + t.status().message());
  return OkStatus();
}

Status CheckDigestText(std::string_view s, const std::string& field) {
  if (s.rfind("sha256:", 0) == 0) s.remove_prefix(7);
  if (s.size() != 64 || !IsHex(s)) {
    return InvalidInput("field '" + field + "' must be a SHA-256 digest: 64 lower-case hex digits, optionally "
                        "prefixed 'sha256:'");
  }
  return OkStatus();
}

Status CheckField(const JsonDoc& doc, uint32_t n, Kind kind, const std::string& field) {
  const JsonDoc::Node& v = doc.node(n);
  const bool is_string = v.kind == JKind::kString;
  switch (kind) {
    case Kind::kId: return is_string ? CheckIdText(v.text, field) : NotString(field);
    case Kind::kText: return is_string ? CheckTextText(v.text, field) : NotString(field);
    case Kind::kDigest: return is_string ? CheckDigestText(v.text, field) : NotString(field);
    case Kind::kTime:
      if (!is_string) return InvalidInput("field '" + field + "' must be an RFC 3339 UTC time string");
      return CheckTimeText(v.text, field);
    case Kind::kVerdict:
      if (!is_string || (v.text != "accepted" && v.text != "rejected")) {
        return InvalidInput("field '" + field + "' must be accepted or rejected");
      }
      return OkStatus();
    case Kind::kSubject:
      if (!is_string || (v.text != "host" && v.text != "lease" && v.text != "job" && v.text != "dataset" &&
                         v.text != "policy")) {
        return InvalidInput("field '" + field + "' must be host, lease, job, dataset or policy");
      }
      return OkStatus();
    case Kind::kSignature:
      if (!is_string || v.text.size() != 128 || !IsHex(v.text)) {
        return InvalidInput("field '" + field + "' must be an Ed25519 signature: 128 lower-case hex digits");
      }
      return OkStatus();
    case Kind::kKeyId:
      if (!is_string || v.text.size() != 32 || !IsHex(v.text)) {
        return InvalidInput("field '" + field + "' must be a data key id: 32 lower-case hex digits");
      }
      return OkStatus();
    case Kind::kPublicKey:
      if (!is_string || v.text.size() != 64 || !IsHex(v.text)) {
        return InvalidInput("field '" + field + "' must be an Ed25519 public key: 64 lower-case hex digits");
      }
      return OkStatus();
    case Kind::kUint: {
      uint64_t u = 0;
      if (v.kind != JKind::kNumber || !internal::JsonUnsigned(v.text, &u)) {
        return InvalidInput("field '" + field + "' must be a non-negative integer");
      }
      return OkStatus();
    }
    case Kind::kNonce:
      if (!is_string || v.text.empty() || v.text.size() > 64 || v.text.size() % 2 != 0 || !IsHex(v.text)) {
        return InvalidInput("field '" + field + "' must be 1..32 bytes as lower-case hex");
      }
      return OkStatus();
    case Kind::kClock: {
      if (v.kind != JKind::kObject) return InvalidInput("field '" + field + "' must be an object");
      for (uint32_t m = v.child; m != JsonDoc::kNone; m = doc.node(m).next) {
        const std::string_view k = doc.node(m).key;
        if (k != "clock" && k != "reset_count" && k != "restart_count" && k != "safe") {
          return InvalidInput("field '" + field + "' has unknown member '" + std::string(k.substr(0, 64)) + "'");
        }
      }
      const std::pair<const char*, uint64_t> members[] = {
          {"clock", UINT64_MAX}, {"reset_count", UINT32_MAX}, {"restart_count", UINT32_MAX}, {"safe", 1}};
      for (const auto& [name, max] : members) {
        const uint32_t m = doc.Find(n, name);
        uint64_t u = 0;
        if (m == JsonDoc::kNone || doc.node(m).kind != JKind::kNumber || !internal::JsonUnsigned(doc.node(m).text, &u) ||
            u > max) {
          return InvalidInput("field '" + field + "." + name + "' must be an integer 0.." + std::to_string(max));
        }
      }
      return OkStatus();
    }
    case Kind::kFileList: {
      if (v.kind != JKind::kArray || v.size == 0 || v.size > 64) {
        return InvalidInput("field '" + field + "' must be an array of 1..64 {path, sha256} objects");
      }
      size_t i = 0;
      for (uint32_t c = v.child; c != JsonDoc::kNone; c = doc.node(c).next, ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        if (doc.node(c).kind != JKind::kObject) return InvalidInput("field '" + item + "' must be an object");
        for (uint32_t m = doc.node(c).child; m != JsonDoc::kNone; m = doc.node(m).next) {
          const std::string_view k = doc.node(m).key;
          if (k != "path" && k != "sha256") {
            return InvalidInput("field '" + item + "' has unknown member '" + std::string(k.substr(0, 64)) + "'");
          }
        }
        const uint32_t path = doc.Find(c, "path"), sha = doc.Find(c, "sha256");
        if (path == JsonDoc::kNone || sha == JsonDoc::kNone) return InvalidInput("field '" + item + "' needs path and sha256");
        RETURN_IF_ERROR(CheckField(doc, path, Kind::kId, item + ".path"));
        RETURN_IF_ERROR(CheckField(doc, sha, Kind::kDigest, item + ".sha256"));
      }
      return OkStatus();
    }
    case Kind::kIdList:
    case Kind::kDigestList: {
      if (v.kind != JKind::kArray || v.size == 0 || v.size > kMaxArray) {
        return InvalidInput("field '" + field + "' must be a non-empty array of at most " +
                            std::to_string(kMaxArray) + " items");
      }
      size_t i = 0;
      for (uint32_t c = v.child; c != JsonDoc::kNone; c = doc.node(c).next, ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        RETURN_IF_ERROR(CheckField(doc, c, kind == Kind::kIdList ? Kind::kId : Kind::kDigest, item));
      }
      return OkStatus();
    }
    case Kind::kChecks: {
      if (v.kind != JKind::kArray || v.size == 0 || v.size > kMaxArray) {
        return InvalidInput("field '" + field + "' must be a non-empty array of check results");
      }
      size_t i = 0;
      for (uint32_t c = v.child; c != JsonDoc::kNone; c = doc.node(c).next, ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        if (doc.node(c).kind != JKind::kObject) return InvalidInput("field '" + item + "' must be an object");
        for (uint32_t m = doc.node(c).child; m != JsonDoc::kNone; m = doc.node(m).next) {
          const std::string_view k = doc.node(m).key;
          if (k != "check" && k != "ok" && k != "reason") {
            return InvalidInput("field '" + item + "' has unknown member '" + std::string(k.substr(0, 64)) + "'");
          }
        }
        const uint32_t check = doc.Find(c, "check"), ok = doc.Find(c, "ok"), reason = doc.Find(c, "reason");
        if (check == JsonDoc::kNone || ok == JsonDoc::kNone || reason == JsonDoc::kNone) {
          return InvalidInput("field '" + item + "' needs check, ok and reason");
        }
        RETURN_IF_ERROR(CheckField(doc, check, Kind::kId, item + ".check"));
        if (doc.node(ok).kind != JKind::kTrue && doc.node(ok).kind != JKind::kFalse) {
          return InvalidInput("field '" + item + ".ok' must be true or false");
        }
        RETURN_IF_ERROR(CheckField(doc, reason, Kind::kText, item + ".reason"));
      }
      return OkStatus();
    }
    case Kind::kMetrics: {
      if (v.kind != JKind::kObject) return InvalidInput("field '" + field + "' must be an object");
      if (v.size < 1 || v.size > kMaxArray) {
        return InvalidInput("field '" + field + "' must have 1..1024 members, has " + std::to_string(v.size));
      }
      for (uint32_t m = v.child; m != JsonDoc::kNone; m = doc.node(m).next) {
        const JsonDoc::Node& mv = doc.node(m);
        RETURN_IF_ERROR(CheckIdText(mv.key, field + " key"));
        double d = 0;
        if (mv.kind != JKind::kNumber || !internal::JsonFiniteNumber(mv.text, &d)) {
          return InvalidInput("field '" + field + "." + std::string(mv.key) + "' must be a finite number");
        }
      }
      return OkStatus();
    }
  }
  return Internal("unhandled field kind");
}

bool IsCommonKey(std::string_view k) {
  return k == "v" || k == "seq" || k == "type" || k == "time" || k == "actor";
}

// The members of object `obj` except the common ones (when `skip_common`) against the
// type's closed field set.
Status ValidateFields(const TypeSpec& spec, const JsonDoc& doc, uint32_t obj, bool skip_common) {
  if (doc.node(obj).kind != JKind::kObject) return InvalidInput("event fields must be a JSON object");
  for (uint32_t m = doc.node(obj).child; m != JsonDoc::kNone; m = doc.node(m).next) {
    const std::string_view k = doc.node(m).key;
    if (skip_common && IsCommonKey(k)) continue;
    bool known = false;
    for (const FieldSpec& f : spec.fields) known = known || k == f.name;
    if (!known) {
      return InvalidInput(std::string(spec.name) + " event has unknown field '" + std::string(k.substr(0, 64)) +
                          "' (event fields are a closed set)");
    }
  }
  for (const FieldSpec& f : spec.fields) {
    const uint32_t m = doc.Find(obj, f.name);
    if (m == JsonDoc::kNone) {
      if (f.required) return InvalidInput(std::string(spec.name) + " event lacks required field '" + f.name + "'");
      continue;
    }
    RETURN_IF_ERROR(CheckField(doc, m, f.kind, f.name));
  }
  if (spec.type == EventType::kAttestationVerdict) {
    bool all_ok = true;
    const uint32_t checks = doc.Find(obj, "checks");
    for (uint32_t c = doc.node(checks).child; c != JsonDoc::kNone; c = doc.node(c).next) {
      all_ok = all_ok && doc.node(doc.Find(c, "ok")).kind == JKind::kTrue;
    }
    const std::string_view verdict = doc.node(doc.Find(obj, "verdict")).text;
    if (verdict == "accepted" && !all_ok) {
      return InvalidInput("attestation.verdict is 'accepted' although a check failed");
    }
    if (verdict == "rejected" && all_ok) {
      return InvalidInput("attestation.verdict is 'rejected' but no check failed (give the failing check and reason)");
    }
    // The archived appraisal inputs come as a set: a verdict either can be recomputed
    // (every required one present) or says nothing about its inputs.
    static const char* const kArchived[] = {"evidence_sha256", "enrolment_sha256", "policy_files",  "nonce",
                                             "nonce_issued_at", "appraised_at",    "result_sha256"};
    size_t present = 0;
    for (const char* f : kArchived) present += doc.Find(obj, f) != JsonDoc::kNone;
    if (present != 0 && present != std::size(kArchived)) {
      for (const char* f : kArchived) {
        if (doc.Find(obj, f) == JsonDoc::kNone) {
          return InvalidInput(std::string("attestation.verdict archives its inputs but lacks field '") + f + "'");
        }
      }
    }
    if (present != 0 && doc.Find(obj, "policy_digest") == JsonDoc::kNone) {
      return InvalidInput("attestation.verdict archives its inputs but lacks field 'policy_digest'");
    }
    if (present == 0) {
      for (const char* f : {"bound_digest", "last_clock"}) {
        if (doc.Find(obj, f) != JsonDoc::kNone) {
          return InvalidInput(std::string("attestation.verdict field '") + f + "' needs the archived inputs");
        }
      }
    }
  }
  return OkStatus();
}

int DaysFromCivil(int y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int>(doe) - 719468;
}

}  // namespace

std::string_view EventTypeName(EventType type) { return SpecFor(type).name; }

Result<EventType> ParseEventType(std::string_view name) {
  for (const TypeSpec& s : Specs()) {
    if (name == s.name) return s.type;
  }
  std::string all;
  for (const TypeSpec& s : Specs()) all += (all.empty() ? "" : ", ") + std::string(s.name);
  return InvalidInput("unknown event type '" + std::string(name).substr(0, 64) + "' (known: " + all + ")");
}

std::vector<std::string_view> AllEventTypeNames() {
  std::vector<std::string_view> out;
  for (const TypeSpec& s : Specs()) out.push_back(s.name);
  return out;
}

Result<int64_t> ParseRfc3339Utc(std::string_view s) {
  auto bad = [&]() {
    return InvalidInput("time '" + std::string(s.substr(0, 64)) +
                        "' is not RFC 3339 UTC (YYYY-MM-DDTHH:MM:SS[.1 to 9 digits]Z)");
  };
  if (s.size() < 20 || s.size() > 40 || s.back() != 'Z') return bad();
  auto digits = [&](size_t pos, size_t n, int* out) {
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!digits(0, 4, &y) || s[4] != '-' || !digits(5, 2, &mo) || s[7] != '-' || !digits(8, 2, &d) ||
      s[10] != 'T' || !digits(11, 2, &h) || s[13] != ':' || !digits(14, 2, &mi) || s[16] != ':' ||
      !digits(17, 2, &se)) {
    return bad();
  }
  int ms = 0;
  size_t pos = 19;
  if (s[pos] == '.') {
    ++pos;
    size_t start = pos, n = 0;
    while (pos < s.size() - 1 && s[pos] >= '0' && s[pos] <= '9') {
      if (n < 3) ms = ms * 10 + (s[pos] - '0');
      ++n;
      ++pos;
    }
    if (pos == start || n > 9) return bad();  // 1..9 fraction digits (down to nanoseconds)
    for (size_t k = n; k < 3; ++k) ms *= 10;
  }
  if (pos != s.size() - 1) return bad();
  static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > kDays[mo - 1] || h > 23 || mi > 59 || se > 60) return bad();
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo == 2 && d == 29 && !leap) return bad();
  const int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return ((days * 24 + h) * 60 + mi) * 60 * 1000 + static_cast<int64_t>(se) * 1000 + ms;
}

Result<json> ParseStrictJson(std::string_view text, std::string_view where) {
  // The strict parser decides (duplicate keys, depth, UTF-8, RFC 8259); nlohmann builds the tree.
  internal::JsonDoc doc;
  RETURN_IF_ERROR(doc.Parse(text, where));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidInput(std::string(where) + ": not valid JSON (or not UTF-8)");
  return j;
}

Status ValidateEvent(const Event& event) {
  const TypeSpec& spec = SpecFor(event.type);
  RETURN_IF_ERROR(CheckTextText(event.actor, "actor"));
  if (!event.time.empty()) RETURN_IF_ERROR(CheckTimeText(event.time, "time"));
  if (!event.fields.is_object()) return InvalidInput("event fields must be a JSON object");
  // Validated as the bytes a reader will see: the fields serialized, then strictly parsed.
  std::string text;
  try {
    text = event.fields.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    return InvalidInput(std::string("event is not valid UTF-8: ") + e.what());
  }
  internal::JsonDoc doc;
  RETURN_IF_ERROR(doc.Parse(text, "event fields"));
  return ValidateFields(spec, doc, 0, /*skip_common=*/false);
}

Result<std::vector<uint8_t>> SerializeEntry(const Event& event, uint64_t seq) {
  RETURN_IF_ERROR(ValidateEvent(event));
  if (event.time.empty()) return InvalidInput("event time is empty (the writer stamps it before serializing)");
  json j = event.fields;
  j["v"] = 1;
  j["seq"] = seq;
  j["type"] = EventTypeName(event.type);
  j["time"] = event.time;
  j["actor"] = event.actor;
  std::string text;
  try {
    text = j.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    return InvalidInput(std::string("event is not valid UTF-8: ") + e.what());
  }
  // Checked here, before anything is written: a longer record would be one that every
  // reader refuses, and the log could not be opened again.
  if (text.size() > kMaxWrittenEntryBytes) {
    return InvalidInput("a " + std::string(EventTypeName(event.type)) + " entry of " + std::to_string(text.size()) +
                        " bytes exceeds the log's limit of " + std::to_string(kMaxWrittenEntryBytes) + " bytes");
  }
  return std::vector<uint8_t>(text.begin(), text.end());
}

Result<Event> EventFromJson(const json& j) {
  if (!j.is_object()) return InvalidInput("event must be a JSON object");
  Event e;
  if (!j.contains("type") || !j["type"].is_string()) return InvalidInput("event lacks a string field 'type'");
  ASSIGN_OR_RETURN(e.type, ParseEventType(j["type"].get<std::string>()));
  if (!j.contains("actor")) return InvalidInput("event lacks field 'actor'");
  if (!j["actor"].is_string()) return NotString("actor");
  e.actor = j["actor"].get<std::string>();
  RETURN_IF_ERROR(CheckTextText(e.actor, "actor"));
  if (j.contains("time")) {
    if (!j["time"].is_string()) return InvalidInput("field 'time' must be an RFC 3339 UTC time string");
    e.time = j["time"].get<std::string>();
    RETURN_IF_ERROR(CheckTimeText(e.time, "time"));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "v" || it.key() == "seq") {
      return InvalidInput("field '" + it.key() + "' is set by the log, not by the caller");
    }
    if (!IsCommonKey(it.key())) e.fields[it.key()] = it.value();
  }
  RETURN_IF_ERROR(ValidateEvent(e));
  return e;
}

Result<EntrySummary> internal::CheckEntry(ByteSpan bytes, JsonDoc* doc) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  RETURN_IF_ERROR(doc->Parse(text, "entry"));
  if (doc->root().kind != JKind::kObject) return InvalidInput("entry is not a JSON object");
  EntrySummary out;
  uint64_t v = 0;
  const uint32_t vn = doc->Find(0, "v");
  if (vn == JsonDoc::kNone || doc->node(vn).kind != JKind::kNumber || !internal::JsonUnsigned(doc->node(vn).text, &v) ||
      v != 1) {
    return Unsupported("entry format version field 'v' must be 1");
  }
  const uint32_t seq = doc->Find(0, "seq");
  if (seq == JsonDoc::kNone || doc->node(seq).kind != JKind::kNumber ||
      !internal::JsonUnsigned(doc->node(seq).text, &out.seq)) {
    return InvalidInput("entry field 'seq' missing or not a non-negative integer");
  }
  const uint32_t time = doc->Find(0, "time");
  if (time == JsonDoc::kNone) return InvalidInput("entry lacks field 'time'");
  const uint32_t type = doc->Find(0, "type");
  if (type == JsonDoc::kNone || doc->node(type).kind != JKind::kString) {
    return InvalidInput("event lacks a string field 'type'");
  }
  ASSIGN_OR_RETURN(out.type, ParseEventType(doc->node(type).text));
  const uint32_t actor = doc->Find(0, "actor");
  if (actor == JsonDoc::kNone) return InvalidInput("event lacks field 'actor'");
  RETURN_IF_ERROR(CheckField(*doc, actor, Kind::kText, "actor"));
  if (doc->node(time).kind != JKind::kString) {
    return InvalidInput("field 'time' must be an RFC 3339 UTC time string");
  }
  auto t = ParseRfc3339Utc(doc->node(time).text);
  if (!t.ok()) return InvalidInput("field 'time': " + t.status().message());
  out.time_ms = *t;
  RETURN_IF_ERROR(ValidateFields(SpecFor(out.type), *doc, 0, /*skip_common=*/true));
  return out;
}

Result<EntrySummary> CheckEntry(ByteSpan bytes) {
  JsonDoc doc;
  return internal::CheckEntry(bytes, &doc);
}

Result<Entry> ParseEntry(ByteSpan bytes) {
  ASSIGN_OR_RETURN(EntrySummary sum, CheckEntry(bytes));
  // Valid by the strict checks; nlohmann only builds the tree for callers that want it.
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Internal("entry passed the strict checks but nlohmann::json cannot parse it");
  Entry out;
  out.seq = sum.seq;
  out.time_ms = sum.time_ms;
  out.event.type = sum.type;
  out.event.actor = std::move(j["actor"].get_ref<std::string&>());
  out.event.time = std::move(j["time"].get_ref<std::string&>());
  for (const char* k : {"v", "seq", "type", "time", "actor"}) j.erase(k);
  out.event.fields = std::move(j);
  return out;
}


namespace {
Event Make(EventType type, std::string actor) {
  Event e;
  e.type = type;
  e.actor = std::move(actor);
  return e;
}
}  // namespace

Event HostEnrolled(std::string actor, std::string host, std::string ek_cert_sha256, std::string ak_public_sha256) {
  Event e = Make(EventType::kHostEnrolled, std::move(actor));
  e.fields["host"] = std::move(host);
  if (!ek_cert_sha256.empty()) e.fields["ek_cert_sha256"] = std::move(ek_cert_sha256);
  if (!ak_public_sha256.empty()) e.fields["ak_public_sha256"] = std::move(ak_public_sha256);
  return e;
}

Event AttestationVerdict(std::string actor, std::string host, bool accepted, std::vector<CheckOutcome> checks,
                         std::string job_digest, std::string policy_digest) {
  Event e = Make(EventType::kAttestationVerdict, std::move(actor));
  e.fields["host"] = std::move(host);
  e.fields["verdict"] = accepted ? "accepted" : "rejected";
  json arr = json::array();
  for (auto& c : checks) arr.push_back({{"check", c.check}, {"ok", c.ok}, {"reason", c.reason}});
  e.fields["checks"] = std::move(arr);
  if (!job_digest.empty()) e.fields["job_digest"] = std::move(job_digest);
  if (!policy_digest.empty()) e.fields["policy_digest"] = std::move(policy_digest);
  return e;
}

Event KeyReleased(std::string actor, std::string dataset_id, std::string lease_id, std::string host,
                  std::string job_digest, std::string expires) {
  Event e = Make(EventType::kKeyReleased, std::move(actor));
  e.fields["dataset_id"] = std::move(dataset_id);
  e.fields["lease_id"] = std::move(lease_id);
  e.fields["host"] = std::move(host);
  e.fields["job_digest"] = std::move(job_digest);
  if (!expires.empty()) e.fields["expires"] = std::move(expires);
  return e;
}

Event ReleaseRefused(std::string actor, std::string host, std::string job_id, std::string job_digest,
                     std::vector<std::string> datasets, std::string policy_id, std::string policy_digest,
                     std::string reason) {
  Event e = Make(EventType::kReleaseRefused, std::move(actor));
  e.fields["host"] = std::move(host);
  e.fields["job_id"] = std::move(job_id);
  e.fields["job_digest"] = std::move(job_digest);
  e.fields["datasets"] = std::move(datasets);
  e.fields["policy_id"] = std::move(policy_id);
  if (!policy_digest.empty()) e.fields["policy_digest"] = std::move(policy_digest);
  e.fields["reason"] = std::move(reason);
  return e;
}

Event LeaseRenewed(std::string actor, std::string lease_id, std::string host, std::string expires) {
  Event e = Make(EventType::kLeaseRenewed, std::move(actor));
  e.fields["lease_id"] = std::move(lease_id);
  e.fields["host"] = std::move(host);
  e.fields["expires"] = std::move(expires);
  return e;
}

Event Revoked(std::string actor, std::string subject, std::string subject_id, std::string reason) {
  Event e = Make(EventType::kRevoked, std::move(actor));
  e.fields["subject"] = std::move(subject);
  e.fields["subject_id"] = std::move(subject_id);
  e.fields["reason"] = std::move(reason);
  return e;
}

Event PolicyActivated(std::string actor, std::string policy_id, std::string policy_digest, std::string signer) {
  Event e = Make(EventType::kPolicyActivated, std::move(actor));
  e.fields["policy_id"] = std::move(policy_id);
  e.fields["policy_digest"] = std::move(policy_digest);
  e.fields["signer"] = std::move(signer);
  return e;
}

Event JobStarted(std::string actor, std::string job_digest, std::string host, std::vector<std::string> datasets) {
  Event e = Make(EventType::kJobStarted, std::move(actor));
  e.fields["job_digest"] = std::move(job_digest);
  e.fields["host"] = std::move(host);
  e.fields["datasets"] = std::move(datasets);
  return e;
}

Event JobFinished(std::string actor, std::string job_digest, std::string host, std::vector<std::string> dataset_digests,
                  std::string model_digest, std::map<std::string, double> metrics, std::string report_digest,
                  std::string report_signature) {
  Event e = Make(EventType::kJobFinished, std::move(actor));
  e.fields["job_digest"] = std::move(job_digest);
  e.fields["host"] = std::move(host);
  e.fields["dataset_digests"] = std::move(dataset_digests);
  e.fields["model_digest"] = std::move(model_digest);
  if (!metrics.empty()) e.fields["metrics"] = metrics;
  e.fields["report_digest"] = std::move(report_digest);
  e.fields["report_signature"] = std::move(report_signature);
  return e;
}

}  // namespace enclave::audit
