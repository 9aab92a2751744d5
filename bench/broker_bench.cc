// The broker's attested key release on loopback, side by side with the bare verifier cost:
//   BM_Release          POST /v1/releases with pre-made evidence: nonce marked used, evidence
//                       appraised, verdict and inputs archived and appended to the audit log
//                       (durable), data-use policy judged, job key made and stored, DEK and
//                       job key sealed to the request's X25519 key, key.released appended
//                       (durable), lease stored; the answer read. p50/p99 per release.
//   BM_Attestation      POST /v1/attestations with pre-made evidence: the same appraisal,
//                       archive and verdict append, no policy, no sealing, no second append.
//   BM_NonceRequest     POST /v1/nonces with a pre-signed request: the AK signature checked,
//                       the replay window updated and the nonce stored (one durable
//                       transaction); the answer read.
//   BM_StatusRoundTrip  GET /v1/status on the same connection: the HTTP + TLS floor.
//   BM_VerifyFromBytes  the baseline: audit::AppraiseFromBytes in this process, what the
//                       broker's appraisal runs on every request (parse the attestation
//                       policy with its EK roots, the evidence and enrolment bundles, then
//                       attest::AppraiseEvidence), with the host's last clock state; no
//                       HTTP, no store, no archive, no log.
//   BM_AppraiseEvidence attest::AppraiseEvidence alone on inputs parsed once (the lower bound).
//
// Setup, once per process: a fresh swtpm with EK certificates (the tests' SwtpmFixture),
// a real `enclave-broker serve` process (tests/broker/broker_process.h: TLS 1.3 on
// 127.0.0.1, SQLite store, audit log, a tenant keystore with one AES-256-GCM DEK and an
// export key, a policy officer key, an admin token), the host enrolled through the attest
// host library (ECC P-256 EK, credential activation) and a signed data-use policy activated
// through the admin API (one-hour lease), as tests/broker/release_test.cc does.
//
// Pre-made evidence: the broker refuses a quote whose TPM clock is not after the host's
// last accepted one, so evidence is posted in the order it was quoted. Each HTTP benchmark
// works in batches of kBatch: first kBatch nonces are fetched and quoted in order (each
// release with its own fresh ReleaseKeys and its own job id, so every binding differs),
// then a fresh keep-alive TLS connection is opened and warmed with one GET /v1/status, and
// only then are the kBatch POSTs sent, in quote order, one at a time. Only the POST (send,
// broker work, answer read) is timed, with a steady clock per request (UseManualTime), so
// the swtpm quotes and the TLS handshake are outside the figures. A batch stays below the
// broker's 100 requests per connection and its 2 s keep-alive idle time; a new socket
// during the timed POSTs (counted through the client's socket-options hook) fails the
// benchmark instead of silently adding a handshake. Every answer is checked (200; the
// sealed DEK and job key of every release are opened after the batch). Fixed iteration
// counts keep the number of samples behind p99 known (300 per repetition).
//
// The client sets TCP_NODELAY (else the request body waits for the ACK of its headers).
// The broker does not (2026-11-30): it writes each answer as two TLS records, headers then
// body, and the second waits for the client's delayed ACK, about 40 ms on Linux. The
// BM_StatusRoundTrip row shows that floor; subtract it to see the broker's own work.
//
// Releases here are sequential: this measures the latency of one release and the rate of
// one client, not the broker's throughput under concurrency (its audit appends are group
// committed, so concurrent releases share fdatasyncs).
#include <benchmark/benchmark.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../audit/witness_process.h"
#include "broker_process.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/host/agent.h"
#include "enclave/attest/host/tpm.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/attest/verifier.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/broker/client.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/common/bytes.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "swtpm_fixture.h"

