#include "enclave/common/status.h"

#include <gtest/gtest.h>

#include "enclave/common/exit_codes.h"

namespace enclave {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidInput("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, PropagatesFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_EQ(r.status().message(), "odd: 3");
}

TEST(Status, AnnotateKeepsCode) {
  Status s = AuthFailed("chunk 3").Annotate("f.sealed");
  EXPECT_EQ(s.code(), Code::kAuthFailed);
  EXPECT_EQ(s.ToString(), "authentication failed: f.sealed: chunk 3");
}

TEST(Status, ResultFromOkStatusIsInternalError) {
  Result<int> r{OkStatus()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

TEST(ExitCodes, DistinctPerCode) {
  EXPECT_EQ(ExitCodeFor(OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(InvalidInput("")), 3);
  EXPECT_EQ(ExitCodeFor(AuthFailed("")), 4);
  EXPECT_EQ(ExitCodeFor(PermissionDenied("")), 5);
  EXPECT_EQ(ExitCodeFor(NotFound("")), 6);
  EXPECT_EQ(ExitCodeFor(AlreadyExists("")), 7);
  EXPECT_EQ(ExitCodeFor(FailedPrecondition("")), 8);
  EXPECT_EQ(ExitCodeFor(Unsupported("")), 9);
  EXPECT_EQ(ExitCodeFor(Unavailable("")), 10);
  EXPECT_EQ(ExitCodeFor(IoError("")), 11);
  EXPECT_EQ(ExitCodeFor(Internal("")), 1);
}

}  // namespace
}  // namespace enclave
