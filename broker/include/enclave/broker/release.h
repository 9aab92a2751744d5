// Attested key release and lease renewal messages (docs/protocol.md, "Key release").
//
// A release request names the job (its claims, usage_policy.h), the data keys it wants,
// the data-use policy to judge it by, and two public keys the requesting process made for
// this job: an X25519 key the broker seals every secret to, and an Ed25519 key the job
// signs its report with. All of it is bound into the TPM quote through the evidence's
// bound digest, ReleaseBinding() below, so the broker releases only to the process whose
// TPM quoted exactly this request.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/proof.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::broker {

inline constexpr size_t kX25519PublicBytes = 32;
using X25519Public = std::array<uint8_t, kX25519PublicBytes>;
inline constexpr size_t kMaxReleaseKeys = 64;
inline constexpr size_t kMaxReleaseBody = 16u << 20;  // evidence with its logs
inline constexpr size_t kMaxAdminBody = 1u << 20;
inline constexpr size_t kMaxRendezvousBody = 4u << 10;

// The code that asks for keys (docs/protocol.md, "Workload"): the executable as IMA
// measured it when it was started, and, for an interpreter, the files of code it runs.
inline constexpr size_t kMaxWorkloadCodeFiles = 256;
inline constexpr size_t kMaxWorkloadPathBytes = 4096;
struct WorkloadFile {
  std::string path;  // the executable: absolute, as the process saw it; code: relative to the job
  crypto::Digest256 sha256{};
};
struct Workload {
  WorkloadFile executable;
  std::vector<WorkloadFile> code;  // 0..kMaxWorkloadCodeFiles, unique paths, in the order given
};
// SHA-256("enclave workload v1" || 0x00 || executable sha256 || u32 n ||
// n x (u32 len || path || sha256)): what a data-use policy approves. The executable's path
// is not part of it (hosts install one binary at different places); code paths are.
crypto::Digest256 WorkloadDigest(const Workload& w);
// The workload of a running executable: `exe` (normally /proc/self/exe) read and hashed,
// and `path` as the name it reports.
Result<Workload> WorkloadOfExecutable(const std::string& exe, const std::string& path);
// Adds the code files an interpreter runs: each `rel` (relative, inside `dir`, no "..", at
// most kMaxWorkloadCodeFiles, no repeats) read from dir/rel and hashed under its name rel.
Status AddWorkloadCode(const std::string& dir, const std::vector<std::string>& rel, Workload* w);

// What a job key is bound to (docs/protocol.md, "Job keys"): the job, the exact data-use
// policy file (its id, and its digest, which names the serial), the datasets, the world size
// and the workload. A later rank whose binding differs in any field is refused; a job's
// checkpoint keys derive from the job key and this binding's digest.
struct JobBinding {
  std::string job_id;
  crypto::Digest256 job_digest{};
  std::string policy_id;
  crypto::Digest256 policy_sha256{};
  std::vector<std::string> datasets;  // sorted, unique
  uint32_t world_size = 1;
  crypto::Digest256 workload_digest{};
};
// Canonical JSON text (sorted keys), as the broker stores it with the job.
std::string EncodeJobBinding(const JobBinding& b);
Result<JobBinding> ParseJobBinding(std::string_view text);
// SHA-256("enclave job binding v1" || 0x00 || u32 len || job_id || job_digest ||
// u32 len || policy_id || policy_sha256 || u32 n || n x (u32 len || dataset) ||
// u32 world_size || workload_digest); datasets sorted.
crypto::Digest256 JobBindingDigest(const JobBinding& b);
// The names of the fields in which `asked` differs from `stored`, for a refusal.
std::vector<std::string> JobBindingDifferences(const JobBinding& stored, const JobBinding& asked);

// A lease's release claims and the suites of its data keys, as the broker stores them with
// the lease so that each renewal can judge the lease under the policy then in force.
std::string EncodeLeaseClaims(const ReleaseClaims& claims, const std::vector<crypto::Suite>& suites);
Status ParseLeaseClaims(std::string_view text, ReleaseClaims* claims, std::vector<crypto::Suite>* suites);

