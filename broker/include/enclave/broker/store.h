// The broker's state store: one SQLite file in WAL mode. A committed transaction is on
// disk before the call returns (the WAL is fdatasync'ed), so a crash at any point loses
// nothing that was acknowledged. Every state change is one transaction. Concurrent
// callers share that sync (a group commit): SQLite runs with synchronous=NORMAL, and each
// writer, after its COMMIT and with the connection free for the next one, waits for one
// fdatasync of the WAL that began after its commit.
//
// Schema (docs/protocol.md, "State store"), versioned by the schema_migrations table:
//   hosts          enrolled hosts: EK public, SHA-256 of the EK certificate that was
//                  appraised, AK public and name, the enrolment bundle, last clock state
//   challenges     pending enrolment challenges: only SHA-256 of the secret, never the secret
//   nonces         attestation nonces: single use (used_at), expiry
//   revocations    revoked hosts and jobs
//   tpm_keys       (v3) the EK keys each host's enrolment bundles certified: every EK
//                  certificate in a bundle that chains to a trusted root, by SHA-256 of its
//                  SubjectPublicKeyInfo. Hosts that share one are the same TPM, and a host
//                  revocation covers every host linked to it this way (transitively)
//   jobs           one per job id: its digest, world size, and its communication key
//                  wrapped (AES-256-GCM) under a key derived from the tenant keystore
//   leases         key releases: host, job, rank, data-use policy, deadlines, end
//   policies       activated data-use policies with their signatures (the highest serial
//                  of a policy id is in force)
// Nothing in the database is key material in clear: the challenge secret is kept as a
// digest, job keys are wrapped, and the DEKs stay in the tenant keystore.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/tpm_types.h"
#include "enclave/common/group_sync.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

struct sqlite3;

