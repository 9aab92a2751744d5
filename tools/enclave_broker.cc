// enclave-broker: the tenant's key broker. `serve` runs the HTTPS service (docs/protocol.md);
// the other verbs are the administrator's, reading the state store. Thin: the work is in
// broker/.
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <iostream>
#include <thread>

#include "cli.h"
#ifdef ENCLAVE_HAVE_POLICY_CLI
#include "broker_policy_cli.h"
#endif
#include "enclave/attest/bundle.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/audit/log_writer.h"
#include "enclave/audit/witnessing.h"
#include "enclave/broker/client.h"
#include "enclave/broker/config.h"
#include "enclave/broker/release.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/broker/server.h"
#include "enclave/broker/service.h"
#include "enclave/broker/store.h"
#include "enclave/common/bytes.h"
#include "enclave/common/exit_codes.h"
#include "enclave/common/files.h"
#include "enclave/crypto/keystore.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;

const FlagSpec kConfig{"config", "broker.toml", "broker configuration file", true};
const FlagSpec kJson{"json", "", "print the result as JSON"};

// The admin token file: one line of at least 32 characters, readable by its owner only.
Result<std::string> ReadAdminToken(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("admin token " + path, errno);
  if ((st.st_mode & 077) != 0) return PermissionDenied("admin token " + path + " must not be readable by group or others (chmod 600)");
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, 4096));
  std::string token(bytes.begin(), bytes.end());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.size() < 32) return InvalidInput("admin token " + path + " is shorter than 32 characters");
  for (char c : token) {
    if (c <= ' ' || c > '~') return InvalidInput("admin token " + path + " must be printable ASCII without spaces");
  }
  return token;
}

