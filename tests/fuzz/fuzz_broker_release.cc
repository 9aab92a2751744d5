// libFuzzer target: the key-release messages (broker/release.h, docs/protocol.md "POST
// /v1/releases", "POST /v1/leases/{lease_id}/renewals", "Administration"). The first input
// byte picks the parser ('0'..'8' as digits, any other byte modulo 9), the rest is the body:
//   0 ParseReleaseRequest   1 ParseReleaseGranted    2 ParseRenewalRequest
//   3 ParseRenewalGranted   4 ParseRevocationRequest 5 ParsePolicyActivation
//   6 ParseRendezvousRequest 7 ParseRendezvousInfo  8 ParseJobReport
// Invariants: no crash, leak, out-of-bounds read or uncaught exception; every refusal has
// a message; whatever parses satisfies the documented ranges (a release answer's
// audit_proofs: one inclusion proof with its entry per key, consecutive from audit_index,
// one checkpoint), re-encodes with the matching Encode* to a body that parses to an equal
// value (field by field; for a release request also the same ReleaseBinding), and a second
// encode is byte-identical. The evidence
// object is kept as nlohmann's compact serialization, so its text is compared after one
// round (parse(encode(parse(x))) against parse(x)).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"

using namespace enclave;
using namespace enclave::broker;

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_broker_release: invariant broken: %s\n", what);
  __builtin_trap();
}
void Check(bool ok, const char* what) {
  if (!ok) Fail(what);
}

// Parses `text`; a refusal must say why. Whatever parses is checked by `valid`, encoded,
// parsed again (must succeed, equal by `same`, and pass `valid`), and encoded again to
// the same bytes.
template <typename T, typename Parse, typename Encode, typename Same, typename Valid>
void RoundTrip(std::string_view text, Parse parse, Encode encode, Same same, Valid valid) {
  Result<T> a = parse(text);
  if (!a.ok()) {
    Check(!a.status().message().empty(), "a refusal without a message");
    return;
  }
  valid(*a);
  const std::string once = encode(*a);
  Result<T> b = parse(once);
  if (!b.ok()) {
    std::fprintf(stderr, "re-encoded: %s\nrefused: %s\n", once.c_str(), b.status().ToString().c_str());
    Fail("an accepted message does not re-parse");
  }
  valid(*b);
  Check(same(*a, *b), "the re-parsed message differs");
  const std::string twice = encode(*b);
  Check(twice == once, "a second encode differs");
  Result<T> c = parse(twice);
  Check(c.ok() && same(*b, *c), "a third parse differs");
}

bool IsLowerHex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// ---- release request ---------------------------------------------------------------------

bool SameClaims(const ReleaseClaims& a, const ReleaseClaims& b) {
  return a.job_id == b.job_id && a.job_digest == b.job_digest && a.kind == b.kind && a.requester == b.requester &&
         a.datasets == b.datasets && a.epochs == b.epochs && a.world_size == b.world_size &&
         a.clear_metrics == b.clear_metrics && a.model_export == b.model_export &&
         a.workload_digest == b.workload_digest && a.writes_keys == b.writes_keys;
}

bool SameWorkload(const Workload& a, const Workload& b) {
  auto same = [](const WorkloadFile& x, const WorkloadFile& y) { return x.path == y.path && x.sha256 == y.sha256; };
  return same(a.executable, b.executable) && a.code.size() == b.code.size() &&
         std::equal(a.code.begin(), a.code.end(), b.code.begin(), same);
}

bool SameKeys(const std::vector<KeyRef>& a, const std::vector<KeyRef>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const KeyRef& x, const KeyRef& y) {
           return x.dataset_id == y.dataset_id && x.key_id == y.key_id;
         });
}

// Everything but the evidence text, which is compared separately (after one round).
bool SameRequestButEvidence(const ReleaseRequest& a, const ReleaseRequest& b) {
  return a.policy_id == b.policy_id && SameClaims(a.job, b.job) && a.rank == b.rank && SameKeys(a.keys, b.keys) &&
         SameWorkload(a.workload, b.workload) && a.job.workload_digest == WorkloadDigest(a.workload) &&
         a.recipient == b.recipient && a.report_key == b.report_key && ReleaseBinding(a) == ReleaseBinding(b);
}

