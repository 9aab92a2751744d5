#include "enclave/audit/report.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "enclave/audit/event.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

std::string Str(const json& f, const char* name) {
  auto it = f.find(name);
  return it != f.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json StrOrNull(const json& f, const char* name) {
  auto it = f.find(name);
  return it != f.end() && it->is_string() ? *it : json(nullptr);
}

std::string NormalDigest(std::string s) {
  if (s.rfind("sha256:", 0) == 0) s.erase(0, 7);
  return s;
}

// Where an event is in the log: index, time, actor.
json Ref(uint64_t index, const Entry& e) { return {{"index", index}, {"time", e.event.time}, {"actor", e.event.actor}}; }

// Keeps first-seen order of keyed records.
class Keyed {
 public:
  json& At(const std::string& key, const std::function<json()>& make) {
    auto it = index_.find(key);
    if (it != index_.end()) return items_[it->second];
    index_[key] = items_.size();
    items_.push_back(make());
    return items_.back();
  }
  json* Find(const std::string& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second];
  }
  json Array() const { return json(items_); }
  size_t size() const { return items_.size(); }

 private:
  std::map<std::string, size_t> index_;
  std::vector<json> items_;
};

// The report's one verdict, from what was checked. A failed check writes no report, so
// every verdict is "verified"; what varies is what else was checked, and the text says
// both what was and what was not.
json Verdict(const VerifyResult& v, const ReportOptions& o, const std::optional<WitnessedCheckpoint>& w) {
  const uint64_t size = v.latest.head.tree_size;
  const std::string headline =
      "Verified: " + std::to_string(v.entries) + " entries, signed tree head size " + std::to_string(size);
  json consistency = {{"checked", false}, {"against_tree_size", nullptr}, {"state_file", nullptr},
                      {"summary", "Consistency not checked: no saved auditor state was given (--state)."}};
  if (v.previously_accepted) {
    const uint64_t old = v.previously_accepted->head.tree_size;
    consistency = {{"checked", true}, {"against_tree_size", old}, {"state_file", o.state_path},
                   {"summary", "Consistency checked: the log extends the tree head of size " + std::to_string(old) +
                                   " saved in " + o.state_path + "."}};
  }
  json witnesses = {{"policy_file", nullptr}, {"required", false}, {"met", nullptr}, {"quorum", nullptr},
                    {"tree_size", nullptr}, {"cosigned_by", json::array()}, {"unwitnessed_entries", nullptr},
                    {"summary", "Witness quorum not required: no witness policy was given (--witness-policy)."}};
  if (w) {
    const WitnessPolicy& policy = *o.witness_policy;
    std::string names;
    json by = json::array();
    for (const CosignedBy& c : w->cosigned_by) {
      by.push_back(c.name);
      names += (names.empty() ? "" : ", ") + c.name;
    }
    const std::string at = "tree size " + std::to_string(w->head.head.tree_size);
    std::string summary =
        policy.quorum_none()
            ? "Witness quorum not required: the witness policy " + o.witness_policy_path + " has quorum none" +
                  (names.empty() ? "." : "; " + at + " is cosigned by " + names + ".")
            : "Witness quorum " + policy.Describe() + " met: " + at + " cosigned by " + names + ".";
    if (w->unwitnessed_entries > 0) {
      const uint64_t n = w->unwitnessed_entries;
      summary += n == 1 ? std::string(" The entry after it is signed by the log only.")
                        : " The " + std::to_string(n) + " entries after it are signed by the log only.";
    }
    witnesses = {{"policy_file", o.witness_policy_path}, {"required", !policy.quorum_none()}, {"met", true},
                 {"quorum", policy.Describe()}, {"tree_size", w->head.head.tree_size}, {"cosigned_by", by},
                 {"unwitnessed_entries", w->unwitnessed_entries}, {"summary", summary}};
  }
  return {{"verified", true},
          {"entries", v.entries},
          {"tree_size", size},
          {"headline", headline},
          {"consistency", consistency},
          {"witnesses", witnesses},
          {"text", headline + ". " + consistency["summary"].get<std::string>() + " " +
                       witnesses["summary"].get<std::string>()}};
}

struct PolicyActivation {
  json record;
  int64_t time_ms;
};

class Collector {
 public:
  explicit Collector(const ReportOptions& o) : opt_(o) {}

