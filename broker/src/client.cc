#include "enclave/broker/client.h"

#include <openssl/ssl.h>
#include <sodium.h>

#include <chrono>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace enclave::broker {

Result<ReleaseKeys> ReleaseKeys::Generate() {
  ReleaseKeys k;
  ASSIGN_OR_RETURN(k.recipient_secret_, crypto::SecretBytes::Create(crypto_box_SECRETKEYBYTES));
  if (crypto_box_keypair(k.recipient_.data(), k.recipient_secret_.ExposeSecretMutable().data()) != 0)
    return Internal("crypto_box_keypair failed");
  ASSIGN_OR_RETURN(k.report_secret_, crypto::SecretBytes::Create(crypto_sign_SECRETKEYBYTES));
  if (crypto_sign_keypair(k.report_public_.data(), k.report_secret_.ExposeSecretMutable().data()) != 0)
    return Internal("crypto_sign_keypair failed");
  return k;
}

Result<crypto::SecretBytes> ReleaseKeys::Open(ByteSpan sealed) const {
  return OpenSealed(recipient_, recipient_secret_, sealed);
}

Result<std::array<uint8_t, kEd25519SignatureBytes>> ReleaseKeys::SignReport(ByteSpan message) const {
  std::array<uint8_t, kEd25519SignatureBytes> sig{};
  if (crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), report_secret_.ExposeSecret().data()) != 0)
    return Internal("crypto_sign_detached failed");
  return sig;
}

Status StatusFromAnswer(int http_status, const std::string& body, const std::string& what) {
  std::string code = "unknown", message = body.substr(0, 200);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    if (j["error"].value("code", nlohmann::json()).is_string()) code = j["error"]["code"].get<std::string>();
    if (j["error"].value("message", nlohmann::json()).is_string()) message = j["error"]["message"].get<std::string>();
  }
  std::string m = what + ": the broker answered " + std::to_string(http_status) + " " + code + ": " + message;
  if (j.is_object() && j.contains("audit_index") && j["audit_index"].is_number_unsigned())
    m += " (audit entry " + std::to_string(j["audit_index"].get<uint64_t>()) + ")";
  if (code == "invalid_input") return InvalidInput(m);
  if (code == "permission_denied") return PermissionDenied(m);
  if (code == "unauthenticated") return PermissionDenied(m);
  if (code == "authentication_failed") return AuthFailed(m);
  if (code == "not_found") return NotFound(m);
  if (code == "failed_precondition") return FailedPrecondition(m);
  if (code == "already_exists") return AlreadyExists(m);
  if (code == "unavailable" || code == "too_many_requests" || http_status == 503 || http_status == 429)
    return Unavailable(m);  // retry later
  if (code == "unsupported") return Unsupported(m);
  return Internal(m);
}

Result<std::unique_ptr<BrokerClient>> BrokerClient::Create(const std::string& url, const std::string& ca_file) {
  constexpr std::string_view kScheme = "https://";
  if (!url.starts_with(kScheme)) return InvalidInput("broker URL must start with https://: " + url);
  std::string rest = url.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find('/') != std::string::npos)
    return InvalidInput("broker URL must be https://HOST:PORT: " + url);
  const std::string host = rest.substr(0, colon);
  int port = 0;
  for (char c : rest.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return InvalidInput("broker URL has a bad port: " + url);
    port = port * 10 + (c - '0');
  }
  if (host.empty() || port <= 0 || port > 65535) return InvalidInput("broker URL must be https://HOST:PORT: " + url);
  if (ca_file.empty()) return InvalidInput("a CA file pinning the broker's certificate is required");
  std::unique_ptr<BrokerClient> c(new BrokerClient());
  c->url_ = url;
  c->http_ = std::make_unique<httplib::SSLClient>(host, port);
  c->http_->set_ca_cert_path(ca_file.c_str());
  c->http_->enable_server_certificate_verification(true);
  c->http_->set_connection_timeout(10, 0);
  c->http_->set_read_timeout(60, 0);
  c->http_->set_write_timeout(60, 0);
  c->http_->set_tcp_nodelay(true);
  // No keep-alive: the broker closes idle connections after keep_alive_s, and httplib 0.11
  // does not retry a request on a connection the server closed (a POST must not be sent
  // twice anyway). One TLS handshake per call.
  SSL_CTX* ctx = c->http_->ssl_context();
  if (ctx == nullptr || SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1)
    return Internal("could not restrict the client to TLS 1.3");
  return c;
}

