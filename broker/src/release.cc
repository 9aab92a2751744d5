#include "enclave/broker/release.h"

#include <filesystem>

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "enclave/broker/messages.h"
#include "enclave/common/files.h"
#include "enclave/crypto/aead.h"

namespace enclave::broker {
namespace {

using json = nlohmann::json;

// Strict field readers: `what` names the message, `path` the field.
class Fields {
 public:
  Fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status Exact(const std::set<std::string>& keys, const std::string& path = "") const {
    if (!j_.is_object()) return Bad(path, "must be an object");
    for (const auto& [k, v] : j_.items()) {
      if (!keys.count(k)) return InvalidInput(what_ + ": unknown field '" + Join(path, k) + "'");
    }
    for (const auto& k : keys) {
      if (!j_.contains(k)) return InvalidInput(what_ + ": missing field '" + Join(path, k) + "'");
    }
    return OkStatus();
  }
  Result<std::string> Str(const std::string& key, size_t max = 4096) const {
    const json& v = j_.at(key);
    if (!v.is_string()) return Bad(key, "must be a string");
    std::string s = v.get<std::string>();
    if (s.size() > max) return Bad(key, "is longer than " + std::to_string(max) + " bytes");
    return s;
  }
  Result<std::string> Id(const std::string& key) const {
    ASSIGN_OR_RETURN(std::string s, Str(key, 256));
    if (Status st = crypto::ValidateObjectId(s); !st.ok()) return Bad(key, st.message());
    return s;
  }
  Result<int64_t> Int(const std::string& key, int64_t lo, int64_t hi) const {
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return Bad(key, "must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return Bad(key, "is out of range");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) return Bad(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  }
  Result<bool> Bool(const std::string& key) const {
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Bad(key, "must be true or false");
    return v.get<bool>();
  }
  template <size_t N>
  Result<std::array<uint8_t, N>> Hex(const std::string& key) const {
    ASSIGN_OR_RETURN(std::string s, Str(key, 2 * N));
    auto b = HexDecode(s);
    if (!b.ok() || b->size() != N) return Bad(key, "must be " + std::to_string(N) + " bytes of hex");
    std::array<uint8_t, N> out{};
    std::copy(b->begin(), b->end(), out.begin());
    return out;
  }
  Result<std::vector<uint8_t>> HexBytes(const std::string& key, size_t n) const {
    ASSIGN_OR_RETURN(std::string s, Str(key, 2 * n));
    auto b = HexDecode(s);
    if (!b.ok() || b->size() != n) return Bad(key, "must be " + std::to_string(n) + " bytes of hex");
    return std::move(b).value();
  }
  Result<const json*> Array(const std::string& key, size_t min, size_t max) const {
    const json& v = j_.at(key);
    if (!v.is_array() || v.size() < min || v.size() > max)
      return Bad(key, "must be an array of " + std::to_string(min) + ".." + std::to_string(max) + " items");
    return &v;
  }
  Result<const json*> Object(const std::string& key) const {
    const json& v = j_.at(key);
    if (!v.is_object()) return Bad(key, "must be an object");
    return &v;
  }
  Status Bad(const std::string& key, const std::string& what) const {
    return InvalidInput(what_ + ": field '" + key + "' " + what);
  }
  const std::string& what() const { return what_; }

 private:
  static std::string Join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }
  const json& j_;
  std::string what_;
};

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutStr(std::vector<uint8_t>& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}
void PutBytes(std::vector<uint8_t>& out, ByteSpan b) { out.insert(out.end(), b.begin(), b.end()); }

void PutDomain(std::vector<uint8_t>& out, std::string_view domain) {
  out.insert(out.end(), domain.begin(), domain.end());
  out.push_back(0);
}

json LeaseJson(const Lease& l) {
  return json{{"lease_id", l.lease_id},       {"host_id", l.host_id},
              {"job_id", l.job_id},           {"policy_id", l.policy_id},
              {"policy_sha256", HexEncode(l.policy_sha256)},
              {"issued_at", l.issued_at},     {"valid_until", l.valid_until},
              {"reattest_by", l.reattest_by}, {"expires_at", l.expires_at()}};
}

Result<Lease> ParseLeaseJson(const json& j, const std::string& what) {
  Fields f(j, what + " lease");
  RETURN_IF_ERROR(f.Exact({"lease_id", "host_id", "job_id", "policy_id", "policy_sha256", "issued_at", "valid_until",
                           "reattest_by", "expires_at"}));
  Lease l;
  ASSIGN_OR_RETURN(l.lease_id, f.Str("lease_id", 64));
  if (!IsLowerHexId(l.lease_id)) return f.Bad("lease_id", "must be 32 lowercase hex digits");
  ASSIGN_OR_RETURN(l.host_id, f.Str("host_id", 64));
  if (!IsLowerHexId(l.host_id)) return f.Bad("host_id", "must be 32 lowercase hex digits");
  ASSIGN_OR_RETURN(l.job_id, f.Id("job_id"));
  ASSIGN_OR_RETURN(l.policy_id, f.Id("policy_id"));
  ASSIGN_OR_RETURN(l.policy_sha256, f.Hex<32>("policy_sha256"));
  ASSIGN_OR_RETURN(l.issued_at, f.Int("issued_at", 0, INT64_MAX));
  ASSIGN_OR_RETURN(l.valid_until, f.Int("valid_until", 0, INT64_MAX));
  ASSIGN_OR_RETURN(l.reattest_by, f.Int("reattest_by", 0, INT64_MAX));
  ASSIGN_OR_RETURN(int64_t expires, f.Int("expires_at", 0, INT64_MAX));
  if (expires != l.expires_at()) return f.Bad("expires_at", "must be min(valid_until, reattest_by)");
  return l;
}

// The evidence object, kept as its compact JSON text (what the broker appraises and archives).
Result<std::string> EvidenceText(const json& j, const Fields& f) {
  if (!j.at("evidence").is_object()) return f.Bad("evidence", "must be an evidence bundle object");
  return j.at("evidence").dump();
}

Result<json> EvidenceObject(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidInput("evidence is not a JSON object");
  return j;
}

}  // namespace

Result<ReleaseRequest> ParseReleaseRequest(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "release request"));
  Fields f(j, "release request");
  RETURN_IF_ERROR(f.Exact({"policy_id", "job", "rank", "keys", "workload", "recipient", "report_key", "evidence"}));
  ReleaseRequest r;
  ASSIGN_OR_RETURN(r.policy_id, f.Id("policy_id"));
  ASSIGN_OR_RETURN(r.recipient, f.Hex<kX25519PublicBytes>("recipient"));
  ASSIGN_OR_RETURN(r.report_key, f.Hex<kEd25519PublicBytes>("report_key"));
  ASSIGN_OR_RETURN(r.evidence, EvidenceText(j, f));

