// enclave-train's attested mode: this host's TPM attests to the job's broker, the data keys
// come back sealed to this process and live only in its memory (an in-memory keystore
// under the tenant keystore's id), the lease is renewed by fresh attestation in the
// background, and the report is signed with the report key the quote bound.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "enclave/attest/host/agent.h"
#include "enclave/attest/host/tpm.h"
#include "enclave/broker/client.h"
#include "enclave/crypto/keystore.h"
#include "enclave/net/ring.h"
#include "enclave/trainer/job.h"
#include "enclave/session/job_release.h"

namespace enclave::session {

// The keeper's renewal schedule (pure functions, tested in tests/broker).
struct RenewalSchedule {
  // When to renew a lease whose release or last renewal was answered at `granted_at` (this
  // host's clock) with the re-attestation deadline `reattest_by`: two thirds of the way
  // from the grant to the deadline, at least 1 s after the grant. Relative to the last
  // grant, so each renewal moves the next one by about two thirds of the interval.
  static int64_t RenewAt(int64_t granted_at, int64_t reattest_by);
  // The next try after `failures` (>= 1) failed renewals in a row, the last at `now`:
  // 1, 2, 4, ... at most 30 s later, and never after 1 s before `expires_at`.
  static int64_t RetryAt(int64_t now, int failures, int64_t expires_at);
  // A failure the broker decided (the lease ended or is not this host's, the evidence was
  // refused, the request is malformed): retrying cannot help. Anything else (broker
  // unreachable, 503, 500) is retried while the lease is valid.
  static bool Final(Code code);
};

class AttestedJob {
 public:
  static constexpr int64_t kStatusCheckSeconds = 5;
  struct Options {
    std::string tcti;       // the TPM (attest::host::DefaultTcti() when empty)
    std::string state_dir;  // the host's AK and enrolment (enclave-attest register)
    attest::host::LogPaths logs;
    JobReleaseOptions release;
  };
  // Attests for the job named by `job`'s [broker] table and opens the release.
  static Result<std::unique_ptr<AttestedJob>> Start(const trainer::JobSpec& job, const Options& options);
  ~AttestedJob();
  AttestedJob(const AttestedJob&) = delete;
  AttestedJob& operator=(const AttestedJob&) = delete;

  crypto::Keystore& keystore() { return *keystore_; }
  const broker::Release& release() const { return release_; }
  const std::string& url() const { return url_; }
  // What the release claimed the job shows in clear, as the broker approved it.
  const std::vector<std::string>& clear_outputs() const { return clear_outputs_; }

  // False once the lease has ended: a renewal was refused, its deadline passed, or the
  // broker answered that it is no longer active (revoked). The keeper renews at two thirds
  // of each re-attestation interval (RenewalSchedule), retries a renewal that failed
  // without a refusal with backoff while the lease is valid, and asks for the lease's
  // status every kStatusCheckSeconds in between (an authenticated rendezvous read).
  bool LeaseHeld() const;
  std::string LeaseEndReason() const;
  broker::Lease CurrentLease() const;

  // The detached signature file of a report (docs/training.md, "Signed report").
  Result<std::string> SignReport(std::string_view report) const;
  // Sends the signed report to the broker, which logs job.finished; its audit index.
  Result<uint64_t> ReportFinished(const std::string& report);

  // The broker as the distributed run's rendezvous (docs/training.md): this rank's listen
  // handle is published as its lease's address "enclave-net:<hex of the handle's first 64
  // bytes>", proven with the job key; the others' are polled until they appear.
  std::unique_ptr<net::HandleExchange> RendezvousExchange();

 private:
  AttestedJob() = default;
  void Keep();
  broker::BrokerClient::Quoter Quoter();
  class BrokerExchange;
  Result<broker::RendezvousInfo> Rendezvous(const std::string& address);

  std::string url_;
  std::vector<std::string> clear_outputs_;
  Options options_;
  std::unique_ptr<broker::BrokerClient> client_;
  std::unique_ptr<attest::host::Tpm> tpm_;
  std::optional<attest::host::HostState> state_;
  std::optional<broker::ReleaseKeys> keys_;
  broker::Release release_;
  std::optional<crypto::Keystore> keystore_;

  std::mutex client_mu_;  // one request at a time on client_ and tpm_ (the keeper and the finish)
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  broker::Lease lease_;         // guarded by mu_
  std::string end_reason_;      // guarded by mu_; non-empty once the lease ended
  std::thread keeper_;
};

}  // namespace enclave::session