BrokerClient::~BrokerClient() = default;

Result<BrokerClient::Answer> BrokerClient::Post(const std::string& path, const std::string& body,
                                                const std::string& bearer) {
  httplib::Headers headers;
  if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
  // A request that could not be connected or written in full cannot have been acted on
  // (the broker reads the whole Content-Length first), so it is retried, three times in
  // all with a short backoff: a burst of new connections overflows the broker's listen
  // backlog. Nothing is retried once the request was sent.
  auto r = http_->Post(path.c_str(), headers, body, "application/json");
  for (int attempt = 1; attempt < 3 && !r; ++attempt) {
    const httplib::Error e = r.error();
    if (e != httplib::Error::Connection && e != httplib::Error::SSLConnection && e != httplib::Error::Write &&
        e != httplib::Error::ConnectionTimeout)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
    r = http_->Post(path.c_str(), headers, body, "application/json");
  }
  if (!r) {
    std::string why = httplib::to_string(r.error());
    const long verify = http_->get_openssl_verify_result();
    if (verify != X509_V_OK) why += " (certificate: " + std::string(X509_verify_cert_error_string(verify)) + ")";
    return Unavailable("broker " + url_ + path + ": " + why);
  }
  return Answer{r->status, r->body};
}

Result<std::string> BrokerClient::Enrol(const attest::EnrolmentBundle& bundle, const Activator& activate) {
  ASSIGN_OR_RETURN(Answer a, Post("/v1/enrolments", attest::EncodeEnrolmentBundle(bundle)));
  if (a.status != 201) return StatusFromAnswer(a.status, a.body, "enrolment");
  ASSIGN_OR_RETURN(EnrolmentChallenge challenge, ParseEnrolmentChallenge(a.body));
  ASSIGN_OR_RETURN(attest::ChallengeBundle cb, attest::ParseChallengeBundle(challenge.challenge_bundle));
  ASSIGN_OR_RETURN(attest::ActivationResponse response, activate(cb));
  ASSIGN_OR_RETURN(Answer done, Post("/v1/enrolments/" + challenge.challenge_id + "/activation",
                                     attest::EncodeActivationResponse(response)));
  if (done.status != 201) return StatusFromAnswer(done.status, done.body, "activation");
  auto j = nlohmann::json::parse(done.body, nullptr, false);
  if (!j.is_object() || !j.contains("host_id") || !j["host_id"].is_string() ||
      j["host_id"].get<std::string>() != challenge.host_id)
    return InvalidInput("activation answer: unexpected body");
  return challenge.host_id;
}

Result<NonceIssued> BrokerClient::Nonce(const std::string& host_id) {
  if (!nonce_signer_) return FailedPrecondition("no nonce signer: nonce requests must be signed with the host's AK");
  NonceRequest request{host_id, {}};
  ASSIGN_OR_RETURN(request.signed_request, nonce_signer_(host_id));
  ASSIGN_OR_RETURN(Answer a, Post("/v1/nonces", EncodeNonceRequest(request)));
  if (a.status != 201) return StatusFromAnswer(a.status, a.body, "nonce");
  ASSIGN_OR_RETURN(NonceIssued n, ParseNonceIssued(a.body));
  if (n.host_id != host_id) return InvalidInput("nonce answer names another host");
  return n;
}

