#include "dapplectl/exit_codes.h"

#include <set>

#include "grpcpp/support/status.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(ExitCodesTest, ConstantsAreTheDocumentedNumbers) {
  EXPECT_EQ(kExitOk, 0);
  EXPECT_EQ(kExitRefused, 1);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(kExitUnreachable, 3);
  EXPECT_EQ(kExitJobFailed, 4);
  EXPECT_EQ(kExitJobCancelled, 5);
  EXPECT_EQ(kExitUnauthenticated, 6);
  EXPECT_EQ(kExitPermissionDenied, 7);
  EXPECT_EQ(kExitInterrupted, 128 + 2);  // SIGINT is 2 on every POSIX system dapple runs on
}

TEST(ExitCodesTest, StatusCodeMapping) {
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kOk), kExitOk);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kInvalidArgument), kExitRefused);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kNotFound), kExitRefused);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kFailedPrecondition), kExitRefused);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kInternal), kExitRefused);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kUnimplemented), kExitRefused);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kUnavailable), kExitUnreachable);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kDeadlineExceeded), kExitUnreachable);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kUnauthenticated), kExitUnauthenticated);
  EXPECT_EQ(ExitCodeForStatusCode(absl::StatusCode::kPermissionDenied), kExitPermissionDenied);
}

TEST(ExitCodesTest, GrpcCodesShareTheNumbersOfAbslCodes) {
  // client.cc converts grpc::StatusCode to absl::StatusCode by value.
  EXPECT_EQ(static_cast<int>(grpc::StatusCode::UNAVAILABLE),
            static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED),
            static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED),
            static_cast<int>(absl::StatusCode::kUnauthenticated));
  // Every gRPC code maps to one of 0, 1, 3, 6, 7.
  for (int c = 0; c <= 16; ++c) {
    const int rc = ExitCodeForStatusCode(static_cast<absl::StatusCode>(c));
    EXPECT_TRUE(rc == kExitOk || rc == kExitRefused || rc == kExitUnreachable ||
                rc == kExitUnauthenticated || rc == kExitPermissionDenied)
        << c;
    EXPECT_EQ(rc == kExitOk, c == 0) << c;
  }
}

TEST(ExitCodesTest, JobStateMapping) {
  EXPECT_EQ(ExitCodeForJobState(v1::JOB_STATE_SUCCEEDED), kExitOk);
  EXPECT_EQ(ExitCodeForJobState(v1::JOB_STATE_FAILED), kExitJobFailed);
  EXPECT_EQ(ExitCodeForJobState(v1::JOB_STATE_CANCELLED), kExitJobCancelled);
  EXPECT_EQ(ExitCodeForJobState(v1::JOB_STATE_RUNNING), kExitUnreachable);
}

TEST(ExitCodesTest, HelpListsEveryCode) {
  const std::string help = ExitCodesHelp();
  for (const char* code : {"  0  ", "  1  ", "  2  ", "  3  ", "  4  ", "  5  ", "  130  "}) {
    EXPECT_NE(help.find(code), std::string::npos) << code;
  }
}

}  // namespace
}  // namespace dapple::ctl
