// The broker's decisions, independent of HTTP: enrolment (EK chain, AK attributes,
// credential activation), attestation nonces, and evidence appraisal. Every method takes
// the request body as received and answers with an HTTP status and a JSON body
// (docs/protocol.md); the server only routes, limits and frames.
//
// Order of effects, so that a crash never leaves a decision unlogged:
//   enrolment:   challenge stored -> answered; activation: challenge deleted (one attempt)
//                -> secret compared in constant time -> "host.enrolled" appended to the
//                audit log (durable) -> host stored -> answered.
//   attestation: nonce marked used (durable) -> evidence appraised -> verdict and its
//                inputs archived and appended (durable) -> clock state stored on a pass
//                -> answered.
#pragma once

#include <cstdint>
#include <functional>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "enclave/attest/bundle.h"
#include "enclave/attest/policy.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/audit/log_writer.h"
#include "enclave/audit/witnessing.h"
#include "enclave/broker/release.h"
#include "enclave/broker/store.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/keystore.h"
#include "enclave/common/status.h"

namespace enclave::broker {

struct Reply {
  int status = 500;
  std::string body;  // JSON
};

// The HTTP status for a Status code (docs/protocol.md, "Errors").
int HttpStatusFor(Code code);
// An error reply: HttpStatusFor(status.code()) and EncodeError.
Reply ErrorReply(const Status& status);

struct ServiceOptions {
  std::string actor = "broker";
  int64_t nonce_ttl_s = 60;
  int64_t challenge_ttl_s = 300;
  int64_t nonces_per_minute = 600;  // per host (a token bucket of this size, refilled per minute)
  int64_t archive_max_bytes = int64_t{16} << 30;
  int64_t archive_min_free_bytes = int64_t{1} << 30;
  std::function<int64_t()> now;  // unix seconds; unset: the system clock
  // Key release (release_service.cc). Without a keystore every release is refused.
  const crypto::Keystore* keystore = nullptr;
  std::vector<SignerPublicKey> policy_signers;  // compliance officers
  std::string export_key;                       // keystore export key name; "": the newest
  // Witnessed releases ([audit] witness_policy): a release is answered only with a
  // checkpoint cosigned by the quorum that holds its key.released entries, waiting at most
  // `witness_wait`; after that the lease ends (logged) and the answer is 503.
  audit::Witnessing* witnessing = nullptr;
  std::chrono::milliseconds witness_wait{5000};
};

// The keystore label of the key that wraps the stored job keys.
inline constexpr std::string_view kJobKeyLabel = "broker job keys v1";

// How far (TPM clock, ms) a signed nonce request may lag behind the newest one accepted
// from its host: room for concurrent requests arriving out of order; older is a replay.
inline constexpr int64_t kNonceRequestWindowMs = 120000;

class Service {
 public:
  // `policy_text` is the attestation policy file's bytes and `policy_dir` its folder (the
  // verdict archive keeps both); the policy is parsed from them here.
  static Result<std::unique_ptr<Service>> Create(Store& store, audit::LogWriter& log, audit::EvidenceArchive archive,
                                                 std::string policy_text, std::string policy_dir,
                                                 ServiceOptions options);

  Reply Enrol(std::string_view body);                                     // POST /v1/enrolments
  Reply Activate(const std::string& challenge_id, std::string_view body);  // POST /v1/enrolments/ID/activation
  // POST /v1/nonces, a request signed with the host's AK (attest/request_signature.h).
  // `peer`: the caller's address; each (host, address) pair has its own allowance, so a
  // flood from elsewhere does not use up the host's own (it is charged before the
  // signature is checked, so a flood of bad signatures is bounded too).
  Reply IssueNonce(std::string_view body, const std::string& peer = "");
  Reply Attest(std::string_view body);                                    // POST /v1/attestations
  // POST /v1/releases. A witnessed release is answered once a witness quorum has cosigned
  // its entries: `done` is called once, on this thread or later through `later` (which runs
  // a function on a worker thread), without a thread waiting meanwhile.
  void Release(std::string_view body, std::function<void(Reply)> done,
               const std::function<void(std::function<void()>)>& later);
  Reply Release(std::string_view body);  // the same, waiting for the answer
  Reply Renew(const std::string& lease_id, std::string_view body);        // POST /v1/leases/ID/renewals
  Reply Rendezvous(const std::string& job_id, std::string_view body);     // POST /v1/jobs/ID/rendezvous
  Reply FinishJob(const std::string& job_id, std::string_view body);      // POST /v1/jobs/ID/reports
  // Administration (the server checks the admin token first).
  Reply AdminRevoke(std::string_view body);                               // POST /v1/admin/revocations
  Reply AdminActivatePolicy(std::string_view body);                       // POST /v1/admin/policies

  const attest::Policy& policy() const { return policy_; }