void ValidRequest(const ReleaseRequest& r) {
  const ReleaseClaims& j = r.job;
  Check(!r.policy_id.empty() && !j.job_id.empty(), "empty policy or job id");
  Check(j.kind == "train" || j.kind == "cv", "job.kind out of range");
  Check(!j.requester.empty() && j.requester.size() <= 256, "job.requester length out of range");
  Check(std::none_of(j.requester.begin(), j.requester.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
        "job.requester has a control character");
  Check(j.epochs >= 1 && j.epochs <= 1000000, "job.epochs out of range");
  Check(j.world_size >= 1 && j.world_size <= 1024, "job.world_size out of range");
  Check(r.rank < j.world_size, "rank >= job.world_size");
  Check(j.clear_metrics.size() <= 16, "too many clear_metrics");
  Check(std::set<std::string>(j.clear_metrics.begin(), j.clear_metrics.end()).size() == j.clear_metrics.size(),
        "duplicate clear_metrics");
  for (const std::string& m : j.clear_metrics) Check(!m.empty() && m.size() <= 64, "metric name length out of range");
  Check(!r.keys.empty() && r.keys.size() <= kMaxReleaseKeys, "keys.size() out of 1..kMaxReleaseKeys");
  Check(j.datasets.size() == r.keys.size(), "job.datasets and keys differ in length");
  std::set<std::string> seen;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    Check(j.datasets[i] == r.keys[i].dataset_id, "job.datasets is not the keys' dataset ids in order");
    Check(!r.keys[i].dataset_id.empty(), "an empty dataset id");
    Check(seen.insert(r.keys[i].dataset_id).second, "a dataset asked for twice");
  }
  Check(!r.evidence.empty() && r.evidence.front() == '{', "evidence is not an object's text");
}

void FuzzReleaseRequest(std::string_view text) {
  Result<ReleaseRequest> a = ParseReleaseRequest(text);
  if (!a.ok()) {
    Check(!a.status().message().empty(), "a refusal without a message");
    return;
  }
  ValidRequest(*a);
  const std::string once = EncodeReleaseRequest(*a);
  Result<ReleaseRequest> b = ParseReleaseRequest(once);
  if (!b.ok()) {
    std::fprintf(stderr, "re-encoded: %s\nrefused: %s\n", once.c_str(), b.status().ToString().c_str());
    Fail("an accepted release request does not re-parse");
  }
  ValidRequest(*b);
  Check(SameRequestButEvidence(*a, *b), "the re-parsed release request differs");
  // The evidence was serialized by nlohmann once in `a`; from there it is a fixed point.
  Check(b->evidence == a->evidence, "the evidence text changed after one round");
  const std::string twice = EncodeReleaseRequest(*b);
  Check(twice == once, "a second encode of a release request differs");
}

// ---- lease and answers -------------------------------------------------------------------

bool SameLease(const Lease& a, const Lease& b) {
  return a.lease_id == b.lease_id && a.host_id == b.host_id && a.job_id == b.job_id && a.policy_id == b.policy_id &&
         a.policy_sha256 == b.policy_sha256 && a.issued_at == b.issued_at && a.valid_until == b.valid_until &&
         a.reattest_by == b.reattest_by && a.expires_at() == b.expires_at();
}

void ValidLease(const Lease& l) {
  Check(IsLowerHex(l.lease_id, 32), "lease_id is not 32 lowercase hex digits");
  Check(IsLowerHex(l.host_id, 32), "host_id is not 32 lowercase hex digits");
  Check(!l.job_id.empty() && !l.policy_id.empty(), "empty job or policy id in a lease");
  Check(l.issued_at >= 0 && l.valid_until >= 0 && l.reattest_by >= 0, "a negative lease time");
  Check(l.expires_at() == std::min(l.valid_until, l.reattest_by), "expires_at is not min(valid_until, reattest_by)");
  Check(l.expires_at() <= l.valid_until && l.expires_at() <= l.reattest_by, "expires_at past a lease bound");
  // The encoded lease carries expires_at, which a parser must have checked.
  Result<RenewalGranted> again = ParseRenewalGranted("{\"lease\":" + EncodeLease(l) + ",\"audit_index\":0}");
  Check(again.ok() && SameLease(again->lease, l), "EncodeLease does not re-parse to the same lease");
}

