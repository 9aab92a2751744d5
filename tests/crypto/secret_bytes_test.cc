#include "enclave/crypto/secret_bytes.h"

#include <gtest/gtest.h>

#include <concepts>
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

}  // namespace
}  // namespace enclave::crypto
