// `enclave-broker serve` as a real process on loopback for the tests: a fresh folder with
// a TLS certificate (openssl CLI, SAN IP:127.0.0.1), a tenant keystore, an audit log and
// its signing key, an attestation policy, broker.toml; the passphrase goes through a pipe
// on fd 3 (--passphrase-fd 3); the broker's first stdout line gives its port.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "enclave/audit/log_writer.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"
#include "enclave/crypto/keystore.h"

extern char** environ;

namespace enclave::broker::testing {

inline constexpr char kPassphrase[] = "correct horse battery staple";

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}
// VmRSS of `pid` in KiB from /proc/PID/status (world-readable even for a non-dumpable
// process); -1 when it cannot be read.
inline long RssKib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct BrokerSettings {
  // The policy's EK roots and intermediates: copied into the broker folder (an archived
  // policy names its files relative to its own folder).
  std::vector<std::string> ek_root_files;
  std::vector<std::string> ek_intermediate_files;
  std::string quote_pcrs = R"({"sha256": [0, 1, 2, 3, 4, 5, 6, 7]})";
  int nonce_ttl_s = 60;
  int challenge_ttl_s = 300;
  int read_timeout_s = 2;
  int threads = 4;
  int max_queued = 8;
  size_t max_body_bytes = 1u << 20;
  int nonces_per_minute = 100000;  // the tests' bursts are not floods
  int64_t archive_max_bytes = int64_t{1} << 34;
  int64_t archive_min_free_bytes = 0;
  std::string extra_config;  // appended to broker.toml ([release], [admin])
  std::string audit_config;  // more [audit] lines ("witness_policy = \"w.policy\"\n")
  std::string server_config;  // more [server] lines ("max_connections = 8\n")
  // Runs after the folder is prepared and before the broker starts (e.g. to add keys to
  // its keystore, which the broker reads at start).
  std::function<Status(const std::string& dir)> before_launch;
};

class BrokerProcess {
 public:
  // Prepares `dir` (once: keys and logs are kept across restarts) and starts the broker.
  static Result<std::unique_ptr<BrokerProcess>> Start(const std::string& dir, const BrokerSettings& s,
                                                      const std::string& passphrase = kPassphrase) {
    ::signal(SIGPIPE, SIG_IGN);  // a test writes to connections the broker closed
    std::unique_ptr<BrokerProcess> b(new BrokerProcess());
    b->dir_ = dir;
    b->settings_ = s;
    RETURN_IF_ERROR(b->Prepare());
    if (s.before_launch) RETURN_IF_ERROR(s.before_launch(dir));
    RETURN_IF_ERROR(b->Launch(passphrase));
    return b;
  }
  ~BrokerProcess() { Stop(); }

  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string config() const { return Path("broker.toml"); }
  std::string log() const { return ReadText(Path("broker.log")); }
  const audit::LogPublicKey& audit_key() const { return audit_key_; }

  bool Alive() const {
    if (pid_ <= 0) return false;
    int status = 0;
    return ::waitpid(pid_, &status, WNOHANG) == 0;
  }
  // SIGTERM and wait; the exit status, or -1.
  int Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  Status Restart() {
    Stop(SIGKILL);
    return Launch(kPassphrase);
  }

