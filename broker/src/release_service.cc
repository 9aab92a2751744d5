// Attested key release, lease renewal and the administrator's revocations and policy
// activations (docs/protocol.md, "Key release", "Leases", "Administration").
//
// Order of effects for a release, so that no key leaves without a durable record and none
// leaves after a revocation that was acknowledged:
//   nonce used up (durable) -> host and job not revoked (early refusal) -> evidence
//   appraised against ReleaseBinding(request) and the verdict logged (durable) -> data-use
//   policy in force evaluated (a refusal is logged as release.refused) -> job identity and
//   rank checked -> lease stored in one transaction with the revocation and rank checks
//   (a refusal there is logged as release.refused) -> one key.released entry per data key
//   (durable; on failure the lease is ended) -> [with witnesses: a quorum-cosigned
//   checkpoint covering them, then the lease checked again] -> keys sealed and sent.
//   From the lease's commit to its last key.released entry, and again from that check to
//   the sealed answer, the release holds revocation_mu_ shared: a revocation is ordered
//   wholly before the lease (refused), or after the keys were sealed into the answer (and
//   ends the lease, counted in its leases_ended), or in between, while the release waits
//   for witnesses (then nothing is sent). A lease whose release was not completed is
//   marked undelivered: it does not count as one of its job's leases.
#include <algorithm>
#include <chrono>
#include <iostream>

#include <sodium.h>

#include <future>
#include <map>
#include <shared_mutex>

#include <nlohmann/json.hpp>

#include "enclave/attest/bundle.h"
#include "enclave/attest/verifier.h"
#include "enclave/audit/event.h"
#include "enclave/audit/tree_head.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/service.h"
#include "enclave/crypto/aead.h"

namespace enclave::broker {
namespace {

using json = nlohmann::json;

std::string RandomHexId() {
  std::array<uint8_t, 16> b{};
  crypto::RandomBytes(b);
  return HexEncode(b);
}

std::string Time(int64_t unix_s) { return audit::FormatTimestampMs(static_cast<uint64_t>(unix_s) * 1000); }

Reply Refused(std::string_view what, const std::string& detail, std::optional<uint64_t> audit_index = {}) {
  std::cerr << "enclave-broker: refused " << what << ": " << detail << "\n";
  json j = json::parse(EncodeError("permission_denied", std::string(what) + " refused"));
  if (audit_index) j["audit_index"] = *audit_index;
  return {403, j.dump()};
}

// Associated data of a wrapped job key: the job id, digest and the stored binding it
// belongs to (a binding edited in the store no longer unwraps the key).
std::vector<uint8_t> JobKeyAd(const std::string& job_id, const crypto::Digest256& digest, const std::string& binding) {
  std::vector<uint8_t> ad(job_id.begin(), job_id.end());
  ad.push_back(0);
  ad.insert(ad.end(), digest.begin(), digest.end());
  ad.insert(ad.end(), binding.begin(), binding.end());
  return ad;
}

}  // namespace

std::string AuditText(std::string_view text, size_t max_bytes) {
  // Valid UTF-8 without control characters (what the audit log's text fields take): an
  // invalid byte becomes '?', a control character a space.
  std::string clean;
  clean.reserve(std::min(text.size(), max_bytes + 8));
  std::vector<size_t> starts;  // where each character of `clean` begins
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && n > 1) {
      // No overlong forms, surrogates or code points above U+10FFFF.
      uint32_t cp = c & (0xff >> (n + 1));
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
      const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_cp[n] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    starts.push_back(clean.size());
    if (!ok) {
      clean += '?';
      i += 1;
    } else if (n == 1 && (c < 0x20 || c == 0x7f)) {
      clean += ' ';
      i += 1;
    } else {
      clean.append(text.substr(i, n));
      i += n;
    }
  }
  if (clean.empty()) return "-";
  if (clean.size() <= max_bytes) return clean;
  const std::string marker = " [truncated: " + std::to_string(text.size()) + " bytes in all]";
  const size_t budget = max_bytes > marker.size() ? max_bytes - marker.size() : 0;
  // Cut at the last character boundary that fits.
  size_t cut = 0;
  for (size_t b : starts) {
    if (b > budget) break;
    cut = b;
  }
  return clean.substr(0, cut) + marker.substr(0, max_bytes - cut);
}

namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s;
}

}  // namespace

