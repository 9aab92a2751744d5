#include "enclave/session/attested_job.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "enclave/attest/bundle.h"
#include "enclave/common/bytes.h"
#include "enclave/crypto/hash.h"
#include "enclave/trainer/checkpoint.h"

namespace enclave::session {
namespace {

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

int64_t RenewalSchedule::RenewAt(int64_t granted_at, int64_t reattest_by) {
  const int64_t left = reattest_by - granted_at;
  return granted_at + std::max<int64_t>(1, left * 2 / 3);
}

int64_t RenewalSchedule::RetryAt(int64_t now, int failures, int64_t expires_at) {
  const int64_t backoff = std::min<int64_t>(30, int64_t{1} << std::clamp(failures - 1, 0, 5));
  return std::max(now + 1, std::min(now + backoff, expires_at - 1));
}

bool RenewalSchedule::Final(Code code) {
  return code == Code::kPermissionDenied || code == Code::kFailedPrecondition || code == Code::kNotFound ||
         code == Code::kAuthFailed || code == Code::kInvalidInput || code == Code::kUnsupported;
}

broker::BrokerClient::Quoter AttestedJob::Quoter() {
  return [this](const broker::NonceIssued& n, const crypto::Digest256& bound) -> Result<attest::EvidenceBundle> {
    ASSIGN_OR_RETURN(attest::PcrSelection sel, attest::PcrSelection::FromString(n.pcr_selection));
    const attest::host::LogPaths paths = options_.logs;
    return attest::host::MakeEvidence(*tpm_, *state_, sel, n.nonce, bound,
                                      [paths] { return attest::host::ReadHostLogs(paths); }, Now());
  };
}

Result<std::unique_ptr<AttestedJob>> AttestedJob::Start(const trainer::JobSpec& job, const Options& options) {
  if (job.broker.url.empty()) return InvalidInput("the job has no [broker] table");
  std::unique_ptr<AttestedJob> a(new AttestedJob());
  a->options_ = options;
  a->url_ = job.broker.url;
  ASSIGN_OR_RETURN(broker::ReleaseRequest request, ReleaseRequestForJob(job, options.release));
  a->clear_outputs_ = request.job.clear_metrics;
  ASSIGN_OR_RETURN(a->client_, broker::BrokerClient::Create(job.broker.url, job.broker.ca));
  if (!job.broker.witness_policy.empty()) {
    auto policy = audit::WitnessPolicy::Load(job.broker.witness_policy);
    if (!policy.ok()) return policy.status().Annotate("[broker] witness_policy");
    a->client_->SetWitnessPolicy(std::move(*policy));
  }
  std::string tcti = options.tcti;
  if (tcti.empty()) {
    ASSIGN_OR_RETURN(tcti, attest::host::DefaultTcti());
  }
  ASSIGN_OR_RETURN(a->tpm_, attest::host::Tpm::Open(tcti));
  ASSIGN_OR_RETURN(attest::host::HostState state, attest::host::HostState::Open(options.state_dir, false));
  a->state_.emplace(std::move(state));
  a->client_->SetNonceSigner([tpm = a->tpm_.get(), state = &*a->state_](const std::string& host_id) {
    return attest::host::SignNonceRequest(*tpm, *state, host_id);
  });
  ASSIGN_OR_RETURN(attest::EnrolmentBundle enrolled, a->state_->LoadEnrolment());
  const crypto::Digest256 ek = crypto::Sha256(enrolled.ek_public);
  const std::string host_id = HexEncode(ByteSpan(ek.data(), 16));
  ASSIGN_OR_RETURN(broker::ReleaseKeys keys, broker::ReleaseKeys::Generate());
  a->keys_.emplace(std::move(keys));
  ASSIGN_OR_RETURN(a->release_, a->client_->RequestRelease(host_id, request, *a->keys_, a->Quoter()));
  ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::InMemory(a->release_.export_key.keystore_id));
  for (broker::ReleasedKey& k : a->release_.keys) {
    crypto::PendingDataKey pending;
    pending.entry.dataset_id = k.dataset_id;
    pending.entry.key_id = k.key_id;
    pending.entry.suite = k.suite;
    pending.dek = std::move(k.dek);  // now only in the keystore, wrapped by its random KEK
    RETURN_IF_ERROR(ks.AddDataKey(pending));
  }
  // The job's checkpoint key, derived from the job key and everything that key is bound
  // to (policy, datasets, world size, workload): every process that attests for this job
  // while it lasts (a resumed run too) derives the same one; nobody else can.
  {
    broker::JobBinding binding;
    binding.job_id = request.job.job_id;
    binding.job_digest = request.job.job_digest;
    binding.policy_id = a->release_.lease.policy_id;
    binding.policy_sha256 = a->release_.lease.policy_sha256;
    binding.datasets = request.job.datasets;
    binding.world_size = request.job.world_size;
    binding.workload_digest = request.job.workload_digest;
    const crypto::Digest256 digest = broker::JobBindingDigest(binding);
    std::string info = "enclave-train checkpoint key v2";
    info.push_back('\0');
    info += job.broker.job_id;
    crypto::PendingDataKey ckpt;
    ckpt.entry.dataset_id = trainer::kCheckpointKeyId;
    ckpt.entry.suite = crypto::Suite::kAes256Gcm;
    const crypto::Digest256 id = crypto::Sha256(AsBytes(info));
    std::copy(id.begin(), id.begin() + 16, ckpt.entry.key_id.begin());
    ASSIGN_OR_RETURN(ckpt.dek, crypto::HkdfSha256(a->release_.job_key, digest, info, 32));
    RETURN_IF_ERROR(ks.AddDataKey(ckpt));
  }
  a->keystore_.emplace(std::move(ks));
  a->lease_ = a->release_.lease;
  a->keeper_ = std::thread([p = a.get()] { p->Keep(); });
  return a;
}

AttestedJob::~AttestedJob() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

void AttestedJob::Keep() {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t next_status_check = Now() + kStatusCheckSeconds;
  // The release was answered just before the keeper started.
  int64_t next_renewal = RenewalSchedule::RenewAt(Now(), lease_.reattest_by);
  int failures = 0;
  while (!stopping_ && end_reason_.empty()) {
    const broker::Lease lease = lease_;
    if (Now() >= lease.expires_at()) {
      end_reason_ = "the lease passed its deadline without a renewal";
      break;
    }
    if (Now() >= next_status_check) {
      // Between renewals, ask whether the lease is still active, so that a revocation
      // stops training within seconds rather than at the next renewal. Only the broker's
      // answer ends the lease here; an unreachable broker is the renewal's to judge.
      next_status_check = Now() + kStatusCheckSeconds;
      lock.unlock();
      Result<broker::RendezvousInfo> status = Rendezvous("");
      lock.lock();
      const Code code = status.status().code();
      if (code == Code::kFailedPrecondition || code == Code::kPermissionDenied) {
        end_reason_ = "the broker no longer holds the lease active: " + status.status().ToString();
        break;
      }
      continue;
    }
    if (Now() < next_renewal || lease.reattest_by >= lease.valid_until) {
      // Not yet, or nothing left to renew (wait for the end).
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    lock.unlock();
    Result<broker::Lease> renewed = [&] {
      std::lock_guard<std::mutex> client_lock(client_mu_);
      return client_->Renew(lease, keys_->recipient(), Quoter());
    }();
    lock.lock();
    if (renewed.ok()) {
      lease_ = *renewed;
      failures = 0;
      next_renewal = RenewalSchedule::RenewAt(Now(), renewed->reattest_by);
    } else if (RenewalSchedule::Final(renewed.status().code())) {
      end_reason_ = "lease renewal refused: " + renewed.status().ToString();
    } else {
      // The broker could not answer: try again while the lease is still valid.
      ++failures;
      next_renewal = RenewalSchedule::RetryAt(Now(), failures, lease.expires_at());
      std::fprintf(stderr, "enclave-train: lease renewal failed (try %d, next in %lld s): %s\n", failures,
                   static_cast<long long>(next_renewal - Now()), renewed.status().ToString().c_str());
    }
  }
}

bool AttestedJob::LeaseHeld() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_reason_.empty() && Now() < lease_.expires_at();
}

std::string AttestedJob::LeaseEndReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!end_reason_.empty()) return end_reason_;
  if (Now() >= lease_.expires_at()) return "the lease passed its deadline without a renewal";
  return "";
}

