// `enclave-audit witness serve` as a real process on loopback for the tests, raw HTTP/1.1
// exchanges with it over a socket, and `enclave-audit` runs of other verbs.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/common/status.h"

extern char** environ;

namespace enclave::audit::testing {

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct CliRun {
  int rc = -1;
  std::string out, err;
};

// enclave-audit ARGS... (absolute paths); stdout and stderr apart, through files in `scratch`.
inline CliRun RunAudit(const std::vector<std::string>& args, const std::string& scratch) {
  const std::string out_file = scratch + "/.run-stdout", err_file = scratch + "/.run-stderr";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> argv = {ENCLAVE_AUDIT_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, ENCLAVE_AUDIT_BIN, &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  CliRun r;
  int status = 0;
  if (rc == 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  r.out = ReadTextFile(out_file);
  r.err = ReadTextFile(err_file);
  return r;
}

struct HttpAnswer {
  int status = -1;  // -1: no answer
  std::string content_type;
  std::string body;
  std::string raw;  // every byte received
};

// Reads the first answer out of `raw` (status line, Content-Type, Content-Length body).
inline HttpAnswer ParseAnswer(const std::string& raw) {
  HttpAnswer a;
  a.raw = raw;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return a;
  a.status = std::atoi(raw.c_str() + 9);
  size_t length = 0;
  std::istringstream head(raw.substr(0, head_end));
  std::string line;
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("Content-Type: ", 0) == 0) a.content_type = line.substr(14);
    if (line.rfind("Content-Length: ", 0) == 0) length = std::stoul(line.substr(16));
  }
  a.body = raw.substr(head_end + 4, length);
  return a;
}

// One client connection to 127.0.0.1:port.
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Conn() { ::close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `until` has arrived (empty: until the peer closes) or `timeout_ms` pass.
  // Returns everything received so far on this connection; closed() says whether it ended.
  const std::string& Read(const std::string& until, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[65536];
    while (!closed_ && (until.empty() || received_.find(until) == std::string::npos)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string received_;
};

// Sends `request` in one write and reads until the witness closes or `timeout_ms` pass.
inline HttpAnswer Exchange(int port, const std::string& request, int timeout_ms = 10000) {
  Conn c(port);
  if (!c.connected() || !c.Send(request)) return {};
  return ParseAnswer(c.Read("", timeout_ms));
}

inline HttpAnswer PostAddCheckpoint(int port, const std::string& body) {
  return Exchange(port, "POST /add-checkpoint HTTP/1.1\r\nHost: witness\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
}

class WitnessProcess {
 public:
  // enclave-audit witness serve --key KEY --state STATE --listen 127.0.0.1:0 --log-key LOGS EXTRA...
  static Result<std::unique_ptr<WitnessProcess>> Start(const std::string& key, const std::string& state,
                                                       const std::string& log_keys, const std::string& stderr_file,
                                                       std::vector<std::string> extra = {}) {
    std::unique_ptr<WitnessProcess> w(new WitnessProcess());
    w->args_ = {ENCLAVE_AUDIT_BIN, "witness", "serve", "--key",  key, "--state", state, "--listen", "127.0.0.1:0",
                "--log-key",       log_keys};
    w->args_.insert(w->args_.end(), extra.begin(), extra.end());
    w->stderr_file_ = stderr_file;
    RETURN_IF_ERROR(w->Launch());
    return w;
  }
  ~WitnessProcess() { Stop(SIGKILL); }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& verifier_key() const { return vkey_; }
  std::string stderr_text() const { return ReadTextFile(stderr_file_); }

  // Sends `sig` and waits: the exit code, or 128 + the signal.
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
    return Launch();
  }

 private:
  WitnessProcess() = default;
  Status Launch() {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, stderr_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    std::vector<char*> a;
    for (auto& x : args_) a.push_back(x.data());
    a.push_back(nullptr);
    const int rc = posix_spawn(&pid_, ENCLAVE_AUDIT_BIN, &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      pid_ = -1;
      return ErrnoStatus("posix_spawn " ENCLAVE_AUDIT_BIN, rc);
    }
    // The first line: {"listening":"http://127.0.0.1:P","port":P,"verifier_key":...}
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[512];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    auto j = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
    if (!j.is_object() || !j.contains("port")) {
      const int code = Stop(SIGKILL);
      return Unavailable("the witness did not start (exit " + std::to_string(code) + "): " + stderr_text());
    }
    port_ = j["port"].get<int>();
    vkey_ = j["verifier_key"].get<std::string>();
    return OkStatus();
  }

  std::vector<std::string> args_;
  std::string stderr_file_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string vkey_;
};

}  // namespace enclave::audit::testing