Status Serve(const Args& args) {
  ASSIGN_OR_RETURN(broker::BrokerConfig config, broker::LoadBrokerConfig(args.Get("config")));
  // Signals are taken by one thread with sigwait: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that hangs up mid-answer must not kill the broker.
  ::signal(SIGPIPE, SIG_IGN);

  ASSIGN_OR_RETURN(crypto::SecretBytes pass, cli::PassphraseFromArgs(args, "Keystore passphrase", false));
  auto keystore = crypto::Keystore::Unlock(config.keystore_path, pass);
  if (!keystore.ok()) return keystore.status().Annotate("keystore " + config.keystore_path);
  pass = crypto::SecretBytes();

  ASSIGN_OR_RETURN(std::unique_ptr<broker::Store> store, broker::Store::Open(config.store_path));
  auto key = audit::LogSigningKey::Load(config.audit_signing_key);
  if (!key.ok()) return key.status().Annotate("audit signing key " + config.audit_signing_key);
  auto log = audit::LogWriter::Open(config.audit_dir, std::move(key).value());
  if (!log.ok()) return log.status().Annotate("audit log " + config.audit_dir);
  if (const audit::RecoveryReport& rec = (*log)->recovery(); rec.truncated_bytes > 0) {
    std::fprintf(stderr, "enclave-broker: audit log %s: recovered after a crash: cut %llu unacknowledged bytes (%s)\n",
                 (*log)->path().c_str(), static_cast<unsigned long long>(rec.truncated_bytes), rec.detail.c_str());
  }
  ASSIGN_OR_RETURN(audit::EvidenceArchive archive, audit::EvidenceArchive::Open(config.audit_dir, /*create=*/true));
  // Witnesses: started before the server, so that no release is answered unwitnessed.
  std::unique_ptr<audit::Witnessing> witnessing;
  if (!config.witness_policy.empty()) {
    auto policy = audit::WitnessPolicy::Load(config.witness_policy);
    if (!policy.ok()) return policy.status().Annotate("audit.witness_policy");
    audit::WitnessingOptions wo;
    wo.client.timeout_s = static_cast<int>(config.witness_timeout_s);
    wo.interval = std::chrono::milliseconds(config.witness_interval_ms);
    auto started = audit::Witnessing::Start(**log, std::move(*policy), wo);
    if (!started.ok()) return started.status().Annotate("audit.witness_policy " + config.witness_policy);
    witnessing = std::move(*started);
    std::fprintf(stderr, "enclave-broker: releases wait for the witness quorum %s (at most %lld ms)\n",
                 witnessing->policy().Describe().c_str(), static_cast<long long>(config.witness_wait_ms));
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> policy_bytes,
                   ReadWholeFile(config.attestation_policy, attest::kMaxPolicyBytes));
  std::string policy_dir = std::filesystem::path(config.attestation_policy).parent_path().string();
  if (policy_dir.empty()) policy_dir = ".";

  broker::ServiceOptions options;
  options.actor = config.actor;
  options.nonce_ttl_s = config.nonce_ttl_s;
  options.challenge_ttl_s = config.challenge_ttl_s;
  options.nonces_per_minute = config.nonces_per_minute;
  options.archive_max_bytes = config.archive_max_bytes;
  options.archive_min_free_bytes = config.archive_min_free_bytes;
  options.keystore = &*keystore;
  options.export_key = config.export_key;
  options.witnessing = witnessing.get();
  options.witness_wait = std::chrono::milliseconds(config.witness_wait_ms);
  for (const std::string& file : config.policy_signers) {
    auto signer = broker::LoadSignerPublicKey(file);
    if (!signer.ok()) return signer.status().Annotate("release.policy_signers " + file);
    options.policy_signers.push_back(*signer);
  }
  if (!config.admin_token_file.empty()) {
    ASSIGN_OR_RETURN(std::string token, ReadAdminToken(config.admin_token_file));
    config.server.admin_token_sha256 = crypto::Sha256(AsBytes(token));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Service> service,
                   broker::Service::Create(*store, **log, std::move(archive),
                                           std::string(policy_bytes.begin(), policy_bytes.end()), policy_dir, options));
  if (config.serve_tiles) {
    config.server.tiles_dir = (*log)->tiles_dir();
    std::fprintf(stderr, "enclave-broker: serving the audit log's tiles (C2SP tlog-tiles) under /v1/audit-log/\n");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Server> server, broker::Server::Create(config.server, *service));

  // Expired challenges and nonces are deleted once a minute (used nonces are kept an hour
  // past their expiry, so a late replay reads "already used" rather than "unknown").
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread janitor([&] {
    std::unique_lock<std::mutex> lock(stop_mu);
    while (!stop_cv.wait_for(lock, std::chrono::seconds(60), [&] { return stopping; })) {
      auto purged = store->PurgeExpired(static_cast<int64_t>(::time(nullptr)), 3600);
      if (!purged.ok()) std::fprintf(stderr, "enclave-broker: purging expired entries: %s\n",
                                     purged.status().ToString().c_str());
    }
  });
  // After SIGTERM/SIGINT the listener is told to stop until it does (a stop that lands
  // before the listener started would otherwise be lost). Every acknowledged change is
  // already durable, so if it has not stopped after 10 s the process ends without it.
  std::atomic<bool> finished{false};
  std::thread waiter([&server, &finished, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    for (int i = 0; i < 100 && !finished; ++i) {
      server->Stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!finished) {
      std::fprintf(stderr, "enclave-broker: the listener did not stop within 10 s; exiting\n");
      std::_Exit(kExitOk);
    }
  });
  // The one line a supervisor (or a test) reads to learn where the broker listens.
  std::printf("{\"listening\":\"https://%s:%d\",\"port\":%d}\n", config.server.listen.c_str(), server->port(),
              server->port());
  std::fflush(stdout);
  Status run = server->Run();
  finished = true;
  if (!run.ok()) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    stopping = true;
  }
  stop_cv.notify_all();
  janitor.join();
  return run;
}

