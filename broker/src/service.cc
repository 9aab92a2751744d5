#include "enclave/broker/service.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <openssl/x509.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "enclave/attest/bundle.h"
#include "enclave/attest/credential.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/enrolment.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/request_signature.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/audit/event.h"
#include "enclave/broker/messages.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::broker {
namespace {

using json = nlohmann::json;

std::string RandomId() {
  std::array<uint8_t, 16> b{};
  crypto::RandomBytes(b);
  return HexEncode(b);
}

Reply JsonReply(int status, const json& j) { return {status, j.dump()}; }

// Refusals of a security check: one opaque message to the client; the detail goes to the
// broker's own log (stderr), never to the caller.
Reply Refuse(std::string_view what, const std::string& detail) {
  std::cerr << "enclave-broker: refused " << what << ": " << detail << "\n";
  return {403, EncodeError("permission_denied", std::string(what) + " refused")};
}

}  // namespace

int HttpStatusFor(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kInvalidInput: return 400;
    case Code::kUnsupported: return 400;
    case Code::kAuthFailed: return 403;
    case Code::kPermissionDenied: return 403;
    case Code::kNotFound: return 404;
    case Code::kAlreadyExists: return 409;
    case Code::kFailedPrecondition: return 409;
    case Code::kUnavailable: return 503;
    case Code::kIo: return 500;
    case Code::kInternal: return 500;
    case Code::kInterrupted: return 503;  // the broker stops serving on a signal
  }
  return 500;
}

Reply ErrorReply(const Status& status) {
  std::string code(CodeName(status.code()));
  for (char& c : code) {
    if (c == ' ') c = '_';
  }
  if (status.code() == Code::kIo) code = "io_error";
  if (status.code() == Code::kInternal) code = "internal";
  // Server-side failures keep their detail in the broker's log only.
  const int http = HttpStatusFor(status.code());
  if (http >= 500) {
    std::cerr << "enclave-broker: " << status.ToString() << "\n";
    return {http, EncodeError(code, "the broker could not complete the request")};
  }
  return {http, EncodeError(code, status.message())};
}

std::string HostIdFor(ByteSpan ek_public) {
  crypto::Digest256 d = crypto::Sha256(ek_public);
  return HexEncode(ByteSpan(d.data(), 16));
}

std::vector<std::string> TpmKeysOf(const attest::EnrolmentBundle& bundle, const attest::EkTrustStore& trust) {
  std::vector<std::string> keys;
  for (const attest::EkCertificateEntry& c : bundle.ek_certificates) {
    // Chain and DER checks as for the enrolled EK's certificate; the key check is not
    // wanted here (the certificate is for another EK of the same TPM).
    auto appraisal = attest::AppraiseEkCertificate(c.der, bundle.ek_public, trust);
    if (!appraisal.ok()) continue;
    const auto& passed = appraisal->passed();
    if (std::find(passed.begin(), passed.end(), "ek.cert.chain") == passed.end() ||
        std::find(passed.begin(), passed.end(), "ek.cert.der") == passed.end())
      continue;
    const unsigned char* p = c.der.data();
    X509* x = d2i_X509(nullptr, &p, static_cast<long>(c.der.size()));
    if (x == nullptr) continue;
    unsigned char* spki = nullptr;
    const int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x), &spki);
    if (n > 0) keys.push_back(HexEncode(crypto::Sha256(ByteSpan(spki, static_cast<size_t>(n)))));
    OPENSSL_free(spki);
    X509_free(x);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Result<std::unique_ptr<Service>> Service::Create(Store& store, audit::LogWriter& log, audit::EvidenceArchive archive,
                                                 std::string policy_text, std::string policy_dir,
                                                 ServiceOptions options) {
  auto policy = attest::ParsePolicy(policy_text, policy_dir);
  if (!policy.ok()) return policy.status().Annotate("attestation policy");
  if (policy->ek_trust.roots.empty()) return FailedPrecondition("attestation policy: no trusted EK root");
  // Every verdict archives the policy and the files it names; refuse at start a policy
  // that cannot be archived rather than fail every appraisal later.
  auto files = audit::PolicyReferencedFiles(policy_text, policy_dir);
  if (!files.ok()) return files.status().Annotate("attestation policy (archiving its EK root files)");
  // Hosts enrolled before the store had tpm_keys (schema v3): link them from their stored
  // enrolment bundles (idempotent), so that a revocation covers their TPM too.
  ASSIGN_OR_RETURN(std::vector<HostRecord> hosts, store.ListHosts());
  for (const HostRecord& h : hosts) {
    auto bundle = attest::ParseEnrolmentBundle(h.enrolment_bundle);
    if (!bundle.ok())
      return Internal("stored enrolment bundle of host " + h.host_id + ": " + bundle.status().message());
    RETURN_IF_ERROR(store.LinkTpmKeys(h.host_id, TpmKeysOf(*bundle, policy->ek_trust), h.enrolled_at));
  }
  ASSIGN_OR_RETURN(uint64_t archived, archive.BytesUsed());
  std::unique_ptr<Service> service(new Service(store, log, std::move(archive), std::move(policy).value(),
                                               std::move(policy_text), std::move(policy_dir), std::move(options)));
  service->archive_bytes_ = archived;
  if (service->options_.keystore != nullptr) {
    // The job keys' wrapping key, derived once (it had been derived twice per release).
    ASSIGN_OR_RETURN(crypto::SecretBytes wrapping, service->options_.keystore->DeriveKey(kJobKeyLabel));
    ASSIGN_OR_RETURN(service->job_key_aead_, crypto::Aead::Create(crypto::Suite::kAes256Gcm, wrapping));
  }
  return service;
}

