// Data-use policies: strict parse, release evaluation, Ed25519 signatures
// (docs/formats/data-use-policy.md).
#include "enclave/broker/usage_policy.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "enclave/audit/event.h"
#include "enclave/common/files.h"
#include "enclave/crypto/sealed_file.h"

namespace enclave::broker {
namespace {

using json = nlohmann::json;

constexpr std::string_view kWhere = "data-use policy";
constexpr std::string_view kPolicyFormat = "enclave-data-use-policy";
constexpr std::string_view kSignatureFormat = "enclave-data-use-policy-signature";
constexpr std::string_view kPublicKeyFormat = "enclave-policy-signer-public-key";
constexpr std::string_view kSignatureLabel = kUsagePolicySignatureLabel;
constexpr std::string_view kModelEncryptedToExportKey = "encrypted-to-export-key";
constexpr std::string_view kKeysInProcessMemory = "process-memory";
constexpr std::string_view kKeysMayBeWritten = "may-be-written";
constexpr uint64_t kPolicyVersion = 2;

constexpr char kSecretMagic[8] = {'E', 'P', 'O', 'L', 'S', 'K', '0', '1'};
constexpr size_t kSecretFileSize = 8 + crypto_sign_SEEDBYTES;

// Ranges (documented in docs/formats/data-use-policy.md, "Keys").
constexpr uint64_t kMaxSerial = (uint64_t{1} << 53) - 1;  // exact in every JSON implementation
constexpr size_t kMaxDescriptionBytes = 1024;
constexpr size_t kMaxDatasets = 1024;
constexpr size_t kMaxRequesters = 1024;
constexpr size_t kMaxRequesterBytes = 256;
constexpr size_t kMaxWorkloads = 256;
constexpr int64_t kMinLeaseS = 60, kMaxLeaseS = 86400;
constexpr int64_t kMinReattestS = 30;
constexpr uint32_t kMaxEpochs = 1000000;
constexpr uint32_t kMaxWorldSize = 1024;

// The job kinds of the trainer: "train" (enclave-train run) and "cv" (enclave-train cv),
// sorted as they are named in messages.
const std::vector<std::string>& JobKinds() {
  static const std::vector<std::string> k = {"cv", "train"};
  return k;
}

// The names of what the trainer can show in clear: trainer::ClearOutputNames()
// (trainer/clear_outputs.h). Copied, not linked: the broker does not depend on the
// trainer. Keep in sync (docs/formats/data-use-policy.md lists them).
const std::vector<std::string>& TrainerMetrics() {
  static const std::vector<std::string> k = {"loss", "accuracy", "roc_auc", "rmse", "mae",
                                             "r2", "board_metrics", "curves", "importance", "coefficients"};
  return k;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

bool Contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A printable, bounded rendering of untrusted text for messages.
std::string Quote(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || u >= 0x80) {
      out += "?";
    } else {
      out += c;
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

// ---- Strict schema walk -----------------------------------------------------------------

Status Bad(const std::string& path, const std::string& what) {
  return InvalidInput(std::string(kWhere) + ": '" + path + "' " + what);
}

std::string Child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// Exactly `keys`, no other: unknown keys first (in key order: nlohmann sorts them), then
// missing ones in the order of `keys`.
Status ExactKeys(const json& obj, const std::string& path, const std::vector<std::string>& keys) {
  for (const auto& [k, v] : obj.items()) {
    if (!Contains(keys, k)) {
      return InvalidInput(std::string(kWhere) + ": unknown key '" + Child(path, Quote(k)) + "'");
    }
  }
  for (const std::string& k : keys) {
    if (!obj.contains(k)) return InvalidInput(std::string(kWhere) + ": missing key '" + Child(path, k) + "'");
  }
  return OkStatus();
}

Result<const json*> Object(const json& j, const std::string& path) {
  if (!j.is_object()) return Bad(path.empty() ? "(top level)" : path, "must be a JSON object");
  return &j;
}

Result<std::string> String(const json& j, const std::string& path) {
  if (!j.is_string()) return Bad(path, "must be a string");
  return j.get<std::string>();
}

// An integer in [lo, hi]; floats (1.0, 1e3) are refused, as are numbers outside int64.
Result<int64_t> Integer(const json& j, const std::string& path, int64_t lo, int64_t hi) {
  const std::string range = std::to_string(lo) + " .. " + std::to_string(hi);
  if (!j.is_number_integer()) return Bad(path, "must be an integer in " + range);
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(hi) || (lo > 0 && v < static_cast<uint64_t>(lo))) {
      return Bad(path, "must be in " + range + ", got " + std::to_string(v));
    }
    return static_cast<int64_t>(v);
  }
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) return Bad(path, "must be in " + range + ", got " + std::to_string(v));
  return v;
}

Result<const json*> Array(const json& j, const std::string& path, size_t max, bool allow_empty) {
  if (!j.is_array()) return Bad(path, "must be an array");
  if (j.empty() && !allow_empty) return Bad(path, "must not be empty");
  if (j.size() > max) return Bad(path, "must have at most " + std::to_string(max) + " entries");
  return &j;
}

// An array of strings, each one of `allowed`, without repeats.
Result<std::vector<std::string>> EnumArray(const json& j, const std::string& path,
                                           const std::vector<std::string>& allowed, bool allow_empty) {
  ASSIGN_OR_RETURN(const json* arr, Array(j, path, allowed.size(), allow_empty));
  std::vector<std::string> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string p = Index(path, i);
    ASSIGN_OR_RETURN(std::string s, String((*arr)[i], p));
    if (!Contains(allowed, s)) return Bad(p, "must be one of " + Join(allowed));
    if (Contains(out, s)) return Bad(p, "repeats '" + s + "'");
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::string> Id(const json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string id, String(j, path));
  if (!crypto::ValidateObjectId(id).ok()) {
    return Bad(path, "must be 1.." + std::to_string(crypto::kMaxObjectIdBytes) +
                         " bytes of letters, digits and . _ - :");
  }
  return id;
}

bool IsRequesterChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == '@' || c == '+' || c == ':';
}

