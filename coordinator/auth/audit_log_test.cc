#include "coordinator/auth/audit_log.h"

#include <string>

#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::auth {
namespace {

using ::dapple::coordinator::FreshDbPath;

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path_, [this] { return now_; });
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);
  }

  int64_t now_ = 5000;
  const std::string path_ = FreshDbPath();
  std::unique_ptr<AuditLog> log_;
};

TEST_F(AuditLogTest, RecordsWhoDidWhatOldestFirst) {
  ASSERT_TRUE(
      log_->Record(TestUser("team-a", "alice"), "SubmitJob", "job-1", absl::OkStatus(), "mlp.yaml")
          .ok());
  now_ = 6000;
  ASSERT_TRUE(log_->Record(TestUser("team-b", "bob"), "CancelJob", "job-1",
                           absl::PermissionDeniedError("job job-1 belongs to another tenant"),
                           "job job-1 belongs to another tenant")
                  .ok());
  absl::StatusOr<std::vector<v1::AuditEntry>> all = log_->List(0, 0, "");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].user(), "alice");
  EXPECT_EQ((*all)[0].tenant(), "team-a");
  EXPECT_EQ((*all)[0].role(), "user");
  EXPECT_EQ((*all)[0].action(), "SubmitJob");
  EXPECT_EQ((*all)[0].target(), "job-1");
  EXPECT_EQ((*all)[0].result(), "OK");
  EXPECT_EQ((*all)[0].unix_ms(), 5000);
  EXPECT_EQ((*all)[1].result(), "PERMISSION_DENIED");
  EXPECT_LT((*all)[0].seq(), (*all)[1].seq());
  // By tenant, after a seq, the newest `limit`.
  EXPECT_EQ(log_->List(0, 0, "team-b")->size(), 1u);
  EXPECT_EQ(log_->List((*all)[0].seq(), 0, "")->size(), 1u);
  absl::StatusOr<std::vector<v1::AuditEntry>> newest = log_->List(0, 1, "");
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ(newest->front().user(), "bob");
  EXPECT_EQ(log_->List(0, -1, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AuditLogTest, DetailIsOneBoundedLine) {
  ASSERT_TRUE(log_->Record(TestAdmin(), "CreateTenant", "tenant x\ny", absl::OkStatus(),
                           std::string(10000, 'a') + "\n")
                  .ok());
  const v1::AuditEntry e = log_->List(0, 0, "")->front();
  EXPECT_EQ(e.target(), "tenant x y");
  EXPECT_EQ(e.detail().size(), AuditLog::kMaxDetailBytes + 3);
  EXPECT_EQ(e.detail().find('\n'), std::string::npos);
}

TEST_F(AuditLogTest, KeptAcrossReopening) {
  ASSERT_TRUE(log_->Record(TestAdmin(), "RotateJoinToken", "join token", absl::OkStatus()).ok());
  log_.reset();
  absl::StatusOr<std::unique_ptr<AuditLog>> again = AuditLog::Open(path_, [] { return 1; });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->List(0, 0, "")->size(), 1u);
}

}  // namespace
}  // namespace dapple::coordinator::auth
