// Every binary that ever holds a key makes itself non-dumpable at start (tools/cli.cc,
// HardenProcess): no core dump, and no other process of the same user can attach to it or
// read its memory through /proc/PID/mem. Each binary is started with a verb whose first
// file is a FIFO, so it blocks in open() after hardening; a process of the same (non-root)
// user then tries to open its /proc/PID/mem. A plain process in the same place is the
// control: its memory can be opened, so the check can fail.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr uid_t kNobody = 65534;

// In a forked child: drop to an unprivileged user when root (root may read any process's
// memory: CAP_SYS_PTRACE), start `argv` as this process's child (an ancestor may attach
// under every Yama mode), wait until it is blocked on the FIFO, then try /proc/PID/mem.
// Exit status: 0 the open was refused (EACCES/EPERM), 1 it succeeded, 2+ setup failed.
[[noreturn]] void ProbeChild(const std::vector<std::string>& argv, const std::string& fifo) {
  if (::geteuid() == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(2);
  }
  const pid_t target = ::fork();
  if (target < 0) ::_exit(3);
  if (target == 0) {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  // Blocked in open(FIFO): /proc/PID/stat (readable even for a non-dumpable process) shows
  // the new program's name and state S. Then a little more, for it to be in open().
  const std::string base = argv[0].substr(argv[0].rfind('/') + 1).substr(0, 15);  // comm is 15 bytes
  const std::string stat = "/proc/" + std::to_string(target) + "/stat";
  for (int i = 0; i < 200; ++i) {
    ::usleep(25000);
    char buf[256] = {};
    const int fd = ::open(stat.c_str(), O_RDONLY);
    if (fd < 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    if (n > 0 && std::strstr(buf, ("(" + base + ") S").c_str()) != nullptr) break;
  }
  ::usleep(200000);
  int status = 0;
  if (::waitpid(target, &status, WNOHANG) == target) ::_exit(4);  // it did not block
  const std::string mem = "/proc/" + std::to_string(target) + "/mem";
  const int fd = ::open(mem.c_str(), O_RDONLY);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  // Unblock it: a writer that closes at once gives it an empty file, which it refuses.
  const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (w >= 0) ::close(w);
  ::kill(target, SIGKILL);
  ::waitpid(target, &status, 0);
  if (fd >= 0) ::_exit(1);
  ::_exit(err == EACCES || err == EPERM ? 0 : 5);
}

// 0: refused, 1: readable, other: the probe could not run.
int Probe(const std::vector<std::string>& argv, const std::string& fifo) {
  const pid_t pid = ::fork();
  if (pid == 0) ProbeChild(argv, fifo);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("enclave-hardening-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::filesystem::permissions(dir_, std::filesystem::perms::all);  // the unprivileged probe opens the FIFO
    fifo_ = (dir_ / "input").string();
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0666), 0) << std::strerror(errno);
    ::chmod(fifo_.c_str(), 0666);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string fifo_;
};

TEST_F(HardeningTest, ControlAPlainProcessCanBeRead) {
  // cat blocks on the FIFO the same way and is not hardened: its memory opens.
  EXPECT_EQ(Probe({"/bin/cat", fifo_}, fifo_), 1);
}

struct Binary {
  const char* name;
  std::vector<std::string> args;  // after the binary; "FIFO" is replaced by the FIFO's path
};

TEST_F(HardeningTest, EveryKeyHoldingBinaryRefusesMemoryReads) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> binaries = {
      {ENCLAVE_DATA_BIN, {"inspect", "FIFO"}},
      {ENCLAVE_TRAIN_BIN, {"run", "--job", "FIFO"}},
      {ENCLAVE_BROKER_BIN, {"serve", "--config", "FIFO"}},
      {ENCLAVE_AUDIT_BIN, {"verify", "--log", "FIFO", "--key", "FIFO"}},
      {ENCLAVE_ATTEST_BIN, {"attest", "--job", "FIFO", "--out", (dir_ / "out").string()}},
  };
  for (const auto& [bin, args] : binaries) {
    SCOPED_TRACE(bin);
    std::vector<std::string> argv = {bin};
    for (const std::string& a : args) argv.push_back(a == "FIFO" ? fifo_ : a);
    EXPECT_EQ(Probe(argv, fifo_), 0) << "0: /proc/PID/mem refused; 1: readable; other: the probe failed";
  }
}

}  // namespace