Result<std::vector<std::string>> Requesters(const json& j, const std::string& path) {
  ASSIGN_OR_RETURN(const json* arr, Array(j, path, kMaxRequesters, /*allow_empty=*/false));
  std::vector<std::string> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string p = Index(path, i);
    ASSIGN_OR_RETURN(std::string s, String((*arr)[i], p));
    if (s == "*") {
      if (arr->size() != 1) return Bad(p, "is \"*\" (any requester), which must be the only entry");
    } else if (s.empty() || s.size() > kMaxRequesterBytes || !std::all_of(s.begin(), s.end(), IsRequesterChar)) {
      return Bad(p, "must be \"*\" or 1.." + std::to_string(kMaxRequesterBytes) +
                        " bytes of letters, digits and . _ - @ + :");
    }
    if (Contains(out, s)) return Bad(p, "repeats '" + s + "'");
    out.push_back(std::move(s));
  }
  return out;
}

Result<crypto::Digest256> Hex32(const json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string hex, String(j, path));
  const bool lower_hex = hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
                           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                         });
  if (!lower_hex) return Bad(path, "must be 64 lowercase hex digits");
  auto bytes = HexDecode(hex);
  if (!bytes.ok()) return Bad(path, "must be 64 lowercase hex digits");
  crypto::Digest256 out{};
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return out;
}

Result<std::string> Description(const json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string s, String(j, path));
  if (s.size() > kMaxDescriptionBytes) {
    return Bad(path, "must be at most " + std::to_string(kMaxDescriptionBytes) + " bytes");
  }
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return Bad(path, "must not hold control characters");
  }
  return s;
}

