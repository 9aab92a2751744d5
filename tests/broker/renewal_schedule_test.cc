// The attested session's lease keeper (session/src/attested_job.cc): when it renews and how it retries.
// The schedule is simulated second by second against a broker that answers each renewal
// with reattest_by = now + interval (docs/protocol.md, "renew by fresh attestation").
#include <gtest/gtest.h>

#include <algorithm>

#include "enclave/session/attested_job.h"

namespace enclave {
using session::RenewalSchedule;
namespace {

// Renewals in `seconds` of a lease released at t = 0 with re-attestation interval
// `interval` (the keeper wakes at least once a second).
int RenewalsIn(int64_t seconds, int64_t interval, int64_t valid_until) {
  int64_t reattest_by = std::min(interval, valid_until);
  int64_t next = RenewalSchedule::RenewAt(0, reattest_by);
  int renewals = 0;
  for (int64_t now = 0; now < seconds && now < valid_until; ++now) {
    EXPECT_LT(now, reattest_by) << "the lease lapsed at t=" << now;
    if (now < next || reattest_by >= valid_until) continue;
    ++renewals;
    reattest_by = std::min(now + interval, valid_until);
    next = RenewalSchedule::RenewAt(now, reattest_by);
    EXPECT_GT(next, now) << "a renewal right after a renewal at t=" << now;
  }
  return renewals;
}

// After 2x the interval the keeper must not renew back to back (the first version computed
// the interval from the release's issued_at, which never moves: 582 renewals in 150 s).
TEST(RenewalScheduleTest, RenewsOncePerTwoThirdsOfTheIntervalForTheWholeLease) {
  for (int64_t interval : {30, 60, 300}) {
    SCOPED_TRACE(interval);
    const int64_t seconds = 20 * interval;
    const int n = RenewalsIn(seconds, interval, /*valid_until=*/1'000'000);
    const int expected = static_cast<int>(seconds / (interval * 2 / 3));
    EXPECT_GE(n, expected - 1);
    EXPECT_LE(n, expected + 1);
  }
  // Nothing to renew once reattest_by reaches valid_until.
  EXPECT_LE(RenewalsIn(1000, 30, 100), 4);
}

TEST(RenewalScheduleTest, RenewsTwoThirdsOfTheWayFromTheLastGrant) {
  EXPECT_EQ(RenewalSchedule::RenewAt(1000, 1030), 1020);
  EXPECT_EQ(RenewalSchedule::RenewAt(5000, 5060), 5040);
  // Never at or before the grant, even with a deadline already near (or past: clock skew).
  EXPECT_EQ(RenewalSchedule::RenewAt(1000, 1001), 1001);
  EXPECT_EQ(RenewalSchedule::RenewAt(1000, 990), 1001);
}

TEST(RenewalScheduleTest, RetriesWithBackoffBeforeTheDeadlineAndStopsOnARefusal) {
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 1, 1000), 101);
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 2, 1000), 102);
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 3, 1000), 104);
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 6, 1000), 130);
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 40, 1000), 130);
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 5, 110), 109) << "the last try comes before the deadline";
  EXPECT_EQ(RenewalSchedule::RetryAt(100, 5, 100), 101) << "never in the past";
  for (Code c : {Code::kUnavailable, Code::kIo, Code::kInternal}) EXPECT_FALSE(RenewalSchedule::Final(c));
  for (Code c : {Code::kPermissionDenied, Code::kFailedPrecondition, Code::kNotFound, Code::kInvalidInput})
    EXPECT_TRUE(RenewalSchedule::Final(c));
}

}  // namespace
}  // namespace enclave