namespace {

using namespace enclave;
using namespace enclave::broker;
using attest::host::HostState;
using attest::host::Tpm;
namespace bt = enclave::broker::testing;
using bt::BrokerProcess;
using bt::BrokerSettings;

constexpr int kBatch = 50;         // quoted, then posted; + 1 warm-up GET < 100 per connection
constexpr int kIterations = 300;   // samples per repetition (p99 = the 3rd slowest)
constexpr char kToken[] = "0123456789abcdef0123456789abcdef-bench-admin-token";

int64_t Now() { return static_cast<int64_t>(::time(nullptr)); }

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "broker_bench: %s\n", why.c_str());
  std::exit(1);
}
template <typename T>
T Must(Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}
void Must(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

std::string UsagePolicyJson(const std::string& attestation_sha256, const std::string& workload) {
  return R"({"format":"enclave-data-use-policy","version":2,"policy_id":"medical","serial":1,)"
         R"("description":"bench","attestation_policy_sha256":")" + attestation_sha256 +
         R"(","datasets":[{"id":"wdbc","job_kinds":["train","cv"],"requesters":["alice@hospital.example"],)"
         R"("workloads":[")" + workload + R"("]}],)"
         R"("cipher_suites":["aes-256-gcm"],"lease":{"duration_s":3600,"reattest_interval_s":600},)"
         R"("max_epochs":100,"max_world_size":4,"outputs":{"model":"encrypted-to-export-key",)"
         R"("clear_metrics":["loss","accuracy","roc_auc"],"released_keys":"process-memory"}})";
}

// One attested host: its TPM (a swtpm instance), its state and its simulated IMA log.
struct BenchHost {
  std::unique_ptr<enclave::testing::SwtpmFixture> fixture;  // null for the main host (Env::fixture)
  Tpm* tpm = nullptr;
  HostState* state = nullptr;
  std::unique_ptr<Tpm> own_tpm;
  std::unique_ptr<HostState> own_state;
  std::string host_id;
  std::string ima_log;
  std::mutex mu;  // one request of this host in flight: the broker wants its quotes in TPM-clock order
  size_t next = 0;  // with fewer hosts than clients: the position of the request to post next
  std::condition_variable turn;
};

struct Env {
  // Declared first: destroyed last (the broker and the TPM connection go before swtpm).
  std::unique_ptr<enclave::testing::SwtpmFixture> fixture;
  std::unique_ptr<Tpm> tpm;
  std::unique_ptr<HostState> host_state;
  std::vector<std::unique_ptr<audit::testing::WitnessProcess>> witness_processes;  // outlive the broker
  std::unique_ptr<BrokerProcess> broker;
  std::unique_ptr<httplib::SSLClient> http;
  std::atomic<int> sockets{0};  // connections the client opened
  std::string host_id;
  crypto::Id128 wdbc_key_id{};
  std::string policy_text, enrolment_text;  // the attestation policy and the host's enrolment
  uint64_t job_counter = 0;
  Workload workload;     // this benchmark binary, measured into PCR 10 as IMA would
  std::string ima_log;   // the simulated IMA log that shows it
  std::vector<std::unique_ptr<BenchHost>> hosts;  // hosts[0] is the main host above
  std::vector<std::unique_ptr<BenchHost>> extra_hosts;  // started, not yet enrolled

  Env() {
    setenv("TSS2_LOG", "all+NONE", 0);
    Must(crypto::InitCrypto(), "crypto init");
    if (!enclave::testing::SwtpmFixture::Installed()) Die("swtpm is not installed (scripts/install-deps installs it)");
    fixture = Must(enclave::testing::SwtpmFixture::Start(), "starting swtpm");
    tpm = Must(Tpm::Open(fixture->tcti()), "opening the TPM");
    host_state = std::make_unique<HostState>(Must(HostState::Open(fixture->dir() + "/host", true), "host state"));
    const std::string exe = std::filesystem::canonical("/proc/self/exe").string();
    Must(attest::host::SimulateImaMeasurement(*tpm, exe, exe, fixture->dir() + "/ima.log"), "simulated IMA");
    ima_log = bt::ReadText(fixture->dir() + "/ima.log");
    workload = Must(WorkloadOfExecutable(exe, exe), "workload");

    BrokerSettings s;
    s.ek_root_files = {fixture->ca_root_cert()};
    s.ek_intermediate_files = {fixture->ca_issuer_cert()};
    s.quote_pcrs = R"({"sha256": [0, 1, 2, 3, 4, 5, 6, 7, 10]})";  // PCR 10: the IMA log names the workload
    s.nonce_ttl_s = 600;  // the evidence-age window (300 s in the policy) still applies
    // The broker's own defaults (broker.toml), and room for BM_ReleaseConcurrent's 64
    // connections from one address.
    s.threads = 16;
    // ENCLAVE_BENCH_BROKER_THREADS=N: another number of workers, to compare.
    if (const char* t = std::getenv("ENCLAVE_BENCH_BROKER_THREADS")) s.threads = static_cast<size_t>(std::atoi(t));
    s.max_queued = 64;
    s.server_config = "max_connections_per_peer = 128\n";
    s.extra_config = "\n[release]\npolicy_signers = [\"officer.pub\"]\nexport_key = \"tenant-export\"\n"
                     "\n[admin]\ntoken_file = \"admin.token\"\n";
    // ENCLAVE_BENCH_WITNESSES=N (1..8): N `enclave-audit witness serve` processes on
    // loopback, all of which must cosign before a release is answered.
    const char* w = std::getenv("ENCLAVE_BENCH_WITNESSES");
    const int witnesses = w != nullptr ? std::atoi(w) : 0;
    if (witnesses < 0 || witnesses > 8) Die("ENCLAVE_BENCH_WITNESSES must be 0..8");
    if (witnesses > 0) {
      s.audit_config = "witness_policy = \"witnesses.policy\"\nwitness_wait_ms = 10000\n";
    }
    s.before_launch = [this, witnesses](const std::string& dir) -> Status {
      RETURN_IF_ERROR(PrepareKeys(dir));
      return StartWitnesses(dir, witnesses);
    };
    // ENCLAVE_BENCH_HOSTS=N (1..64): N attested hosts for BM_ReleaseConcurrent.
    const char* h = std::getenv("ENCLAVE_BENCH_HOSTS");
    const int host_count = h != nullptr ? std::atoi(h) : 1;
    if (host_count < 1 || host_count > 64) Die("ENCLAVE_BENCH_HOSTS must be 1..64");
    StartExtraHosts(static_cast<size_t>(host_count));
    broker = Must(BrokerProcess::Start(fixture->dir() + "/broker", s), "starting the broker");
    Connect();
    Enrol();
    ActivateUsagePolicy();
    auto main = std::make_unique<BenchHost>();
    main->tpm = tpm.get();
    main->state = host_state.get();
    main->host_id = host_id;
    main->ima_log = ima_log;
    hosts.push_back(std::move(main));
    for (auto& extra : extra_hosts) {
      extra->host_id = EnrolHost(*extra->tpm, *extra->state);
      hosts.push_back(std::move(extra));
    }
    extra_hosts.clear();
    policy_text = bt::ReadText(broker->Path("policy.json"));
  }

  Status PrepareKeys(const std::string& dir) {
    ASSIGN_OR_RETURN(PolicySignerKey officer, PolicySignerKey::Generate());
    RETURN_IF_ERROR(officer.Save(dir + "/officer.key"));
    RETURN_IF_ERROR(SaveSignerPublicKey(dir + "/officer.pub", officer.public_key()));
    bt::WriteText(dir + "/admin.token", std::string(kToken) + "\n");
    ::chmod((dir + "/admin.token").c_str(), 0600);
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, crypto::SecretBytes::CopyFrom(AsBytes(bt::kPassphrase)));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(dir + "/tenant.keystore", pass));
    ASSIGN_OR_RETURN(crypto::SecretBytes dek, ks.CreateDataKey("wdbc", crypto::Suite::kAes256Gcm, &wdbc_key_id));
    ASSIGN_OR_RETURN(crypto::ExportKeyEntry ek, ks.CreateExportKey("tenant-export"));
    (void)ek;
    return OkStatus();
  }

  Status StartWitnesses(const std::string& dir, int n) {
    if (n == 0) return OkStatus();
    ASSIGN_OR_RETURN(audit::LogSigningKey key, audit::LogSigningKey::Load(dir + "/audit.key"));
    bt::WriteText(dir + "/log.vkey", audit::NoteVerifierKey(key.public_key()) + "\n");
    std::string policy = "log " + audit::NoteVerifierKey(key.public_key()) + "\n", group = "group all all";
    for (int i = 1; i <= n; ++i) {
      const std::string name = "w" + std::to_string(i);
      auto r = audit::testing::RunAudit({"witness", "keygen", "--name", "bench/" + name, "--key", dir + "/" + name + ".key"}, dir);
      if (r.rc != 0) return Internal("witness keygen: " + r.err);
      ASSIGN_OR_RETURN(auto w, audit::testing::WitnessProcess::Start(dir + "/" + name + ".key", dir + "/" + name + ".state",
                                                                     dir + "/log.vkey", dir + "/" + name + ".err"));
      policy += "witness " + name + " " + w->verifier_key() + " http://127.0.0.1:" + std::to_string(w->port()) + "\n";
      group += " " + name;
      witness_processes.push_back(std::move(w));
    }
    bt::WriteText(dir + "/witnesses.policy", policy + group + "\nquorum all\n");
    return OkStatus();
  }

  // One keep-alive TLS 1.3 client, as BrokerClient configures it plus keep-alive.
  void Connect() { http = NewClient(); }
  std::unique_ptr<httplib::SSLClient> NewClient() {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", broker->port());
    c->set_ca_cert_path(broker->Path("tls.crt").c_str());
    c->enable_server_certificate_verification(true);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // else our request's body waits for the ACK of its headers
    c->set_connection_timeout(10, 0);
    c->set_read_timeout(60, 0);
    c->set_write_timeout(60, 0);
    c->set_socket_options([this](int) { sockets.fetch_add(1); });  // counts connects
    SSL_CTX* ctx = c->ssl_context();
    if (ctx == nullptr || SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) Die("TLS 1.3 only");
    return c;
  }

  BrokerProcess::Answer Post(const std::string& path, const std::string& body, const std::string& bearer = "") {
    httplib::Headers h;
    if (!bearer.empty()) h.emplace("Authorization", "Bearer " + bearer);
    auto r = http->Post(path.c_str(), h, body, "application/json");
    if (!r) return {-1, httplib::to_string(r.error())};
    return {r->status, r->body};
  }

  void Enrol() { host_id = EnrolHost(*tpm, *host_state); }
  std::string EnrolHost(Tpm& host_tpm, HostState& state) {
    attest::host::EnrollOptions o;
    o.force = true;
    attest::EnrolmentBundle bundle = Must(attest::host::Enroll(host_tpm, state, o, Now()), "enrol");
    enrolment_text = attest::EncodeEnrolmentBundle(bundle);
    auto a = Post("/v1/enrolments", enrolment_text);
    if (a.status != 201) Die("POST /v1/enrolments: " + std::to_string(a.status) + " " + a.body);
    EnrolmentChallenge c = Must(ParseEnrolmentChallenge(a.body), "enrolment challenge");
    attest::ChallengeBundle challenge = Must(attest::ParseChallengeBundle(c.challenge_bundle), "challenge bundle");
    attest::ActivationResponse response = Must(attest::host::Activate(host_tpm, state, challenge), "activate");
    auto done = Post("/v1/enrolments/" + c.challenge_id + "/activation", attest::EncodeActivationResponse(response));
    if (done.status != 201) Die("activation: " + std::to_string(done.status) + " " + done.body);
    return done.json()["host_id"].get<std::string>();
  }

  // Hosts 1..n-1 (ENCLAVE_BENCH_HOSTS): each a fresh swtpm with its workload measured,
  // its EK certified by the main host's CA (which the broker's policy trusts).
  void StartExtraHosts(size_t n) {
    const std::string exe = std::filesystem::canonical("/proc/self/exe").string();
    for (size_t i = 1; i < n; ++i) {
      auto h = std::make_unique<BenchHost>();
      // One manufacturer CA for the fleet, the main host's (as real fleets share a few).
      h->fixture = Must(enclave::testing::SwtpmFixture::Start(fixture->dir() + "/ca"), "starting another swtpm");
      h->own_tpm = Must(Tpm::Open(h->fixture->tcti()), "opening its TPM");
      h->own_state = std::make_unique<HostState>(Must(HostState::Open(h->fixture->dir() + "/host", true), "host state"));
      h->tpm = h->own_tpm.get();
      h->state = h->own_state.get();
      Must(attest::host::SimulateImaMeasurement(*h->tpm, exe, exe, h->fixture->dir() + "/ima.log"), "simulated IMA");
      h->ima_log = bt::ReadText(h->fixture->dir() + "/ima.log");
      extra_hosts.push_back(std::move(h));
    }
  }

  void ActivateUsagePolicy() {
    const std::string att_sha = HexEncode(crypto::Sha256(AsBytes(bt::ReadText(broker->Path("policy.json")))));
    const std::string policy = UsagePolicyJson(att_sha, HexEncode(WorkloadDigest(workload)));
    PolicySignerKey key = Must(PolicySignerKey::Load(broker->Path("officer.key")), "officer key");
    std::string sig = Must(SignUsagePolicy(policy, key), "sign usage policy");
    auto a = Post("/v1/admin/policies", EncodePolicyActivation({policy, sig}), kToken);
    if (a.status != 200) Die("policy activation: " + std::to_string(a.status) + " " + a.body);
  }

  Result<attest::EvidenceBundle> Quote(ByteSpan nonce, const std::optional<crypto::Digest256>& bound,
                                       const std::string& selection, BenchHost* host = nullptr) {
    BenchHost& h = host != nullptr ? *host : *hosts[0];
    ASSIGN_OR_RETURN(attest::PcrSelection sel, attest::PcrSelection::FromString(selection));
    auto logs = [&h] {
      attest::host::HostLogs l;
      l.ima_log = h.ima_log;
      return Result<attest::host::HostLogs>(l);
    };
    return attest::host::MakeEvidence(*h.tpm, *h.state, sel, nonce, bound, logs, Now());
  }

  Result<NonceIssued> Nonce(BenchHost* host = nullptr) {
    BenchHost& h = host != nullptr ? *host : *hosts[0];
    ASSIGN_OR_RETURN(attest::SignedNonceRequest signed_request, attest::host::SignNonceRequest(*h.tpm, *h.state, h.host_id));
    auto a = Post("/v1/nonces", EncodeNonceRequest({h.host_id, std::move(signed_request)}));
    if (a.status != 201) return Unavailable("POST /v1/nonces: " + std::to_string(a.status) + " " + a.body);
    return ParseNonceIssued(a.body);
  }
};