struct KeyRef {
  std::string dataset_id;
  crypto::Id128 key_id{};  // as the sealed file's header names it
};

// POST /v1/releases
struct ReleaseRequest {
  std::string policy_id;      // the data-use policy to judge the request by
  ReleaseClaims job;          // job.datasets is derived from `keys` (in order, unique)
  uint32_t rank = 0;          // < job.world_size
  std::vector<KeyRef> keys;   // 1..kMaxReleaseKeys, one per dataset
  Workload workload;          // job.workload_digest is WorkloadDigest(workload)
  X25519Public recipient{};   // secrets are sealed to this key
  SignerPublicKey report_key{};  // Ed25519: the job report's signing key
  std::string evidence;       // attest evidence bundle (JSON text) whose bound digest is ReleaseBinding(*this)
};
Result<ReleaseRequest> ParseReleaseRequest(std::string_view body);
std::string EncodeReleaseRequest(const ReleaseRequest& r);

// SHA-256 over the binding encoding (docs/protocol.md, "Release binding"): every field
// of the request but the evidence, length-prefixed, after the domain string
// "enclave key release v2" || 0x00 (v2 added the workload and writes_keys).
crypto::Digest256 ReleaseBinding(const ReleaseRequest& r);

struct SealedKey {
  std::string dataset_id;
  crypto::Id128 key_id{};
  crypto::Suite suite = crypto::Suite::kAes256Gcm;
  std::vector<uint8_t> sealed;  // crypto_box_seal(DEK, recipient): 32 + 48 bytes
};

struct Lease {
  std::string lease_id;  // 32 lowercase hex digits
  std::string host_id;
  std::string job_id;
  std::string policy_id;
  crypto::Digest256 policy_sha256{};
  int64_t issued_at = 0;
  int64_t valid_until = 0;   // hard end: issued_at + the policy's lease length
  int64_t reattest_by = 0;   // renew by fresh attestation before this, or the lease ends
  // When the holder must stop and wipe the keys unless it renews: min(valid_until, reattest_by).
  int64_t expires_at() const { return valid_until < reattest_by ? valid_until : reattest_by; }
};

// 200 answer of POST /v1/releases.
struct ReleaseGranted {
  Lease lease;
  std::vector<SealedKey> keys;          // in request order
  std::vector<uint8_t> sealed_job_key;  // crypto_box_seal(32-byte job communication key)
  std::string export_key_name;
  crypto::Id128 export_keystore_id{};   // the tenant keystore holding the private half
  crypto::Id128 export_key_id{};
  X25519Public export_public{};
  uint32_t world_size = 1;
  std::vector<uint32_t> ranks_joined;   // ranks of this job holding a lease, ascending
  uint64_t audit_index = 0;             // the first key.released entry of this decision
  // From a witnessed broker: one inclusion proof per key.released entry, in key order, all
  // against one checkpoint cosigned by the broker's witness quorum (docs/protocol.md,
  // "Witnessed releases"). Empty from a broker without witnesses.
  std::vector<audit::Proof> audit_proofs;
};
std::string EncodeReleaseGranted(const ReleaseGranted& g);
// Strict; audit_proofs, when present, must be one inclusion proof with its entry per key,
// audit_index first and consecutive, all against the same checkpoint note. Their hashes and
// signatures are checked by VerifyWitnessedRelease, not here.
Result<ReleaseGranted> ParseReleaseGranted(std::string_view body);

// The client's check of a witnessed release: every proof holds; the checkpoint is signed by
// the policy's log and cosigned by its quorum; entry i is the key.released entry of this
// lease, host, job and report key for keys[i]. AuthFailed (PermissionDenied when the answer
// carries no proofs) naming what failed; on success the witnesses that cosigned.
Result<std::vector<audit::CosignedBy>> VerifyWitnessedRelease(const ReleaseGranted& g,
                                                              const std::array<uint8_t, 32>& report_key,
                                                              const audit::WitnessPolicy& policy);

