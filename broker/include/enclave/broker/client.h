// The broker's client library (docs/protocol.md), used by `enclave-attest` and the
// trainer: HTTPS with TLS 1.3 to a broker whose certificate (or its CA) the caller pins,
// enrolment, nonces, attested key release and lease renewal, and the admin calls.
//
// The TPM stays out of this library: the caller passes a Quoter that turns a nonce and a
// bound digest into an evidence bundle, and a NonceSigner that signs nonce requests
// (attest/host's MakeEvidence and SignNonceRequest on a real host).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/bundle.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"
#include "enclave/common/status.h"
#include "enclave/crypto/model_export.h"
#include "enclave/crypto/secret_bytes.h"

namespace httplib {
class SSLClient;
}

namespace enclave::broker {

// The ephemeral keys of one release: an X25519 key pair the broker seals to, and an
// Ed25519 key pair the job signs its report with. Secrets in guarded memory; they never
// leave the process.
class ReleaseKeys {
 public:
  static Result<ReleaseKeys> Generate();
  const X25519Public& recipient() const { return recipient_; }
  const SignerPublicKey& report_public() const { return report_public_; }
  Result<crypto::SecretBytes> Open(ByteSpan sealed) const;
  // Ed25519 signature of `message` with the report key.
  Result<std::array<uint8_t, kEd25519SignatureBytes>> SignReport(ByteSpan message) const;

 private:
  X25519Public recipient_{};
  crypto::SecretBytes recipient_secret_;
  SignerPublicKey report_public_{};
  crypto::SecretBytes report_secret_;  // libsodium's 64-byte form
};

struct ReleasedKey {
  std::string dataset_id;
  crypto::Id128 key_id{};
  crypto::Suite suite = crypto::Suite::kAes256Gcm;
  crypto::SecretBytes dek;
};

// A granted release with every secret opened.
struct Release {
  Lease lease;
  std::vector<ReleasedKey> keys;
  crypto::SecretBytes job_key;
  crypto::ExportPublicKey export_key;  // what the model is sealed to
  uint32_t world_size = 1;
  std::vector<uint32_t> ranks_joined;
  uint64_t audit_index = 0;
  // From a witnessed broker: inclusion proofs of the release's key.released entries in a
  // quorum-cosigned checkpoint (ReleaseGranted::audit_proofs), kept for the job's report;
  // witnessed_by is filled when they were checked against the client's witness policy.
  std::vector<audit::Proof> audit_proofs;
  std::vector<audit::CosignedBy> witnessed_by;
};

class BrokerClient {
 public:
  // `url`: https://HOST:PORT. `ca_file`: PEM certificate(s) the broker's chain must end in
  // (its own self-signed certificate works). The host name or IP is verified.
  static Result<std::unique_ptr<BrokerClient>> Create(const std::string& url, const std::string& ca_file);
  ~BrokerClient();

  struct Answer {
    int status = 0;
    std::string body;
  };
  // One POST with a JSON body; `bearer` adds "Authorization: Bearer ...". A transport
  // failure (connect, TLS, timeout) is Unavailable naming the URL.
  Result<Answer> Post(const std::string& path, const std::string& body, const std::string& bearer = "");

  // Enrols a host: posts the bundle, answers the credential challenge with `activate`,
  // returns the host id.
  using Activator = std::function<Result<attest::ActivationResponse>(const attest::ChallengeBundle&)>;
  Result<std::string> Enrol(const attest::EnrolmentBundle& bundle, const Activator& activate);

  // Signs a nonce request for a host with that host's AK (attest::host::SignNonceRequest).
  using NonceSigner = std::function<Result<attest::SignedNonceRequest>(const std::string& host_id)>;
  // The host's signer, used by Nonce (and so by RequestRelease and Renew): like a client
  // certificate, set once for the host this client acts for. Without one, Nonce fails.
  void SetNonceSigner(NonceSigner signer) { nonce_signer_ = std::move(signer); }
  // With a witness policy, RequestRelease accepts only an answer whose audit proofs hold
  // under it (VerifyWitnessedRelease), before any key is opened.
  void SetWitnessPolicy(std::optional<audit::WitnessPolicy> policy) { witness_policy_ = std::move(policy); }
  Result<NonceIssued> Nonce(const std::string& host_id);

  // Evidence for a fresh nonce with `bound` as the bound digest (attest::host::MakeEvidence).
  using Quoter = std::function<Result<attest::EvidenceBundle>(const NonceIssued& nonce, const crypto::Digest256& bound)>;

  // Fills request.recipient, request.report_key and request.evidence, posts it, and opens
  // the answer with `keys`. A refusal is PermissionDenied (its audit index in the message).
  Result<Release> RequestRelease(const std::string& host_id, ReleaseRequest request, const ReleaseKeys& keys,
                                 const Quoter& quote);
  Result<Lease> Renew(const Lease& lease, const X25519Public& recipient, const Quoter& quote);
  // Sends the job's report with its report-key signature; the broker logs job.finished.
  // The audit index of that entry.
  Result<uint64_t> FinishJob(const Lease& lease, const std::string& report,
                             const std::array<uint8_t, kEd25519SignatureBytes>& signature);
  // Publishes this rank's address ("" only reads) and returns who has joined the job.
  Result<RendezvousInfo> Rendezvous(const Lease& lease, const crypto::SecretBytes& job_key,
                                    const std::string& address);

 private:
  BrokerClient() = default;
  std::string url_;
  std::unique_ptr<httplib::SSLClient> http_;
  NonceSigner nonce_signer_;
  std::optional<audit::WitnessPolicy> witness_policy_;
};

// A broker error answer as a Status: the code from {"error":{"code"}} and its message.
Status StatusFromAnswer(int http_status, const std::string& body, const std::string& what);

}  // namespace enclave::broker