 private:
  Service(Store& store, audit::LogWriter& log, audit::EvidenceArchive archive, attest::Policy policy,
          std::string policy_text, std::string policy_dir, ServiceOptions options)
      : store_(store), log_(log), archive_(std::move(archive)), policy_(std::move(policy)),
        policy_text_(std::move(policy_text)), policy_dir_(std::move(policy_dir)), options_(std::move(options)) {
    policy_sha256_ = crypto::Sha256(AsBytes(policy_text_));
  }
  int64_t Now() const;
  // Inclusion proofs of a release's entries (first_index...) in a quorum-cosigned checkpoint.
  Result<std::vector<audit::Proof>> WitnessedProofs(const audit::CosignedCheckpoint& c, uint64_t first_index,
                                                    const std::vector<std::vector<uint8_t>>& entries);
  // A release: decided and logged (an answer, or nullopt when it waits for witnesses),
  // then completed with the cosigned checkpoint (or the failure to get one), then answered.
  struct PendingRelease;
  std::optional<Reply> DecideRelease(std::string_view body, PendingRelease& p);
  Reply CompleteWitnessedRelease(PendingRelease& p, const Result<audit::CosignedCheckpoint>& cosigned);
  // Seals the keys into the answer; the caller holds revocation_mu_ shared. The second
  // abandons the release (below) when the first fails.
  Reply FinishRelease(PendingRelease& p, const std::shared_lock<std::shared_mutex>& revocation_guard);
  Reply FinishOrAbandon(PendingRelease& p, const std::shared_lock<std::shared_mutex>& revocation_guard);
  // A logged release that sends nothing: its lease ends, marked undelivered, and a lease
  // revocation entry with `why` says so in the audit log (failures go to the broker's log).
  void AbandonRelease(const std::string& lease_id, const std::string& why);
  std::shared_ptr<std::mutex> HostLock(const std::string& host_id);
  std::shared_ptr<std::mutex> JobLock(const std::string& job_id);
  // Appraises `evidence_text` for `host` with `bound` as the expected bound digest,
  // archiving and logging the verdict; updates the host's clock state on a pass.
  Result<audit::RecordedVerdict> AppraiseFor(const HostRecord& host, const NonceRecord& nonce,
                                             std::string_view evidence_text,
                                             const std::optional<crypto::Digest256>& bound,
                                             const std::string& job_digest_hex);
  // The job's communication key: unwrapped, or made and stored for a new job id.
  // The job's key: created with the job, or the stored one when `binding` is the job's
  // and the job has not ended. FailedPrecondition (a refusal to log) otherwise.
  Result<crypto::SecretBytes> JobKey(const JobBinding& binding, int64_t now);
  // The stored job's key, unwrapped.
  Result<crypto::SecretBytes> UnwrapJobKey(const JobRecord& job);

  Store& store_;
  audit::LogWriter& log_;
  const audit::EvidenceArchive archive_;
  const attest::Policy policy_;
  const std::string policy_text_, policy_dir_;
  const ServiceOptions options_;
  std::mutex locks_mu_;
  std::map<std::string, std::shared_ptr<std::mutex>> host_locks_;  // one appraisal per host at a time
  std::map<std::string, std::shared_ptr<std::mutex>> job_locks_;   // one release per job at a time
  // Shared by a release (renewal) from the commit of its lease (renewal) until its audit
  // entries are written; exclusive for a revocation. So the audit log never shows a key
  // released (a lease renewed) after the revocation that ended that lease: a revocation
  // commits either before the lease (refused in the store's transaction) or after the
  // release's entries (and ends the lease).
  std::shared_mutex revocation_mu_;
  std::mutex activation_mu_;  // policy activations, one at a time (serial order = log order)
  // Nonces per (host, caller address): a token bucket of options_.nonces_per_minute,
  // refilled continuously. Entries of hosts that are not enrolled are never made.
  struct NonceBucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  std::mutex buckets_mu_;
  std::map<std::string, NonceBucket> nonce_buckets_;
  // The evidence archive's size: scanned at start, then counted per appraisal (an upper
  // bound: a blob already stored is counted again).
  std::atomic<uint64_t> archive_bytes_{0};
  crypto::Digest256 policy_sha256_{};  // of policy_text_
  // Wraps the stored job keys (keystore-derived, label kJobKeyLabel); one cipher context,
  // so one use at a time.
  std::mutex job_key_aead_mu_;
  std::unique_ptr<crypto::Aead> job_key_aead_;
};

// The audit log's limit on a text field (audit/src/event.cc).
inline constexpr size_t kMaxAuditTextBytes = 2048;
// `text` as an audit text field: valid UTF-8 without control characters (an invalid byte
// becomes '?', a control character a space), at most `max_bytes`; a longer text is cut
// at a character boundary and ends with " [truncated: N bytes in all]". Never empty.
std::string AuditText(std::string_view text, size_t max_bytes = kMaxAuditTextBytes);

// hex(SHA-256(ek_public)[0..16)).
std::string HostIdFor(ByteSpan ek_public);

// The TPM keys of an enrolment bundle: hex SHA-256 of the SubjectPublicKeyInfo of every EK
// certificate in the bundle (any NV index) that is strict DER and chains to a root of
// `trust`, sorted and distinct. Every EK of one TPM that its manufacturer certified is
// here when the host sends all its EK certificates (enclave-attest and the host agent
// read every EK certificate index), so these tie the host ids of one TPM together.
std::vector<std::string> TpmKeysOf(const attest::EnrolmentBundle& bundle, const attest::EkTrustStore& trust);

}  // namespace enclave::broker