// "format" and "version" come first so that a file of another kind or a later version is
// named as such instead of failing on its keys.
Status FormatAndVersion(const json& j, std::string_view format, std::string_view what, uint64_t version) {
  const std::string v = std::to_string(version);
  if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != format) {
    return InvalidInput(std::string(what) + ": not a " + std::string(what) + " ('format' must be \"" +
                        std::string(format) + "\")");
  }
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return InvalidInput(std::string(what) + ": 'version' must be the integer " + v);
  }
  if (!j["version"].is_number_unsigned() || j["version"].get<uint64_t>() != version) {
    // Version 1 policies had no workload rule: they would release keys to any code.
    const bool old = j["version"].is_number_unsigned() && j["version"].get<uint64_t>() < version;
    return Unsupported(std::string(what) + ": version " + j["version"].dump() + " is not supported (only " + v +
                       (old ? "; version 1 has no workload rule: add datasets[].workloads and "
                              "outputs.released_keys, set version 2 and sign it again)"
                            : ")"));
  }
  return OkStatus();
}

// ---- Signatures -------------------------------------------------------------------------

std::vector<uint8_t> SignatureInput(const crypto::Digest256& policy_digest) {
  std::vector<uint8_t> msg(kSignatureLabel.begin(), kSignatureLabel.end());
  msg.push_back(0);
  msg.insert(msg.end(), policy_digest.begin(), policy_digest.end());
  return msg;
}

Status CheckPublicKey(const SignerPublicKey& key, std::string_view where) {
  // Refuses encodings that are not on the curve and small-order points (libsodium).
  if (crypto_core_ed25519_is_valid_point(key.data()) != 1) {
    return InvalidInput(std::string(where) + ": " + HexEncode(key) + " is not a valid Ed25519 public key");
  }
  return OkStatus();
}

Result<SignerPublicKey> PublicKeyHex(const json& j, const std::string& field, std::string_view where) {
  const json& v = j.at(field);
  if (!v.is_string()) return InvalidInput(std::string(where) + ": '" + field + "' must be a string");
  const std::string hex = v.get<std::string>();
  auto bytes = HexDecode(hex);
  const bool lower = std::none_of(hex.begin(), hex.end(), [](char c) { return c >= 'A' && c <= 'F'; });
  if (!bytes.ok() || bytes->size() != kEd25519PublicBytes || !lower) {
    return InvalidInput(std::string(where) + ": '" + field + "' must be 64 lowercase hex digits");
  }
  SignerPublicKey key{};
  std::copy(bytes->begin(), bytes->end(), key.begin());
  RETURN_IF_ERROR(CheckPublicKey(key, where));
  return key;
}

Status ExactTopKeys(const json& j, std::string_view what, const std::vector<std::string>& keys) {
  for (const auto& [k, v] : j.items()) {
    if (!Contains(keys, k)) return InvalidInput(std::string(what) + ": unknown key '" + Quote(k) + "'");
  }
  for (const std::string& k : keys) {
    if (!j.contains(k)) return InvalidInput(std::string(what) + ": missing key '" + k + "'");
  }
  return OkStatus();
}

Status WriteAllFd(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

}  // namespace

// ---- Parse --------------------------------------------------------------------------------