Status Hosts(const Args& args) {
  ASSIGN_OR_RETURN(broker::BrokerConfig config, broker::LoadBrokerConfig(args.Get("config")));
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Store> store, broker::Store::OpenReadOnly(config.store_path));
  ASSIGN_OR_RETURN(std::vector<broker::HostRecord> hosts, store->ListHosts());
  if (args.json()) {
    json list = json::array();
    for (const auto& h : hosts) {
      auto revoked = store->IsRevoked(broker::RevokedKind::kHost, h.host_id);
      if (!revoked.ok()) return revoked.status();
      json clock = nullptr;
      if (!h.clock_state.empty()) {
        auto c = attest::ParseClockState(h.clock_state);
        if (!c.ok()) return c.status().Annotate("host " + h.host_id + " clock state");
        clock = {{"clock", c->clock}, {"reset_count", c->reset_count}, {"restart_count", c->restart_count},
                 {"safe", c->safe != 0}};
      }
      list.push_back({{"host_id", h.host_id},
                      {"ak_name", HexEncode(h.ak_name)},
                      {"ek_cert_sha256", HexEncode(h.ek_cert_sha256)},
                      {"ek_public_sha256", HexEncode(crypto::Sha256(h.ek_public))},
                      {"enrolled_at", h.enrolled_at},
                      {"revoked", *revoked},
                      {"last_clock", clock}});
    }
    cli::PrintJson({{"hosts", list}});
    return OkStatus();
  }
  std::printf("%-32s  %-20s  %-8s  %s\n", "HOST", "ENROLLED (UTC)", "REVOKED", "AK NAME");
  for (const auto& h : hosts) {
    auto revoked = store->IsRevoked(broker::RevokedKind::kHost, h.host_id);
    if (!revoked.ok()) return revoked.status();
    char when[32] = "?";
    time_t t = static_cast<time_t>(h.enrolled_at);
    struct tm tm {};
    if (gmtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    std::printf("%-32s  %-20s  %-8s  %s\n", h.host_id.c_str(), when, *revoked ? "yes" : "no",
                HexEncode(h.ak_name).c_str());
  }
  std::printf("%zu host(s)\n", hosts.size());
  return OkStatus();
}

const FlagSpec kUrl{"url", "https://HOST:PORT", "the running broker (default: [server] listen and port of the config)"};
const FlagSpec kCa{"ca", "PEM", "certificate the broker's chain must end in (default: [server] certificate)"};
const FlagSpec kTokenFile{"token-file", "FILE", "admin bearer token (default: [admin] token_file)"};

std::string Utc(int64_t t) {
  char when[32] = "?";
  time_t tt = static_cast<time_t>(t);
  struct tm tm {};
  if (gmtime_r(&tt, &tm) != nullptr) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  return when;
}

// An admin POST to the running broker; the answer's JSON on success.
Result<json> AdminPost(const Args& args, const std::string& path, const std::string& body) {
  ASSIGN_OR_RETURN(broker::BrokerConfig config, broker::LoadBrokerConfig(args.Get("config")));
  std::string url = args.Get("url");
  if (url.empty()) {
    if (config.server.port == 0) return InvalidInput("the config listens on port 0 (any port): give --url");
    url = "https://" + config.server.listen + ":" + std::to_string(config.server.port);
  }
  const std::string ca = args.Get("ca", config.server.certificate);
  const std::string token_file = args.Get("token-file", config.admin_token_file);
  if (token_file.empty()) return InvalidInput("no admin token: give --token-file or set [admin] token_file");
  ASSIGN_OR_RETURN(std::string token, ReadAdminToken(token_file));
  ASSIGN_OR_RETURN(std::unique_ptr<broker::BrokerClient> client, broker::BrokerClient::Create(url, ca));
  ASSIGN_OR_RETURN(broker::BrokerClient::Answer a, client->Post(path, body, token));
  if (a.status != 200) return broker::StatusFromAnswer(a.status, a.body, path);
  auto j = json::parse(a.body, nullptr, false);
  if (!j.is_object()) return InvalidInput(path + ": the broker's answer is not a JSON object");
  return j;
}