// POST /v1/leases/LEASE/renewals: fresh evidence whose bound digest is RenewalBinding.
struct RenewalRequest {
  std::string evidence;
};
Result<RenewalRequest> ParseRenewalRequest(std::string_view body);
std::string EncodeRenewalRequest(const RenewalRequest& r);
// SHA-256("enclave lease renewal v1" || 0x00 || lease id (16 bytes) || recipient (32 bytes)).
crypto::Digest256 RenewalBinding(const std::string& lease_id, const X25519Public& recipient);

// 200 answer of a renewal.
struct RenewalGranted {
  Lease lease;
  uint64_t audit_index = 0;
};
std::string EncodeLease(const Lease& l);  // the "lease" object, also GET-free admin listings
std::string EncodeRenewalGranted(const RenewalGranted& g);
Result<RenewalGranted> ParseRenewalGranted(std::string_view body);

// Admin: POST /v1/admin/revocations {"kind":"host"|"job","id":ID,"reason":TEXT}
struct RevocationRequest {
  std::string kind;
  std::string id;
  std::string reason;
};
Result<RevocationRequest> ParseRevocationRequest(std::string_view body);
std::string EncodeRevocationRequest(const RevocationRequest& r);

// Admin: POST /v1/admin/policies {"policy":TEXT,"signature":TEXT} (both files' exact text).
struct PolicyActivation {
  std::string policy;
  std::string signature;
};
Result<PolicyActivation> ParsePolicyActivation(std::string_view body);
std::string EncodePolicyActivation(const PolicyActivation& a);

// POST /v1/jobs/JOB/rendezvous: a rank publishes where it listens and learns the others'.
// The proof shows it holds the job key (only ranks that attested for the job do).
struct RendezvousRequest {
  std::string lease_id;
  std::string address;  // "HOST:PORT" the rank listens on; "" to only read
  std::array<uint8_t, 32> proof{};
};
Result<RendezvousRequest> ParseRendezvousRequest(std::string_view body);
std::string EncodeRendezvousRequest(const RendezvousRequest& r);
// HMAC-SHA256(job key, "enclave rendezvous v1" || 0x00 || u32 len || job_id || lease id
// (16 bytes) || u32 len || address).
std::array<uint8_t, 32> RendezvousProof(const crypto::SecretBytes& job_key, const std::string& job_id,
                                        const std::string& lease_id, const std::string& address);

struct RendezvousRank {
  uint32_t rank = 0;
  std::string host_id;
  std::string address;  // "" when not published yet
};
struct RendezvousInfo {
  std::string job_id;
  uint32_t world_size = 1;
  std::vector<RendezvousRank> ranks;  // active leases of the job, by rank
  bool complete = false;              // every rank 0..world_size-1 present with an address
};
std::string EncodeRendezvousInfo(const RendezvousInfo& info);
Result<RendezvousInfo> ParseRendezvousInfo(std::string_view body);

// POST /v1/jobs/JOB/reports: the job's signed report, to be logged as job.finished.
inline constexpr size_t kMaxJobReportBody = 2u << 20;
struct JobReport {
  std::string lease_id;
  std::string report;  // report.json's exact text
  std::array<uint8_t, kEd25519SignatureBytes> signature{};
};
Result<JobReport> ParseJobReport(std::string_view body);
std::string EncodeJobReport(const JobReport& r);
// "enclave-train report v1" || 0x00 || SHA-256(report): what the report key signs.
std::vector<uint8_t> ReportSignatureInput(std::string_view report);

// libsodium sealed boxes (X25519 + XSalsa20-Poly1305, anonymous sender).
std::vector<uint8_t> SealTo(const X25519Public& recipient, const crypto::SecretBytes& secret);
// The recipient's key pair; kAuthFailed when the box does not open.
Result<crypto::SecretBytes> OpenSealed(const X25519Public& public_key, const crypto::SecretBytes& secret_key,
                                       ByteSpan sealed);

}  // namespace enclave::broker