std::shared_ptr<std::mutex> Service::JobLock(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(locks_mu_);
  auto& m = job_locks_[job_id];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

Result<audit::RecordedVerdict> Service::AppraiseFor(const HostRecord& host, const NonceRecord& nonce,
                                                    std::string_view evidence_text,
                                                    const std::optional<crypto::Digest256>& bound,
                                                    const std::string& job_digest_hex) {
  audit::VerdictInputs in;
  in.actor = options_.actor;
  in.host = host.host_id;
  in.job_digest = job_digest_hex;
  in.evidence_bundle = std::string(evidence_text);
  in.enrolment_bundle = host.enrolment_bundle;
  in.policy = policy_text_;
  in.policy_dir = policy_dir_;
  in.context.nonce = nonce.nonce;
  in.context.bound_digest = bound;  // what the broker expects; the quote must carry exactly this
  in.context.nonce_issued_at = nonce.issued_at;
  in.context.appraised_at = Now();
  // Nothing is archived or logged against a host until its enrolled AK is shown to have
  // signed this quote for this nonce: free nonces and replayed bundles cost one signature
  // check, not disk and audit entries (PermissionDenied: the caller refuses, unlogged).
  {
    auto parsed = attest::ParseEvidenceBundle(evidence_text);
    if (!parsed.ok()) return parsed.status();
    RETURN_IF_ERROR(attest::VerifyQuoteOrigin(host.ak_public, attest::ToEvidenceParts(*parsed).quote, nonce.nonce,
                                              parsed->bound_digest)
                        .Annotate("the quote is not " + host.host_id + "'s for this nonce"));
  }
  // The archive's disk budget, checked before anything is written: refused (503) while the
  // archive is full or its file system low, so the audit log never runs out of disk.
  const uint64_t incoming = evidence_text.size() + host.enrolment_bundle.size();
  ASSIGN_OR_RETURN(uint64_t free_bytes, archive_.BytesFree());
  if (archive_bytes_ + incoming > static_cast<uint64_t>(options_.archive_max_bytes) ||
      free_bytes < static_cast<uint64_t>(options_.archive_min_free_bytes) + incoming) {
    std::cerr << "enclave-broker: evidence archive budget reached (" << archive_bytes_.load() << " of "
              << options_.archive_max_bytes << " bytes stored, " << free_bytes << " bytes free, "
              << options_.archive_min_free_bytes << " kept free): appraisal of " << host.host_id << " refused\n";
    return Unavailable("the evidence archive is full; retry later");
  }
  if (!host.clock_state.empty()) {
    auto clock = attest::ParseClockState(host.clock_state);
    if (!clock.ok()) return Internal("stored clock state of " + host.host_id + ": " + clock.status().message());
    in.context.last_clock = *clock;
  }
  ASSIGN_OR_RETURN(audit::RecordedVerdict recorded, audit::AppraiseAndRecord(log_, archive_, in));
  archive_bytes_ += incoming;
  if (recorded.verdict.passed() && recorded.verdict.clock) {
    RETURN_IF_ERROR(
        store_.UpdateClockState(host.host_id, host.clock_state, attest::EncodeClockState(*recorded.verdict.clock)));
  }
  return recorded;
}

Result<crypto::SecretBytes> Service::JobKey(const JobBinding& binding, int64_t now) {
  if (!job_key_aead_) return Unavailable("this broker has no keystore");
  JobRecord candidate;
  candidate.job_id = binding.job_id;
  candidate.job_digest = binding.job_digest;
  candidate.world_size = binding.world_size;
  candidate.created_at = now;
  candidate.binding = EncodeJobBinding(binding);
  const std::vector<uint8_t> ad = JobKeyAd(candidate.job_id, candidate.job_digest, candidate.binding);
  ASSIGN_OR_RETURN(crypto::SecretBytes fresh, crypto::SecretBytes::Random(32));
  candidate.key_nonce.resize(crypto::kAeadNonceBytes);
  crypto::RandomBytes(candidate.key_nonce);
  candidate.key_wrapped.resize(fresh.size() + crypto::kAeadTagBytes);
  {
    std::lock_guard<std::mutex> lk(job_key_aead_mu_);
    RETURN_IF_ERROR(job_key_aead_->Seal(candidate.key_nonce, ad, fresh.ExposeSecret(), candidate.key_wrapped));
  }
  ASSIGN_OR_RETURN(JobRecord job, store_.GetOrCreateJob(candidate));
  const std::string id = "job '" + binding.job_id + "'";
  if (job.ended_at)
    return FailedPrecondition(id + " has ended (" + job.end_reason + "); its key is never issued again: name a new job");
  if (job.binding.empty()) return FailedPrecondition(id + " was stored without a binding and cannot be joined");
  auto stored = ParseJobBinding(job.binding);
  if (!stored.ok()) return Internal("stored binding of " + id + ": " + stored.status().message());
  const std::vector<std::string> differ = JobBindingDifferences(*stored, binding);
  if (!differ.empty()) {
    std::string list;
    for (const std::string& d : differ) list += (list.empty() ? "" : ", ") + d;
    return FailedPrecondition(id + " is another job: its " + list + " differ from this request's");
  }
  // A job whose every lease has ended is over, even without a report: its key stays ended.
  // (Only for a job stored before: the store kept its record, not our candidate.)
  const bool existing = job.key_wrapped != candidate.key_wrapped;
  if (existing) {
    ASSIGN_OR_RETURN(Store::JobLeaseCounts leases, store_.CountLeasesOfJob(job.job_id, now));
    if (leases.ever > 0 && leases.active == 0) {
      RETURN_IF_ERROR(store_.EndJob(job.job_id, "its last lease ended", now));
      return FailedPrecondition(id + " has ended (its last lease ended); its key is never issued again: name a new job");
    }
  }
  return UnwrapJobKey(job);
}

Result<crypto::SecretBytes> Service::UnwrapJobKey(const JobRecord& job) {
  if (!job_key_aead_) return Unavailable("this broker has no keystore");
  if (job.key_nonce.size() != crypto::kAeadNonceBytes || job.key_wrapped.size() != 32 + crypto::kAeadTagBytes)
    return Internal("stored job key of " + job.job_id + " is malformed");
  ASSIGN_OR_RETURN(crypto::SecretBytes key, crypto::SecretBytes::Create(32));
  std::lock_guard<std::mutex> lk(job_key_aead_mu_);
  RETURN_IF_ERROR(job_key_aead_->Open(job.key_nonce, JobKeyAd(job.job_id, job.job_digest, job.binding),
                                      job.key_wrapped, key.ExposeSecretMutable()));
  return key;
}

Reply Service::Rendezvous(const std::string& job_id, std::string_view body) {
  if (Status s = crypto::ValidateObjectId(job_id); !s.ok()) return ErrorReply(InvalidInput("job id: " + s.message()));
  auto r = ParseRendezvousRequest(body);
  if (!r.ok()) return ErrorReply(r.status());
  if (options_.keystore == nullptr) return ErrorReply(Unavailable("this broker has no keystore"));
  const int64_t now = Now();
  // The proof (made with the job key of the job in the path) is checked before anything of
  // the lease is told: an unknown job, a bad proof, and then an unknown lease, another
  // job's or an ended one all get the same answer until the caller shows the key.
  auto job = store_.GetJob(job_id);
  if (!job.ok()) return ErrorReply(job.status());
  if (!*job) return Refused("rendezvous", "job " + job_id + " is unknown");
  auto key = UnwrapJobKey(**job);
  if (!key.ok()) return ErrorReply(key.status());
  const auto expected = RendezvousProof(*key, job_id, r->lease_id, r->address);
  if (!crypto::ConstantTimeEquals(expected, r->proof))
    return Refused("rendezvous", "lease " + r->lease_id + ": the proof is not made with the job key");
  auto lease = store_.GetLease(r->lease_id);
  if (!lease.ok()) return ErrorReply(lease.status());
  if (lease->job_id != job_id) return Refused("rendezvous", "lease " + r->lease_id + " is for job " + lease->job_id);
  if (!lease->ActiveAt(now)) return ErrorReply(FailedPrecondition("lease " + r->lease_id + " has ended"));
  if (!r->address.empty()) {
    if (Status s = store_.SetLeaseAddress(r->lease_id, r->address, now); !s.ok()) return ErrorReply(s);
  }
  auto active = store_.ActiveLeasesOfJob(job_id, now);
  if (!active.ok()) return ErrorReply(active.status());
  RendezvousInfo info;
  info.job_id = job_id;
  info.world_size = (*job)->world_size;
  std::vector<bool> ready(info.world_size, false);
  for (const LeaseRecord& l : *active) {
    info.ranks.push_back({l.rank, l.host_id, l.address});
    if (l.rank < info.world_size && !l.address.empty()) ready[l.rank] = true;
  }
  info.complete = std::all_of(ready.begin(), ready.end(), [](bool b) { return b; });
  return {200, EncodeRendezvousInfo(info)};
}

// What a release carries from its decision to its answer (across the wait for witnesses).
struct Service::PendingRelease {
  ReleaseRequest request;
  std::vector<crypto::DataKeyEntry> entries;  // the keystore's, in request order
  LeaseRecord lease;
  ReleaseGranted granted;
  std::vector<std::vector<uint8_t>> entries_logged;  // the key.released entries
  std::optional<crypto::SecretBytes> job_key;
  crypto::ExportKeyEntry export_key;
  int64_t now = 0;
};

Result<std::vector<audit::Proof>> Service::WitnessedProofs(const audit::CosignedCheckpoint& c, uint64_t first_index,
                                                          const std::vector<std::vector<uint8_t>>& entries) {
  std::vector<audit::Proof> proofs;
  for (size_t i = 0; i < entries.size(); ++i) {
    audit::Proof p;
    p.kind = audit::ProofKind::kInclusion;
    p.leaf_index = first_index + i;
    p.entry = entries[i];
    p.leaf_hash = audit::LeafHash(entries[i]);
    p.new_size = c.tree_size;
    p.new_root = c.root;
    p.new_checkpoint = c.note;
    ASSIGN_OR_RETURN(p.path, log_.InclusionProof(p.leaf_index, c.tree_size));
    proofs.push_back(std::move(p));
  }
  return proofs;
}

Reply Service::Release(std::string_view body) {
  std::promise<Reply> answer;
  Release(body, [&answer](Reply r) { answer.set_value(std::move(r)); }, [](std::function<void()> fn) { fn(); });
  return answer.get_future().get();
}

void Service::Release(std::string_view body, std::function<void(Reply)> done,
                      const std::function<void(std::function<void()>)>& later) {
  auto pending = std::make_shared<PendingRelease>();
  std::optional<Reply> answer = DecideRelease(body, *pending);
  if (answer) return done(std::move(*answer));
  // Nothing leaves until a witness quorum has cosigned a checkpoint holding the entries;
  // no thread waits for it meanwhile (the witnessing's notifier calls back).
  const uint64_t last = pending->granted.audit_index + pending->entries_logged.size() - 1;
  options_.witnessing->OnCovering(
      last, options_.witness_wait,
      [this, pending, done = std::move(done), later](Result<audit::CosignedCheckpoint> c) mutable {
        later([this, pending, done = std::move(done), c = std::move(c)]() mutable {
          Reply reply{500, EncodeError("internal", "the broker could not complete the request")};
          try {
            reply = CompleteWitnessedRelease(*pending, c);
          } catch (const std::exception& e) {  // answered anyway: the caller must not wait forever
            std::cerr << "enclave-broker: completing release of lease " << pending->lease.lease_id << ": " << e.what()
                      << "\n";
            try {
              AbandonRelease(pending->lease.lease_id, "release not completed: the broker failed to complete it");
            } catch (const std::exception&) {  // the lease then lapses at its deadline
            }
          }
          done(std::move(reply));
        });
      });
}

Reply Service::CompleteWitnessedRelease(PendingRelease& p, const Result<audit::CosignedCheckpoint>& cosigned) {
  const LeaseRecord& lease = p.lease;
  auto proofs = cosigned.ok() ? WitnessedProofs(*cosigned, p.granted.audit_index, p.entries_logged)
                              : Result<std::vector<audit::Proof>>(cosigned.status());
  if (!proofs.ok()) {
    // The witnesses' answers (and URLs) stay in the broker's log; the client learns what
    // happened and that nothing was released.
    std::cerr << "enclave-broker: release of lease " << lease.lease_id << " not completed: "
              << proofs.status().ToString() << "\n";
    AbandonRelease(lease.lease_id, "release not completed: " + proofs.status().message());
    return {503, EncodeError("unavailable",
                             "audit witnesses: no checkpoint holding this release's audit entries was cosigned by "
                             "the witness quorum in time; nothing was released and lease " + lease.lease_id +
                                 " has ended; try again later")};
  }
  p.granted.audit_proofs = std::move(*proofs);
  // The lease and the job are read again: a revocation acknowledged while the release
  // waited ended its lease, a report logged meanwhile ended its job (whose key is then
  // never issued again). Either way nothing is sent. Checked under the shared lock, so a
  // revocation from here on comes after the keys were sealed into the answer.
  std::shared_lock<std::shared_mutex> revocation_guard(revocation_mu_);
  auto current = store_.GetLease(lease.lease_id);
  auto job = store_.GetJob(lease.job_id);
  if (!current.ok() || !job.ok()) {
    AbandonRelease(lease.lease_id, "release not completed: its lease or job could not be read again");
    return ErrorReply(!current.ok() ? current.status() : job.status());
  }
  std::string ended;
  if (!current->ActiveAt(Now())) {
    ended = "lease " + lease.lease_id + " ended (" +
            (current->end_reason.empty() ? "not renewed in time" : current->end_reason) + ")";
  } else if (!*job || (*job)->ended_at) {
    ended = "job '" + lease.job_id + "' ended (" + (*job ? (*job)->end_reason : "no longer stored") + ")";
  }
  if (!ended.empty()) {
    AbandonRelease(lease.lease_id, "release not completed: the lease or its job ended while the release waited for "
                                   "its witnesses");
    return Refused("release", ended + " while the release waited for its witnesses; nothing was sent");
  }
  return FinishOrAbandon(p, revocation_guard);
}

Reply Service::FinishOrAbandon(PendingRelease& p, const std::shared_lock<std::shared_mutex>& revocation_guard) {
  Reply reply = FinishRelease(p, revocation_guard);
  if (reply.status != 200) AbandonRelease(p.lease.lease_id, "release not completed: its answer could not be made");
  return reply;
}

void Service::AbandonRelease(const std::string& lease_id, const std::string& why) {
  if (Status s = store_.EndUndeliveredLease(lease_id, AuditText(why), Now()); !s.ok())
    std::cerr << "enclave-broker: ending lease " << lease_id << " (" << why << "): " << s.ToString() << "\n";
  if (auto index = log_.Append(audit::Revoked(options_.actor, "lease", lease_id, AuditText(why))); !index.ok())
    std::cerr << "enclave-broker: logging the end of lease " << lease_id << ": " << index.status().ToString() << "\n";
}

Reply Service::FinishRelease(PendingRelease& p, const std::shared_lock<std::shared_mutex>& revocation_guard) {
  if (!revocation_guard.owns_lock()) return ErrorReply(Internal("a release was finished without the revocation lock"));
  const ReleaseRequest& r = p.request;
  const LeaseRecord& lease = p.lease;
  ReleaseGranted& g = p.granted;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    auto dek = options_.keystore->GetDataKey(r.keys[i].dataset_id, r.keys[i].key_id);
    if (!dek.ok()) return ErrorReply(Internal("keystore: " + dek.status().message()));
    g.keys.push_back({r.keys[i].dataset_id, r.keys[i].key_id, p.entries[i].suite, SealTo(r.recipient, *dek)});
  }
  g.sealed_job_key = SealTo(r.recipient, *p.job_key);
  g.lease = Lease{lease.lease_id,   lease.host_id,   lease.job_id,     lease.policy_id,
                  lease.policy_sha256, lease.issued_at, lease.valid_until, lease.reattest_by};
  g.export_key_name = p.export_key.name;
  g.export_keystore_id = options_.keystore->id();
  g.export_key_id = p.export_key.key_id;
  g.export_public = p.export_key.public_key;
  g.world_size = r.job.world_size;
  auto joined = store_.RanksJoined(r.job.job_id, p.now);
  if (!joined.ok()) return ErrorReply(joined.status());
  g.ranks_joined = *joined;
  return {200, EncodeReleaseGranted(g)};
}

