// enclave-broker: the tenant's key broker. `serve` runs the HTTPS service (docs/protocol.md);
// the other verbs are the administrator's, reading the state store. Thin: the work is in
// broker/.
#include <pthread.h>
#include <signal.h>

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
#include "enclave/attest/bundle.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/audit/log_writer.h"
#include "enclave/broker/config.h"
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
  ASSIGN_OR_RETURN(audit::EvidenceArchive archive, audit::EvidenceArchive::Open(config.audit_dir, /*create=*/true));
  ASSIGN_OR_RETURN(std::vector<uint8_t> policy_bytes,
                   ReadWholeFile(config.attestation_policy, attest::kMaxPolicyBytes));
  std::string policy_dir = std::filesystem::path(config.attestation_policy).parent_path().string();
  if (policy_dir.empty()) policy_dir = ".";

  broker::ServiceOptions options;
  options.actor = config.actor;
  options.nonce_ttl_s = config.nonce_ttl_s;
  options.challenge_ttl_s = config.challenge_ttl_s;
  ASSIGN_OR_RETURN(std::unique_ptr<broker::Service> service,
                   broker::Service::Create(*store, **log, std::move(archive),
                                           std::string(policy_bytes.begin(), policy_bytes.end()), policy_dir, options));
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

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-broker";
  p.summary = "the tenant's key broker: host enrolment, attestation, (later) attested key release";
  p.holds_keys = true;
  p.verbs = {
      {"serve", "run the HTTPS service (docs/protocol.md) until SIGTERM or SIGINT", "", 0,
       {kConfig, cli::PassphraseFdFlag()}, Serve},
      {"hosts", "list enrolled hosts from the state store (read-only)", "", 0, {kConfig, kJson}, Hosts},
  };
  return cli::Main(p, argc, argv);
}