Result<UsagePolicy> ParseUsagePolicy(std::string_view json_text) {
  if (json_text.size() > kMaxUsagePolicyBytes) {
    return InvalidInput(std::string(kWhere) + ": file is " + std::to_string(json_text.size()) +
                        " bytes, more than the limit of " + std::to_string(kMaxUsagePolicyBytes));
  }
  ASSIGN_OR_RETURN(json j, audit::ParseStrictJson(json_text, kWhere));
  if (!j.is_object()) return InvalidInput(std::string(kWhere) + ": the top level must be a JSON object");
  RETURN_IF_ERROR(FormatAndVersion(j, kPolicyFormat, kWhere, kPolicyVersion));
  RETURN_IF_ERROR(ExactKeys(j, "",
                            {"format", "version", "policy_id", "serial", "description", "attestation_policy_sha256",
                             "datasets", "cipher_suites", "lease", "max_epochs", "max_world_size", "outputs"}));
  UsagePolicy p;
  ASSIGN_OR_RETURN(p.policy_id, Id(j["policy_id"], "policy_id"));
  ASSIGN_OR_RETURN(int64_t serial, Integer(j["serial"], "serial", 1, static_cast<int64_t>(kMaxSerial)));
  p.serial = static_cast<uint64_t>(serial);
  ASSIGN_OR_RETURN(p.description, Description(j["description"], "description"));
  ASSIGN_OR_RETURN(p.attestation_policy_sha256, Hex32(j["attestation_policy_sha256"], "attestation_policy_sha256"));

  ASSIGN_OR_RETURN(const json* datasets, Array(j["datasets"], "datasets", kMaxDatasets, /*allow_empty=*/false));
  for (size_t i = 0; i < datasets->size(); ++i) {
    const std::string path = Index("datasets", i);
    ASSIGN_OR_RETURN(const json* d, Object((*datasets)[i], path));
    RETURN_IF_ERROR(ExactKeys(*d, path, {"id", "job_kinds", "requesters", "workloads"}));
    DatasetRule rule;
    ASSIGN_OR_RETURN(rule.dataset_id, Id((*d)["id"], Child(path, "id")));
    for (size_t k = 0; k < p.datasets.size(); ++k) {
      if (p.datasets[k].dataset_id == rule.dataset_id) {
        return Bad(Child(path, "id"), "repeats dataset '" + rule.dataset_id + "' of " + Index("datasets", k));
      }
    }
    ASSIGN_OR_RETURN(rule.job_kinds, EnumArray((*d)["job_kinds"], Child(path, "job_kinds"), JobKinds(), false));
    ASSIGN_OR_RETURN(rule.requesters, Requesters((*d)["requesters"], Child(path, "requesters")));
    const std::string wpath = Child(path, "workloads");
    ASSIGN_OR_RETURN(const json* workloads, Array((*d)["workloads"], wpath, kMaxWorkloads, /*allow_empty=*/false));
    for (size_t w = 0; w < workloads->size(); ++w) {
      ASSIGN_OR_RETURN(crypto::Digest256 digest, Hex32((*workloads)[w], Index(wpath, w)));
      if (std::find(rule.workloads.begin(), rule.workloads.end(), digest) != rule.workloads.end())
        return Bad(Index(wpath, w), "repeats workload " + HexEncode(digest));
      rule.workloads.push_back(digest);
    }
    p.datasets.push_back(std::move(rule));
  }

  std::vector<std::string> suite_names = {std::string(crypto::SuiteName(crypto::Suite::kAes256Gcm)),
                                          std::string(crypto::SuiteName(crypto::Suite::kChaCha20Poly1305))};
  ASSIGN_OR_RETURN(std::vector<std::string> suites,
                   EnumArray(j["cipher_suites"], "cipher_suites", suite_names, /*allow_empty=*/false));
  for (const std::string& s : suites) {
    ASSIGN_OR_RETURN(crypto::Suite suite, crypto::ParseSuite(s));
    p.cipher_suites.push_back(suite);
  }

  ASSIGN_OR_RETURN(const json* lease, Object(j["lease"], "lease"));
  RETURN_IF_ERROR(ExactKeys(*lease, "lease", {"duration_s", "reattest_interval_s"}));
  ASSIGN_OR_RETURN(p.lease_s, Integer((*lease)["duration_s"], "lease.duration_s", kMinLeaseS, kMaxLeaseS));
  ASSIGN_OR_RETURN(p.reattest_interval_s,
                   Integer((*lease)["reattest_interval_s"], "lease.reattest_interval_s", kMinReattestS, kMaxLeaseS));
  if (p.reattest_interval_s > p.lease_s) {
    return Bad("lease.reattest_interval_s", "(" + std::to_string(p.reattest_interval_s) +
                                                ") must not exceed 'lease.duration_s' (" +
                                                std::to_string(p.lease_s) + ")");
  }
  ASSIGN_OR_RETURN(int64_t epochs, Integer(j["max_epochs"], "max_epochs", 1, kMaxEpochs));
  p.max_epochs = static_cast<uint32_t>(epochs);
  ASSIGN_OR_RETURN(int64_t world, Integer(j["max_world_size"], "max_world_size", 1, kMaxWorldSize));
  p.max_world_size = static_cast<uint32_t>(world);

  ASSIGN_OR_RETURN(const json* outputs, Object(j["outputs"], "outputs"));
  RETURN_IF_ERROR(ExactKeys(*outputs, "outputs", {"model", "clear_metrics", "released_keys"}));
  ASSIGN_OR_RETURN(std::string model, String((*outputs)["model"], "outputs.model"));
  if (model != kModelEncryptedToExportKey) {
    return Bad("outputs.model", "must be \"" + std::string(kModelEncryptedToExportKey) + "\" (the only value in v2)");
  }
  p.require_model_export = true;
  // The one array that may be empty: no metric leaves in clear.
  ASSIGN_OR_RETURN(p.clear_metrics, EnumArray((*outputs)["clear_metrics"], "outputs.clear_metrics", TrainerMetrics(),
                                              /*allow_empty=*/true));
  ASSIGN_OR_RETURN(std::string keys, String((*outputs)["released_keys"], "outputs.released_keys"));
  if (keys == kKeysInProcessMemory) {
    p.released_keys = KeyCustody::kProcessMemory;
  } else if (keys == kKeysMayBeWritten) {
    p.released_keys = KeyCustody::kMayBeWritten;
  } else {
    return Bad("outputs.released_keys", "must be \"" + std::string(kKeysInProcessMemory) + "\" or \"" +
                                            std::string(kKeysMayBeWritten) + "\"");
  }
  return p;
}