std::optional<Reply> Service::DecideRelease(std::string_view body, PendingRelease& p) {
  auto request = ParseReleaseRequest(body);
  if (!request.ok()) return ErrorReply(request.status());
  p.request = std::move(*request);
  const ReleaseRequest& r = p.request;
  auto evidence = attest::ParseEvidenceBundle(r.evidence);
  if (!evidence.ok()) return ErrorReply(evidence.status().Annotate("release request: evidence"));
  if (evidence->nonce.size() != kNonceBytes)
    return ErrorReply(InvalidInput("release request: evidence nonce must be a 32-byte nonce issued by this broker"));
  if (options_.keystore == nullptr) return ErrorReply(Unavailable("this broker has no keystore for key release"));
  // Used up before anything else: a nonce answers one appraisal, whatever its outcome.
  auto nonce = store_.ConsumeNonce(evidence->nonce, Now());
  if (!nonce.ok()) return ErrorReply(nonce.status());
  for (auto [kind, id] : {std::pair{RevokedKind::kHost, nonce->host_id}, std::pair{RevokedKind::kJob, r.job.job_id}}) {
    auto revoked = store_.IsRevoked(kind, id);
    if (!revoked.ok()) return ErrorReply(revoked.status());
    if (*revoked) return Refused("release", std::string(kind == RevokedKind::kHost ? "host " : "job ") + id + " is revoked");
  }

  std::shared_ptr<std::mutex> host_lock = HostLock(nonce->host_id);
  std::unique_lock<std::mutex> host_guard(*host_lock);
  auto host = store_.GetHost(nonce->host_id);
  if (!host.ok()) return ErrorReply(host.status());
  const std::string job_digest = HexEncode(r.job.job_digest);
  auto recorded = AppraiseFor(*host, *nonce, r.evidence, ReleaseBinding(r), job_digest);
  if (!recorded.ok() && recorded.status().code() == Code::kPermissionDenied)
    return Refused("release", recorded.status().message());
  if (!recorded.ok()) return ErrorReply(recorded.status());
  if (!recorded->verdict.passed())
    return Refused("release", "attestation of " + host->host_id + " failed: " + recorded->verdict.appraisal.Summary(),
                   recorded->index);

  // The data-use policy in force, then the job's identity; each refusal is logged.
  std::shared_ptr<std::mutex> job_lock = JobLock(r.job.job_id);
  std::unique_lock<std::mutex> job_guard(*job_lock);
  const int64_t now = Now();
  p.now = now;
  auto refuse = [&](const std::string& policy_digest, const std::string& reason) -> Reply {
    // The entry's reason field holds at most kMaxAuditTextBytes: a longer reason (many
    // keys, many broken rules) is cut at a character boundary and marked as truncated;
    // the whole reason goes to the broker's log.
    audit::Event e = audit::ReleaseRefused(options_.actor, host->host_id, r.job.job_id, job_digest, r.job.datasets,
                                           r.policy_id, policy_digest, AuditText(reason));
    e.fields["requester"] = AuditText(r.job.requester, 256);
    e.fields["workload"] = HexEncode(r.job.workload_digest);
    auto index = log_.Append(e);
    if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
    return Refused("release", reason, *index);
  };
  auto record = store_.GetActivePolicy(r.policy_id);
  if (!record.ok() && record.status().code() != Code::kNotFound) return ErrorReply(record.status());
  if (!record.ok()) return refuse("", "no data-use policy '" + r.policy_id + "' is active");
  const std::string policy_digest = HexEncode(record->policy_sha256);
  auto policy = ParseUsagePolicy(record->policy_text);
  if (!policy.ok()) return ErrorReply(Internal("stored policy " + r.policy_id + ": " + policy.status().message()));

  std::vector<crypto::DataKeyEntry>& entries = p.entries;
  std::vector<crypto::Suite> suites;
  std::vector<std::string> missing;
  for (const KeyRef& k : r.keys) {
    bool found = false;
    for (const crypto::DataKeyEntry& e : options_.keystore->entries()) {
      if (e.dataset_id == k.dataset_id && e.key_id == k.key_id) {
        entries.push_back(e);
        suites.push_back(e.suite);
        found = true;
        break;
      }
    }
    if (!found) missing.push_back("the keystore has no key " + HexEncode(k.key_id) + " for dataset '" + k.dataset_id + "'");
  }
  if (!missing.empty()) return refuse(policy_digest, Join(missing));
  // The workload: the quote proves which host asked, the IMA log it covers shows that the
  // named executable ran there; the policy then decides whether that code may have the keys.
  auto measured = attest::FindImaMeasurement(attest::ToEvidenceParts(*evidence), r.workload.executable.sha256);
  if (!measured.ok())
    return refuse(policy_digest, "workload executable " + AuditText(r.workload.executable.path, 256) +
                                     " is not measured: " + measured.status().message());
  UsageDecision decision = EvaluateRelease(*policy, r.job, policy_sha256_, suites);
  if (!decision.allowed) return refuse(policy_digest, Join(decision.reasons));

  JobBinding binding;
  binding.job_id = r.job.job_id;
  binding.job_digest = r.job.job_digest;
  binding.policy_id = r.policy_id;
  binding.policy_sha256 = record->policy_sha256;
  binding.datasets = r.job.datasets;
  std::sort(binding.datasets.begin(), binding.datasets.end());
  binding.world_size = r.job.world_size;
  binding.workload_digest = r.job.workload_digest;
  auto job_key = JobKey(binding, now);
  if (!job_key.ok()) {
    if (job_key.status().code() == Code::kFailedPrecondition) return refuse(policy_digest, job_key.status().message());
    return ErrorReply(job_key.status());
  }
  p.job_key = std::move(*job_key);
  LeaseRecord& lease = p.lease;
  lease.lease_id = RandomHexId();
  lease.host_id = host->host_id;
  lease.job_id = r.job.job_id;
  lease.rank = r.rank;
  lease.policy_id = r.policy_id;
  lease.policy_sha256 = record->policy_sha256;
  lease.recipient.assign(r.recipient.begin(), r.recipient.end());
  lease.report_key.assign(r.report_key.begin(), r.report_key.end());
  lease.datasets = r.job.datasets;
  lease.claims = EncodeLeaseClaims(r.job, suites);
  lease.issued_at = now;
  lease.valid_until = now + policy->lease_s;
  lease.reattest_by = now + policy->reattest_interval_s;
  // A rank another host holds is refused before anything is logged as released (the job
  // lock keeps this check and PutLease together).
  auto active = store_.ActiveLeasesOfJob(lease.job_id, now);
  if (!active.ok()) return ErrorReply(active.status());
  for (const LeaseRecord& other : *active) {
    if (other.rank == lease.rank && other.host_id != lease.host_id)
      return refuse(policy_digest, "rank " + std::to_string(r.rank) + " of job " + r.job.job_id + " is held by host " +
                                       other.host_id);
  }

  auto export_key = options_.keystore->FindExportKey(options_.export_key);
  if (!export_key.ok()) return ErrorReply(Unavailable("export key: " + export_key.status().message()));
  p.export_key = std::move(*export_key);

  // The lease is stored first, in one transaction with the revocation and rank checks:
  // after a revocation is acknowledged no lease for that host or job is stored, and a
  // revocation that comes after this commit ends the lease. The shared lock keeps a
  // revocation from landing between the commit and the key.released entries, so the
  // audit log never shows a key released after the revocation that ended its lease.
  std::shared_lock<std::shared_mutex> revocation_guard(revocation_mu_);
  if (Status s = store_.PutLease(lease, now); !s.ok()) {
    if (s.code() == Code::kPermissionDenied || s.code() == Code::kAlreadyExists)
      return refuse(policy_digest, s.message());
    return ErrorReply(s);
  }
  // Logged before anything leaves: one entry per data key. When the log fails, the lease
  // ends and nothing is sent.
  ReleaseGranted& g = p.granted;
  std::vector<std::vector<uint8_t>>& entries_logged = p.entries_logged;
  entries_logged.resize(r.keys.size());
  for (size_t i = 0; i < r.keys.size(); ++i) {
    audit::Event e = audit::KeyReleased(options_.actor, r.keys[i].dataset_id, lease.lease_id, host->host_id, job_digest,
                                        Time(std::min(lease.valid_until, lease.reattest_by)));
    e.fields["job_id"] = r.job.job_id;
    e.fields["key_id"] = HexEncode(r.keys[i].key_id);
    e.fields["policy_id"] = r.policy_id;
    e.fields["policy_digest"] = policy_digest;
    e.fields["report_key"] = HexEncode(r.report_key);
    e.fields["workload"] = HexEncode(r.job.workload_digest);
    e.fields["requester"] = AuditText(r.job.requester, 256);
    auto index = log_.Append(e, &entries_logged[i]);
    if (!index.ok()) {
      if (Status s = store_.EndUndeliveredLease(lease.lease_id, "audit log unavailable: release not completed", Now());
          !s.ok())
        std::cerr << "enclave-broker: ending lease " << lease.lease_id << " after an audit failure: " << s.ToString()
                  << "\n";
      return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
    }
    if (i == 0) g.audit_index = *index;
  }
  // Without witnesses the keys are sealed into the answer before a revocation can land.
  if (options_.witnessing == nullptr) return FinishOrAbandon(p, revocation_guard);
  return std::nullopt;  // answered once witnessed (other releases of this host and job need not wait)
}