  ASSIGN_OR_RETURN(const json* job, f.Object("job"));
  Fields jf(*job, "release request: job");
  RETURN_IF_ERROR(jf.Exact({"job_id", "job_sha256", "kind", "requester", "epochs", "world_size", "clear_metrics",
                            "model_export", "writes_keys"}));
  ReleaseClaims& c = r.job;
  ASSIGN_OR_RETURN(c.job_id, jf.Id("job_id"));
  ASSIGN_OR_RETURN(c.job_digest, jf.Hex<32>("job_sha256"));
  ASSIGN_OR_RETURN(c.kind, jf.Str("kind", 16));
  if (c.kind != "train" && c.kind != "cv") return jf.Bad("kind", "must be \"train\" or \"cv\"");
  ASSIGN_OR_RETURN(c.requester, jf.Str("requester", 256));
  if (c.requester.empty()) return jf.Bad("requester", "must not be empty");
  for (char ch : c.requester) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return jf.Bad("requester", "has a control character");
  }
  ASSIGN_OR_RETURN(int64_t epochs, jf.Int("epochs", 1, 1000000));
  c.epochs = static_cast<uint32_t>(epochs);
  ASSIGN_OR_RETURN(int64_t world, jf.Int("world_size", 1, 1024));
  c.world_size = static_cast<uint32_t>(world);
  ASSIGN_OR_RETURN(const json* metrics, jf.Array("clear_metrics", 0, 16));
  std::set<std::string> seen_metrics;
  for (const json& m : *metrics) {
    if (!m.is_string() || m.get<std::string>().empty() || m.get<std::string>().size() > 64)
      return jf.Bad("clear_metrics", "must hold metric names");
    if (!seen_metrics.insert(m.get<std::string>()).second) return jf.Bad("clear_metrics", "has a duplicate");
    c.clear_metrics.push_back(m.get<std::string>());
  }
  ASSIGN_OR_RETURN(c.model_export, jf.Bool("model_export"));
  ASSIGN_OR_RETURN(c.writes_keys, jf.Bool("writes_keys"));

  ASSIGN_OR_RETURN(const json* workload, f.Object("workload"));
  Fields wf(*workload, "release request: workload");
  RETURN_IF_ERROR(wf.Exact({"executable", "code"}));
  auto file = [](const json& entry, const std::string& what, bool absolute) -> Result<WorkloadFile> {
    Fields ff(entry, what);
    RETURN_IF_ERROR(ff.Exact({"path", "sha256"}));
    WorkloadFile out;
    ASSIGN_OR_RETURN(out.path, ff.Str("path", kMaxWorkloadPathBytes));
    if (out.path.empty()) return ff.Bad("path", "must not be empty");
    if (absolute != (out.path[0] == '/')) return ff.Bad("path", absolute ? "must be absolute" : "must be relative");
    for (char ch : out.path) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return ff.Bad("path", "has a control character");
    }
    ASSIGN_OR_RETURN(out.sha256, ff.Hex<32>("sha256"));
    return out;
  };
  ASSIGN_OR_RETURN(r.workload.executable, file(workload->at("executable"), "release request: workload.executable", true));
  ASSIGN_OR_RETURN(const json* code, wf.Array("code", 0, kMaxWorkloadCodeFiles));
  std::set<std::string> code_paths;
  for (size_t i = 0; i < code->size(); ++i) {
    ASSIGN_OR_RETURN(WorkloadFile cf, file((*code)[i], "release request: workload.code[" + std::to_string(i) + "]", false));
    if (!code_paths.insert(cf.path).second) return wf.Bad("code", "names '" + cf.path + "' twice");
    r.workload.code.push_back(std::move(cf));
  }
  c.workload_digest = WorkloadDigest(r.workload);

  ASSIGN_OR_RETURN(int64_t rank, f.Int("rank", 0, 1023));
  if (rank >= world) return f.Bad("rank", "must be below job.world_size");
  r.rank = static_cast<uint32_t>(rank);

  ASSIGN_OR_RETURN(const json* keys, f.Array("keys", 1, kMaxReleaseKeys));
  std::set<std::string> datasets;
  for (size_t i = 0; i < keys->size(); ++i) {
    Fields kf((*keys)[i], "release request: keys[" + std::to_string(i) + "]");
    RETURN_IF_ERROR(kf.Exact({"dataset_id", "key_id"}));
    KeyRef k;
    ASSIGN_OR_RETURN(k.dataset_id, kf.Id("dataset_id"));
    ASSIGN_OR_RETURN(k.key_id, kf.Hex<16>("key_id"));
    if (!datasets.insert(k.dataset_id).second) return kf.Bad("dataset_id", "is asked for twice");
    c.datasets.push_back(k.dataset_id);
    r.keys.push_back(std::move(k));
  }
  return r;
}