broker::Lease AttestedJob::CurrentLease() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lease_;
}

Result<std::string> AttestedJob::SignReport(std::string_view report) const {
  ASSIGN_OR_RETURN(auto signature, keys_->SignReport(broker::ReportSignatureInput(report)));
  return nlohmann::json{{"format", "enclave-train report signature v1"},
                        {"report_sha256", HexEncode(crypto::Sha256(AsBytes(report)))},
                        {"report_key", HexEncode(keys_->report_public())},
                        {"lease_id", release_.lease.lease_id},
                        {"job_id", release_.lease.job_id},
                        {"signature", HexEncode(signature)}}
             .dump(2) +
         "\n";
}

Result<uint64_t> AttestedJob::ReportFinished(const std::string& report) {
  ASSIGN_OR_RETURN(auto signature, keys_->SignReport(broker::ReportSignatureInput(report)));
  const broker::Lease lease = CurrentLease();
  std::lock_guard<std::mutex> client_lock(client_mu_);  // the keeper uses the client too
  return client_->FinishJob(lease, report, signature);
}

Result<broker::RendezvousInfo> AttestedJob::Rendezvous(const std::string& address) {
  const broker::Lease lease = CurrentLease();
  std::lock_guard<std::mutex> client_lock(client_mu_);
  return client_->Rendezvous(lease, release_.job_key, address);
}

