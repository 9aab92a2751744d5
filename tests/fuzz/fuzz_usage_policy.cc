// libFuzzer target: data-use policies and their signature files (broker/usage_policy.h,
// docs/formats/data-use-policy.md). The input is split on its first 0x00 byte: the bytes
// before are a policy file, the bytes after a signature file (empty when there is no 0x00);
// signatures are checked against one fixed signer (seed bytes 0x60..0x7f; the
// `valid-signed-*` seeds are signed with it). Invariants: no crash, leak or out-of-bounds
// read; every refusal has a message; an accepted policy satisfies every documented range;
// parsing (and verifying) twice gives the same result; a verified policy equals the parsed
// one; an accepted policy signed with the fixed key verifies; EvaluateRelease allows a job
// that keeps to the policy and gives a reason for each rule a job breaks.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "enclave/broker/usage_policy.h"
#include "enclave/crypto/sealed_file.h"

using namespace enclave;
using namespace enclave::broker;

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_usage_policy: invariant broken: %s\n", what);
  std::abort();
}
void Check(bool ok, const char* what) {
  if (!ok) Fail(what);
}

const PolicySignerKey& FixedSigner() {
  static const PolicySignerKey key = [] {
    std::array<uint8_t, 32> seed{};
    for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(0x60 + i);
    auto s = crypto::SecretBytes::CopyFrom(seed);
    if (!s.ok()) std::abort();
    auto k = PolicySignerKey::FromSeed(*s);
    if (!k.ok()) std::abort();
    return std::move(k).value();
  }();
  return key;
}

bool SameRule(const DatasetRule& a, const DatasetRule& b) {
  return a.dataset_id == b.dataset_id && a.job_kinds == b.job_kinds && a.requesters == b.requesters && a.workloads == b.workloads;
}

bool Same(const UsagePolicy& a, const UsagePolicy& b) {
  return a.policy_id == b.policy_id && a.serial == b.serial && a.description == b.description &&
         a.attestation_policy_sha256 == b.attestation_policy_sha256 && a.datasets.size() == b.datasets.size() &&
         std::equal(a.datasets.begin(), a.datasets.end(), b.datasets.begin(), SameRule) &&
         a.cipher_suites == b.cipher_suites && a.lease_s == b.lease_s &&
         a.reattest_interval_s == b.reattest_interval_s && a.max_epochs == b.max_epochs &&
         a.max_world_size == b.max_world_size && a.clear_metrics == b.clear_metrics &&
         a.require_model_export == b.require_model_export && a.released_keys == b.released_keys;
}

template <typename T>
bool Unique(const std::vector<T>& v) {
  std::set<T> s(v.begin(), v.end());
  return s.size() == v.size();
}

bool OneOf(const std::string& s, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (s == a) return true;
  }
  return false;
}

void CheckRanges(const UsagePolicy& p) {
  Check(crypto::ValidateObjectId(p.policy_id).ok(), "policy_id charset");
  Check(p.serial >= 1 && p.serial <= (uint64_t{1} << 53) - 1, "serial range");
  Check(p.description.size() <= 1024, "description length");
  for (char c : p.description) Check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, "description control char");
  Check(!p.datasets.empty() && p.datasets.size() <= 1024, "datasets count");
  std::vector<std::string> ids;
  for (const DatasetRule& d : p.datasets) {
    Check(crypto::ValidateObjectId(d.dataset_id).ok(), "dataset id charset");
    ids.push_back(d.dataset_id);
    Check(!d.job_kinds.empty() && d.job_kinds.size() <= 2 && Unique(d.job_kinds), "job_kinds count");
    for (const auto& k : d.job_kinds) Check(OneOf(k, {"train", "cv"}), "job kind");
    Check(!d.requesters.empty() && d.requesters.size() <= 1024 && Unique(d.requesters), "requesters count");
    Check(!d.workloads.empty() && d.workloads.size() <= 256 && Unique(d.workloads), "workloads count");
    for (const auto& r : d.requesters) {
      Check(!r.empty() && r.size() <= 256, "requester length");
      if (r == "*") Check(d.requesters.size() == 1, "\"*\" alone");
    }
  }
  Check(Unique(ids), "dataset ids unique");
  Check(!p.cipher_suites.empty() && p.cipher_suites.size() <= 2 && Unique(p.cipher_suites), "suites");
  for (crypto::Suite s : p.cipher_suites) {
    Check(s == crypto::Suite::kAes256Gcm || s == crypto::Suite::kChaCha20Poly1305, "suite value");
  }
  Check(p.lease_s >= 60 && p.lease_s <= 86400, "lease range");
  Check(p.reattest_interval_s >= 30 && p.reattest_interval_s <= p.lease_s, "reattest range");
  Check(p.max_epochs >= 1 && p.max_epochs <= 1000000, "max_epochs range");
  Check(p.max_world_size >= 1 && p.max_world_size <= 1024, "max_world_size range");
  Check(p.clear_metrics.size() <= 3 && Unique(p.clear_metrics), "clear_metrics");
  for (const auto& m : p.clear_metrics) Check(OneOf(m, {"loss", "accuracy", "roc_auc"}), "metric name");
  Check(p.require_model_export, "require_model_export");
}

