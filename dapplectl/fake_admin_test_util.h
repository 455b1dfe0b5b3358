// Test only: an in-process dapple.v1.Admin on 127.0.0.1 that keeps tenants, users and tokens in
// memory, for the admin client and command tests. It records every call's request and
// `authorization` metadata; with RequireToken set it answers UNAUTHENTICATED unless the call
// carries "Bearer <that token>", as the coordinator does. Thread-safe.
#ifndef DAPPLE_DAPPLECTL_FAKE_ADMIN_TEST_UTIL_H_
#define DAPPLE_DAPPLECTL_FAKE_ADMIN_TEST_UTIL_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "dapple/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dapple::ctl::testing {

// The secret part every token the fake issues contains, so tests can look for it in output.
inline constexpr char kFakeSecret[] = "5ecre7c0ffee";

class FakeAdmin final : public v1::Admin::Service {
 public:
  FakeAdmin() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeAdmin() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // Every call must carry `authorization: Bearer <token>`; "" : any call is accepted.
  void RequireToken(std::string token) {
    absl::MutexLock lock(&mu_);
    required_token_ = std::move(token);
  }
  // Every call answers `status` while it is not OK (after the token check).
  void FailAll(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(status);
  }
  // The `authorization` metadata of each call, in order ("" when absent).
  std::vector<std::string> authorizations() const {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  // The method names called, in order.
  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // The last request of each method, by method name.
  template <typename Request>
  Request last(const std::string& method) const {
    absl::MutexLock lock(&mu_);
    Request r;
    auto it = requests_.find(method);
    if (it != requests_.end()) r.ParseFromString(it->second);
    return r;
  }
  void AddTenant(v1::Tenant tenant) {
    absl::MutexLock lock(&mu_);
    tenants_[tenant.name()] = std::move(tenant);
  }
  void AddCohort(v1::Cohort cohort) {
    absl::MutexLock lock(&mu_);
    cohorts_[cohort.name()] = std::move(cohort);
  }
  void AddAudit(v1::AuditEntry entry) {
    absl::MutexLock lock(&mu_);
    audit_.push_back(std::move(entry));
  }

  grpc::Status CreateTenant(grpc::ServerContext* c, const v1::CreateTenantRequest* r,
                            v1::Tenant* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "CreateTenant", *r); !s.ok()) return s;
    if (tenants_.count(r->name()) > 0) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("tenant ", r->name(), " already exists"));
    }
    v1::Tenant& t = tenants_[r->name()];
    t.set_name(r->name());
    t.set_created_unix_ms(1000);
    *t.mutable_quota() = r->quota();
    *response = t;
    return grpc::Status::OK;
  }
  grpc::Status ListTenants(grpc::ServerContext* c, const v1::ListTenantsRequest* r,
                           v1::ListTenantsResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "ListTenants", *r); !s.ok()) return s;
    for (const auto& [name, t] : tenants_) *response->add_tenants() = t;
    for (const auto& [name, cohort] : cohorts_) *response->add_cohorts() = cohort;
    return grpc::Status::OK;
  }
  grpc::Status SetTenantQuota(grpc::ServerContext* c, const v1::SetTenantQuotaRequest* r,
                              v1::Tenant* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "SetTenantQuota", *r); !s.ok()) return s;
    auto it = tenants_.find(r->tenant());
    if (it == tenants_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no tenant ", r->tenant()));
    }
    *it->second.mutable_quota() = r->quota();
    *response = it->second;
    return grpc::Status::OK;
  }
  grpc::Status SetCohort(grpc::ServerContext* c, const v1::SetCohortRequest* r,
                         v1::Cohort* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "SetCohort", *r); !s.ok()) return s;
    cohorts_[r->cohort().name()] = r->cohort();
    *response = r->cohort();
    return grpc::Status::OK;
  }
  grpc::Status CreateUser(grpc::ServerContext* c, const v1::CreateUserRequest* r,
                          v1::User* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "CreateUser", *r); !s.ok()) return s;
    if (r->role() == "user" && tenants_.count(r->tenant()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no tenant ", r->tenant()));
    }
    v1::User& u = users_[r->name()];
    u.set_name(r->name());
    u.set_tenant(r->tenant());
    u.set_role(r->role());
    u.set_created_unix_ms(1000);
    *response = u;
    return grpc::Status::OK;
  }
  grpc::Status ListUsers(grpc::ServerContext* c, const v1::ListUsersRequest* r,
                         v1::ListUsersResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "ListUsers", *r); !s.ok()) return s;
    for (const auto& [name, u] : users_) {
      if (r->tenant().empty() || u.tenant() == r->tenant()) *response->add_users() = u;
    }
    return grpc::Status::OK;
  }
  grpc::Status IssueToken(grpc::ServerContext* c, const v1::IssueTokenRequest* r,
                          v1::IssueTokenResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "IssueToken", *r); !s.ok()) return s;
    if (users_.count(r->user()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no user ", r->user()));
    }
    v1::TokenInfo& info = tokens_[NextId()];
    info.set_id(absl::StrFormat("%016x", next_token_));
    info.set_user(r->user());
    info.set_created_unix_ms(1000);
    if (r->ttl_seconds() > 0) info.set_expires_unix_ms(1000 + r->ttl_seconds() * 1000);
    response->set_token(absl::StrCat("dpl_", info.id(), "_", kFakeSecret));
    *response->mutable_info() = info;
    return grpc::Status::OK;
  }
  grpc::Status ListTokens(grpc::ServerContext* c, const v1::ListTokensRequest* r,
                          v1::ListTokensResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "ListTokens", *r); !s.ok()) return s;
    for (const auto& [id, t] : tokens_) {
      if (r->user().empty() || t.user() == r->user()) *response->add_tokens() = t;
    }
    return grpc::Status::OK;
  }
  grpc::Status RevokeToken(grpc::ServerContext* c, const v1::RevokeTokenRequest* r,
                           v1::RevokeTokenResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "RevokeToken", *r); !s.ok()) return s;
    auto it = tokens_.find(r->id());
    if (it == tokens_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no token ", r->id()));
    }
    if (it->second.revoked_unix_ms() != 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("token dpl_", r->id(), " is already revoked"));
    }
    it->second.set_revoked_unix_ms(2000);
    *response->mutable_info() = it->second;
    return grpc::Status::OK;
  }
  grpc::Status RotateJoinToken(grpc::ServerContext* c, const v1::RotateJoinTokenRequest* r,
                               v1::IssueTokenResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "RotateJoinToken", *r); !s.ok()) return s;
    response->set_token(absl::StrCat("dpl_", NextId(), "_", kFakeSecret));
    response->mutable_info()->set_id(absl::StrFormat("%016x", next_token_));
    return grpc::Status::OK;
  }
  grpc::Status ListAudit(grpc::ServerContext* c, const v1::ListAuditRequest* r,
                         v1::ListAuditResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = Enter(c, "ListAudit", *r); !s.ok()) return s;
    for (const v1::AuditEntry& e : audit_) {
      if (r->tenant().empty() || e.tenant() == r->tenant()) *response->add_entries() = e;
    }
    return grpc::Status::OK;
  }

 private:
  std::string NextId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::StrFormat("%016x", ++next_token_);
  }

  // Records the call; the token check and FailAll.
  grpc::Status Enter(grpc::ServerContext* context, const char* method,
                     const google::protobuf::Message& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string authorization;
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      authorization.assign(it->second.data(), it->second.size());
    }
    authorizations_.push_back(authorization);
    calls_.push_back(method);
    requests_[method] = request.SerializeAsString();
    if (!required_token_.empty() && authorization != "Bearer " + required_token_) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          authorization.empty() ? "no token" : "unknown token");
    }
    return fail_;
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::string required_token_ ABSL_GUARDED_BY(mu_);
  grpc::Status fail_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Cohort> cohorts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::User> users_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::TokenInfo> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AuditEntry> audit_ ABSL_GUARDED_BY(mu_);
  int next_token_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dapple::ctl::testing

#endif  // DAPPLE_DAPPLECTL_FAKE_ADMIN_TEST_UTIL_H_