  void Add(uint64_t index, const Entry& e) {
    const bool after = opt_.to_ms && e.time_ms >= *opt_.to_ms;
    const bool before = opt_.from_ms && e.time_ms < *opt_.from_ms;
    if (after) return;
    const json& f = e.event.fields;
    // Context from before the period: enrolments, policies, leases.
    switch (e.event.type) {
      case EventType::kHostEnrolled: {
        json enrolled = Ref(index, e);
        enrolled["ek_cert_sha256"] = StrOrNull(f, "ek_cert_sha256");
        enrolled["ak_public_sha256"] = StrOrNull(f, "ak_public_sha256");
        enrolments_[Str(f, "host")] = enrolled;
        break;
      }
      case EventType::kPolicyActivated: {
        json p = {{"policy_id", f["policy_id"]},
                  {"policy_digest", f["policy_digest"]},
                  {"signer", f["signer"]},
                  {"version", f.contains("version") ? f["version"] : json(nullptr)},
                  {"activated", Ref(index, e)},
                  {"activated_in_period", !before},
                  {"superseded", nullptr},
                  {"revoked", nullptr}};
        policies_.push_back({std::move(p), e.time_ms});
        break;
      }
      case EventType::kRevoked:
        if (Str(f, "subject") == "policy") {
          for (auto& p : policies_) {
            if (p.record["policy_id"] == f["subject_id"] && p.record["revoked"].is_null() &&
                p.record["superseded"].is_null()) {
              p.record["revoked"] = Ref(index, e);
              p.record["revoked"]["reason"] = f["reason"];
            }
          }
        }
        break;
      case EventType::kKeyReleased: {
        json& lease = Lease(Str(f, "lease_id"));
        AddUnique(lease["datasets"], f["dataset_id"]);
        lease["host"] = f["host"];
        lease["job_digest"] = f["job_digest"];
        if (f.contains("expires")) lease["expires"] = f["expires"];
        break;
      }
      case EventType::kLeaseRenewed: {
        json& lease = Lease(Str(f, "lease_id"));
        lease["expires"] = f["expires"];
        if (lease["host"].is_null()) lease["host"] = f["host"];
        break;
      }
      default: break;
    }
    if (before) return;
    ++in_period_;
    ++by_type_[std::string(EventTypeName(e.event.type))];
    if (first_index_ < 0) first_index_ = static_cast<int64_t>(index);
    last_index_ = static_cast<int64_t>(index);
    AddInPeriod(index, e);
  }

