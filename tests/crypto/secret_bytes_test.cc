#include "enclave/crypto/secret_bytes.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <concepts>
#include <cstring>
#include <fstream>
#include <string>
#include <ostream>
#include <span>
#include <type_traits>
#include <utility>

#include "crypto_test_util.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT

// The type's promises, checked at compile time.
template <typename T>
concept Streamable = requires(std::ostream& os, const T& t) { os << t; };
static_assert(!std::is_copy_constructible_v<SecretBytes>);
static_assert(!std::is_copy_assignable_v<SecretBytes>);
static_assert(std::is_nothrow_move_constructible_v<SecretBytes>);
static_assert(std::is_nothrow_move_assignable_v<SecretBytes>);
static_assert(!Streamable<SecretBytes>, "secrets must not be printable");
static_assert(!std::is_convertible_v<SecretBytes, std::span<const uint8_t>>);
static_assert(!std::is_convertible_v<const SecretBytes&, bool>);

TEST(SecretBytes, CreateRandomCopy) {
  ASSERT_OK_AND_ASSIGN(SecretBytes z, SecretBytes::Create(48));
  EXPECT_EQ(z.size(), 48u);
  EXPECT_FALSE(z.empty());
  EXPECT_TRUE(AllZero(z.ExposeSecret()));
  ASSERT_OK_AND_ASSIGN(SecretBytes e, SecretBytes::Create(0));
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.ExposeSecret().size(), 0u);

  ASSERT_OK_AND_ASSIGN(SecretBytes r1, SecretBytes::Random(32));
  ASSERT_OK_AND_ASSIGN(SecretBytes r2, SecretBytes::Random(32));
  EXPECT_FALSE(AllZero(r1.ExposeSecret()));
  EXPECT_FALSE(ConstantTimeEquals(r1.ExposeSecret(), r2.ExposeSecret()));

  std::vector<uint8_t> src = PatternBytes(20, 3);
  ASSERT_OK_AND_ASSIGN(SecretBytes c, SecretBytes::CopyFrom(src));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), c.ExposeSecret().begin(), c.ExposeSecret().end()));
  EXPECT_NE(c.ExposeSecret().data(), src.data());
  src[0] ^= 1;  // the copy is independent of the caller's buffer
  EXPECT_NE(c.ExposeSecret()[0], src[0]);
  c.ExposeSecretMutable()[1] = 0x77;
  EXPECT_EQ(c.ExposeSecret()[1], 0x77);
}

TEST(SecretBytes, MoveTransfersOwnership) {
  ASSERT_OK_AND_ASSIGN(SecretBytes a, SecretBytes::CopyFrom(PatternBytes(16, 1)));
  const uint8_t* where = a.ExposeSecret().data();
  SecretBytes b(std::move(a));
  EXPECT_EQ(b.ExposeSecret().data(), where);  // moved, not copied
  EXPECT_EQ(b.size(), 16u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.ExposeSecret().data(), nullptr);

  ASSERT_OK_AND_ASSIGN(SecretBytes c, SecretBytes::CopyFrom(PatternBytes(8, 2)));
  c = std::move(b);  // releases c's old buffer, takes b's
  EXPECT_EQ(c.ExposeSecret().data(), where);
  EXPECT_EQ(c.size(), 16u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)

  SecretBytes& alias = c;
  c = std::move(alias);  // self-move keeps the secret
  EXPECT_EQ(c.ExposeSecret().data(), where);
  EXPECT_EQ(c.size(), 16u);
  EXPECT_TRUE(std::equal(c.ExposeSecret().begin(), c.ExposeSecret().end(), PatternBytes(16, 1).begin()));

  SecretBytes d;
  d = std::move(c);
  SecretBytes empty;
  d = std::move(empty);  // moving an empty secret in releases the old one
  EXPECT_TRUE(d.empty());
}

TEST(SecretBytes, CloneIsDeepAndIndependent) {
  ASSERT_OK_AND_ASSIGN(SecretBytes a, SecretBytes::Random(32));
  ASSERT_OK_AND_ASSIGN(SecretBytes b, a.Clone());
  EXPECT_EQ(b.size(), 32u);
  EXPECT_NE(a.ExposeSecret().data(), b.ExposeSecret().data());
  EXPECT_TRUE(ConstantTimeEquals(a.ExposeSecret(), b.ExposeSecret()));
  b.ExposeSecretMutable()[0] ^= 0xff;
  EXPECT_FALSE(ConstantTimeEquals(a.ExposeSecret(), b.ExposeSecret()));
  SecretBytes none;
  ASSERT_OK_AND_ASSIGN(SecretBytes none2, none.Clone());
  EXPECT_TRUE(none2.empty());
}

