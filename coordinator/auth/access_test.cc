#include "coordinator/auth/access.h"

#include "coordinator/auth/test_identities.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::auth {
namespace {

v1::Job JobOf(const std::string& tenant) {
  v1::Job job;
  job.set_id("job-3");
  job.set_tenant(tenant);
  return job;
}

TEST(AccessTest, UsersSeeTheirTenantsJobsAdminsAll) {
  EXPECT_TRUE(CanAccessJob(TestUser("team-a", "alice"), JobOf("team-a")));
  EXPECT_FALSE(CanAccessJob(TestUser("team-a", "alice"), JobOf("team-b")));
  EXPECT_FALSE(CanAccessJob(TestUser("team-a", "alice"), JobOf("")));  // an admin's job
  EXPECT_TRUE(CanAccessJob(TestAdmin(), JobOf("team-b")));
  EXPECT_TRUE(CanAccessJob(TestAdmin(), JobOf("")));
  EXPECT_FALSE(CanAccessJob(TestWorker("w-1"), JobOf("")));
  EXPECT_FALSE(CanAccessJob(TestJoin(), JobOf("")));
  // A user without a tenant (never made by CredentialStore) sees nothing, not the admins' jobs.
  EXPECT_FALSE(CanAccessJob(TestUser("", "nobody"), JobOf("")));
  const absl::Status s = CheckJobAccess(TestUser("team-a", "alice"), JobOf("team-b"));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "job job-3 belongs to another tenant");
}

TEST(AccessTest, EachServiceItsCallers) {
  EXPECT_TRUE(CheckService(TestAdmin(), Service::kAdmin).ok());
  EXPECT_EQ(CheckService(TestUser("t", "u"), Service::kAdmin).message(), "admin only");
  EXPECT_EQ(CheckService(TestWorker("w-1"), Service::kAdmin).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckService(TestUser("t", "u"), Service::kCoordinator).ok());
  EXPECT_TRUE(CheckService(TestAdmin(), Service::kCoordinator).ok());
  EXPECT_EQ(CheckService(TestWorker("w-1"), Service::kCoordinator).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckService(TestJoin(), Service::kCoordinator).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckService(TestWorker("w-1"), Service::kWorkerControl).ok());
  EXPECT_TRUE(CheckService(TestJoin(), Service::kWorkerControl).ok());
  EXPECT_EQ(CheckService(TestUser("t", "u"), Service::kWorkerControl).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckService(TestAdmin(), Service::kWorkerControl).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(AccessTest, AWorkerActsForItselfOnly) {
  EXPECT_TRUE(CheckWorker(TestWorker("w-1"), "w-1").ok());
  const absl::Status other = CheckWorker(TestWorker("w-1"), "w-2");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(), "the credential of worker w-1 may not act for worker w-2");
  EXPECT_EQ(CheckWorker(TestJoin(), "_join").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckWorker(TestAdmin(), "admin").code(), absl::StatusCode::kPermissionDenied);
}

TEST(AccessTest, CheckpointFoldersPerTenant) {
  EXPECT_EQ(TenantCheckpointDir("/ck", "team-a"), "/ck/team-a");
  EXPECT_EQ(TenantCheckpointDir("/ck", ""), "/ck/_admin");
}

}  // namespace
}  // namespace dapple::coordinator::auth