class AttestedJob::BrokerExchange final : public net::HandleExchange {
 public:
  explicit BrokerExchange(AttestedJob* job) : job_(job) {}

  Status Publish(int rank, const net::RingHandle& handle) override {
    if (static_cast<uint32_t>(rank) != job_->options_.release.rank) return Internal("publishing another rank's handle");
    // Bytes 64..127 are the connector's scratch and reserved: zero from listen().
    for (size_t i = kHandlePrefix; i < handle.size(); ++i) {
      if (handle[i] != 0) return Internal("listen handle with non-zero bytes after offset 64");
    }
    return job_->Rendezvous(kScheme + HexEncode(ByteSpan(handle.data(), kHandlePrefix))).status();
  }

  Result<net::RingHandle> Fetch(int rank, std::chrono::steady_clock::time_point deadline) override {
    for (;;) {
      ASSIGN_OR_RETURN(broker::RendezvousInfo info, job_->Rendezvous(""));
      for (const broker::RendezvousRank& r : info.ranks) {
        if (r.rank != static_cast<uint32_t>(rank) || r.address.empty()) continue;
        if (r.address.compare(0, kScheme.size(), kScheme) != 0) {
          return InvalidInput("rank " + std::to_string(rank) + " published '" + r.address +
                              "' at the broker, not an enclave-net listen handle");
        }
        ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, HexDecode(r.address.substr(kScheme.size())));
        if (bytes.size() != kHandlePrefix) return InvalidInput("rank " + std::to_string(rank) + ": handle of the wrong size");
        net::RingHandle h{};
        std::copy(bytes.begin(), bytes.end(), h.begin());
        return h;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Unavailable("rank " + std::to_string(rank) + " did not publish its handle at the broker in time");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The address stays with the lease, which ends with the job.
  void Withdraw(int) override {}

 private:
  static constexpr size_t kHandlePrefix = 64;
  inline static const std::string kScheme = "enclave-net:";
  AttestedJob* job_;
};

std::unique_ptr<net::HandleExchange> AttestedJob::RendezvousExchange() {
  return std::make_unique<BrokerExchange>(this);
}

}  // namespace enclave::session