namespace enclave::broker {

class StatementCache;  // store.cc
class Txn;             // store.cc

inline constexpr int kSchemaVersion = 6;

struct HostRecord {
  std::string host_id;                 // hex SHA-256(EK public)[0..16): stable across AK changes
  std::vector<uint8_t> ek_public;      // TPM2B_PUBLIC
  crypto::Digest256 ek_cert_sha256{};  // the EK certificate that was appraised
  std::vector<uint8_t> ak_public;      // TPM2B_PUBLIC
  std::vector<uint8_t> ak_name;        // TPM2B_NAME contents
  std::string enrolment_bundle;        // as the host sent it (archived with each verdict)
  std::string clock_state;             // attest::EncodeClockState, "" before the first pass
  int64_t enrolled_at = 0;             // unix seconds
};

struct PendingChallenge {
  std::string challenge_id;  // 32 hex
  std::string host_id;
  std::string enrolment_bundle;
  crypto::Digest256 secret_sha256{};
  crypto::Digest256 ek_cert_sha256{};
  int64_t created_at = 0;
  int64_t expires_at = 0;
};

struct NonceRecord {
  std::vector<uint8_t> nonce;  // 32 bytes
  std::string host_id;
  int64_t issued_at = 0;
  int64_t expires_at = 0;
};

enum class RevokedKind { kHost, kJob };

struct JobRecord {
  std::string job_id;
  crypto::Digest256 job_digest{};
  uint32_t world_size = 1;
  std::vector<uint8_t> key_nonce;    // 12 bytes
  std::vector<uint8_t> key_wrapped;  // AES-256-GCM(job key) || tag; AD: see service.cc
  int64_t created_at = 0;
  // EncodeJobBinding (release.h) of everything the job key is bound to; empty for a job
  // stored before schema 4, which is never issued again.
  std::string binding;
  std::optional<int64_t> ended_at;  // the job ended (report, revocation, last lease ended)
  std::string end_reason;
};

struct LeaseRecord {
  std::string lease_id;
  std::string host_id;
  std::string job_id;
  uint32_t rank = 0;
  std::string policy_id;
  crypto::Digest256 policy_sha256{};
  std::vector<uint8_t> recipient;     // the X25519 key the release was sealed to
  std::vector<std::string> datasets;
  int64_t issued_at = 0;
  int64_t valid_until = 0;
  int64_t reattest_by = 0;
  std::optional<int64_t> ended_at;    // set when revoked or failed re-attestation
  std::string end_reason;
  std::string address;                // rendezvous: where this rank listens ("" until published)
  std::vector<uint8_t> report_key;    // Ed25519: the job's report signing key bound into the quote
  std::optional<int64_t> reported_at; // set when the job's signed report was logged
  std::string claims;                 // EncodeLeaseClaims (release.h): what renewals judge again
  bool undelivered = false;           // its release ended without sending a key
  // Usable at `now`: not ended, and before both deadlines.
  bool ActiveAt(int64_t now) const { return !ended_at && now < valid_until && now < reattest_by; }
};

struct PolicyRecord {
  std::string policy_id;
  uint64_t serial = 0;
  crypto::Digest256 policy_sha256{};
  std::string policy_text;
  std::string signature_text;
  std::vector<uint8_t> signer;  // Ed25519 public key
  int64_t activated_at = 0;
};

class Store {
 public:
  // Opens (creating when absent, mode 0600) and migrates to kSchemaVersion. A database
  // written by a newer broker (higher version) is Unsupported.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  // Opens an existing database read-only (admin commands), without migrating.
  static Result<std::unique_ptr<Store>> OpenReadOnly(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  Result<int> SchemaVersion();
  // PRAGMA integrity_check: OK or the first problem.
  Status IntegrityCheck();

  Status PutChallenge(const PendingChallenge& challenge);
  // Deletes the challenge and returns it: one activation attempt per challenge. NotFound
  // when unknown (or already used); FailedPrecondition when it expired (deleted too).
  Result<PendingChallenge> TakeChallenge(const std::string& challenge_id, int64_t now);

  // Inserts the host, or replaces its AK and enrolment bundle when its EK is already
  // enrolled (the clock state is kept: same TPM, same clock), and links it to the TPM keys
  // `tpm_keys` (hex SHA-256 of each certified EK's SubjectPublicKeyInfo), in one
  // transaction that first checks revocation: PermissionDenied when the host, or any host
  // sharing one of these keys (or one of its stored keys), is revoked.
  Status UpsertHost(const HostRecord& host, const std::vector<std::string>& tpm_keys = {});
  // Links a host to TPM keys (idempotent; used to fill tpm_keys for hosts enrolled before v3).
  Status LinkTpmKeys(const std::string& host_id, const std::vector<std::string>& tpm_keys, int64_t now);
  // The revoked host id that `host_id` is, or is linked to through a TPM key (its stored
  // keys or `tpm_keys`, transitively); nullopt when none is revoked.
  Result<std::optional<std::string>> RevokedTpmLink(const std::string& host_id,
                                                    const std::vector<std::string>& tpm_keys = {});
  Result<HostRecord> GetHost(const std::string& host_id);
  Result<std::vector<HostRecord>> ListHosts();
  // The host enrolled with this AK name, if any.
  Result<std::optional<std::string>> HostIdForAkName(const std::vector<uint8_t>& ak_name);
  // Replaces the clock state only when it still equals `expected` (compare and set).
  Status UpdateClockState(const std::string& host_id, const std::string& expected, const std::string& clock_state);

  Status PutNonce(const NonceRecord& nonce);
  // Stores the nonce for a signed request of its host whose quote carried `clock` and
  // whose TPMS_ATTEST hashes to `request_digest`, in one transaction with the replay check:
  // PermissionDenied when that request was accepted before, was signed in an earlier TPM
  // boot (resetCount, restartCount) than the host's newest accepted request, or in the same
  // boot more than `window_ms` of TPM clock before it. Requests arriving out of order
  // within the window are accepted; each digest is remembered while inside the window.
  Status PutNonceForRequest(const NonceRecord& nonce, const attest::ClockInfo& clock,
                            const crypto::Digest256& request_digest, int64_t window_ms);
  // Marks the nonce used and returns it, in one transaction. NotFound when unknown;
  // FailedPrecondition when already used or expired. A nonce is never usable twice.
  Result<NonceRecord> ConsumeNonce(const std::vector<uint8_t>& nonce, int64_t now);
  // Deletes expired challenges and nonces that expired more than `keep_s` ago.
  Result<int64_t> PurgeExpired(int64_t now, int64_t keep_s);

  // Records the revocation and ends every lease of that job, or of that host and of every
  // host linked to it through a TPM key, in one transaction; the number of leases ended.
  Result<int64_t> Revoke(RevokedKind kind, const std::string& id, const std::string& reason, int64_t now);
  // A job: revoked by id. A host: revoked by id or through a TPM key it shares with a
  // revoked host (RevokedTpmLink).
  Result<bool> IsRevoked(RevokedKind kind, const std::string& id);

  // The job with this id, inserting `candidate` when there is none (one transaction). A
  // job id names one job: the caller compares digests and world sizes.
  Result<JobRecord> GetOrCreateJob(const JobRecord& candidate);
  Result<std::optional<JobRecord>> GetJob(const std::string& job_id);
  // Marks the job ended (kept when it already was); its key is never issued again.
  Status EndJob(const std::string& job_id, const std::string& reason, int64_t now);
  // How many leases the job ever had, not counting undelivered ones (EndUndeliveredLease),
  // and how many are active at `now`: read together, so that a lease ended undelivered
  // meanwhile is never counted in the first and missing from the second.
  struct JobLeaseCounts {
    int64_t ever = 0;
    int64_t active = 0;
  };
  Result<JobLeaseCounts> CountLeasesOfJob(const std::string& job_id, int64_t now);

  // Inserts the lease, in one transaction that first checks that neither its host (nor a
  // host linked to it, see IsRevoked) nor its job is revoked (PermissionDenied) and that
  // no other host holds an active lease for the same job and rank (AlreadyExists). A
  // revocation therefore either commits before the lease (which is refused) or after it
  // (and ends it).
  Status PutLease(const LeaseRecord& lease, int64_t now);
  Result<LeaseRecord> GetLease(const std::string& lease_id);
  // Active leases only unless `all`.
  Result<std::vector<LeaseRecord>> ListLeases(bool all, int64_t now);
  // The job's active leases, by rank (the (job_id, rank) index).
  Result<std::vector<LeaseRecord>> ActiveLeasesOfJob(const std::string& job_id, int64_t now);
  // Ranks of the job with an active lease, ascending.
  Result<std::vector<uint32_t>> RanksJoined(const std::string& job_id, int64_t now);
  // Moves the re-attestation deadline of an active lease (FailedPrecondition otherwise),
  // in one transaction that first checks that neither the lease's host (nor a linked
  // host) nor its job is revoked (PermissionDenied). Returns the previous deadline.
  Result<int64_t> RenewLease(const std::string& lease_id, int64_t reattest_by, int64_t now);
  // Undoes a renewal whose audit entry could not be written: sets the deadline back to
  // `previous` only while it is still `renewed` (fail closed: never extends).
  Status UndoRenewal(const std::string& lease_id, int64_t renewed, int64_t previous);
  Status EndLease(const std::string& lease_id, const std::string& reason, int64_t now);
  // Ends a lease whose release sent no key (kept ended, with its first reason, when it
  // already was) and marks it undelivered: a failed release does not use up its job.
  Status EndUndeliveredLease(const std::string& lease_id, const std::string& reason, int64_t now);
  // Marks the lease's job report as logged; FailedPrecondition when it already was.
  Status MarkReported(const std::string& lease_id, int64_t now);
  // Rendezvous: the address an active lease's rank listens on.
  Status SetLeaseAddress(const std::string& lease_id, const std::string& address, int64_t now);

  // Stores an activated policy. AlreadyExists when this id already has this serial or a
  // higher one (activation never goes back).
  Status PutPolicy(const PolicyRecord& policy);
  // The policy in force for this id (highest serial), NotFound when none.
  Result<PolicyRecord> GetActivePolicy(const std::string& policy_id);
  Result<std::vector<PolicyRecord>> ListActivePolicies();

  // How many fdatasyncs of the WAL have run (each covers every commit made before it).
  uint64_t wal_syncs() const;

 private:
  explicit Store(sqlite3* db);
  static Result<std::unique_ptr<Store>> OpenReadWrite(const std::string& path);
  Status Exec(const char* sql);
  Status Migrate();
  // With mu_ held (inside a transaction where it matters).
  Status LinkTpmKeysLocked(const std::string& host_id, const std::vector<std::string>& tpm_keys, int64_t now);
  Result<std::optional<std::string>> RevokedLinkLocked(const std::string& host_id,
                                                       const std::vector<std::string>& tpm_keys);
  Result<bool> IsRevokedLocked(RevokedKind kind, const std::string& id);
  // PermissionDenied when the host (or a host linked to it) or the job is revoked.
  Status CheckNotRevokedLocked(const std::string& host_id, const std::string& job_id);
  // Runs body(txn) in one transaction under mu_; every statement the body makes ends with
  // it, still under mu_. When the body committed, then waits, with mu_ let go, until a sync
  // of the WAL covers the commit, and fails if that sync failed. Returns what the body did.
  template <typename Body>
  auto WriteDurably(Body&& body) -> decltype(body(std::declval<Txn&>()));
  Status SyncWal();
  sqlite3* db_ = nullptr;
  std::string wal_path_;  // empty for a read-only store
  int wal_fd_ = -1;       // the WAL file, opened at the first sync (guarded by the sync)
  std::unique_ptr<GroupSync> wal_sync_;
  std::unique_ptr<StatementCache> stmts_;  // the connection's prepared statements
  std::mutex mu_;  // one connection, one transaction at a time
};

}  // namespace enclave::broker