std::string EncodeReleaseRequest(const ReleaseRequest& r) {
  json keys = json::array();
  for (const KeyRef& k : r.keys) keys.push_back({{"dataset_id", k.dataset_id}, {"key_id", HexEncode(k.key_id)}});
  json code = json::array();
  for (const WorkloadFile& c : r.workload.code) code.push_back({{"path", c.path}, {"sha256", HexEncode(c.sha256)}});
  json j{{"policy_id", r.policy_id},
         {"job",
          {{"job_id", r.job.job_id},
           {"job_sha256", HexEncode(r.job.job_digest)},
           {"kind", r.job.kind},
           {"requester", r.job.requester},
           {"epochs", r.job.epochs},
           {"world_size", r.job.world_size},
           {"clear_metrics", r.job.clear_metrics},
           {"model_export", r.job.model_export},
           {"writes_keys", r.job.writes_keys}}},
         {"rank", r.rank},
         {"keys", keys},
         {"workload", {{"executable", {{"path", r.workload.executable.path},
                                       {"sha256", HexEncode(r.workload.executable.sha256)}}},
                       {"code", code}}},
         {"recipient", HexEncode(r.recipient)},
         {"report_key", HexEncode(r.report_key)}};
  auto ev = EvidenceObject(r.evidence);
  j["evidence"] = ev.ok() ? *ev : json(nullptr);
  return j.dump();
}

crypto::Digest256 ReleaseBinding(const ReleaseRequest& r) {
  std::vector<uint8_t> m;
  PutDomain(m, "enclave key release v2");
  PutStr(m, r.policy_id);
  PutStr(m, r.job.job_id);
  PutBytes(m, r.job.job_digest);
  PutStr(m, r.job.kind);
  PutStr(m, r.job.requester);
  PutU32(m, r.job.epochs);
  PutU32(m, r.job.world_size);
  PutU32(m, r.rank);
  PutU32(m, static_cast<uint32_t>(r.job.clear_metrics.size()));
  for (const std::string& metric : r.job.clear_metrics) PutStr(m, metric);
  m.push_back(r.job.model_export ? 1 : 0);
  PutU32(m, static_cast<uint32_t>(r.keys.size()));
  for (const KeyRef& k : r.keys) {
    PutStr(m, k.dataset_id);
    PutBytes(m, k.key_id);
  }
  m.push_back(r.job.writes_keys ? 1 : 0);
  PutStr(m, r.workload.executable.path);
  PutBytes(m, WorkloadDigest(r.workload));
  PutBytes(m, r.recipient);
  PutBytes(m, r.report_key);
  return crypto::Sha256(m);
}