Status AdminToken(const Args& args) {
  std::array<uint8_t, 32> raw{};
  crypto::RandomBytes(raw);
  const std::string token = HexEncode(raw) + "\n";
  const std::string out = args.Get("out");
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("admin token " + out, errno);
  const bool written = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(out.c_str());
    return IoError("admin token " + out + ": write failed");
  }
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"token_file", args.Get("out")}});
  } else {
    std::printf("admin token written to %s (mode 0600); name it in [admin] token_file\n", args.Get("out").c_str());
  }
  return OkStatus();
}

Status Revoke(const Args& args) {
  const bool host = args.Has("host"), job = args.Has("job");
  if (host == job) return InvalidInput("give exactly one of --host HOST_ID and --job JOB_ID");
  broker::RevocationRequest r{host ? "host" : "job", host ? args.Get("host") : args.Get("job"), args.Get("reason")};
  ASSIGN_OR_RETURN(json j, AdminPost(args, "/v1/admin/revocations", broker::EncodeRevocationRequest(r)));
  if (args.json()) {
    cli::PrintJson(j);
  } else {
    std::printf("revoked %s %s: %s leases ended (audit entry %s)\n", r.kind.c_str(), r.id.c_str(),
                j.value("leases_ended", json(0)).dump().c_str(), j.value("audit_index", json(nullptr)).dump().c_str());
  }
  return OkStatus();
}

Status PolicyActivate(const Args& args) {
  const std::string policy = args.Get("policy");
  const std::string sig = args.Get("sig", policy + ".sig");
  ASSIGN_OR_RETURN(std::vector<uint8_t> p, ReadWholeFile(policy, broker::kMaxUsagePolicyBytes));
  ASSIGN_OR_RETURN(std::vector<uint8_t> s, ReadWholeFile(sig, broker::kMaxPolicySignatureBytes));
  broker::PolicyActivation a{std::string(p.begin(), p.end()), std::string(s.begin(), s.end())};
  ASSIGN_OR_RETURN(json j, AdminPost(args, "/v1/admin/policies", broker::EncodePolicyActivation(a)));
  if (args.json()) {
    cli::PrintJson(j);
  } else {
    std::printf("activated policy %s serial %s (sha256 %s, audit entry %s)\n", j.value("policy_id", "").c_str(),
                j.value("serial", json(nullptr)).dump().c_str(), j.value("policy_sha256", "").c_str(),
                j.value("audit_index", json(nullptr)).dump().c_str());
  }
  return OkStatus();
}

Status Leases(const Args& args) {
  ASSIGN_OR_RETURN(broker::BrokerConfig config, broker::LoadBrokerConfig(args.Get("config")));
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Store> store, broker::Store::OpenReadOnly(config.store_path));
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  ASSIGN_OR_RETURN(std::vector<broker::LeaseRecord> leases, store->ListLeases(args.Has("all"), now));
  if (args.json()) {
    json list = json::array();
    for (const auto& l : leases) {
      list.push_back({{"lease_id", l.lease_id},       {"host_id", l.host_id},
                      {"job_id", l.job_id},           {"rank", l.rank},
                      {"policy_id", l.policy_id},     {"policy_sha256", HexEncode(l.policy_sha256)},
                      {"datasets", l.datasets},       {"issued_at", l.issued_at},
                      {"valid_until", l.valid_until}, {"reattest_by", l.reattest_by},
                      {"active", l.ActiveAt(now)},
                      {"ended_at", l.ended_at ? json(*l.ended_at) : json(nullptr)},
                      {"end_reason", l.end_reason},
                      {"undelivered", l.undelivered}});
    }
    cli::PrintJson({{"leases", list}});
    return OkStatus();
  }
  std::printf("%-32s  %-20s  %-4s  %-32s  %-19s  %-19s  %s\n", "LEASE", "JOB", "RANK", "HOST", "ISSUED (UTC)",
              "EXPIRES (UTC)", "STATE");
  for (const auto& l : leases) {
    const std::string state = l.ActiveAt(now) ? "active" : l.ended_at ? "ended: " + l.end_reason : "lapsed";
    std::printf("%-32s  %-20s  %-4u  %-32s  %-19s  %-19s  %s\n", l.lease_id.c_str(), l.job_id.c_str(), l.rank,
                l.host_id.c_str(), Utc(l.issued_at).c_str(), Utc(std::min(l.valid_until, l.reattest_by)).c_str(),
                state.c_str());
  }
  std::printf("%zu lease(s)\n", leases.size());
  return OkStatus();
}