Env& GetEnv() {
  static Env env;
  return env;
}

// One request ready to post; `keys` opens the answer of a release.
struct Prepared {
  std::string path, body;
  std::unique_ptr<ReleaseKeys> keys;
};

Result<Prepared> PrepareReleaseOf(Env& env, BenchHost* host) {
  ASSIGN_OR_RETURN(NonceIssued n, env.Nonce(host));
  ASSIGN_OR_RETURN(ReleaseKeys keys, ReleaseKeys::Generate());
  ReleaseRequest r;
  r.policy_id = "medical";
  r.job.job_id = "bench-" + std::to_string(++env.job_counter);  // a new job each time
  r.job.job_digest.fill(0x5a);
  r.job.kind = "train";
  r.job.requester = "alice@hospital.example";
  r.job.datasets = {"wdbc"};
  r.job.epochs = 50;
  r.job.world_size = 1;
  r.job.clear_metrics = {"loss", "accuracy"};
  r.rank = 0;
  r.keys = {{"wdbc", env.wdbc_key_id}};
  r.workload = env.workload;
  r.job.workload_digest = WorkloadDigest(env.workload);
  r.recipient = keys.recipient();
  r.report_key = keys.report_public();
  ASSIGN_OR_RETURN(attest::EvidenceBundle ev, env.Quote(n.nonce, ReleaseBinding(r), n.pcr_selection, host));
  r.evidence = attest::EncodeEvidenceBundle(ev);
  return Prepared{"/v1/releases", EncodeReleaseRequest(r), std::make_unique<ReleaseKeys>(std::move(keys))};
}
Result<Prepared> PrepareRelease(Env& env) { return PrepareReleaseOf(env, nullptr); }

