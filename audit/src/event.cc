#include "enclave/audit/event.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "enclave/audit/tree_head.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

constexpr size_t kMaxIdLength = 256;
constexpr size_t kMaxTextLength = 2048;
constexpr size_t kMaxArray = 1024;
constexpr int kMaxDepth = 8;

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
  kUint,        // non-negative integer
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
        {"policy_digest", Kind::kDigest, false}}},
      {EventType::kKeyReleased,
       "key.released",
       {{"dataset_id", Kind::kId, true},
        {"lease_id", Kind::kId, true},
        {"host", Kind::kId, true},
        {"job_digest", Kind::kDigest, true},
        {"expires", Kind::kTime, false}}},
      {EventType::kLeaseRenewed,
       "lease.renewed",
       {{"lease_id", Kind::kId, true}, {"host", Kind::kId, true}, {"expires", Kind::kTime, true}}},
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

Status CheckId(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidInput("field '" + field + "' must be a string");
  const auto& s = v.get_ref<const std::string&>();
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

Status CheckText(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidInput("field '" + field + "' must be a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > kMaxTextLength) {
    return InvalidInput("field '" + field + "' must be 1.." + std::to_string(kMaxTextLength) + " bytes");
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return InvalidInput("field '" + field + "' contains a control character");
  }
  // UTF-8 validity: nlohmann's dump (strict) and parse enforce it.
  return OkStatus();
}

Status CheckDigest(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidInput("field '" + field + "' must be a string");
  std::string_view s = v.get_ref<const std::string&>();
  if (s.rfind("sha256:", 0) == 0) s.remove_prefix(7);
  if (s.size() != 64 || !IsHex(s)) {
    return InvalidInput("field '" + field + "' must be a SHA-256 digest: 64 lower-case hex digits, optionally "
                        "prefixed 'sha256:'");
  }
  return OkStatus();
}

Status CheckTime(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidInput("field '" + field + "' must be an RFC 3339 UTC time string");
  auto t = ParseRfc3339Utc(v.get_ref<const std::string&>());
  if (!t.ok()) return InvalidInput("field '" + field + "': " + t.status().message());
  return OkStatus();
}

Status CheckField(const json& v, Kind kind, const std::string& field) {
  switch (kind) {
    case Kind::kId: return CheckId(v, field);
    case Kind::kText: return CheckText(v, field);
    case Kind::kDigest: return CheckDigest(v, field);
    case Kind::kTime: return CheckTime(v, field);
    case Kind::kVerdict:
      if (v != "accepted" && v != "rejected") return InvalidInput("field '" + field + "' must be accepted or rejected");
      return OkStatus();
    case Kind::kSubject:
      if (v != "host" && v != "lease" && v != "job" && v != "dataset" && v != "policy") {
        return InvalidInput("field '" + field + "' must be host, lease, job, dataset or policy");
      }
      return OkStatus();
    case Kind::kSignature:
      if (!v.is_string() || v.get_ref<const std::string&>().size() != 128 ||
          !IsHex(v.get_ref<const std::string&>())) {
        return InvalidInput("field '" + field + "' must be an Ed25519 signature: 128 lower-case hex digits");
      }
      return OkStatus();
    case Kind::kUint:
      if (!v.is_number_unsigned()) return InvalidInput("field '" + field + "' must be a non-negative integer");
      return OkStatus();
    case Kind::kIdList:
    case Kind::kDigestList: {
      if (!v.is_array() || v.empty() || v.size() > kMaxArray) {
        return InvalidInput("field '" + field + "' must be a non-empty array of at most " +
                            std::to_string(kMaxArray) + " items");
      }
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        RETURN_IF_ERROR(kind == Kind::kIdList ? CheckId(v[i], item) : CheckDigest(v[i], item));
      }
      return OkStatus();
    }
    case Kind::kChecks: {
      if (!v.is_array() || v.empty() || v.size() > kMaxArray) {
        return InvalidInput("field '" + field + "' must be a non-empty array of check results");
      }
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        const json& c = v[i];
        if (!c.is_object()) return InvalidInput("field '" + item + "' must be an object");
        for (auto it = c.begin(); it != c.end(); ++it) {
          if (it.key() != "check" && it.key() != "ok" && it.key() != "reason") {
            return InvalidInput("field '" + item + "' has unknown member '" + it.key() + "'");
          }
        }
        if (!c.contains("check") || !c.contains("ok") || !c.contains("reason")) {
          return InvalidInput("field '" + item + "' needs check, ok and reason");
        }
        RETURN_IF_ERROR(CheckId(c["check"], item + ".check"));
        if (!c["ok"].is_boolean()) return InvalidInput("field '" + item + ".ok' must be true or false");
        RETURN_IF_ERROR(CheckText(c["reason"], item + ".reason"));
      }
      return OkStatus();
    }
    case Kind::kMetrics: {
      if (!v.is_object() || v.size() > kMaxArray) return InvalidInput("field '" + field + "' must be an object");
      for (auto it = v.begin(); it != v.end(); ++it) {
        RETURN_IF_ERROR(CheckId(json(it.key()), field + " key"));
        if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
          return InvalidInput("field '" + field + "." + it.key() + "' must be a finite number");
        }
      }
      return OkStatus();
    }
  }
  return Internal("unhandled field kind");
}