  json Finish(const VerifyResult& v, const LogPublicKey& key, double seconds,
             const std::optional<WitnessedCheckpoint>& witnessed) {
    // Policies: one activation is in force until the next activation of the same id
    // (superseded) or a revocation of that id.
    json policies = json::array();
    for (size_t i = 0; i < policies_.size(); ++i) {
      json& p = policies_[i].record;
      for (size_t k = i + 1; k < policies_.size(); ++k) {
        if (policies_[k].record["policy_id"] == p["policy_id"]) {
          p["superseded"] = policies_[k].record["activated"];
          break;
        }
      }
      auto ended_before_period = [&](const json& ref) {
        if (ref.is_null() || !opt_.from_ms) return false;
        auto t = ParseRfc3339Utc(ref["time"].get<std::string>());
        return t.ok() && *t <= *opt_.from_ms;
      };
      if (ended_before_period(p["superseded"]) || ended_before_period(p["revoked"])) continue;
      p["in_force_at_end"] = p["superseded"].is_null() && p["revoked"].is_null();
      policies.push_back(p);
    }
    json hosts = json::array();
    for (json h : hosts_.Array()) {
      auto it = enrolments_.find(h["host"].get<std::string>());
      h["enrolled"] = it == enrolments_.end() ? json(nullptr) : it->second;
      hosts.push_back(std::move(h));
    }
    json leases = json::array();
    for (const std::string& id : leases_in_period_) leases.push_back(leases_[id]);

    json verification = {
        {"verified", true},
        {"log_path", v.path},
        {"log_id", HexEncode(key.log_id)},
        {"public_key", HexEncode(key.key)},
        {"entries", v.entries},
        {"file_bytes", v.file_bytes},
        {"tree_heads", v.tree_heads.size()},
        {"latest_tree_head", v.latest.ToJson()},
        {"seconds", seconds},
        {"checks",
         {"header: magic, version and log id = SHA-256 of the public key",
          "every record framed correctly (magic, type, length, SHA-256 check), no bytes after the last record",
          "every entry strictly valid (RFC 8259, UTF-8, no duplicate keys, closed schema of its type) with seq equal "
          "to its position",
          "Merkle tree (RFC 6962) recomputed from the stored bytes of all " + std::to_string(v.entries) +
              " entries; every one of the " + std::to_string(v.tree_heads.size()) +
              " signed tree heads matches it in size and root",
          "every tree-head signature verified with the Ed25519 public key; timestamps never decrease",
          "no entry after the last signed tree head"}},
    };
    if (v.previously_accepted) {
      verification["consistency"] = {
          {"checked", true},
          {"state_file", opt_.state_path},
          {"previously_accepted", v.previously_accepted->ToJson()},
          {"result", "the log extends the tree head accepted earlier (RFC 9162 consistency proof verified): no "
                     "entry was edited, removed or reordered since, and no fork"}};
    } else {
      verification["consistency"] = {
          {"checked", false},
          {"state_file", nullptr},
          {"previously_accepted", nullptr},
          {"result", "not checked (no auditor state given): a truncated log or a whole alternative history signed "
                     "by the log key cannot be recognised without an earlier tree head"}};
    }

    verification["witnessed"] =
        witnessed ? WitnessedCheckpointJson(*witnessed, *opt_.witness_policy, opt_.cosigned_path) : json(nullptr);

    json by_type = json::object();
    for (std::string_view t : AllEventTypeNames()) {
      auto it = by_type_.find(std::string(t));
      by_type[std::string(t)] = it == by_type_.end() ? 0 : it->second;
    }
    const uint64_t now = opt_.generated_at_ms != 0 ? opt_.generated_at_ms : NowMs();
    return {
        {"format", "enclave-audit-compliance-report"},
        {"version", 1},
        {"generated_at", FormatTimestampMs(now)},
        {"verdict", Verdict(v, opt_, witnessed)},
        {"period",
         {{"from", opt_.from_ms ? json(FormatTimestampMs(static_cast<uint64_t>(*opt_.from_ms))) : json(nullptr)},
          {"to", opt_.to_ms ? json(FormatTimestampMs(static_cast<uint64_t>(*opt_.to_ms))) : json(nullptr)}}},
        {"log", verification},
        {"summary",
         {{"entries_in_period", in_period_},
          {"first_index", first_index_ < 0 ? json(nullptr) : json(first_index_)},
          {"last_index", last_index_ < 0 ? json(nullptr) : json(last_index_)},
          {"by_type", by_type},
          {"jobs", jobs_.size()},
          {"datasets", datasets_.size()},
          {"hosts", hosts.size()},
          {"policies_in_force", policies.size()},
          {"key_releases", key_releases_.size()},
          {"leases", leases.size()},
          {"lease_renewals", by_type["lease.renewed"]},
          {"failed_attestations", failed_.size()},
          {"refused_releases", refused_.size()},
          {"revocations", revocations_.size()}}},
        {"jobs", jobs_.Array()},
        {"datasets", datasets_.Array()},
        {"hosts", hosts},
        {"policies", policies},
        {"key_releases", key_releases_},
        {"leases", leases},
        {"failed_attestations", failed_},
        {"refused_releases", refused_},
        {"revocations", revocations_},
    };
  }

 private:
  static void AddUnique(json& arr, const json& v) {
    for (const json& x : arr) {
      if (x == v) return;
    }
    arr.push_back(v);
  }

  json& Lease(const std::string& id) {
    auto it = leases_.find(id);
    if (it != leases_.end()) return it->second;
    return leases_[id] = {{"lease_id", id},       {"datasets", json::array()}, {"host", nullptr},
                          {"job_digest", nullptr}, {"expires", nullptr},        {"releases", 0},
                          {"first_release", nullptr}, {"last_release", nullptr},
                          {"renewals", json::array()}, {"revoked", nullptr}};
  }

  void LeaseInPeriod(const std::string& id) {
    if (leases_seen_.insert(id).second) leases_in_period_.push_back(id);
  }

  json& Job(const std::string& digest) {
    return jobs_.At(NormalDigest(digest), [&] {
      return json{{"job_digest", NormalDigest(digest)},
                  {"hosts", json::array()},
                  {"status", "keys released"},
                  {"started", nullptr},
                  {"finished", nullptr},
                  {"datasets", json::array()},
                  {"dataset_digests", json::array()},
                  {"model_digest", nullptr},
                  {"metrics", nullptr},
                  {"report_digest", nullptr},
                  {"outcome", nullptr},
                  {"key_releases", 0},
                  {"failed_attestations", 0}};
    });
  }