// ---- Evaluate -----------------------------------------------------------------------------

UsageDecision EvaluateRelease(const UsagePolicy& policy, const ReleaseClaims& claims,
                              const crypto::Digest256& attestation_policy_sha256,
                              const std::vector<crypto::Suite>& dataset_suites) {
  UsageDecision d;
  auto& r = d.reasons;
  const std::string pol = "policy '" + policy.policy_id + "'";

  // 1. The evidence was appraised under the attestation policy this policy requires.
  if (attestation_policy_sha256 != policy.attestation_policy_sha256) {
    r.push_back("attestation policy " + HexEncode(attestation_policy_sha256) + " is not the one " + pol +
                " requires (" + HexEncode(policy.attestation_policy_sha256) + ")");
  }
  // 2. The job kind.
  if (!Contains(JobKinds(), claims.kind)) {
    r.push_back("job kind '" + Quote(claims.kind) + "' is not one of " + Join(JobKinds()));
  }
  // 3. Every dataset (each id once: repeats are reason 9): in the policy, kind, requester.
  std::set<std::string> seen;
  for (const std::string& id : claims.datasets) {
    if (!seen.insert(id).second) continue;
    const DatasetRule* rule = nullptr;
    for (const DatasetRule& x : policy.datasets) {
      if (x.dataset_id == id) rule = &x;
    }
    if (rule == nullptr) {
      r.push_back("dataset '" + Quote(id) + "' is not in " + pol);
      continue;
    }
    if (!Contains(rule->job_kinds, claims.kind)) {
      r.push_back("dataset '" + Quote(id) + "' may not be used for job kind '" + Quote(claims.kind) + "' (allowed: " +
                  Join(rule->job_kinds) + ")");
    }
    const bool any = rule->requesters.size() == 1 && rule->requesters[0] == "*";
    if (claims.requester.empty() || (!any && !Contains(rule->requesters, claims.requester))) {
      r.push_back("requester '" + Quote(claims.requester) + "' may not use dataset '" + Quote(id) + "'");
    }
    if (std::find(rule->workloads.begin(), rule->workloads.end(), claims.workload_digest) == rule->workloads.end()) {
      r.push_back("workload " + HexEncode(claims.workload_digest) + " is not approved for dataset '" + Quote(id) +
                  "' in " + pol);
    }
  }
  // 4. One suite per dataset, each allowed.
  if (dataset_suites.size() != claims.datasets.size()) {
    r.push_back(std::to_string(dataset_suites.size()) + " cipher suite(s) given for " +
                std::to_string(claims.datasets.size()) + " dataset(s)");
  }
  for (size_t i = 0; i < dataset_suites.size(); ++i) {
    const crypto::Suite s = dataset_suites[i];
    if (std::find(policy.cipher_suites.begin(), policy.cipher_suites.end(), s) != policy.cipher_suites.end()) continue;
    const std::string name = s == crypto::Suite::kAes256Gcm || s == crypto::Suite::kChaCha20Poly1305
                                 ? std::string(crypto::SuiteName(s))
                                 : "suite " + std::to_string(static_cast<unsigned>(s));
    const std::string which = i < claims.datasets.size() ? "dataset '" + Quote(claims.datasets[i]) + "'"
                                                         : "dataset #" + std::to_string(i);
    r.push_back(which + " is sealed with " + name + ", which " + pol + " does not allow");
  }
  // 5, 6. Epochs and ranks.
  if (claims.epochs > policy.max_epochs) {
    r.push_back("epochs " + std::to_string(claims.epochs) + " exceed max_epochs " + std::to_string(policy.max_epochs) +
                " of " + pol);
  }
  if (claims.world_size > policy.max_world_size) {
    r.push_back("world size " + std::to_string(claims.world_size) + " exceeds max_world_size " +
                std::to_string(policy.max_world_size) + " of " + pol);
  }
  // 7. Clear metrics.
  for (const std::string& m : claims.clear_metrics) {
    if (!Contains(policy.clear_metrics, m)) {
      r.push_back("metric '" + Quote(m) + "' may not leave in clear under " + pol);
    }
  }
  // 8. The model leaves only encrypted to the export key (always required in v1).
  if (!claims.model_export) {
    r.push_back("the model must leave encrypted to the export key (" + pol + "), and the job does not export it so");
  }
  // 9. Released keys stay in the attested process unless the policy lets them be written.
  if (claims.writes_keys && policy.released_keys != KeyCustody::kMayBeWritten) {
    r.push_back("the requester would write the released keys out of process memory, which " + pol +
                " forbids (outputs.released_keys is \"" + std::string(kKeysInProcessMemory) + "\")");
  }
  // 10. The dataset list itself.
  if (claims.datasets.empty()) r.push_back("no dataset is asked for");
  std::set<std::string> seen_twice;
  std::set<std::string> once;
  for (const std::string& id : claims.datasets) {
    if (!once.insert(id).second && seen_twice.insert(id).second) {
      r.push_back("dataset '" + Quote(id) + "' is asked for more than once");
    }
  }
  d.allowed = r.empty();
  return d;
}

