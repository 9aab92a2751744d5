#include "enclave/common/files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "../scratch_cleanup.h"

namespace enclave {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("enclave-files-test-" + std::to_string(::getpid()));
    testing::RemoveAtExit(d);
    return d;
  }();
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicOutputFile, AppearsOnlyOnCommit) {
  fs::path out = TempDir() / "a.txt";
  fs::remove(out);
  {
    auto f = AtomicOutputFile::Create(out.string(), false);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write("hello", 5).ok());
    EXPECT_FALSE(fs::exists(out));
    ASSERT_TRUE(f->Commit().ok());
  }
  EXPECT_EQ(fs::file_size(out), 5u);
}

TEST(AtomicOutputFile, AbandonedLeavesNothing) {
  fs::path dir = TempDir() / "abandon";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    auto f = AtomicOutputFile::Create((dir / "b.txt").string(), false);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write("partial", 7).ok());
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(AtomicOutputFile, RefusesToOverwriteUnlessAllowed) {
  fs::path out = TempDir() / "c.txt";
  fs::remove(out);
  {
    auto f = AtomicOutputFile::Create(out.string(), false);
    ASSERT_TRUE(f->Write("1", 1).ok());
    ASSERT_TRUE(f->Commit().ok());
  }
  auto again = AtomicOutputFile::Create(out.string(), false);
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  auto forced = AtomicOutputFile::Create(out.string(), true);
  ASSERT_TRUE(forced.ok());
  ASSERT_TRUE(forced->Write("22", 2).ok());
  ASSERT_TRUE(forced->Commit().ok());
  EXPECT_EQ(fs::file_size(out), 2u);
}

// A signal that ends the process never runs ~AtomicOutputFile; the handler installed by
// Create() removes the uncommitted temporaries (decrypted plaintext, for `enclave-data open`)
// and the process still dies of the signal. Committed outputs stay.
void ExpectSignalRemovesTemporaries(int sig) {
  fs::path dir = TempDir() / ("signal-" + std::to_string(sig));
  fs::remove_all(dir);
  fs::create_directories(dir);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto done = AtomicOutputFile::Create((dir / "done.txt").string(), false);
    auto a = AtomicOutputFile::Create((dir / "a.csv").string(), false);
    auto b = AtomicOutputFile::Create((dir / "b.csv").string(), true);
    if (!done.ok() || !a.ok() || !b.ok() || !done->Write("x", 1).ok() || !done->Commit().ok()) ::_exit(2);
    std::string rows(3 << 20, 'r');  // past the write buffer: really on disk
    if (!a->Write(rows.data(), rows.size()).ok() || !b->Write("row\n", 4).ok()) ::_exit(3);
    ::raise(sig);
    ::_exit(4);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), sig);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"done.txt"});
}

TEST(AtomicOutputFile, SigtermRemovesTemporaries) { ExpectSignalRemovesTemporaries(SIGTERM); }
TEST(AtomicOutputFile, SigintRemovesTemporaries) { ExpectSignalRemovesTemporaries(SIGINT); }
TEST(AtomicOutputFile, SighupRemovesTemporaries) { ExpectSignalRemovesTemporaries(SIGHUP); }

TEST(FileReader, ReadAtPastEndIsAnError) {
  fs::path p = TempDir() / "d.txt";
  fs::remove(p);
  {
    auto f = AtomicOutputFile::Create(p.string(), false);
    ASSERT_TRUE(f->Write("abcd", 4).ok());
    ASSERT_TRUE(f->Commit().ok());
  }
  auto r = FileReader::Open(p.string());
  ASSERT_TRUE(r.ok());
  char buf[8];
  EXPECT_TRUE(r->ReadAt(1, buf, 3).ok());
  EXPECT_EQ(std::string(buf, 3), "bcd");
  EXPECT_FALSE(r->ReadAt(2, buf, 3).ok());
  EXPECT_EQ(FileReader::Open((TempDir() / "missing").string()).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace enclave