  json& Host(const std::string& host) {
    return hosts_.At(host, [&] {
      return json{{"host", host},
                  {"attestations_accepted", 0},
                  {"attestations_rejected", 0},
                  {"last_verdict", nullptr},
                  {"measurements", json::array()},
                  {"key_releases", 0},
                  {"revoked", nullptr}};
    });
  }

  json& Dataset(const std::string& id) {
    return datasets_.At(id, [&] {
      return json{{"dataset_id", id}, {"key_releases", 0}, {"jobs", json::array()}, {"uses", json::array()},
                  {"revoked", nullptr}};
    });
  }

  void AddInPeriod(uint64_t index, const Entry& e) {
    const json& f = e.event.fields;
    const std::string host = Str(f, "host");
    if (!host.empty()) Host(host);
    switch (e.event.type) {
      case EventType::kHostEnrolled: break;
      case EventType::kAttestationVerdict: {
        json& h = Host(host);
        const bool accepted = Str(f, "verdict") == "accepted";
        h[accepted ? "attestations_accepted" : "attestations_rejected"] =
            h[accepted ? "attestations_accepted" : "attestations_rejected"].get<uint64_t>() + 1;
        json verdict = Ref(index, e);
        verdict["verdict"] = f["verdict"];
        verdict["policy_digest"] = StrOrNull(f, "policy_digest");
        verdict["job_digest"] = StrOrNull(f, "job_digest");
        h["last_verdict"] = verdict;
        h["measurements"] = f["checks"];
        if (f.contains("job_digest") && !accepted) {
          json& j = Job(Str(f, "job_digest"));
          j["failed_attestations"] = j["failed_attestations"].get<uint64_t>() + 1;
        }
        if (!accepted) {
          json failed = Ref(index, e);
          failed["host"] = f["host"];
          failed["job_digest"] = StrOrNull(f, "job_digest");
          failed["policy_digest"] = StrOrNull(f, "policy_digest");
          json checks = json::array();
          for (const json& c : f["checks"]) {
            if (!c["ok"].get<bool>()) checks.push_back({{"check", c["check"]}, {"reason", c["reason"]}});
          }
          failed["failed_checks"] = checks;
          failed_.push_back(std::move(failed));
        }
        break;
      }
      case EventType::kReleaseRefused: {
        json ref = Ref(index, e);
        for (const char* k : {"host", "job_id", "job_digest", "datasets", "policy_id", "reason"}) ref[k] = f[k];
        ref["policy_digest"] = StrOrNull(f, "policy_digest");
        ref["requester"] = StrOrNull(f, "requester");  // who ran the job (absent in older entries)
        refused_.push_back(std::move(ref));
        break;
      }
      case EventType::kKeyReleased: {
        json rel = Ref(index, e);
        for (const char* k : {"dataset_id", "lease_id", "host", "job_digest"}) rel[k] = f[k];
        rel["expires"] = StrOrNull(f, "expires");
        rel["requester"] = StrOrNull(f, "requester");
        key_releases_.push_back(rel);
        const std::string lease_id = Str(f, "lease_id");
        LeaseInPeriod(lease_id);
        {
          // Counted, not listed: key_releases already lists every release with its lease.
          json& lease = leases_[lease_id];
          lease["releases"] = lease["releases"].get<uint64_t>() + 1;
          if (lease["first_release"].is_null()) lease["first_release"] = Ref(index, e);
          lease["last_release"] = Ref(index, e);
        }
        json& d = Dataset(Str(f, "dataset_id"));
        d["key_releases"] = d["key_releases"].get<uint64_t>() + 1;
        const std::string job = NormalDigest(Str(f, "job_digest"));
        AddUnique(d["jobs"], job);
        if (d["uses"].size() < kMaxUses) {
          json use = Ref(index, e);
          use["event"] = "key.released";
          use["host"] = f["host"];
          use["job_digest"] = job;
          use["lease_id"] = f["lease_id"];
          d["uses"].push_back(use);
        }
        json& h = Host(host);
        h["key_releases"] = h["key_releases"].get<uint64_t>() + 1;
        json& j = Job(job);
        j["key_releases"] = j["key_releases"].get<uint64_t>() + 1;
        AddUnique(j["hosts"], f["host"]);
        AddUnique(j["datasets"], f["dataset_id"]);
        break;
      }
      case EventType::kLeaseRenewed: {
        const std::string lease_id = Str(f, "lease_id");
        LeaseInPeriod(lease_id);
        json r = Ref(index, e);
        r["expires"] = f["expires"];
        leases_[lease_id]["renewals"].push_back(r);
        break;
      }
      case EventType::kRevoked: {
        json r = Ref(index, e);
        for (const char* k : {"subject", "subject_id", "reason"}) r[k] = f[k];
        revocations_.push_back(r);
        const std::string subject = Str(f, "subject"), id = Str(f, "subject_id");
        json mark = Ref(index, e);
        mark["reason"] = f["reason"];
        if (subject == "host") Host(id)["revoked"] = mark;
        if (subject == "dataset") Dataset(id)["revoked"] = mark;
        if (subject == "lease") {
          Lease(id)["revoked"] = mark;
          LeaseInPeriod(id);
        }
        if (subject == "job") {
          json& j = Job(id);
          j["revoked"] = mark;
        }
        break;
      }
      case EventType::kPolicyActivated: break;
      case EventType::kJobStarted: {
        json& j = Job(Str(f, "job_digest"));
        j["started"] = Ref(index, e);
        if (j["finished"].is_null()) j["status"] = "started";
        AddUnique(j["hosts"], f["host"]);
        for (const json& d : f["datasets"]) {
          AddUnique(j["datasets"], d);
          json& ds = Dataset(d.get<std::string>());
          AddUnique(ds["jobs"], j["job_digest"]);
          if (ds["uses"].size() < kMaxUses) {
            json use = Ref(index, e);
            use["event"] = "job.started";
            use["host"] = f["host"];
            use["job_digest"] = j["job_digest"];
            use["lease_id"] = nullptr;
            ds["uses"].push_back(use);
          }
        }
        if (f.contains("dataset_digests")) {
          for (const json& d : f["dataset_digests"]) AddUnique(j["dataset_digests"], d);
        }
        break;
      }
      case EventType::kJobFinished: {
        json& j = Job(Str(f, "job_digest"));
        j["finished"] = Ref(index, e);
        j["status"] = "finished";
        AddUnique(j["hosts"], f["host"]);
        for (const json& d : f["dataset_digests"]) AddUnique(j["dataset_digests"], d);
        j["model_digest"] = f["model_digest"];
        j["metrics"] = f.contains("metrics") ? f["metrics"] : json(nullptr);
        j["report_digest"] = f["report_digest"];
        j["outcome"] = StrOrNull(f, "outcome");
        break;
      }
    }
  }