Result<Release> BrokerClient::RequestRelease(const std::string& host_id, ReleaseRequest request,
                                             const ReleaseKeys& keys, const Quoter& quote) {
  request.recipient = keys.recipient();
  request.report_key = keys.report_public();
  ASSIGN_OR_RETURN(NonceIssued nonce, Nonce(host_id));
  ASSIGN_OR_RETURN(attest::EvidenceBundle evidence, quote(nonce, ReleaseBinding(request)));
  request.evidence = attest::EncodeEvidenceBundle(evidence);
  ASSIGN_OR_RETURN(Answer a, Post("/v1/releases", EncodeReleaseRequest(request)));
  if (a.status != 200) return StatusFromAnswer(a.status, a.body, "key release");
  ASSIGN_OR_RETURN(ReleaseGranted g, ParseReleaseGranted(a.body));
  // The answer must be for exactly what was asked.
  if (g.keys.size() != request.keys.size()) return InvalidInput("release answer: wrong number of keys");
  if (g.lease.host_id != host_id || g.lease.job_id != request.job.job_id || g.lease.policy_id != request.policy_id)
    return InvalidInput("release answer: the lease is for another host, job or policy");
  Release out;
  if (witness_policy_) {
    ASSIGN_OR_RETURN(out.witnessed_by, VerifyWitnessedRelease(g, request.report_key, *witness_policy_));
  }
  out.audit_proofs = g.audit_proofs;
  for (size_t i = 0; i < g.keys.size(); ++i) {
    if (g.keys[i].dataset_id != request.keys[i].dataset_id || g.keys[i].key_id != request.keys[i].key_id)
      return InvalidInput("release answer: keys[" + std::to_string(i) + "] is not the key asked for");
    ASSIGN_OR_RETURN(crypto::SecretBytes dek, keys.Open(g.keys[i].sealed));
    if (dek.size() != 32) return InvalidInput("release answer: a data key is not 32 bytes");
    out.keys.push_back({g.keys[i].dataset_id, g.keys[i].key_id, g.keys[i].suite, std::move(dek)});
  }
  ASSIGN_OR_RETURN(out.job_key, keys.Open(g.sealed_job_key));
  if (out.job_key.size() != 32) return InvalidInput("release answer: the job key is not 32 bytes");
  out.lease = g.lease;
  out.export_key.name = g.export_key_name;
  out.export_key.keystore_id = g.export_keystore_id;
  out.export_key.key_id = g.export_key_id;
  out.export_key.public_key = g.export_public;
  out.world_size = g.world_size;
  out.ranks_joined = g.ranks_joined;
  out.audit_index = g.audit_index;
  return out;
}

Result<Lease> BrokerClient::Renew(const Lease& lease, const X25519Public& recipient, const Quoter& quote) {
  ASSIGN_OR_RETURN(NonceIssued nonce, Nonce(lease.host_id));
  ASSIGN_OR_RETURN(attest::EvidenceBundle evidence, quote(nonce, RenewalBinding(lease.lease_id, recipient)));
  ASSIGN_OR_RETURN(Answer a, Post("/v1/leases/" + lease.lease_id + "/renewals",
                                  EncodeRenewalRequest({attest::EncodeEvidenceBundle(evidence)})));
  if (a.status != 200) return StatusFromAnswer(a.status, a.body, "lease renewal");
  ASSIGN_OR_RETURN(RenewalGranted g, ParseRenewalGranted(a.body));
  if (g.lease.lease_id != lease.lease_id) return InvalidInput("renewal answer names another lease");
  return g.lease;
}

Result<uint64_t> BrokerClient::FinishJob(const Lease& lease, const std::string& report,
                                         const std::array<uint8_t, kEd25519SignatureBytes>& signature) {
  ASSIGN_OR_RETURN(Answer a, Post("/v1/jobs/" + lease.job_id + "/reports",
                                  EncodeJobReport({lease.lease_id, report, signature})));
  if (a.status != 200) return StatusFromAnswer(a.status, a.body, "job report");
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  if (!j.is_object() || !j.contains("audit_index") || !j["audit_index"].is_number_unsigned())
    return InvalidInput("job report answer: no audit_index");
  return j["audit_index"].get<uint64_t>();
}

Result<RendezvousInfo> BrokerClient::Rendezvous(const Lease& lease, const crypto::SecretBytes& job_key,
                                                const std::string& address) {
  RendezvousRequest r{lease.lease_id, address, RendezvousProof(job_key, lease.job_id, lease.lease_id, address)};
  ASSIGN_OR_RETURN(Answer a, Post("/v1/jobs/" + lease.job_id + "/rendezvous", EncodeRendezvousRequest(r)));
  if (a.status != 200) return StatusFromAnswer(a.status, a.body, "rendezvous");
  ASSIGN_OR_RETURN(RendezvousInfo info, ParseRendezvousInfo(a.body));
  if (info.job_id != lease.job_id) return InvalidInput("rendezvous answer names another job");
  return info;
}

}  // namespace enclave::broker