int64_t Service::Now() const {
  if (options_.now) return options_.now();
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<std::mutex> Service::HostLock(const std::string& host_id) {
  std::lock_guard<std::mutex> lock(locks_mu_);
  auto& m = host_locks_[host_id];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

Reply Service::Enrol(std::string_view body) {
  auto bundle = attest::ParseEnrolmentBundle(body);
  if (!bundle.ok()) return ErrorReply(bundle.status());
  crypto::Digest256 ek_cert_sha256{};
  auto appraisal = attest::AppraiseEnrolment(policy_, *bundle, &ek_cert_sha256);
  if (!appraisal.ok()) return ErrorReply(appraisal.status());
  if (!appraisal->ok()) return Refuse("enrolment", appraisal->Summary());
  const std::string host_id = HostIdFor(bundle->ek_public);
  // Revocation covers the TPM: this EK's host id, and every host id that shares one of the
  // bundle's certified EK keys (another EK of the same TPM).
  auto revoked = store_.RevokedTpmLink(host_id, TpmKeysOf(*bundle, policy_.ek_trust));
  if (!revoked.ok()) return ErrorReply(revoked.status());
  if (*revoked)
    return Refuse("enrolment", "host " + host_id + " is revoked (revoked host of this TPM: " + **revoked + ")");

  const int64_t now = Now();
  auto made = attest::MakeChallenge(*bundle, crypto::Sha256(AsBytes(body)), now);
  if (!made.ok()) return ErrorReply(made.status());
  const attest::ChallengeBundle& c = made->bundle;

  PendingChallenge pending;
  pending.challenge_id = RandomId();
  pending.host_id = host_id;
  pending.enrolment_bundle = std::string(body);
  pending.secret_sha256 = c.secret_sha256;
  pending.ek_cert_sha256 = ek_cert_sha256;
  pending.created_at = now;
  pending.expires_at = now + options_.challenge_ttl_s;
  if (Status s = store_.PutChallenge(pending); !s.ok()) return ErrorReply(s);

  EnrolmentChallenge answer{pending.challenge_id, host_id, pending.expires_at, attest::EncodeChallengeBundle(c)};
  return {201, EncodeEnrolmentChallenge(answer)};
}

Reply Service::Activate(const std::string& challenge_id, std::string_view body) {
  if (!IsLowerHexId(challenge_id)) return ErrorReply(InvalidInput("challenge id must be 32 lowercase hex digits"));
  auto response = attest::ParseActivationResponse(body);
  if (!response.ok()) return ErrorReply(response.status());
  auto pending = store_.TakeChallenge(challenge_id, Now());
  if (!pending.ok()) return ErrorReply(pending.status());
  auto bundle = attest::ParseEnrolmentBundle(pending->enrolment_bundle);
  if (!bundle.ok()) return ErrorReply(Internal("stored enrolment bundle: " + bundle.status().message()));
  // Both compared in full; the secret's digest in constant time.
  const crypto::Digest256 got = crypto::Sha256(response->secret);
  const bool secret_ok = crypto::ConstantTimeEquals(got, pending->secret_sha256);
  const bool name_ok = response->ak_name == bundle->ak_name;
  if (!secret_ok || !name_ok) {
    return Refuse("activation", std::string("challenge ") + challenge_id + ": " +
                                    (name_ok ? "" : "the answer names another AK; ") +
                                    (secret_ok ? "" : "the secret does not match"));
  }
  const std::vector<std::string> tpm_keys = TpmKeysOf(*bundle, policy_.ek_trust);
  auto revoked = store_.RevokedTpmLink(pending->host_id, tpm_keys);
  if (!revoked.ok()) return ErrorReply(revoked.status());
  if (*revoked) {
    return Refuse("activation",
                  "host " + pending->host_id + " was revoked (revoked host of this TPM: " + **revoked + ")");
  }
  // Checked before the audit entry, so the log never records an enrolment the store refuses.
  auto owner = store_.HostIdForAkName(bundle->ak_name);
  if (!owner.ok()) return ErrorReply(owner.status());
  if (owner->has_value() && **owner != pending->host_id)
    return ErrorReply(AlreadyExists("this AK is enrolled for host " + **owner));
  const crypto::Digest256 ak_sha = crypto::Sha256(bundle->ak_public);
  auto index = log_.Append(audit::HostEnrolled(options_.actor, pending->host_id, HexEncode(pending->ek_cert_sha256),
                                                HexEncode(ak_sha)));
  if (!index.ok()) return ErrorReply(Unavailable("audit log: " + index.status().ToString()));

  HostRecord host;
  host.host_id = pending->host_id;
  host.ek_public = bundle->ek_public;
  host.ek_cert_sha256 = pending->ek_cert_sha256;
  host.ak_public = bundle->ak_public;
  host.ak_name = bundle->ak_name;
  host.enrolment_bundle = pending->enrolment_bundle;
  host.enrolled_at = Now();
  // The store checks revocation again in the transaction that stores the host.
  if (Status s = store_.UpsertHost(host, tpm_keys); !s.ok()) {
    if (s.code() == Code::kPermissionDenied) return Refuse("activation", s.message());
    return ErrorReply(s);
  }
  return JsonReply(201, json{{"host_id", host.host_id},
                             {"ak_name", HexEncode(host.ak_name)},
                             {"enrolled_at", host.enrolled_at},
                             {"audit_index", *index}});
}

Reply Service::IssueNonce(std::string_view body, const std::string& peer) {
  auto request = ParseNonceRequest(body);
  if (!request.ok()) return ErrorReply(request.status());
  auto host = store_.GetHost(request->host_id);
  if (!host.ok()) return ErrorReply(host.status());
  auto revoked = store_.IsRevoked(RevokedKind::kHost, host->host_id);
  if (!revoked.ok()) return ErrorReply(revoked.status());
  if (*revoked) return Refuse("nonce", "host " + host->host_id + " is revoked");
  {
    // Nonces cost a row each and a host needs a few per job: a flood is refused, not stored.
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
    const double per_minute = static_cast<double>(options_.nonces_per_minute);
    std::lock_guard<std::mutex> lock(buckets_mu_);
    if (nonce_buckets_.size() > 100000) nonce_buckets_.clear();  // bounded: a full bucket for everyone again
    auto [it, fresh] = nonce_buckets_.try_emplace(host->host_id + " " + peer, NonceBucket{per_minute, now_ms});
    NonceBucket& b = it->second;
    b.tokens = std::min(per_minute, b.tokens + static_cast<double>(now_ms - b.at_ms) * per_minute / 60000.0);
    b.at_ms = now_ms;
    if (b.tokens < 1) {
      std::cerr << "enclave-broker: refused a nonce for " << host->host_id << " to " << peer << ": over "
                << options_.nonces_per_minute << " per minute\n";
      const int64_t wait_s = static_cast<int64_t>(std::ceil((1 - b.tokens) * 60 / per_minute));
      json j = json::parse(EncodeError("too_many_requests", "too many nonces for this host; retry later"));
      j["retry_after_s"] = wait_s;
      return JsonReply(429, j);
    }
    b.tokens -= 1;
  }
  // Only a process that can use this host's TPM gets nonces for it: the request is a quote
  // by the enrolled AK, and each signed request is good for one nonce.
  auto clock = attest::VerifyNonceRequest(host->ak_public, host->host_id, request->signed_request);
  if (!clock.ok() && clock.status().code() == Code::kPermissionDenied)
    return Refuse("nonce", "host " + host->host_id + " (from " + peer + "): " + clock.status().message());
  if (!clock.ok()) return ErrorReply(clock.status());
  NonceRecord n;
  n.nonce.resize(kNonceBytes);
  crypto::RandomBytes(n.nonce);
  n.host_id = host->host_id;
  n.issued_at = Now();
  n.expires_at = n.issued_at + options_.nonce_ttl_s;
  const crypto::Digest256 request_digest = crypto::Sha256(request->signed_request.attest);
  if (Status s = store_.PutNonceForRequest(n, *clock, request_digest, kNonceRequestWindowMs); !s.ok()) {
    if (s.code() == Code::kPermissionDenied) return Refuse("nonce", "host " + host->host_id + ": " + s.message());
    return ErrorReply(s);
  }
  NonceIssued answer{n.nonce, n.host_id, n.issued_at, n.expires_at, policy_.quote_selection.ToString()};
  return {201, EncodeNonceIssued(answer)};
}

Reply Service::Attest(std::string_view body) {
  auto evidence = attest::ParseEvidenceBundle(body);
  if (!evidence.ok()) return ErrorReply(evidence.status());
  if (evidence->nonce.size() != kNonceBytes)
    return ErrorReply(InvalidInput("evidence bundle: field 'nonce' must be a 32-byte nonce issued by this broker"));
  // Used up before anything else: a nonce answers one appraisal, whatever its outcome.
  auto nonce = store_.ConsumeNonce(evidence->nonce, Now());
  if (!nonce.ok()) return ErrorReply(nonce.status());
  auto revoked = store_.IsRevoked(RevokedKind::kHost, nonce->host_id);
  if (!revoked.ok()) return ErrorReply(revoked.status());
  if (*revoked) return Refuse("attestation", "host " + nonce->host_id + " is revoked");

  // One appraisal per host at a time, so the clock state read here is the one replaced.
  std::shared_ptr<std::mutex> host_lock = HostLock(nonce->host_id);
  std::lock_guard<std::mutex> guard(*host_lock);
  auto host = store_.GetHost(nonce->host_id);
  if (!host.ok()) return ErrorReply(host.status());

  auto recorded = AppraiseFor(*host, *nonce, body, evidence->bound_digest, "");
  if (!recorded.ok() && recorded.status().code() == Code::kPermissionDenied)
    return Refuse("attestation", recorded.status().message());
  if (!recorded.ok()) return ErrorReply(recorded.status());
  if (!recorded->verdict.passed()) {
    std::cerr << "enclave-broker: attestation of " << host->host_id << " failed (audit entry " << recorded->index
              << "): " << recorded->verdict.appraisal.Summary() << "\n";
    json j = json::parse(EncodeError("permission_denied", "attestation refused"));
    j["audit_index"] = recorded->index;
    return JsonReply(403, j);
  }
  json j{{"verdict", "pass"}, {"host_id", host->host_id}, {"audit_index", recorded->index}};
  j["bound_digest"] = evidence->bound_digest ? json(HexEncode(*evidence->bound_digest)) : json(nullptr);
  return JsonReply(200, j);
}

}  // namespace enclave::broker
