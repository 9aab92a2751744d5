// Two `enclave-audit witness serve` processes on loopback that follow one test log, and a
// tlog-policy file naming them: the fixture of the client and verification tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/witness_policy.h"
#include "witness_process.h"

namespace enclave::audit::testing {

inline void WriteText(const fs::path& path, const std::string& text) {
  WriteBytes(path.string(), std::vector<uint8_t>(text.begin(), text.end()));
}

// A port nothing listens on (bound, then closed).
inline int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A loopback HTTP server that answers every request with `status` and `body` (a witness
// that answers what a test wants it to), each connection in turn, until destroyed.
class ScriptedHttpServer {
 public:
  ScriptedHttpServer(int status, std::string body) : status_(status), body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "the scripted server could not listen: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedHttpServer() {
    stop_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      // Read the head and the Content-Length bytes of the body, then answer and close.
      std::string in;
      char buf[4096];
      size_t want = std::string::npos;
      while (want == std::string::npos || in.size() < want) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        const size_t head = in.find("\r\n\r\n");
        if (want == std::string::npos && head != std::string::npos) {
          const size_t cl = in.find("Content-Length: ");
          want = head + 4 + (cl < head ? std::stoul(in.substr(cl + 16)) : 0);
        }
      }
      const std::string answer = "HTTP/1.1 " + std::to_string(status_) + " Answer\r\nContent-Type: text/plain\r\n" +
                                 "Content-Length: " + std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n" +
                                 body_;
      (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int status_;
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class TwoWitnessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ScratchDir("two-witnesses");
    log_ = MakeLog("two-witnesses-log");
    WriteText(dir_ / "log.vkey", NoteVerifierKey(log_.pub) + "\n");
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i + 1);
      CliRun r = RunAudit({"witness", "keygen", "--name", "witness.test/w" + n, "--key", Path("w" + n + ".key")},
                          dir_.string());
      ASSERT_EQ(r.rc, 0) << r.err;
      auto w = WitnessProcess::Start(Path("w" + n + ".key"), Path("state" + n), Path("log.vkey"),
                                     Path("w" + n + ".err"));
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      witnesses_.push_back(std::move(*w));
    }
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Url(int i) const { return "http://127.0.0.1:" + std::to_string(witnesses_[i]->port()); }
  // A tlog-policy file naming both witnesses (with `urls[i]`, or their own) and the quorum.
  WitnessPolicy Policy(const std::string& quorum, std::vector<std::string> urls = {}) {
    if (urls.empty()) urls = {Url(0), Url(1)};
    const std::string text = "log " + NoteVerifierKey(log_.pub) + "\nwitness w1 " + witnesses_[0]->verifier_key() +
                             " " + urls[0] + "\nwitness w2 " + witnesses_[1]->verifier_key() + " " + urls[1] + "\n" +
                             quorum;
    WriteText(dir_ / "policy", text);
    auto p = WitnessPolicy::Parse(text, "policy");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return *p;
  }
  struct Latest {
    std::string note;
    std::vector<Hash> leaves;
  };
  Latest Now() {
    auto v = VerifyLog(log_.dir.string(), log_.pub);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return {*FormatCheckpointNote(log_.pub, v->latest), v->leaf_hashes};
  }

  fs::path dir_;
  TestLog log_;
  std::vector<std::unique_ptr<WitnessProcess>> witnesses_;
};

// Cuts the log back to the end of its chained head of `size` (what an operator with the
// disk can do), then appends `count` entries of another history.
inline void CutBackAndRewrite(const TestLog& log, uint64_t size, int count) {
  std::vector<uint8_t> file = ReadBytes(log.log_path());
  std::vector<RawRecord> kept;
  for (const RawRecord& rec : RawRecords(file)) {
    kept.push_back(rec);
    if (rec.type == RecordType::kChainedTreeHead && ParseTreeHead(rec.payload)->head.tree_size == size) break;
  }
  WriteBytes(log.log_path(), Reassemble(file, kept));
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE((*w)->Append(Revoked("operator@tenant", "host", "rewritten-" + std::to_string(i), "history rewritten")).ok());
  }
}

}  // namespace enclave::audit::testing