Reply Service::Renew(const std::string& lease_id, std::string_view body) {
  if (!IsLowerHexId(lease_id)) return ErrorReply(InvalidInput("lease id must be 32 lowercase hex digits"));
  auto request = ParseRenewalRequest(body);
  if (!request.ok()) return ErrorReply(request.status());
  auto evidence = attest::ParseEvidenceBundle(request->evidence);
  if (!evidence.ok()) return ErrorReply(evidence.status().Annotate("renewal request: evidence"));
  if (evidence->nonce.size() != kNonceBytes)
    return ErrorReply(InvalidInput("renewal request: evidence nonce must be a 32-byte nonce issued by this broker"));
  auto nonce = store_.ConsumeNonce(evidence->nonce, Now());
  if (!nonce.ok()) return ErrorReply(nonce.status());
  // Until the quote is shown to be the lease host's, for this renewal, an unknown lease,
  // another host's and an ended one get the same answer as a bad quote, nothing is logged,
  // and no lease changes: a lease id alone (it is in logs and reports) is worth nothing.
  auto lease = store_.GetLease(lease_id);
  if (!lease.ok() && lease.status().code() != Code::kNotFound) return ErrorReply(lease.status());
  if (!lease.ok()) return Refused("renewal", "lease " + lease_id + " is unknown");
  if (lease->host_id != nonce->host_id)
    return Refused("renewal", "nonce of host " + nonce->host_id + " for a lease of " + lease->host_id);
  std::shared_ptr<std::mutex> host_lock = HostLock(lease->host_id);
  std::lock_guard<std::mutex> host_guard(*host_lock);
  auto host = store_.GetHost(lease->host_id);
  if (!host.ok()) return ErrorReply(host.status());
  X25519Public recipient{};
  if (lease->recipient.size() != recipient.size()) return ErrorReply(Internal("stored lease recipient is malformed"));
  std::copy(lease->recipient.begin(), lease->recipient.end(), recipient.begin());
  const crypto::Digest256 binding = RenewalBinding(lease_id, recipient);
  if (Status s = attest::VerifyQuoteOrigin(host->ak_public, attest::ToEvidenceParts(*evidence).quote, evidence->nonce,
                                           binding);
      !s.ok())
    return Refused("renewal", "lease " + lease_id + ": the quote is not the lease host's for this renewal: " + s.message());
  // The caller is the lease host's TPM: from here on the answers may differ (never with a
  // revocation's reason, which stays in the broker's log and the audit log).
  if (!lease->ActiveAt(Now())) {
    std::cerr << "enclave-broker: renewal of ended lease " << lease_id << " refused ("
              << (lease->end_reason.empty() ? "not renewed in time" : lease->end_reason) << ")\n";
    return ErrorReply(FailedPrecondition("lease " + lease_id + " has ended" +
                                         (lease->end_reason.empty() ? " (not renewed in time)" : "")));
  }
  for (auto [kind, id] : {std::pair{RevokedKind::kHost, lease->host_id}, std::pair{RevokedKind::kJob, lease->job_id}}) {
    auto revoked = store_.IsRevoked(kind, id);
    if (!revoked.ok()) return ErrorReply(revoked.status());
    if (*revoked) return Refused("renewal", std::string(kind == RevokedKind::kHost ? "host " : "job ") + id + " is revoked");
  }
  auto job = store_.GetJob(lease->job_id);
  if (!job.ok()) return ErrorReply(job.status());
  const std::string job_digest = *job ? HexEncode((*job)->job_digest) : "";
  auto recorded = AppraiseFor(*host, *nonce, request->evidence, binding, job_digest);
  if (!recorded.ok() && recorded.status().code() == Code::kPermissionDenied)
    return Refused("renewal", recorded.status().message());
  if (!recorded.ok()) return ErrorReply(recorded.status());
  const int64_t now = Now();
  if (!recorded->verdict.passed()) {
    // A failed re-attestation of the host's own, fresh quote (its AK signed it for this
    // renewal, checked above) ends the lease: recorded, then ended.
    auto index = log_.Append(audit::Revoked(options_.actor, "lease", lease_id, "re-attestation failed"));
    if (Status s = store_.EndLease(lease_id, "re-attestation failed", now); !s.ok()) return ErrorReply(s);
    if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
    return Refused("renewal", "re-attestation of " + host->host_id + " failed: " + recorded->verdict.appraisal.Summary(),
                   recorded->index);
  }
  // The policy in force judges the lease again: a serial activated since the release that
  // no longer allows it ends it (recorded, then ended); one that does sets the interval.
  auto record = store_.GetActivePolicy(lease->policy_id);
  if (!record.ok()) return ErrorReply(record.status());
  auto policy = ParseUsagePolicy(record->policy_text);
  if (!policy.ok()) return ErrorReply(Internal("stored policy " + lease->policy_id + ": " + policy.status().message()));
  if (record->policy_sha256 != lease->policy_sha256) {
    ReleaseClaims claims;
    std::vector<crypto::Suite> suites;
    std::vector<std::string> reasons;
    if (Status s = ParseLeaseClaims(lease->claims, &claims, &suites); !s.ok()) {
      reasons.push_back("the lease's claims are not stored (" + s.message() + ")");
    } else {
      reasons = EvaluateRelease(*policy, claims, policy_sha256_, suites).reasons;
    }
    if (!reasons.empty()) {
      const std::string why = "policy " + lease->policy_id + " serial " + std::to_string(record->serial) +
                              " no longer allows this lease: " + Join(reasons);
      auto index = log_.Append(audit::Revoked(options_.actor, "lease", lease_id, AuditText(why)));
      if (Status s = store_.EndLease(lease_id, AuditText(why, 512), now); !s.ok()) return ErrorReply(s);
      if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
      return Refused("renewal", why, *index);
    }
  }
  const int64_t reattest_by =
      std::min({now + policy->reattest_interval_s, lease->valid_until, lease->issued_at + policy->lease_s});
  Lease out{lease->lease_id, lease->host_id,   lease->job_id,     lease->policy_id,
            lease->policy_sha256, lease->issued_at, lease->valid_until, reattest_by};
  // Committed first, in one transaction with the revocation and lease checks; then
  // logged. A renewal whose entry cannot be written is undone (the deadline goes back).
  // The shared lock orders a revocation wholly before the commit or after the entry.
  std::shared_lock<std::shared_mutex> revocation_guard(revocation_mu_);
  auto previous = store_.RenewLease(lease_id, reattest_by, now);
  if (!previous.ok()) {
    if (previous.status().code() == Code::kPermissionDenied) return Refused("renewal", previous.status().message());
    return ErrorReply(previous.status());
  }
  audit::Event e = audit::LeaseRenewed(options_.actor, lease_id, host->host_id, Time(out.expires_at()));
  e.fields["reattest_by"] = Time(reattest_by);
  auto index = log_.Append(e);
  if (!index.ok()) {
    if (Status s = store_.UndoRenewal(lease_id, reattest_by, *previous); !s.ok())
      std::cerr << "enclave-broker: undoing the renewal of lease " << lease_id << ": " << s.ToString() << "\n";
    return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
  }
  revocation_guard.unlock();
  return {200, EncodeRenewalGranted({out, *index})};
}