// ---- Keys -------------------------------------------------------------------------------

Result<PolicySignerKey> PolicySignerKey::FromSeed(const crypto::SecretBytes& seed) {
  PolicySignerKey k;
  if (seed.size() != crypto_sign_SEEDBYTES) return InvalidInput("Ed25519 seed must be 32 bytes");
  RETURN_IF_ERROR(crypto::InitCrypto());
  ASSIGN_OR_RETURN(k.secret_, crypto::SecretBytes::Create(crypto_sign_SECRETKEYBYTES));
  if (crypto_sign_seed_keypair(k.public_.data(), k.secret_.ExposeSecretMutable().data(),
                               seed.ExposeSecret().data()) != 0) {
    return Internal("crypto_sign_seed_keypair failed");
  }
  return k;
}

Result<PolicySignerKey> PolicySignerKey::Generate() {
  RETURN_IF_ERROR(crypto::InitCrypto());
  ASSIGN_OR_RETURN(crypto::SecretBytes seed, crypto::SecretBytes::Random(crypto_sign_SEEDBYTES));
  return FromSeed(seed);
}

Status PolicySignerKey::Save(const std::string& secret_path) const {
  if (secret_.size() != crypto_sign_SECRETKEYBYTES) return FailedPrecondition("saving an empty policy signing key");
  int fd = ::open(secret_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("creating policy signing key " + secret_path, errno);
  auto sk = secret_.ExposeSecret();
  Status s = WriteAllFd(fd, reinterpret_cast<const uint8_t*>(kSecretMagic), sizeof kSecretMagic, secret_path);
  if (s.ok()) s = WriteAllFd(fd, sk.data(), crypto_sign_SEEDBYTES, secret_path);  // the seed half
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus("fsync " + secret_path, errno);
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus("close " + secret_path, errno);
  if (!s.ok()) ::unlink(secret_path.c_str());
  return s;
}

Result<PolicySignerKey> PolicySignerKey::Load(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening policy signing key " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return PermissionDenied(path + ": policy signing key is readable or writable by group or others (mode " +
                            std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                            std::to_string(st.st_mode & 7) + "); chmod 600 it");
  }
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kSecretFileSize)) {
    ::close(fd);
    return InvalidInput(path + ": not a policy signing key (expected a " + std::to_string(kSecretFileSize) +
                        "-byte file)");
  }
  auto buf = crypto::SecretBytes::Create(kSecretFileSize);
  if (!buf.ok()) {
    ::close(fd);
    return buf.status();
  }
  auto b = buf->ExposeSecretMutable();
  size_t got = 0;
  while (got < b.size()) {
    ssize_t n = ::read(fd, b.data() + got, b.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return n == 0 ? InvalidInput(path + ": short read") : ErrnoStatus("reading " + path, err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (std::memcmp(b.data(), kSecretMagic, sizeof kSecretMagic) != 0) {
    return InvalidInput(path + ": not a policy signing key (bad magic; expected EPOLSK01)");
  }
  ASSIGN_OR_RETURN(crypto::SecretBytes seed, crypto::SecretBytes::CopyFrom(b.subspan(8, crypto_sign_SEEDBYTES)));
  return FromSeed(seed);
}

std::string EncodeSignerPublicKey(const SignerPublicKey& key) {
  nlohmann::ordered_json j;
  j["format"] = kPublicKeyFormat;
  j["version"] = 1;
  j["algorithm"] = "ed25519";
  j["public_key"] = HexEncode(key);
  return j.dump(2) + "\n";
}

Result<SignerPublicKey> ParseSignerPublicKey(std::string_view text) {
  constexpr std::string_view kWhat = "policy signer public key";
  if (text.size() > 64 * 1024) return InvalidInput(std::string(kWhat) + ": file larger than 64 KiB");
  ASSIGN_OR_RETURN(json j, audit::ParseStrictJson(text, kWhat));
  if (!j.is_object()) return InvalidInput(std::string(kWhat) + ": the top level must be a JSON object");
  RETURN_IF_ERROR(FormatAndVersion(j, kPublicKeyFormat, kWhat, 1));
  RETURN_IF_ERROR(ExactTopKeys(j, kWhat, {"format", "version", "algorithm", "public_key"}));
  if (!j["algorithm"].is_string() || j["algorithm"].get<std::string>() != "ed25519") {
    return Unsupported(std::string(kWhat) + ": 'algorithm' must be \"ed25519\"");
  }
  return PublicKeyHex(j, "public_key", kWhat);
}

Result<SignerPublicKey> LoadSignerPublicKey(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, 64 * 1024));
  auto key = ParseSignerPublicKey(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  if (!key.ok()) return key.status().Annotate(path);
  return key;
}

Status SaveSignerPublicKey(const std::string& path, const SignerPublicKey& key) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, /*allow_overwrite=*/false));
  const std::string text = EncodeSignerPublicKey(key);
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  RETURN_IF_ERROR(out.Commit());
  ::chmod(path.c_str(), 0644);  // public: readable by anyone who verifies
  return OkStatus();
}

