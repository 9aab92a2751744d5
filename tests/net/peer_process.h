// A child process with its stdin and stdout on pipes (posix_spawn): the tests start
// enclave_net_peer through it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace enclave::net::test {

class PeerProcess {
 public:
  bool Start(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
    return rc == 0;
  }
  ~PeerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  bool WriteLine(const std::string& s) {
    std::string line = s + "\n";
    return write(in_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  }
  void CloseInput() {
    if (in_ >= 0) close(in_);
    in_ = -1;
  }
  // One line of the child's stdout, or "" after timeout_s or EOF.
  std::string ReadLine(double timeout_s = 60) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char tmp[4096];
      ssize_t n = read(out_, tmp, sizeof(tmp));
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  // Everything the child still prints, then its exit status (-1: killed or unknown).
  std::string ReadAll(double timeout_s = 120) {
    std::string all, line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      line = ReadLine(1);
      if (line.empty() && Exited()) break;
      all += line + "\n";
    }
    return all + buf_;
  }
  int Wait() {
    if (pid_ <= 0) return status_;
    int st = 0;
    if (waitpid(pid_, &st, 0) == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    pid_ = -1;
    return status_;
  }
  void Kill() {
    if (pid_ > 0) kill(pid_, SIGKILL);
  }
  // SIGSTOP, returning once the child is stopped (its kernel sockets stay open: a peer
  // that no longer reads or writes); Continue() resumes it.
  bool Stop() {
    if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return false;
    int st = 0;
    return waitpid(pid_, &st, WUNTRACED) == pid_ && WIFSTOPPED(st);
  }
  bool Continue() { return pid_ > 0 && kill(pid_, SIGCONT) == 0; }

 private:
  bool Exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      pid_ = -1;
      return true;
    }
    return false;
  }
  pid_t pid_ = -1;
  int status_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
};

}  // namespace enclave::net::test