  std::unique_ptr<httplib::SSLClient> Client() const {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port_);
    c->set_ca_cert_path(Path("tls.crt").c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5, 0);
    c->set_read_timeout(30, 0);
    return c;
  }
  // POST with Content-Type application/json; status -1 when there was no answer.
  struct Answer {
    int status = -1;
    std::string body;
    nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
  };
  Answer Post(const std::string& path, const std::string& body,
              const std::string& content_type = "application/json") const {
    auto r = Client()->Post(path.c_str(), body, content_type.c_str());
    if (!r) return {};
    return {r->status, r->body};
  }
  Answer Get(const std::string& path) const {
    auto r = Client()->Get(path.c_str());
    if (!r) return {};
    return {r->status, r->body};
  }

  // Runs `bin` with `args`, the passphrase on fd 3, stdout and stderr into *output; the
  // exit code, or -1.
  static int RunProgram(const std::string& bin, const std::vector<std::string>& args, const std::string& passphrase,
                        std::string* output) {
    int pass[2];
    if (::pipe(pass) != 0) return -1;
    (void)!::write(pass[1], passphrase.data(), passphrase.size());
    (void)!::write(pass[1], "\n", 1);
    ::close(pass[1]);
    char tmpl[] = "/tmp/broker-run-XXXXXX";
    int out = ::mkstemp(tmpl);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pass[0], 3);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, out, 2);
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pass[0]);
    ::close(out);
    int status = 0;
    if (rc == 0) ::waitpid(pid, &status, 0);
    if (output) *output = ReadText(tmpl);
    ::unlink(tmpl);
    return rc == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // `enclave-broker ARGS`; for the admin verbs and the tests of failing starts.
  static int RunBroker(const std::vector<std::string>& args, const std::string& passphrase, std::string* output) {
    return RunProgram(ENCLAVE_BROKER_BIN, args, passphrase, output);
  }

 private:
  BrokerProcess() = default;

  Status Prepare() {
    std::filesystem::create_directories(dir_);
    if (!std::filesystem::exists(Path("tls.crt"))) {
      const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "
                              "/CN=enclave-broker-test -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
                              Path("tls.key") + "' -out '" + Path("tls.crt") + "' >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) return Internal("openssl req failed");
    }
    if (!std::filesystem::exists(Path("tenant.keystore"))) {
      RETURN_IF_ERROR(crypto::InitCrypto());
      ASSIGN_OR_RETURN(crypto::SecretBytes pass,
                       crypto::SecretBytes::CopyFrom(std::span<const uint8_t>(
                           reinterpret_cast<const uint8_t*>(kPassphrase), sizeof(kPassphrase) - 1)));
      RETURN_IF_ERROR(crypto::Keystore::Init(Path("tenant.keystore"), pass, crypto::KdfParams{2, 19ull << 20}));
    }
    if (!std::filesystem::exists(Path("audit.key"))) {
      ASSIGN_OR_RETURN(audit::LogSigningKey key, audit::LogSigningKey::Generate());
      RETURN_IF_ERROR(key.Save(Path("audit.key")));
      RETURN_IF_ERROR(audit::LogWriter::Create(Path("audit"), key));
    }
    ASSIGN_OR_RETURN(audit::LogSigningKey key, audit::LogSigningKey::Load(Path("audit.key")));
    audit_key_ = key.public_key();
    const BrokerSettings& s = settings_;
    auto copy_all = [&](const std::vector<std::string>& files, const std::string& sub) {
      std::filesystem::remove_all(Path(sub));
      std::filesystem::create_directories(Path(sub));
      std::string list = "[";
      for (size_t i = 0; i < files.size(); ++i) {
        const std::string name = sub + "/" + std::to_string(i) + ".pem";
        std::filesystem::copy_file(files[i], Path(name));
        list += (i ? ", \"" : "\"") + name + "\"";
      }
      return list + "]";
    };
    const std::string roots = copy_all(s.ek_root_files, "ek-roots");
    const std::string intermediates = copy_all(s.ek_intermediate_files, "ek-intermediates");
    WriteText(Path("policy.json"), R"({
  "version": 1,
  "name": "broker test",
  "quote_pcrs": )" + s.quote_pcrs + R"(,
  "ek_roots": {"files": )" + roots + R"(, "intermediates": )" + intermediates + R"(},
  "max_evidence_age_s": 300,
  "event_log": {"required": false, "exempt_pcrs": [10]}
}
)");
    WriteText(Path("broker.toml"), "[server]\nlisten = \"127.0.0.1\"\nport = 0\ncertificate = \"tls.crt\"\n"
                                   "private_key = \"tls.key\"\nthreads = " + std::to_string(s.threads) +
                                       "\nmax_queued = " + std::to_string(s.max_queued) +
                                       "\nmax_body_bytes = " + std::to_string(s.max_body_bytes) +
                                       "\nread_timeout_s = " + std::to_string(s.read_timeout_s) +
                                       "\nwrite_timeout_s = 5\nkeep_alive_s = 2\n" + s.server_config +
                                       "\n[store]\npath = \"state/broker.db\"\n\n"
                                       "[keystore]\npath = \"tenant.keystore\"\n\n"
                                       "[audit]\ndir = \"audit\"\nsigning_key = \"audit.key\"\nactor = \"broker@test\"\n"
                                       "archive_max_bytes = " + std::to_string(s.archive_max_bytes) +
                                       "\narchive_min_free_bytes = " + std::to_string(s.archive_min_free_bytes) +
                                       "\n" + s.audit_config + "\n[attestation]\npolicy = \"policy.json\"\nnonce_ttl_s = " +
                                       std::to_string(s.nonce_ttl_s) + "\nchallenge_ttl_s = " +
                                       std::to_string(s.challenge_ttl_s) + "\nnonces_per_minute = " +
                                       std::to_string(s.nonces_per_minute) + "\n" + s.extra_config);
    std::filesystem::create_directories(Path("state"));
    return OkStatus();
  }

  Status Launch(const std::string& passphrase) {
    int pass[2], out[2];
    if (::pipe(pass) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
    (void)!::write(pass[1], passphrase.data(), passphrase.size());
    (void)!::write(pass[1], "\n", 1);
    ::close(pass[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pass[0], 3);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, Path("broker.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    std::vector<std::string> argv = {ENCLAVE_BROKER_BIN, "serve", "--config", config(), "--passphrase-fd", "3"};
    std::vector<char*> a;
    for (auto& x : argv) a.push_back(x.data());
    a.push_back(nullptr);
    int rc = posix_spawn(&pid_, ENCLAVE_BROKER_BIN, &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pass[0]);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      return ErrnoStatus("posix_spawn " ENCLAVE_BROKER_BIN, rc);
    }
    // The first line: {"listening":"https://127.0.0.1:P","port":P}
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      ssize_t n = ::read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    auto j = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
    if (!j.is_object() || !j.contains("port")) {
      Stop(SIGKILL);
      return Unavailable("the broker did not start: " + log());
    }
    port_ = j["port"].get<int>();
    return OkStatus();
  }

  std::string dir_;
  BrokerSettings settings_;
  audit::LogPublicKey audit_key_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A self-signed CA certificate (an "EK root" for policies that need one) at `path`.
inline bool MakeSelfSignedCa(const std::string& dir, const std::string& name) {
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=" +
                          name + " -keyout '" + dir + "/" + name + ".key' -out '" + dir + "/" + name +
                          ".pem' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace enclave::broker::testing