// ---- Sign and verify ----------------------------------------------------------------------

std::vector<uint8_t> UsagePolicySignatureInput(const crypto::Digest256& policy_sha256) {
  return SignatureInput(policy_sha256);
}

Result<std::string> SignUsagePolicy(std::string_view policy_bytes, const PolicySignerKey& key) {
  if (key.secret_.size() != crypto_sign_SECRETKEYBYTES) return FailedPrecondition("signing with an empty policy key");
  // Fail closed: a policy the broker would refuse is not signed.
  RETURN_IF_ERROR(ParseUsagePolicy(policy_bytes).status());
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(policy_bytes));
  const std::vector<uint8_t> msg = SignatureInput(digest);
  std::array<uint8_t, kEd25519SignatureBytes> sig{};
  if (crypto_sign_detached(sig.data(), nullptr, msg.data(), msg.size(), key.secret_.ExposeSecret().data()) != 0) {
    return Internal("crypto_sign_detached failed");
  }
  nlohmann::ordered_json j;
  j["format"] = kSignatureFormat;
  j["version"] = 1;
  j["policy_sha256"] = HexEncode(digest);
  j["signer"] = HexEncode(key.public_key());
  j["signature"] = HexEncode(sig);
  return j.dump(2) + "\n";
}

Result<VerifiedPolicy> VerifyUsagePolicy(std::string_view policy_bytes, std::string_view signature_text,
                                         const std::vector<SignerPublicKey>& trusted_signers) {
  constexpr std::string_view kWhat = "data-use policy signature";
  RETURN_IF_ERROR(crypto::InitCrypto());
  if (policy_bytes.size() > kMaxUsagePolicyBytes) {
    return InvalidInput(std::string(kWhere) + ": file is " + std::to_string(policy_bytes.size()) +
                        " bytes, more than the limit of " + std::to_string(kMaxUsagePolicyBytes));
  }
  if (signature_text.size() > kMaxPolicySignatureBytes) {
    return InvalidInput(std::string(kWhat) + ": file larger than " + std::to_string(kMaxPolicySignatureBytes >> 10) +
                        " KiB");
  }
  ASSIGN_OR_RETURN(json j, audit::ParseStrictJson(signature_text, kWhat));
  if (!j.is_object()) return InvalidInput(std::string(kWhat) + ": the top level must be a JSON object");
  RETURN_IF_ERROR(FormatAndVersion(j, kSignatureFormat, kWhat, 1));
  RETURN_IF_ERROR(ExactTopKeys(j, kWhat, {"format", "version", "policy_sha256", "signer", "signature"}));
  auto claimed = Hex32(j["policy_sha256"], "policy_sha256");
  if (!claimed.ok()) return InvalidInput(std::string(kWhat) + ": 'policy_sha256' must be 64 lowercase hex digits");
  ASSIGN_OR_RETURN(SignerPublicKey signer, PublicKeyHex(j, "signer", kWhat));
  if (!j["signature"].is_string()) return InvalidInput(std::string(kWhat) + ": 'signature' must be a string");
  const std::string sig_hex = j["signature"].get<std::string>();
  auto sig = HexDecode(sig_hex);
  const bool lower = std::none_of(sig_hex.begin(), sig_hex.end(), [](char c) { return c >= 'A' && c <= 'F'; });
  if (!sig.ok() || sig->size() != kEd25519SignatureBytes || !lower) {
    return InvalidInput(std::string(kWhat) + ": 'signature' must be 128 lowercase hex digits");
  }

  VerifiedPolicy out;
  out.digest = crypto::Sha256(AsBytes(policy_bytes));
  out.signer = signer;
  if (*claimed != out.digest) {
    return AuthFailed("signature file is for another policy (sha256 " + HexEncode(*claimed) + "; this policy is " +
                      HexEncode(out.digest) + ")");
  }
  if (std::find(trusted_signers.begin(), trusted_signers.end(), signer) == trusted_signers.end()) {
    return AuthFailed("policy signer " + HexEncode(signer) + " is not trusted");
  }
  const std::vector<uint8_t> msg = SignatureInput(out.digest);
  if (crypto_sign_verify_detached(sig->data(), msg.data(), msg.size(), signer.data()) != 0) {
    return AuthFailed("data-use policy " + HexEncode(out.digest) +
                      ": Ed25519 signature does not verify under signer " + HexEncode(signer));
  }
  ASSIGN_OR_RETURN(out.policy, ParseUsagePolicy(policy_bytes));
  return out;
}

}  // namespace enclave::broker