Result<Prepared> PrepareAttestation(Env& env) {
  ASSIGN_OR_RETURN(NonceIssued n, env.Nonce());
  crypto::Digest256 bound{};
  crypto::RandomBytes(bound);
  ASSIGN_OR_RETURN(attest::EvidenceBundle ev, env.Quote(n.nonce, bound, n.pcr_selection));
  return Prepared{"/v1/attestations", attest::EncodeEvidenceBundle(ev), nullptr};
}

// A nonce request signed with the host's AK (TPM2_Quote on swtpm, outside the timing).
Result<Prepared> PrepareNonceRequest(Env& env) {
  ASSIGN_OR_RETURN(attest::SignedNonceRequest r, attest::host::SignNonceRequest(*env.tpm, *env.host_state, env.host_id));
  return Prepared{"/v1/nonces", EncodeNonceRequest({env.host_id, std::move(r)}), nullptr};
}

// The opened answer of a release: one DEK sealed to our key, and the job key.
Status CheckGranted(const Prepared& p, const std::string& body) {
  ASSIGN_OR_RETURN(ReleaseGranted g, ParseReleaseGranted(body));
  if (g.keys.size() != 1) return Internal("a release with " + std::to_string(g.keys.size()) + " keys");
  ASSIGN_OR_RETURN(crypto::SecretBytes dek, p.keys->Open(g.keys[0].sealed));
  ASSIGN_OR_RETURN(crypto::SecretBytes job, p.keys->Open(g.sealed_job_key));
  if (dek.size() != 32 || job.size() != 32) return Internal("released keys of the wrong size");
  if (!GetEnv().witness_processes.empty() && g.audit_proofs.size() != 1)
    return Internal("a witnessed release without its audit proof");
  return OkStatus();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

// The batched, timed POST loop shared by the HTTP benchmarks.
void RunPosts(benchmark::State& state, Result<Prepared> (*prepare)(Env&), bool is_release, int expected = 200) {
  Env& env = GetEnv();
  std::deque<Prepared> ready;
  std::vector<Prepared> sent;
  std::vector<std::string> answers;
  std::vector<double> latency_ms;
  latency_ms.reserve(static_cast<size_t>(state.max_iterations));
  auto settle = [&]() -> Status {  // checks the answers of the batch just sent
    for (size_t i = 0; i < sent.size() && is_release; ++i) RETURN_IF_ERROR(CheckGranted(sent[i], answers[i]));
    sent.clear();
    answers.clear();
    return OkStatus();
  };
  for (auto _ : state) {
    if (ready.empty()) {
      if (Status s = settle(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
      // Quote a whole batch first (in order), then post it on a fresh, warm connection.
      for (int i = 0; i < kBatch; ++i) {
        auto p = prepare(env);
        if (!p.ok()) return state.SkipWithError(p.status().ToString().c_str());
        ready.push_back(std::move(p).value());
      }
      env.http->stop();
      auto warm = env.http->Get("/v1/status");
      if (!warm || warm->status != 200) return state.SkipWithError("GET /v1/status failed before the batch");
    }
    Prepared p = std::move(ready.front());
    ready.pop_front();
    const int sockets_before = env.sockets.load();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = env.http->Post(p.path.c_str(), p.body, "application/json");
    const auto t1 = std::chrono::steady_clock::now();
    if (!r) return state.SkipWithError(("POST " + p.path + ": " + httplib::to_string(r.error())).c_str());
    if (r->status != expected) return state.SkipWithError(("POST " + p.path + ": " + std::to_string(r->status) + " " + r->body).c_str());
    if (env.sockets.load() != sockets_before) return state.SkipWithError("the client reconnected inside a timed POST");
    const double s = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(s);
    latency_ms.push_back(s * 1e3);
    answers.push_back(std::move(r->body));
    sent.push_back(std::move(p));
  }
  if (Status s = settle(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  state.SetItemsProcessed(state.iterations());
  state.counters["p50_ms"] = Percentile(latency_ms, 0.50);
  state.counters["p99_ms"] = Percentile(latency_ms, 0.99);
  state.counters["max_ms"] = Percentile(latency_ms, 1.0);
}

void BM_Release(benchmark::State& state) { RunPosts(state, PrepareRelease, true); }
BENCHMARK(BM_Release)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond);

// Releases from 64 concurrent clients over ENCLAVE_BENCH_HOSTS attested hosts (a swtpm
// each; clients of one host take turns, since the broker wants a host's quotes in
// TPM-clock order) on its own keep-alive TLS 1.3 connection: every
// client's evidence is quoted first (not timed), then all clients start together and post
// theirs one after another; the time is from the start to the last answer. p50/p99 over
// every request. What concurrency buys: the audit log's group commits (and, with
// witnesses, their rounds) are shared.
constexpr int kConcurrentClients = 64;
// ENCLAVE_BENCH_PER_CLIENT (1..100, default 5): releases per client; more for a longer,
// steadier burst (the broker's state at the end of a 5-release burst is still warming up:
// the tile writer reuses the files it replaced only after a second).
int PerClient() {
  const char* v = std::getenv("ENCLAVE_BENCH_PER_CLIENT");
  const int n = v != nullptr ? std::atoi(v) : 5;
  if (n < 1 || n > 100) Die("ENCLAVE_BENCH_PER_CLIENT must be 1..100");
  return n;
}
void BM_ReleaseConcurrent(benchmark::State& state) {
  Env& env = GetEnv();
  const int kPerClient = PerClient();
  const int hosts = static_cast<int>(env.hosts.size());
  auto host_of = [&](int client) { return env.hosts[static_cast<size_t>(client % hosts)].get(); };
  std::vector<double> latency_ms;
  int64_t done = 0;
  for (auto _ : state) {
    for (auto& h : env.hosts) h->next = 0;
    std::vector<std::vector<Prepared>> work(kConcurrentClients);
    for (int i = 0; i < kPerClient; ++i) {  // each host's quotes in the order its clients will post them
      for (int c = 0; c < kConcurrentClients; ++c) {
        auto p = PrepareReleaseOf(env, host_of(c));
        if (!p.ok()) return state.SkipWithError(p.status().ToString().c_str());
        work[c].push_back(std::move(p).value());
      }
    }
    std::vector<std::unique_ptr<httplib::SSLClient>> clients;
    for (int c = 0; c < kConcurrentClients; ++c) {
      clients.push_back(env.NewClient());
      auto warm = clients.back()->Get("/v1/status");
      if (!warm || warm->status != 200) return state.SkipWithError("GET /v1/status failed before the run");
    }
    std::atomic<int> waiting{kConcurrentClients};
    std::atomic<bool> go{false};
    std::vector<std::vector<double>> lat(kConcurrentClients);
    std::vector<std::string> errors(kConcurrentClients);
    std::vector<std::thread> threads;
    for (int c = 0; c < kConcurrentClients; ++c) {
      threads.emplace_back([&, c] {
        waiting.fetch_sub(1);
        while (!go.load()) std::this_thread::yield();
        BenchHost* h = host_of(c);
        for (size_t i = 0; i < work[c].size(); ++i) {
          Prepared& p = work[c][i];
          // With fewer hosts than clients, a host's requests go in quote order: client c
          // posts its i-th after the host's clients before it posted theirs.
          std::unique_lock<std::mutex> turn(h->mu, std::defer_lock);
          if (hosts < kConcurrentClients) {
            turn.lock();
            const size_t clients_of_host = kConcurrentClients / hosts + (c % hosts < kConcurrentClients % hosts);
            const size_t mine = i * clients_of_host + static_cast<size_t>(c / hosts);
            h->turn.wait(turn, [&] { return h->next == mine; });
          }
          const auto t0 = std::chrono::steady_clock::now();
          auto r = clients[c]->Post(p.path.c_str(), p.body, "application/json");
          const auto t1 = std::chrono::steady_clock::now();
          if (turn.owns_lock()) {
            ++h->next;
            h->turn.notify_all();
          }
          if (!r || r->status != 200) {
            errors[c] = r ? std::to_string(r->status) + " " + r->body : httplib::to_string(r.error());
            return;
          }
          if (Status s = CheckGranted(p, r->body); !s.ok()) {
            errors[c] = s.ToString();
            return;
          }
          lat[c].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      });
    }
    while (waiting.load() > 0) std::this_thread::yield();
    const auto start = std::chrono::steady_clock::now();
    go = true;
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const std::string& e : errors) {
      if (!e.empty()) return state.SkipWithError(("POST /v1/releases: " + e).c_str());
    }
    for (const auto& l : lat) latency_ms.insert(latency_ms.end(), l.begin(), l.end());
    done += kConcurrentClients * kPerClient;
    state.SetIterationTime(seconds);
  }
  state.SetItemsProcessed(done);
  state.counters["clients"] = kConcurrentClients;
  state.counters["hosts"] = hosts;
  state.counters["witnesses"] = static_cast<double>(env.witness_processes.size());
  state.counters["p50_ms"] = Percentile(latency_ms, 0.50);
  state.counters["p99_ms"] = Percentile(latency_ms, 0.99);
  state.counters["max_ms"] = Percentile(latency_ms, 1.0);
}
BENCHMARK(BM_ReleaseConcurrent)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_Attestation(benchmark::State& state) { RunPosts(state, PrepareAttestation, false); }
BENCHMARK(BM_Attestation)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond);

void BM_NonceRequest(benchmark::State& state) { RunPosts(state, PrepareNonceRequest, false, 201); }
BENCHMARK(BM_NonceRequest)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond);

void BM_StatusRoundTrip(benchmark::State& state) {
  Env& env = GetEnv();
  env.http->stop();
  auto warm = env.http->Get("/v1/status");
  if (!warm || warm->status != 200) return state.SkipWithError("GET /v1/status failed");
  int n = 0;
  for (auto _ : state) {
    if (++n % 90 == 0) {  // stay under the broker's 100 requests per connection, untimed
      env.http->stop();
      env.http->Get("/v1/status");
    }
    const int sockets_before = env.sockets.load();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = env.http->Get("/v1/status");
    const auto t1 = std::chrono::steady_clock::now();
    if (!r || r->status != 200) return state.SkipWithError("GET /v1/status failed");
    if (env.sockets.load() != sockets_before) return state.SkipWithError("the client reconnected inside a timed GET");
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StatusRoundTrip)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond);

// Two quotes of the enrolled host for a nonce of our own: the first one's clock is the
// "last accepted" clock state the broker would hold when it appraises the second.
struct VerifyInputs {
  std::string evidence;
  audit::VerdictContext context;
};
const VerifyInputs& GetVerifyInputs() {
  static VerifyInputs in = [] {
    Env& env = GetEnv();
    VerifyInputs v;
    v.context.nonce.resize(32);
    crypto::RandomBytes(v.context.nonce);
    crypto::Digest256 bound{};
    crypto::RandomBytes(bound);
    v.context.bound_digest = bound;
    v.context.nonce_issued_at = Now();
    const std::string sel = "sha256:0,1,2,3,4,5,6,7,10";  // the broker's quote_pcrs
    const std::string first = attest::EncodeEvidenceBundle(Must(env.Quote(v.context.nonce, bound, sel), "quote"));
    v.evidence = attest::EncodeEvidenceBundle(Must(env.Quote(v.context.nonce, bound, sel), "quote"));
    v.context.appraised_at = Now();  // fixed: the evidence does not age during the run
    const std::string dir = env.broker->dir();
    attest::Verdict prior =
        Must(audit::AppraiseFromBytes(env.policy_text, dir, first, env.enrolment_text, v.context), "appraise");
    if (!prior.passed() || !prior.clock) Die("the baseline evidence did not verify: " + prior.appraisal.Summary());
    v.context.last_clock = prior.clock;
    return v;
  }();
  return in;
}

void BM_VerifyFromBytes(benchmark::State& state) {
  Env& env = GetEnv();
  const VerifyInputs& in = GetVerifyInputs();
  const std::string dir = env.broker->dir();
  for (auto _ : state) {
    auto v = audit::AppraiseFromBytes(env.policy_text, dir, in.evidence, env.enrolment_text, in.context);
    if (!v.ok() || !v->passed()) {
      state.SkipWithError(v.ok() ? v->appraisal.Summary().c_str() : v.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(v->clock);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_VerifyFromBytes)->Unit(benchmark::kMillisecond);

void BM_AppraiseEvidence(benchmark::State& state) {
  Env& env = GetEnv();
  const VerifyInputs& in = GetVerifyInputs();
  attest::Policy policy = Must(attest::ParsePolicy(env.policy_text, env.broker->dir()), "policy");
  attest::EvidenceBundle evidence = Must(attest::ParseEvidenceBundle(in.evidence), "evidence");
  attest::EnrolmentBundle enrolment = Must(attest::ParseEnrolmentBundle(env.enrolment_text), "enrolment");
  attest::TpmtPublic ak = Must(attest::ParseTpm2bPublic(enrolment.ak_public), "AK public");
  attest::AppraisalContext ctx;
  ctx.ak_public = ak.encoded;
  ctx.nonce = in.context.nonce;
  ctx.bound_digest = in.context.bound_digest;
  ctx.last_clock = in.context.last_clock;
  ctx.nonce_issued_at = in.context.nonce_issued_at;
  ctx.now = in.context.appraised_at;
  const attest::EvidenceParts parts = attest::ToEvidenceParts(evidence);
  for (auto _ : state) {
    auto v = attest::AppraiseEvidence(policy, parts, ctx);
    if (!v.ok() || !v->passed()) {
      state.SkipWithError("the evidence did not verify");
      break;
    }
    benchmark::DoNotOptimize(v->clock);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AppraiseEvidence)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