std::string EncodeJobBinding(const JobBinding& b) {
  return json{{"job_id", b.job_id},
              {"job_sha256", HexEncode(b.job_digest)},
              {"policy_id", b.policy_id},
              {"policy_sha256", HexEncode(b.policy_sha256)},
              {"datasets", b.datasets},
              {"world_size", b.world_size},
              {"workload", HexEncode(b.workload_digest)}}
      .dump();
}

Result<JobBinding> ParseJobBinding(std::string_view text) {
  ASSIGN_OR_RETURN(json j, ParseObject(text, "job binding"));
  Fields f(j, "job binding");
  RETURN_IF_ERROR(f.Exact({"job_id", "job_sha256", "policy_id", "policy_sha256", "datasets", "world_size", "workload"}));
  JobBinding b;
  ASSIGN_OR_RETURN(b.job_id, f.Id("job_id"));
  ASSIGN_OR_RETURN(b.job_digest, f.Hex<32>("job_sha256"));
  ASSIGN_OR_RETURN(b.policy_id, f.Id("policy_id"));
  ASSIGN_OR_RETURN(b.policy_sha256, f.Hex<32>("policy_sha256"));
  ASSIGN_OR_RETURN(const json* datasets, f.Array("datasets", 1, kMaxReleaseKeys));
  for (const json& d : *datasets) {
    if (!d.is_string()) return f.Bad("datasets", "must hold dataset ids");
    b.datasets.push_back(d.get<std::string>());
  }
  ASSIGN_OR_RETURN(int64_t world, f.Int("world_size", 1, 1024));
  b.world_size = static_cast<uint32_t>(world);
  ASSIGN_OR_RETURN(b.workload_digest, f.Hex<32>("workload"));
  return b;
}

crypto::Digest256 JobBindingDigest(const JobBinding& b) {
  std::vector<std::string> datasets = b.datasets;
  std::sort(datasets.begin(), datasets.end());
  std::vector<uint8_t> m;
  PutDomain(m, "enclave job binding v1");
  PutStr(m, b.job_id);
  PutBytes(m, b.job_digest);
  PutStr(m, b.policy_id);
  PutBytes(m, b.policy_sha256);
  PutU32(m, static_cast<uint32_t>(datasets.size()));
  for (const std::string& d : datasets) PutStr(m, d);
  PutU32(m, b.world_size);
  PutBytes(m, b.workload_digest);
  return crypto::Sha256(m);
}

std::vector<std::string> JobBindingDifferences(const JobBinding& stored, const JobBinding& asked) {
  std::vector<std::string> out;
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  if (stored.job_id != asked.job_id) out.push_back("job id");
  if (stored.job_digest != asked.job_digest) out.push_back("job digest");
  if (stored.policy_id != asked.policy_id || stored.policy_sha256 != asked.policy_sha256)
    out.push_back("data-use policy (" + stored.policy_id + " " + HexEncode(stored.policy_sha256).substr(0, 16) +
                  "..., asked " + asked.policy_id + " " + HexEncode(asked.policy_sha256).substr(0, 16) + "...)");
  if (sorted(stored.datasets) != sorted(asked.datasets)) out.push_back("datasets");
  if (stored.world_size != asked.world_size)
    out.push_back("world size (" + std::to_string(stored.world_size) + ", asked " + std::to_string(asked.world_size) +
                  ")");
  if (stored.workload_digest != asked.workload_digest) out.push_back("workload");
  return out;
}

std::string EncodeLeaseClaims(const ReleaseClaims& c, const std::vector<crypto::Suite>& suites) {
  json names = json::array();
  for (crypto::Suite s : suites) names.push_back(std::string(crypto::SuiteName(s)));
  return json{{"job_id", c.job_id},
              {"job_sha256", HexEncode(c.job_digest)},
              {"kind", c.kind},
              {"requester", c.requester},
              {"datasets", c.datasets},
              {"epochs", c.epochs},
              {"world_size", c.world_size},
              {"clear_metrics", c.clear_metrics},
              {"model_export", c.model_export},
              {"workload", HexEncode(c.workload_digest)},
              {"writes_keys", c.writes_keys},
              {"suites", names}}
      .dump();
}