void CheckEvaluate(const UsagePolicy& p) {
  const DatasetRule& d = p.datasets.front();
  ReleaseClaims ok;
  ok.job_id = "fuzz-job";
  ok.kind = d.job_kinds.front();
  ok.requester = d.requesters.front() == "*" ? "anyone@fuzz.example" : d.requesters.front();
  ok.datasets = {d.dataset_id};
  ok.epochs = p.max_epochs;
  ok.world_size = p.max_world_size;
  ok.clear_metrics = p.clear_metrics;
  ok.model_export = true;
  ok.workload_digest = d.workloads.front();
  ok.writes_keys = p.released_keys == KeyCustody::kMayBeWritten;
  UsageDecision yes = EvaluateRelease(p, ok, p.attestation_policy_sha256, {p.cipher_suites.front()});
  Check(yes.allowed && yes.reasons.empty(), "a job that keeps to the policy is allowed");

  ReleaseClaims bad = ok;
  bad.kind = "infer";
  bad.epochs = p.max_epochs + 1;
  bad.world_size = p.max_world_size + 1;
  bad.model_export = false;
  bad.writes_keys = true;  // a reason only under process-memory
  crypto::Digest256 other = p.attestation_policy_sha256;
  other[0] ^= 1;
  UsageDecision no = EvaluateRelease(p, bad, other, {});
  Check(!no.allowed, "a job that breaks the policy is refused");
  // attestation, kind, dataset kind, suite count, epochs, world size, model export, and
  // writing keys out where the policy keeps them in process memory.
  Check(no.reasons.size() == (p.released_keys == KeyCustody::kProcessMemory ? 8u : 7u), "one reason per broken rule");
  ReleaseClaims unapproved = ok;
  unapproved.workload_digest[0] ^= 1;
  bool approved_elsewhere = false;
  for (const auto& w : d.workloads) approved_elsewhere |= w == unapproved.workload_digest;
  if (!approved_elsewhere) {
    Check(!EvaluateRelease(p, unapproved, p.attestation_policy_sha256, {p.cipher_suites.front()}).allowed,
          "an unapproved workload is refused");
  }
  for (const auto& r : no.reasons) Check(!r.empty(), "empty reason");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view policy = input.substr(0, nul);
  const std::string_view signature = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  Result<UsagePolicy> a = ParseUsagePolicy(policy);
  Result<UsagePolicy> b = ParseUsagePolicy(policy);
  Check(a.ok() == b.ok(), "parse is deterministic (ok)");
  if (!a.ok()) {
    Check(!a.status().message().empty(), "refusal without a message");
    Check(a.status().code() == b.status().code() && a.status().message() == b.status().message(),
          "parse is deterministic (error)");
  } else {
    Check(Same(*a, *b), "parse is deterministic (value)");
    CheckRanges(*a);
    CheckEvaluate(*a);
    // Sign with the fixed key and verify: the round trip must succeed.
    Result<std::string> sig = SignUsagePolicy(policy, FixedSigner());
    Check(sig.ok(), "an accepted policy can be signed");
    Result<VerifiedPolicy> v = VerifyUsagePolicy(policy, *sig, {FixedSigner().public_key()});
    Check(v.ok(), "a policy signed with the fixed key verifies");
    Check(Same(v->policy, *a), "verified policy equals parsed policy");
  }

  Result<VerifiedPolicy> v1 = VerifyUsagePolicy(policy, signature, {FixedSigner().public_key()});
  Result<VerifiedPolicy> v2 = VerifyUsagePolicy(policy, signature, {FixedSigner().public_key()});
  Check(v1.ok() == v2.ok(), "verify is deterministic");
  if (!v1.ok()) {
    Check(!v1.status().message().empty(), "verify refusal without a message");
    Check(v1.status().message() == v2.status().message(), "verify is deterministic (error)");
  } else {
    Check(a.ok(), "a verified policy parses");
    Check(Same(v1->policy, *a), "verified policy equals parsed policy");
    Check(v1->digest == crypto::Sha256(AsBytes(policy)), "digest is SHA-256 of the policy bytes");
    Check(v1->signer == FixedSigner().public_key(), "signer is the trusted key");
  }
  return 0;
}