bool SameGranted(const ReleaseGranted& a, const ReleaseGranted& b) {
  auto same_key = [](const SealedKey& x, const SealedKey& y) {
    return x.dataset_id == y.dataset_id && x.key_id == y.key_id && x.suite == y.suite && x.sealed == y.sealed;
  };
  return SameLease(a.lease, b.lease) && a.keys.size() == b.keys.size() &&
         std::equal(a.keys.begin(), a.keys.end(), b.keys.begin(), same_key) && a.sealed_job_key == b.sealed_job_key &&
         a.export_key_name == b.export_key_name && a.export_keystore_id == b.export_keystore_id &&
         a.export_key_id == b.export_key_id && a.export_public == b.export_public && a.world_size == b.world_size &&
         a.ranks_joined == b.ranks_joined && a.audit_index == b.audit_index &&
         a.audit_proofs.size() == b.audit_proofs.size() &&
         std::equal(a.audit_proofs.begin(), a.audit_proofs.end(), b.audit_proofs.begin(),
                    [](const audit::Proof& x, const audit::Proof& y) { return x.ToJson() == y.ToJson(); });
}

void ValidGranted(const ReleaseGranted& g) {
  ValidLease(g.lease);
  Check(!g.keys.empty() && g.keys.size() <= kMaxReleaseKeys, "answer keys.size() out of 1..kMaxReleaseKeys");
  for (const SealedKey& k : g.keys) {
    Check(!k.dataset_id.empty(), "an empty dataset id in an answer");
    Check(k.sealed.size() == 80, "a sealed key that is not 32 + 48 bytes");
    Check(k.suite == crypto::Suite::kAes256Gcm || k.suite == crypto::Suite::kChaCha20Poly1305, "an unknown suite");
  }
  Check(g.sealed_job_key.size() == 80, "a sealed job key that is not 32 + 48 bytes");
  Check(!g.export_key_name.empty(), "an empty export key name");
  Check(g.world_size >= 1 && g.world_size <= 1024, "world_size out of range");
  Check(g.ranks_joined.size() <= 1024, "too many ranks_joined");
  for (uint32_t r : g.ranks_joined) Check(r < g.world_size, "a joined rank >= world_size");
  for (size_t i = 1; i < g.ranks_joined.size(); ++i)
    Check(g.ranks_joined[i - 1] < g.ranks_joined[i], "ranks_joined not strictly ascending");
  Check(g.audit_index <= static_cast<uint64_t>(INT64_MAX), "audit_index out of range");
  Check(g.audit_proofs.empty() || g.audit_proofs.size() == g.keys.size(), "not one audit proof per key");
  for (size_t i = 0; i < g.audit_proofs.size(); ++i) {
    const audit::Proof& p = g.audit_proofs[i];
    Check(p.kind == audit::ProofKind::kInclusion && p.entry.has_value(), "an audit proof without its entry");
    Check(p.leaf_index == g.audit_index + i, "audit proofs not for consecutive entries from audit_index");
    Check(!p.new_checkpoint.empty() && p.new_checkpoint == g.audit_proofs[0].new_checkpoint,
          "audit proofs against different checkpoints");
  }
}

bool SameRenewalGranted(const RenewalGranted& a, const RenewalGranted& b) {
  return SameLease(a.lease, b.lease) && a.audit_index == b.audit_index;
}

void ValidRenewalGranted(const RenewalGranted& g) {
  ValidLease(g.lease);
  Check(g.audit_index <= static_cast<uint64_t>(INT64_MAX), "audit_index out of range");
}

// ---- renewal request and admin -----------------------------------------------------------

void FuzzRenewalRequest(std::string_view text) {
  Result<RenewalRequest> a = ParseRenewalRequest(text);
  if (!a.ok()) {
    Check(!a.status().message().empty(), "a refusal without a message");
    return;
  }
  Check(!a->evidence.empty() && a->evidence.front() == '{', "evidence is not an object's text");
  const std::string once = EncodeRenewalRequest(*a);
  Result<RenewalRequest> b = ParseRenewalRequest(once);
  if (!b.ok()) Fail("an accepted renewal request does not re-parse");
  Check(b->evidence == a->evidence, "the evidence text changed after one round");
  Check(EncodeRenewalRequest(*b) == once, "a second encode of a renewal request differs");
}