Status ParseLeaseClaims(std::string_view text, ReleaseClaims* c, std::vector<crypto::Suite>* suites) {
  ASSIGN_OR_RETURN(json j, ParseObject(text, "lease claims"));
  Fields f(j, "lease claims");
  RETURN_IF_ERROR(f.Exact({"job_id", "job_sha256", "kind", "requester", "datasets", "epochs", "world_size",
                           "clear_metrics", "model_export", "workload", "writes_keys", "suites"}));
  ASSIGN_OR_RETURN(c->job_id, f.Id("job_id"));
  ASSIGN_OR_RETURN(c->job_digest, f.Hex<32>("job_sha256"));
  ASSIGN_OR_RETURN(c->kind, f.Str("kind", 16));
  ASSIGN_OR_RETURN(c->requester, f.Str("requester", 256));
  auto strings = [&](const std::string& key, std::vector<std::string>* out) -> Status {
    ASSIGN_OR_RETURN(const json* arr, f.Array(key, 0, 1024));
    for (const json& v : *arr) {
      if (!v.is_string()) return f.Bad(key, "must hold strings");
      out->push_back(v.get<std::string>());
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(strings("datasets", &c->datasets));
  RETURN_IF_ERROR(strings("clear_metrics", &c->clear_metrics));
  ASSIGN_OR_RETURN(int64_t epochs, f.Int("epochs", 1, 1000000));
  c->epochs = static_cast<uint32_t>(epochs);
  ASSIGN_OR_RETURN(int64_t world, f.Int("world_size", 1, 1024));
  c->world_size = static_cast<uint32_t>(world);
  ASSIGN_OR_RETURN(c->model_export, f.Bool("model_export"));
  ASSIGN_OR_RETURN(c->workload_digest, f.Hex<32>("workload"));
  ASSIGN_OR_RETURN(c->writes_keys, f.Bool("writes_keys"));
  std::vector<std::string> names;
  RETURN_IF_ERROR(strings("suites", &names));
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(crypto::Suite s, crypto::ParseSuite(n));
    suites->push_back(s);
  }
  return OkStatus();
}

crypto::Digest256 WorkloadDigest(const Workload& w) {
  std::vector<uint8_t> m;
  PutDomain(m, "enclave workload v1");
  PutBytes(m, w.executable.sha256);
  PutU32(m, static_cast<uint32_t>(w.code.size()));
  for (const WorkloadFile& c : w.code) {
    PutStr(m, c.path);
    PutBytes(m, c.sha256);
  }
  return crypto::Sha256(m);
}

Result<Workload> WorkloadOfExecutable(const std::string& exe, const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(exe, size_t{1} << 30));
  Workload w;
  w.executable.path = path;
  w.executable.sha256 = crypto::Sha256(bytes);
  return w;
}

Status AddWorkloadCode(const std::string& dir, const std::vector<std::string>& rel, Workload* w) {
  for (const std::string& r : rel) {
    const std::filesystem::path p(r);
    if (r.empty() || p.is_absolute() || std::find(p.begin(), p.end(), "..") != p.end())
      return InvalidInput("code file '" + r + "' must be a relative path inside the job's folder");
    if (std::any_of(w->code.begin(), w->code.end(), [&](const WorkloadFile& f) { return f.path == r; }))
      return InvalidInput("code file '" + r + "' is named twice");
    if (w->code.size() == kMaxWorkloadCodeFiles)
      return InvalidInput("more than " + std::to_string(kMaxWorkloadCodeFiles) + " code files");
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile((std::filesystem::path(dir) / p).string(), size_t{1} << 30));
    w->code.push_back({r, crypto::Sha256(bytes)});
  }
  return OkStatus();
}

std::string EncodeLease(const Lease& l) { return LeaseJson(l).dump(); }

std::string EncodeReleaseGranted(const ReleaseGranted& g) {
  json keys = json::array();
  for (const SealedKey& k : g.keys) {
    keys.push_back({{"dataset_id", k.dataset_id},
                    {"key_id", HexEncode(k.key_id)},
                    {"suite", std::string(crypto::SuiteName(k.suite))},
                    {"sealed_key", HexEncode(k.sealed)}});
  }
  json j{{"lease", LeaseJson(g.lease)},
              {"keys", keys},
              {"sealed_job_key", HexEncode(g.sealed_job_key)},
              {"export_key",
               {{"name", g.export_key_name}, {"keystore_id", HexEncode(g.export_keystore_id)},
                {"key_id", HexEncode(g.export_key_id)},
                {"public_key", HexEncode(g.export_public)}}},
              {"world_size", g.world_size},
              {"ranks_joined", g.ranks_joined},
              {"audit_index", g.audit_index}};
  if (!g.audit_proofs.empty()) {
    json proofs = json::array();
    for (const audit::Proof& p : g.audit_proofs) proofs.push_back(p.ToJson());
    j["audit_proofs"] = std::move(proofs);
  }
  return j.dump();
}