Status Policies(const Args& args) {
  ASSIGN_OR_RETURN(broker::BrokerConfig config, broker::LoadBrokerConfig(args.Get("config")));
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Store> store, broker::Store::OpenReadOnly(config.store_path));
  ASSIGN_OR_RETURN(std::vector<broker::PolicyRecord> policies, store->ListActivePolicies());
  if (args.json()) {
    json list = json::array();
    for (const auto& p : policies) {
      list.push_back({{"policy_id", p.policy_id}, {"serial", p.serial}, {"policy_sha256", HexEncode(p.policy_sha256)},
                      {"signer", HexEncode(p.signer)}, {"activated_at", p.activated_at}});
    }
    cli::PrintJson({{"policies", list}});
    return OkStatus();
  }
  for (const auto& p : policies) {
    std::printf("%-24s serial %-6llu sha256 %s signer %s activated %s\n", p.policy_id.c_str(),
                static_cast<unsigned long long>(p.serial), HexEncode(p.policy_sha256).c_str(), HexEncode(p.signer).c_str(),
                Utc(p.activated_at).c_str());
  }
  std::printf("%zu policy(ies) in force\n", policies.size());
  return OkStatus();
}

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-broker";
  p.summary = "the tenant's key broker: host enrolment, attestation, attested key release, leases, data-use policies";
  p.holds_keys = true;
  p.verbs = {
      {"serve", "run the HTTPS service (docs/protocol.md) until SIGTERM or SIGINT", "", 0,
       {kConfig, cli::PassphraseFdFlag()}, Serve},
      {"hosts", "list enrolled hosts from the state store (read-only)", "", 0, {kConfig, kJson}, Hosts},
      {"leases", "list leases from the state store (read-only; active ones unless --all)", "", 0,
       {kConfig, {"all", "", "also ended and lapsed leases"}, kJson}, Leases},
      {"policies", "list the data-use policies in force (read-only)", "", 0, {kConfig, kJson}, Policies},
      {"admin-token", "write a fresh admin bearer token (mode 0600) for [admin] token_file", "", 0,
       {{"out", "FILE", "where to write it (never overwritten)", true}, kJson}, AdminToken},
      {"revoke", "revoke a host or a job on the running broker: its leases end, nothing renews", "", 0,
       {kConfig, {"host", "HOST_ID", "the host to revoke"}, {"job", "JOB_ID", "the job to revoke"},
        {"reason", "TEXT", "why (recorded in the audit log)", true}, kUrl, kCa, kTokenFile, kJson},
       Revoke},
      {"policy activate", "activate a signed data-use policy on the running broker", "", 0,
       {kConfig, {"policy", "FILE", "the policy JSON", true}, {"sig", "FILE", "its signature (default FILE.sig)"}, kUrl,
        kCa, kTokenFile, kJson},
       PolicyActivate},
  };
#ifdef ENCLAVE_HAVE_POLICY_CLI
  for (cli::Verb& v : PolicyVerbs()) p.verbs.push_back(std::move(v));
#endif
  return cli::Main(p, argc, argv);
}