void ValidRevocation(const RevocationRequest& r) {
  Check(r.kind == "host" || r.kind == "job", "revocation kind out of range");
  Check(!r.id.empty(), "an empty revocation id");
  if (r.kind == "host") Check(IsLowerHex(r.id, 32), "a host id that is not 32 lowercase hex digits");
  Check(!r.reason.empty() && r.reason.size() <= 1024, "revocation reason length out of range");
  Check(std::none_of(r.reason.begin(), r.reason.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
        "revocation reason has a control character");
}

bool SameRevocation(const RevocationRequest& a, const RevocationRequest& b) {
  return a.kind == b.kind && a.id == b.id && a.reason == b.reason;
}

void ValidActivation(const PolicyActivation& a) {
  Check(a.policy.size() <= kMaxUsagePolicyBytes, "policy text too long");
  Check(a.signature.size() <= 16384, "signature text too long");
}

bool SameActivation(const PolicyActivation& a, const PolicyActivation& b) {
  return a.policy == b.policy && a.signature == b.signature;
}

bool SameRendezvousRequest(const RendezvousRequest& a, const RendezvousRequest& b) {
  return a.lease_id == b.lease_id && a.address == b.address && a.proof == b.proof;
}

void ValidRendezvousRequest(const RendezvousRequest& r) {
  Check(IsLowerHex(r.lease_id, 32), "lease_id is not 32 lowercase hex digits");
  Check(r.address.size() <= 255, "an address over 255 bytes");
  Check(r.address.empty() || r.address.find(':') != std::string::npos, "an address without a port");
}

bool SameRendezvousInfo(const RendezvousInfo& a, const RendezvousInfo& b) {
  if (a.job_id != b.job_id || a.world_size != b.world_size || a.complete != b.complete) return false;
  if (a.ranks.size() != b.ranks.size()) return false;
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    if (a.ranks[i].rank != b.ranks[i].rank || a.ranks[i].host_id != b.ranks[i].host_id ||
        a.ranks[i].address != b.ranks[i].address)
      return false;
  }
  return true;
}

void ValidRendezvousInfo(const RendezvousInfo& info) {
  Check(info.world_size >= 1 && info.world_size <= 1024, "world_size out of range");
  for (const RendezvousRank& r : info.ranks) {
    Check(r.rank < info.world_size, "a rank >= world_size");
    Check(IsLowerHex(r.host_id, 32), "host_id is not 32 lowercase hex digits");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const unsigned selector = data[0] >= '0' && data[0] <= '8' ? data[0] - '0' : data[0] % 9u;
  switch (selector) {
    case 0:
      FuzzReleaseRequest(text);
      break;
    case 1:
      RoundTrip<ReleaseGranted>(text, ParseReleaseGranted, EncodeReleaseGranted, SameGranted, ValidGranted);
      break;
    case 2:
      FuzzRenewalRequest(text);
      break;
    case 3:
      RoundTrip<RenewalGranted>(text, ParseRenewalGranted, EncodeRenewalGranted, SameRenewalGranted,
                                ValidRenewalGranted);
      break;
    case 4:
      RoundTrip<RevocationRequest>(text, ParseRevocationRequest, EncodeRevocationRequest, SameRevocation,
                                   ValidRevocation);
      break;
    case 5:
      RoundTrip<PolicyActivation>(text, ParsePolicyActivation, EncodePolicyActivation, SameActivation,
                                  ValidActivation);
      break;
    case 6:
      RoundTrip<RendezvousRequest>(text, ParseRendezvousRequest, EncodeRendezvousRequest, SameRendezvousRequest,
                                   ValidRendezvousRequest);
      break;
    case 7:
      RoundTrip<RendezvousInfo>(text, ParseRendezvousInfo, EncodeRendezvousInfo, SameRendezvousInfo,
                                ValidRendezvousInfo);
      break;
    case 8:
      RoundTrip<JobReport>(
          text, ParseJobReport, EncodeJobReport,
          [](const JobReport& a, const JobReport& b) {
            return a.lease_id == b.lease_id && a.report == b.report && a.signature == b.signature;
          },
          [](const JobReport& r) {
            Check(IsLowerHex(r.lease_id, 32), "lease_id is not 32 lowercase hex digits");
            Check(r.report.size() <= kMaxJobReportBody, "a report over the limit");
          });
      break;
  }
  return 0;
}