Result<ReleaseGranted> ParseReleaseGranted(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "release answer"));
  Fields f(j, "release answer");
  std::set<std::string> members{"lease",        "keys",        "sealed_job_key", "export_key",
                                "world_size",   "ranks_joined", "audit_index"};
  if (j.is_object() && j.contains("audit_proofs")) members.insert("audit_proofs");
  RETURN_IF_ERROR(f.Exact(members));
  ReleaseGranted g;
  ASSIGN_OR_RETURN(g.lease, ParseLeaseJson(j.at("lease"), "release answer"));
  ASSIGN_OR_RETURN(const json* keys, f.Array("keys", 1, kMaxReleaseKeys));
  constexpr size_t kSealedKeyBytes = 32 + crypto_box_SEALBYTES;
  for (size_t i = 0; i < keys->size(); ++i) {
    Fields kf((*keys)[i], "release answer: keys[" + std::to_string(i) + "]");
    RETURN_IF_ERROR(kf.Exact({"dataset_id", "key_id", "suite", "sealed_key"}));
    SealedKey k;
    ASSIGN_OR_RETURN(k.dataset_id, kf.Id("dataset_id"));
    ASSIGN_OR_RETURN(k.key_id, kf.Hex<16>("key_id"));
    ASSIGN_OR_RETURN(std::string suite, kf.Str("suite", 32));
    auto s = crypto::ParseSuite(suite);
    if (!s.ok()) return kf.Bad("suite", s.status().message());
    k.suite = *s;
    ASSIGN_OR_RETURN(k.sealed, kf.HexBytes("sealed_key", kSealedKeyBytes));
    g.keys.push_back(std::move(k));
  }
  ASSIGN_OR_RETURN(g.sealed_job_key, f.HexBytes("sealed_job_key", kSealedKeyBytes));
  ASSIGN_OR_RETURN(const json* ek, f.Object("export_key"));
  Fields ef(*ek, "release answer: export_key");
  RETURN_IF_ERROR(ef.Exact({"name", "keystore_id", "key_id", "public_key"}));
  ASSIGN_OR_RETURN(g.export_key_name, ef.Id("name"));
  ASSIGN_OR_RETURN(g.export_keystore_id, ef.Hex<16>("keystore_id"));
  ASSIGN_OR_RETURN(g.export_key_id, ef.Hex<16>("key_id"));
  ASSIGN_OR_RETURN(g.export_public, ef.Hex<32>("public_key"));
  ASSIGN_OR_RETURN(int64_t world, f.Int("world_size", 1, 1024));
  g.world_size = static_cast<uint32_t>(world);
  ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks_joined", 0, 1024));
  for (const json& r : *ranks) {
    if (!r.is_number_unsigned() || r.get<uint64_t>() >= g.world_size) return f.Bad("ranks_joined", "has a bad rank");
    const auto rank = static_cast<uint32_t>(r.get<uint64_t>());
    if (!g.ranks_joined.empty() && rank <= g.ranks_joined.back())
      return f.Bad("ranks_joined", "must be strictly ascending");
    g.ranks_joined.push_back(rank);
  }
  ASSIGN_OR_RETURN(int64_t index, f.Int("audit_index", 0, INT64_MAX));
  g.audit_index = static_cast<uint64_t>(index);
  if (members.count("audit_proofs")) {
    ASSIGN_OR_RETURN(const json* proofs, f.Array("audit_proofs", g.keys.size(), g.keys.size()));
    for (size_t i = 0; i < proofs->size(); ++i) {
      const std::string where = "release answer: audit_proofs[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(audit::Proof p, audit::Proof::FromJson((*proofs)[i], where));
      if (p.kind != audit::ProofKind::kInclusion || !p.entry || p.new_checkpoint.empty())
        return InvalidInput(where + ": must be an inclusion proof of an entry with its checkpoint");
      if (p.leaf_index != g.audit_index + i)
        return InvalidInput(where + ": proves entry " + std::to_string(p.leaf_index) + ", not entry " +
                            std::to_string(g.audit_index + i));
      if (i > 0 && p.new_checkpoint != g.audit_proofs[0].new_checkpoint)
        return InvalidInput(where + ": is against another checkpoint than audit_proofs[0]");
      g.audit_proofs.push_back(std::move(p));
    }
  }
  return g;
}

Result<RenewalRequest> ParseRenewalRequest(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "renewal request"));
  Fields f(j, "renewal request");
  RETURN_IF_ERROR(f.Exact({"evidence"}));
  RenewalRequest r;
  ASSIGN_OR_RETURN(r.evidence, EvidenceText(j, f));
  return r;
}

std::string EncodeRenewalRequest(const RenewalRequest& r) {
  auto ev = EvidenceObject(r.evidence);
  return json{{"evidence", ev.ok() ? *ev : json(nullptr)}}.dump();
}