Status ValidateFields(const TypeSpec& spec, const json& fields) {
  if (!fields.is_object()) return InvalidInput("event fields must be a JSON object");
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    bool known = false;
    for (const FieldSpec& f : spec.fields) known = known || it.key() == f.name;
    if (!known) {
      return InvalidInput(std::string(spec.name) + " event has unknown field '" + it.key() +
                          "' (event fields are a closed set)");
    }
  }
  for (const FieldSpec& f : spec.fields) {
    auto it = fields.find(f.name);
    if (it == fields.end()) {
      if (f.required) return InvalidInput(std::string(spec.name) + " event lacks required field '" + f.name + "'");
      continue;
    }
    RETURN_IF_ERROR(CheckField(*it, f.kind, f.name));
  }
  if (spec.type == EventType::kAttestationVerdict) {
    bool all_ok = true;
    for (const json& c : fields["checks"]) all_ok = all_ok && c["ok"].get<bool>();
    if (fields["verdict"] == "accepted" && !all_ok) {
      return InvalidInput("attestation.verdict is 'accepted' although a check failed");
    }
    if (fields["verdict"] == "rejected" && all_ok) {
      return InvalidInput("attestation.verdict is 'rejected' but no check failed (give the failing check and reason)");
    }
  }
  return OkStatus();
}

const std::set<std::string>& CommonKeys() {
  static const std::set<std::string> keys = {"v", "seq", "type", "time", "actor"};
  return keys;
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
    return InvalidInput("time '" + std::string(s.substr(0, 64)) + "' is not RFC 3339 UTC (YYYY-MM-DDTHH:MM:SS[.fff]Z)");
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
    if (pos == start) return bad();
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
  const std::string w(where);
  // Nesting depth first (outside strings), so no input can build a deep structure.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return InvalidInput(w + ": JSON nested deeper than " + std::to_string(kMaxDepth));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  // Keys of the objects being parsed, innermost last; objects are small, so a linear
  // search beats a set.
  std::vector<std::vector<std::string>> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == json::parse_event_t::key) {
      if (keys.empty()) return true;
      const auto& k = parsed.get_ref<const std::string&>();
      auto& seen = keys.back();
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
        if (duplicate.empty()) duplicate = k;
      } else {
        seen.push_back(k);
      }
    } else if (ev == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    }
    return true;
  };
  json j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidInput(w + ": not valid JSON (or not UTF-8)");
  if (!duplicate.empty()) return InvalidInput(w + ": duplicate JSON key '" + duplicate.substr(0, 64) + "'");
  return j;
}

Status ValidateEvent(const Event& event) {
  const TypeSpec& spec = SpecFor(event.type);
  RETURN_IF_ERROR(CheckText(json(event.actor), "actor"));
  if (!event.time.empty()) RETURN_IF_ERROR(CheckTime(json(event.time), "time"));
  return ValidateFields(spec, event.fields);
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
  return std::vector<uint8_t>(text.begin(), text.end());
}

namespace {

// Takes the members out of `j` (no copies): the hot path of verification.
Result<Event> EventFromOwnedJson(json&& j) {
  if (!j.is_object()) return InvalidInput("event must be a JSON object");
  Event e;
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return InvalidInput("event lacks a string field 'type'");
  ASSIGN_OR_RETURN(e.type, ParseEventType(type->get_ref<const std::string&>()));
  auto actor = j.find("actor");
  if (actor == j.end()) return InvalidInput("event lacks field 'actor'");
  RETURN_IF_ERROR(CheckText(*actor, "actor"));
  e.actor = std::move(actor->get_ref<std::string&>());
  if (auto time = j.find("time"); time != j.end()) {
    RETURN_IF_ERROR(CheckTime(*time, "time"));
    e.time = std::move(time->get_ref<std::string&>());
  }
  for (const char* k : {"v", "seq"}) {
    if (j.contains(k)) return InvalidInput(std::string("field '") + k + "' is set by the log, not by the caller");
  }
  for (const char* k : {"type", "actor", "time"}) j.erase(k);
  e.fields = std::move(j);
  RETURN_IF_ERROR(ValidateFields(SpecFor(e.type), e.fields));
  return e;
}

}  // namespace

Result<Event> EventFromJson(const json& j) {
  if (!j.is_object()) return InvalidInput("event must be a JSON object");
  Event e;
  if (!j.contains("type") || !j["type"].is_string()) return InvalidInput("event lacks a string field 'type'");
  ASSIGN_OR_RETURN(e.type, ParseEventType(j["type"].get<std::string>()));
  if (!j.contains("actor")) return InvalidInput("event lacks field 'actor'");
  RETURN_IF_ERROR(CheckText(j["actor"], "actor"));
  e.actor = j["actor"].get<std::string>();
  if (j.contains("time")) {
    RETURN_IF_ERROR(CheckTime(j["time"], "time"));
    e.time = j["time"].get<std::string>();
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "v" || it.key() == "seq") {
      return InvalidInput("field '" + it.key() + "' is set by the log, not by the caller");
    }
    if (!CommonKeys().count(it.key())) e.fields[it.key()] = it.value();
  }
  RETURN_IF_ERROR(ValidateEvent(e));
  return e;
}

Result<Entry> ParseEntry(ByteSpan bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  ASSIGN_OR_RETURN(json j, ParseStrictJson(text, "entry"));
  if (!j.is_object()) return InvalidInput("entry is not a JSON object");
  if (!j.contains("v") || !j["v"].is_number_unsigned() || j["v"].get<uint64_t>() != 1) {
    return Unsupported("entry format version field 'v' must be 1");
  }
  if (!j.contains("seq") || !j["seq"].is_number_unsigned()) {
    return InvalidInput("entry field 'seq' missing or not a non-negative integer");
  }
  if (!j.contains("time")) return InvalidInput("entry lacks field 'time'");
  Entry out;
  out.seq = j["seq"].get<uint64_t>();
  j.erase("v");
  j.erase("seq");
  ASSIGN_OR_RETURN(out.event, EventFromOwnedJson(std::move(j)));
  ASSIGN_OR_RETURN(out.time_ms, ParseRfc3339Utc(out.event.time));
  return out;
}

// --- builders ---

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
