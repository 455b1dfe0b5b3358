// Test helper: what a GrpcServer needs to authenticate callers (grpc_auth.h), on a test's
// database, with an admin's token and the join token issued, and a way to add a token to a
// call.
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_TEST_UTIL_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "coordinator/auth/audit_log.h"
#include "coordinator/auth/authenticator.h"
#include "coordinator/auth/credential_store.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/service/grpc_auth.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {

struct TestGrpcAuth {
  // Opens the credential store and audit log on `db_path` (the coordinator's database), creates
  // admin `admin` with a token and the join token. Fails the test when it cannot.
  explicit TestGrpcAuth(const std::string& db_path,
                        std::function<int64_t()> now = WallClockUnixMs) {
    auto s = auth::CredentialStore::Open(db_path, now);
    EXPECT_TRUE(s.ok()) << s.status();
    store = *std::move(s);
    auto a = auth::AuditLog::Open(db_path, now);
    EXPECT_TRUE(a.ok()) << a.status();
    audit = *std::move(a);
    authenticator = std::make_unique<auth::Authenticator>(
        store.get(), [this](absl::string_view) { failures.fetch_add(1); });
    EXPECT_TRUE(store->CreateUser("", "admin", auth::Role::kAdmin).ok());
    admin_token = store->IssueToken("admin", std::nullopt)->token;
    join_token = store->RotateJoinToken()->token;
  }

  GrpcAuth auth() const { return GrpcAuth{authenticator.get(), store.get(), audit.get()}; }

  std::unique_ptr<auth::CredentialStore> store;
  std::unique_ptr<auth::AuditLog> audit;
  std::unique_ptr<auth::Authenticator> authenticator;
  std::string admin_token;
  std::string join_token;
  std::atomic<int> failures{0};
};

// `authorization: Bearer <token>` on `context`.
inline void AddToken(grpc::ClientContext* context, const std::string& token) {
  context->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_TEST_UTIL_H_