Reply Service::FinishJob(const std::string& job_id, std::string_view body) {
  if (Status s = crypto::ValidateObjectId(job_id); !s.ok()) return ErrorReply(InvalidInput("job id: " + s.message()));
  auto r = ParseJobReport(body);
  if (!r.ok()) return ErrorReply(r.status());
  auto lease = store_.GetLease(r->lease_id);
  if (!lease.ok()) return ErrorReply(lease.status());
  if (lease->report_key.size() != kEd25519PublicBytes) return ErrorReply(Internal("stored report key is malformed"));
  // Signed by the report key the release bound into the attested quote; checked first, so
  // that an unsigned request learns nothing of the lease (its job, why it ended).
  const std::vector<uint8_t> input = ReportSignatureInput(r->report);
  if (crypto_sign_verify_detached(r->signature.data(), input.data(), input.size(), lease->report_key.data()) != 0)
    return Refused("job report", "lease " + r->lease_id + ": the signature is not by the release's report key");
  if (lease->job_id != job_id) return Refused("job report", "lease " + r->lease_id + " is for job " + lease->job_id);
  if (lease->ended_at)
    return ErrorReply(FailedPrecondition("lease " + r->lease_id + " was ended (" + lease->end_reason + ")"));
  auto job = store_.GetJob(job_id);
  if (!job.ok()) return ErrorReply(job.status());
  if (!*job) return ErrorReply(Internal("lease " + r->lease_id + " names an unknown job"));
  // What the entry records comes from the signed report.
  auto report = json::parse(r->report, nullptr, false);
  if (!report.is_object()) return ErrorReply(InvalidInput("job report: the report is not a JSON object"));
  auto str_at = [&](const json& j, std::initializer_list<const char*> path) -> std::string {
    const json* p = &j;
    for (const char* k : path) {
      if (!p->is_object() || !p->contains(k)) return "";
      p = &(*p)[k];
    }
    return p->is_string() ? p->get<std::string>() : "";
  };
  if (str_at(report, {"job", "sha256"}) != HexEncode((*job)->job_digest))
    return ErrorReply(InvalidInput("job report: job.sha256 is not the digest of the job this lease is for"));
  if (str_at(report, {"lease", "lease_id"}) != r->lease_id)
    return ErrorReply(InvalidInput("job report: lease.lease_id is not this lease"));
  std::vector<std::string> dataset_digests;
  if (report.contains("datasets") && report["datasets"].is_array()) {
    for (const json& d : report["datasets"]) {
      const std::string digest = str_at(d, {"sha256"});
      if (digest.size() != 64) return ErrorReply(InvalidInput("job report: a dataset without its sha256"));
      dataset_digests.push_back(digest);
    }
  }
  if (dataset_digests.empty()) return ErrorReply(InvalidInput("job report: no dataset digests"));
  const std::string model_digest = str_at(report, {"model_export", "sha256"});
  if (model_digest.size() != 64) return ErrorReply(InvalidInput("job report: no exported model digest"));
  std::map<std::string, double> metrics;
  if (report.contains("final") && report["final"].is_object()) {
    for (const char* k : {"val_accuracy", "val_roc_auc", "val_loss", "train_loss"}) {
      if (report["final"].contains(k) && report["final"][k].is_number()) metrics[k] = report["final"][k].get<double>();
    }
  }
  // Logged, then marked: a failure between the two may log a report twice on retry, never
  // lose one. The job lock keeps two posts of one report from both logging.
  std::shared_ptr<std::mutex> job_lock = JobLock(job_id);
  std::lock_guard<std::mutex> job_guard(*job_lock);
  auto fresh = store_.GetLease(r->lease_id);
  if (!fresh.ok()) return ErrorReply(fresh.status());
  if (fresh->reported_at)
    return ErrorReply(FailedPrecondition("the report of lease " + r->lease_id + " was already logged"));
  audit::Event e = audit::JobFinished(options_.actor, HexEncode((*job)->job_digest), lease->host_id, dataset_digests,
                                      model_digest, metrics, HexEncode(crypto::Sha256(AsBytes(r->report))),
                                      HexEncode(r->signature));
  e.fields["outcome"] = "completed";
  auto index = log_.Append(e);
  if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
  if (Status s = store_.MarkReported(r->lease_id, Now()); !s.ok()) return ErrorReply(s);
  // The job is over: its key is never issued again (ranks that hold it keep their leases).
  if (Status s = store_.EndJob(job_id, "its report was logged", Now()); !s.ok()) return ErrorReply(s);
  return {200, json{{"audit_index", *index}}.dump()};
}

