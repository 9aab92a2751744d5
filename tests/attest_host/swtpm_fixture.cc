#include "swtpm_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace enclave::testing {
namespace {

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return IoError("writing " + path + " failed");
  return OkStatus();
}

// Spawns `argv` with stdout and stderr appended to `log`; returns the pid.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return ErrnoStatus("posix_spawn " + argv[0], rc);
  return pid;
}

// Two adjacent free loopback ports P, P+1 (probed by binding both, then released).
Result<int> FreeAdjacentPorts() {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (a < 0 || b < 0) {
      int err = errno;
      if (a >= 0) close(a);
      if (b >= 0) close(b);
      return ErrnoStatus("socket", err);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    int port = 0;
    socklen_t len = sizeof(addr);
    if (bind(a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(a, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
      addr.sin_port = htons(static_cast<uint16_t>(port + 1));
      if (port >= 65535 || bind(b, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) port = 0;
    }
    close(a);
    close(b);
    if (port != 0) return port;
  }
  return Unavailable("no two adjacent free loopback ports found after 200 attempts");
}

bool CanConnect(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(s);
  return ok;
}

}  // namespace

bool SwtpmFixture::Installed() {
  return !FindInPath("swtpm").empty() && !FindInPath("swtpm_setup").empty() &&
         !FindInPath("swtpm_localca").empty();
}

Result<std::unique_ptr<SwtpmFixture>> SwtpmFixture::Start(const std::string& ca_dir) {
  if (!Installed()) return Unavailable("swtpm, swtpm_setup or swtpm_localca not in PATH");
  std::unique_ptr<SwtpmFixture> f(new SwtpmFixture());
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/enclave-swtpm.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
  f->dir_ = buf.data();
  f->ca_dir_ = ca_dir.empty() ? f->dir_ + "/ca" : ca_dir;
  RETURN_IF_ERROR(f->Manufacture());
  RETURN_IF_ERROR(f->Launch());
  return f;
}

Status SwtpmFixture::Manufacture() {
  std::error_code ec;
  std::filesystem::create_directories(ca_dir_, ec);
  std::filesystem::create_directories(dir_ + "/state", ec);
  if (ec) return IoError("creating " + ca_dir_ + " and " + dir_ + "/state: " + ec.message());
  // swtpm_localca's configuration: the CA's keys and serial live in ca_dir_. The root CA
  // and the intermediate ("issuercert") are created on first use.
  RETURN_IF_ERROR(WriteText(dir_ + "/swtpm-localca.conf",
                            "statedir = " + ca_dir_ + "\n" +
                            "signingkey = " + ca_dir_ + "/signkey.pem\n" +
                            "issuercert = " + ca_dir_ + "/issuercert.pem\n" +
                            "certserial = " + ca_dir_ + "/certserial\n"));
  RETURN_IF_ERROR(WriteText(dir_ + "/swtpm-localca.options",
                            "--platform-manufacturer EnclaveTest\n"
                            "--platform-version 2.1\n"
                            "--platform-model swtpm\n"));
  RETURN_IF_ERROR(WriteText(dir_ + "/swtpm_setup.conf",
                            "create_certs_tool = " + FindInPath("swtpm_localca") + "\n" +
                            "create_certs_tool_config = " + dir_ + "/swtpm-localca.conf\n" +
                            "create_certs_tool_options = " + dir_ + "/swtpm-localca.options\n" +
                            "active_pcr_banks = sha1,sha256\n"));
  std::string log = dir_ + "/setup.log";
  ASSIGN_OR_RETURN(pid_t pid,
                   Spawn({FindInPath("swtpm_setup"), "--tpm2", "--tpmstate", dir_ + "/state",
                          "--create-ek-cert", "--create-platform-cert", "--lock-nvram",
                          "--pcr-banks", "sha1,sha256", "--config", dir_ + "/swtpm_setup.conf",
                          "--logfile", log},
                         dir_ + "/setup.out"));
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) != pid) return ErrnoStatus("waitpid swtpm_setup", errno);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::string text = ReadText(log) + ReadText(dir_ + "/setup.out");
    for (char& c : text) if (c == '\n') c = ' ';
    return Internal("swtpm_setup failed (status " + std::to_string(wstatus) + "): " + text);
  }
  if (!std::filesystem::exists(ca_root_cert()) || !std::filesystem::exists(ca_issuer_cert())) {
    return Internal("swtpm_setup succeeded but the local CA certificates are missing in " + ca_dir_);
  }
  return OkStatus();
}

Status SwtpmFixture::Launch() {
  // A port probed free can be taken before swtpm binds it: then swtpm exits, and we retry.
  std::string last_error = "not started";
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(int port, FreeAdjacentPorts());
    std::string p = std::to_string(port), c = std::to_string(port + 1);
    ASSIGN_OR_RETURN(pid_t pid,
                     Spawn({FindInPath("swtpm"), "socket", "--tpm2", "--tpmstate",
                            "dir=" + dir_ + "/state", "--server",
                            "type=tcp,port=" + p + ",bindaddr=127.0.0.1", "--ctrl",
                            "type=tcp,port=" + c + ",bindaddr=127.0.0.1", "--flags",
                            "not-need-init,startup-clear", "--log",
                            "file=" + dir_ + "/swtpm.log,level=1"},
                           dir_ + "/swtpm.out"));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
      int wstatus = 0;
      if (waitpid(pid, &wstatus, WNOHANG) == pid) {
        exited = true;
        last_error = "swtpm exited with status " + std::to_string(wstatus) + " on port " + p +
                     ": " + ReadText(dir_ + "/swtpm.out");
        break;
      }
      if (CanConnect(port + 1) && CanConnect(port)) {
        pid_ = pid;
        port_ = port;
        tcti_ = "swtpm:host=127.0.0.1,port=" + p;
        return OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!exited) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      last_error = "swtpm did not listen on 127.0.0.1:" + p + " within 10 s";
    }
  }
  return Unavailable("starting swtpm: " + last_error);
}

void SwtpmFixture::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

SwtpmFixture::~SwtpmFixture() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace enclave::testing