crypto::Digest256 RenewalBinding(const std::string& lease_id, const X25519Public& recipient) {
  std::vector<uint8_t> m;
  PutDomain(m, "enclave lease renewal v1");
  auto id = HexDecode(lease_id);
  if (id.ok()) PutBytes(m, *id);
  PutBytes(m, recipient);
  return crypto::Sha256(m);
}

std::string EncodeRenewalGranted(const RenewalGranted& g) {
  return json{{"lease", LeaseJson(g.lease)}, {"audit_index", g.audit_index}}.dump();
}

Result<RenewalGranted> ParseRenewalGranted(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "renewal answer"));
  Fields f(j, "renewal answer");
  RETURN_IF_ERROR(f.Exact({"lease", "audit_index"}));
  RenewalGranted g;
  ASSIGN_OR_RETURN(g.lease, ParseLeaseJson(j.at("lease"), "renewal answer"));
  ASSIGN_OR_RETURN(int64_t index, f.Int("audit_index", 0, INT64_MAX));
  g.audit_index = static_cast<uint64_t>(index);
  return g;
}

Result<RevocationRequest> ParseRevocationRequest(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "revocation request"));
  Fields f(j, "revocation request");
  RETURN_IF_ERROR(f.Exact({"kind", "id", "reason"}));
  RevocationRequest r;
  ASSIGN_OR_RETURN(r.kind, f.Str("kind", 8));
  if (r.kind != "host" && r.kind != "job") return f.Bad("kind", "must be \"host\" or \"job\"");
  ASSIGN_OR_RETURN(r.id, f.Id("id"));
  if (r.kind == "host" && !IsLowerHexId(r.id)) return f.Bad("id", "must be a host id (32 lowercase hex digits)");
  ASSIGN_OR_RETURN(r.reason, f.Str("reason", 1024));
  if (r.reason.empty()) return f.Bad("reason", "must not be empty");
  for (char ch : r.reason) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return f.Bad("reason", "has a control character");
  }
  return r;
}

std::string EncodeRevocationRequest(const RevocationRequest& r) {
  return json{{"kind", r.kind}, {"id", r.id}, {"reason", r.reason}}.dump();
}

Result<PolicyActivation> ParsePolicyActivation(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "policy activation"));
  Fields f(j, "policy activation");
  RETURN_IF_ERROR(f.Exact({"policy", "signature"}));
  PolicyActivation a;
  ASSIGN_OR_RETURN(a.policy, f.Str("policy", kMaxUsagePolicyBytes));
  ASSIGN_OR_RETURN(a.signature, f.Str("signature", kMaxPolicySignatureBytes));
  return a;
}