  // A dataset used a million times lists its first uses; the counts stay exact.
  static constexpr size_t kMaxUses = 1000;

  const ReportOptions& opt_;
  uint64_t in_period_ = 0;
  int64_t first_index_ = -1, last_index_ = -1;
  std::map<std::string, uint64_t> by_type_;
  std::map<std::string, json> enrolments_;
  std::vector<PolicyActivation> policies_;
  std::map<std::string, json> leases_;
  std::set<std::string> leases_seen_;
  std::vector<std::string> leases_in_period_;
  Keyed jobs_, hosts_, datasets_;
  json key_releases_ = json::array();
  json refused_ = json::array();
  json failed_ = json::array();
  json revocations_ = json::array();
};

}  // namespace

Result<json> BuildReport(const std::string& dir, const LogPublicKey& key, const ReportOptions& options) {
  if (options.from_ms && options.to_ms && *options.from_ms >= *options.to_ms) {
    return InvalidInput("the report period is empty: --from must be before --to");
  }
  ReportOptions o = options;
  if (o.witness_policy && o.cosigned_path.empty()) o.cosigned_path = dir + "/cosigned-checkpoint";
  Collector c(o);
  VerifyOptions vo;
  vo.trusted = options.trusted;
  vo.on_entry = [&](uint64_t index, uint64_t, ByteSpan, const Entry& e) -> Status {
    c.Add(index, e);
    return OkStatus();
  };
  const auto start = std::chrono::steady_clock::now();
  // Fail-closed: any verification failure is returned as is; nothing collected is used.
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(dir, key, vo));
  // The same quorum check as `verify --witness-policy`; a quorum not met is no report.
  std::optional<WitnessedCheckpoint> witnessed;
  if (o.witness_policy) {
    ASSIGN_OR_RETURN(witnessed, LoadWitnessedCheckpoint(v, key, *o.witness_policy, o.cosigned_path));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c.Finish(v, key, seconds, witnessed);
}

}  // namespace enclave::audit