TEST(SecretBytes, ConstantTimeEquals) {
  const auto x = PatternBytes(32, 5);
  auto y = x;
  EXPECT_TRUE(ConstantTimeEquals(x, y));
  for (size_t i : {size_t{0}, size_t{15}, size_t{31}}) {
    for (int bit = 0; bit < 8; ++bit) {
      y = x;
      y[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(ConstantTimeEquals(x, y)) << i << "/" << bit;
    }
  }
  EXPECT_FALSE(ConstantTimeEquals(x, std::span(x).first(31)));  // a prefix is not equal
  EXPECT_FALSE(ConstantTimeEquals(std::span(x).first(31), x));
  EXPECT_TRUE(ConstantTimeEquals({}, {}));
  EXPECT_FALSE(ConstantTimeEquals({}, x));
  EXPECT_TRUE(ConstantTimeEquals(std::span(x).first(1), std::span(y).first(1)));
}

// The buffer ends at a guard page (libsodium sodium_malloc): a write one past the end faults.
TEST(SecretBytesDeathTest, WritePastTheEndFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto s = SecretBytes::Create(32);
        volatile uint8_t* p = s->ExposeSecretMutable().data();
        p[32] = 1;
        p[4096] = 1;
      },
      "");
}

// A released small secret's region is kept for the next secret of its size: wiped, and
// still against its guard page.
TEST(SecretBytes, AReusedRegionIsWipedAndStillGuarded) {
  const uint8_t* first = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(SecretBytes s, SecretBytes::Create(48));
    std::memset(s.ExposeSecretMutable().data(), 0xA5, 48);
    first = s.ExposeSecret().data();
  }
  ASSERT_OK_AND_ASSIGN(SecretBytes again, SecretBytes::Create(48));
  ASSERT_EQ(again.ExposeSecret().data(), first) << "the region was not reused";
  for (uint8_t b : again.ExposeSecret()) ASSERT_EQ(b, 0);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        { auto s = SecretBytes::Create(40); }
        auto reused = SecretBytes::Create(40);
        volatile uint8_t* p = reused->ExposeSecretMutable().data();
        p[40] = 1;
      },
      "");
}

// A write before a secret's start is caught when it is released, pooled or not.
TEST(SecretBytesDeathTest, WriteBeforeTheStartAbortsAtRelease) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto s = SecretBytes::Create(32);
        s->ExposeSecretMutable().data()[-1] ^= 1;
      },
      "canary before a secret was overwritten");
  EXPECT_DEATH(
      {
        auto s = SecretBytes::Create(1 << 16);
        s->ExposeSecretMutable().data()[-3] ^= 1;
      },
      "canary before a secret was overwritten");
}

// Kilobytes of this process's locked memory (VmLck in /proc/self/status), -1 if unreadable.
long LockedKib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Locked while alive, unlocked when freed (no locked memory leaks across allocations).
TEST(SecretBytes, MemoryIsLockedWhileAlive) {
  const long before = LockedKib();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(SecretBytes s, SecretBytes::Create(1 << 20));
    ASSERT_GE(LockedKib() - before, 1024) << i;
  }
  EXPECT_LT(LockedKib() - before, 1024);
}

// Memory locks are not inherited by fork(): a child reusing a region its parent released
// must lock it again.
TEST(SecretBytes, AForkedChildLocksARegionItReuses) {
  { ASSERT_OK_AND_ASSIGN(SecretBytes s, SecretBytes::Create(56)); }  // released: kept for reuse
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const long before = LockedKib();  // 0 in a fresh child, whatever the parent holds
    auto s = SecretBytes::Create(56);
    _exit(!s.ok() ? 3 : LockedKib() > before ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "1: the reused region was not locked in the child; 3: Create failed";
}

// libsodium's sodium_malloc carries on with unlocked pages when mlock fails; Create must
// refuse instead. A child process without CAP_IPC_LOCK (root drops to nobody) and with a
// 64 KiB RLIMIT_MEMLOCK may still lock a small secret but not a 1 MiB one, and the error
// names the limit and how to raise it.
TEST(SecretBytes, RefusesMemoryThatCannotBeLocked) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto report = [&](const std::string& what, int code) {
      (void)!write(fds[1], what.data(), what.size());
      _exit(code);
    };
    // Exit 2: this environment cannot set up the test (a user namespace without uid 65534,
    // a hard limit below 64 KiB); the parent skips.
    if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) report("cannot drop to uid 65534", 2);
    const struct rlimit limit {64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) report("cannot set RLIMIT_MEMLOCK to 64 KiB", 2);
    Result<SecretBytes> small = SecretBytes::Create(4096);
    if (!small.ok()) report("a 4 KiB secret was refused: " + small.status().message(), 1);
    Result<SecretBytes> big = SecretBytes::Create(1 << 20);
    if (big.ok()) report("a 1 MiB secret was created without being locked", 1);
    report(std::to_string(static_cast<int>(big.status().code())) + " " + big.status().message(), 0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << out;
  if (WEXITSTATUS(wstatus) == 2) GTEST_SKIP() << out;
  ASSERT_EQ(WEXITSTATUS(wstatus), 0) << out;
  const std::string expected = std::to_string(static_cast<int>(Code::kFailedPrecondition)) + " cannot lock 1048576 bytes";
  EXPECT_EQ(out.rfind(expected, 0), 0u) << out;
  EXPECT_NE(out.find("locked already, RLIMIT_MEMLOCK soft limit 65536 bytes"), std::string::npos) << out;
  EXPECT_EQ(out.find('\n'), std::string::npos) << out;
}

}  // namespace
}  // namespace enclave::crypto