Reply Service::AdminRevoke(std::string_view body) {
  auto r = ParseRevocationRequest(body);
  if (!r.ok()) return ErrorReply(r.status());
  const RevokedKind kind = r->kind == "host" ? RevokedKind::kHost : RevokedKind::kJob;
  // In force first (fail closed), then logged; a retry after a log failure logs it.
  // Exclusive: no release or renewal is between its commit and its audit entries.
  std::unique_lock<std::shared_mutex> revocation_guard(revocation_mu_);
  auto ended = store_.Revoke(kind, r->id, r->reason, Now());
  if (!ended.ok()) return ErrorReply(ended.status());
  if (kind == RevokedKind::kJob) {
    if (Status s = store_.EndJob(r->id, "revoked", Now()); !s.ok()) return ErrorReply(s);
  }
  auto index = log_.Append(audit::Revoked(options_.actor, r->kind, r->id, r->reason));
  if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
  return {200, json{{"revoked", {{"kind", r->kind}, {"id", r->id}}}, {"leases_ended", *ended}, {"audit_index", *index}}
                   .dump()};
}

Reply Service::AdminActivatePolicy(std::string_view body) {
  auto a = ParsePolicyActivation(body);
  if (!a.ok()) return ErrorReply(a.status());
  // One activation at a time: the serial check, the audit entry and the store's write are
  // in one order, so the log never shows a move to a lower serial.
  std::lock_guard<std::mutex> activation_guard(activation_mu_);
  auto verified = VerifyUsagePolicy(a->policy, a->signature, options_.policy_signers);
  if (!verified.ok()) return ErrorReply(verified.status());
  const UsagePolicy& p = verified->policy;
  if (p.attestation_policy_sha256 != policy_sha256_)
    return ErrorReply(FailedPrecondition("policy " + p.policy_id + " requires attestation policy " +
                                         HexEncode(p.attestation_policy_sha256) + "; this broker appraises with " +
                                         HexEncode(policy_sha256_)));
  auto current = store_.GetActivePolicy(p.policy_id);
  if (current.ok() && current->serial >= p.serial)
    return ErrorReply(AlreadyExists("policy " + p.policy_id + " serial " + std::to_string(current->serial) +
                                    " is active; activate a higher serial"));
  if (!current.ok() && current.status().code() != Code::kNotFound) return ErrorReply(current.status());
  audit::Event e = audit::PolicyActivated(options_.actor, p.policy_id, HexEncode(verified->digest),
                                          "ed25519:" + HexEncode(verified->signer));
  e.fields["version"] = p.serial;
  auto index = log_.Append(e);
  if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));
  PolicyRecord rec;
  rec.policy_id = p.policy_id;
  rec.serial = p.serial;
  rec.policy_sha256 = verified->digest;
  rec.policy_text = a->policy;
  rec.signature_text = a->signature;
  rec.signer.assign(verified->signer.begin(), verified->signer.end());
  rec.activated_at = Now();
  if (Status s = store_.PutPolicy(rec); !s.ok()) return ErrorReply(s);
  return {200, json{{"policy_id", p.policy_id},
                    {"serial", p.serial},
                    {"policy_sha256", HexEncode(verified->digest)},
                    {"signer", HexEncode(verified->signer)},
                    {"audit_index", *index}}
                   .dump()};
}

}  // namespace enclave::broker