std::string EncodePolicyActivation(const PolicyActivation& a) {
  return json{{"policy", a.policy}, {"signature", a.signature}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {
// "HOST:PORT": 1..255 bytes of [A-Za-z0-9.:[\]-], with a port.
// The listen handle of libnccl-net-enclave (docs/formats/net-transport.md), its first 64
// bytes in lower-case hex: how enclave-train's ranks find each other through the broker.
bool IsNetHandleAddress(const std::string& a) {
  constexpr std::string_view kPrefix = "enclave-net:";
  if (a.size() != kPrefix.size() + 128 || a.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  for (size_t i = kPrefix.size(); i < a.size(); ++i) {
    const char c = a[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsAddress(const std::string& a) {
  if (IsNetHandleAddress(a)) return true;
  if (a.empty() || a.size() > 255) return false;
  for (char c : a) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != ':' && c != '-' && c != '[' && c != ']')
      return false;
  }
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) return false;
  int port = 0;
  for (char c : a.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return false;
    port = port * 10 + (c - '0');
  }
  return port >= 1 && port <= 65535;
}
}  // namespace

Result<RendezvousRequest> ParseRendezvousRequest(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "rendezvous request"));
  Fields f(j, "rendezvous request");
  RETURN_IF_ERROR(f.Exact({"lease_id", "address", "proof"}));
  RendezvousRequest r;
  ASSIGN_OR_RETURN(r.lease_id, f.Str("lease_id", 64));
  if (!IsLowerHexId(r.lease_id)) return f.Bad("lease_id", "must be 32 lowercase hex digits");
  ASSIGN_OR_RETURN(r.address, f.Str("address", 255));
  if (!r.address.empty() && !IsAddress(r.address)) return f.Bad("address", "must be HOST:PORT, enclave-net:<128 hex digits>, or empty");
  ASSIGN_OR_RETURN(r.proof, f.Hex<32>("proof"));
  return r;
}

std::string EncodeRendezvousRequest(const RendezvousRequest& r) {
  return json{{"lease_id", r.lease_id}, {"address", r.address}, {"proof", HexEncode(r.proof)}}.dump();
}

std::array<uint8_t, 32> RendezvousProof(const crypto::SecretBytes& job_key, const std::string& job_id,
                                        const std::string& lease_id, const std::string& address) {
  std::vector<uint8_t> m;
  PutDomain(m, "enclave rendezvous v1");
  PutStr(m, job_id);
  auto id = HexDecode(lease_id);
  if (id.ok()) PutBytes(m, *id);
  PutStr(m, address);
  return crypto::HmacSha256(job_key, m);
}

std::string EncodeRendezvousInfo(const RendezvousInfo& info) {
  json ranks = json::array();
  for (const RendezvousRank& r : info.ranks) {
    ranks.push_back({{"rank", r.rank}, {"host_id", r.host_id},
                     {"address", r.address.empty() ? json(nullptr) : json(r.address)}});
  }
  return json{{"job_id", info.job_id}, {"world_size", info.world_size}, {"ranks", ranks}, {"complete", info.complete}}
      .dump();
}

Result<RendezvousInfo> ParseRendezvousInfo(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "rendezvous answer"));
  Fields f(j, "rendezvous answer");
  RETURN_IF_ERROR(f.Exact({"job_id", "world_size", "ranks", "complete"}));
  RendezvousInfo info;
  ASSIGN_OR_RETURN(info.job_id, f.Id("job_id"));
  ASSIGN_OR_RETURN(int64_t world, f.Int("world_size", 1, 1024));
  info.world_size = static_cast<uint32_t>(world);
  ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", 0, 4096));
  for (size_t i = 0; i < ranks->size(); ++i) {
    Fields rf((*ranks)[i], "rendezvous answer: ranks[" + std::to_string(i) + "]");
    RETURN_IF_ERROR(rf.Exact({"rank", "host_id", "address"}));
    RendezvousRank r;
    ASSIGN_OR_RETURN(int64_t rank, rf.Int("rank", 0, world - 1));
    r.rank = static_cast<uint32_t>(rank);
    ASSIGN_OR_RETURN(r.host_id, rf.Str("host_id", 64));
    if (!IsLowerHexId(r.host_id)) return rf.Bad("host_id", "must be 32 lowercase hex digits");
    if (!(*ranks)[i].at("address").is_null()) {
      ASSIGN_OR_RETURN(r.address, rf.Str("address", 255));
      if (!IsAddress(r.address)) return rf.Bad("address", "must be HOST:PORT");
    }
    if (!info.ranks.empty() && r.rank < info.ranks.back().rank) return rf.Bad("rank", "ranks must be in ascending order");
    info.ranks.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(info.complete, f.Bool("complete"));
  return info;
}

Result<JobReport> ParseJobReport(std::string_view body) {
  ASSIGN_OR_RETURN(json j, ParseObject(body, "job report"));
  Fields f(j, "job report");
  RETURN_IF_ERROR(f.Exact({"lease_id", "report", "signature"}));
  JobReport r;
  ASSIGN_OR_RETURN(r.lease_id, f.Str("lease_id", 64));
  if (!IsLowerHexId(r.lease_id)) return f.Bad("lease_id", "must be 32 lowercase hex digits");
  ASSIGN_OR_RETURN(r.report, f.Str("report", kMaxJobReportBody));
  ASSIGN_OR_RETURN(r.signature, f.Hex<kEd25519SignatureBytes>("signature"));
  return r;
}

std::string EncodeJobReport(const JobReport& r) {
  return json{{"lease_id", r.lease_id}, {"report", r.report}, {"signature", HexEncode(r.signature)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::vector<uint8_t> ReportSignatureInput(std::string_view report) {
  std::vector<uint8_t> m;
  PutDomain(m, "enclave-train report v1");
  PutBytes(m, crypto::Sha256(AsBytes(report)));
  return m;
}

std::vector<uint8_t> SealTo(const X25519Public& recipient, const crypto::SecretBytes& secret) {
  std::vector<uint8_t> out(secret.size() + crypto_box_SEALBYTES);
  crypto_box_seal(out.data(), secret.ExposeSecret().data(), secret.size(), recipient.data());
  return out;
}

Result<crypto::SecretBytes> OpenSealed(const X25519Public& public_key, const crypto::SecretBytes& secret_key,
                                       ByteSpan sealed) {
  if (sealed.size() < crypto_box_SEALBYTES || secret_key.size() != crypto_box_SECRETKEYBYTES)
    return AuthFailed("sealed box is too short");
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(sealed.size() - crypto_box_SEALBYTES));
  if (crypto_box_seal_open(out.ExposeSecretMutable().data(), sealed.data(), sealed.size(), public_key.data(),
                           secret_key.ExposeSecret().data()) != 0)
    return AuthFailed("sealed box does not open with this key");
  return out;
}

}  // namespace enclave::broker
