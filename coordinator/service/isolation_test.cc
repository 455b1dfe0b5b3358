// The isolation matrix of issue 16 (docs/security.md, "Who may call what"): every RPC of the
// Coordinator, WorkerControl and Admin services through a real GrpcServer on 127.0.0.1, real
// channels and a real SQLite file, called as: no token, a malformed token, a revoked token, an
// expired token (simulated clock), another tenant's user, the job's owner, an admin, and a worker
// credential (used for the Coordinator and Admin services, and for another worker's calls).
// Each answer is the documented code, and no answer carries the other tenant's job in any field.
// Then hostile input: a 1 MB token, binary metadata, and 2000 failed logins, which must not slow
// a valid user's calls beyond the bound stated below and are counted. Last, what outlives one
// call: open WatchJob streams end once their token is revoked or expires, and ListWorkers hides
// which job (and stage) another tenant's worker runs.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/auth/identity.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/grpc_auth_test_util.h"
#include "coordinator/service/grpc_service.h"
#include "dapple/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using grpc::StatusCode;

constexpr char kSpec[] = R"(name: iso
model:
  input_shape: [784]
  layers:
    - {type: linear, out: 8}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training: {global_batch: 8, micro_batch: 4, epochs: 1, optimizer: {type: sgd, lr: 0.1}}
parallel: {schedule: gpipe, planner: uniform, stages: 2, devices: 2, device_type: cpu}
)";

constexpr int64_t kStart = 1'800'000'000'000;

// A caller of the matrix: the token it sends ("" : none).
struct Caller {
  std::string name;
  std::string token;
};

// A WatchJob stream on job-1, read to its end on its own thread.
struct OpenWatch {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  std::thread thread;
  std::atomic<bool> ended{false};
  grpc::Status status;  // once ended
  std::chrono::steady_clock::time_point ended_at;

  ~OpenWatch() {
    ctx.TryCancel();
    if (thread.joinable()) thread.join();
  }
  // True when the stream ended within `limit`.
  bool WaitEnded(std::chrono::milliseconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!ended.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ended.load();
  }
};

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.db_path = FreshDbPath();
    options.measure_profiles = false;
    options.now_unix_ms = [this] { return now_.load(); };
    options.stall_grace_ms = 0;
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    service_ = *std::move(svc);
    auth_ = std::make_unique<TestGrpcAuth>(options.db_path, [this] { return now_.load(); });
    auth::CredentialStore& store = *auth_->store;
    ASSERT_TRUE(store.CreateTenant("team-a").ok());
    ASSERT_TRUE(store.CreateTenant("team-b").ok());
    // Each tenant may run 2 cpu devices (docs/scheduling.md): the quotas are not under test.
    for (const char* tenant : {"team-a", "team-b"}) {
      v1::SetTenantQuotaRequest quota;
      quota.set_tenant(tenant);
      v1::DeviceQuota* d = quota.mutable_quota()->add_devices();
      d->set_device_type("cpu");
      d->set_nominal(2);
      v1::Tenant described;
      ASSERT_TRUE(service_->SetTenantQuota(auth::TestAdmin(), quota, &described).ok());
    }
    ASSERT_TRUE(store.CreateUser("team-a", "alice", auth::Role::kUser).ok());
    ASSERT_TRUE(store.CreateUser("team-b", "bob", auth::Role::kUser).ok());
    alice_ = store.IssueToken("alice", std::nullopt)->token;
    bob_ = store.IssueToken("bob", std::nullopt)->token;
    auto revoked = store.IssueToken("alice", std::nullopt);
    ASSERT_TRUE(store.RevokeToken(revoked->id).ok());
    revoked_ = revoked->token;
    expired_ = store.IssueToken("alice", 1000)->token;
    auto server = GrpcServer::Start("127.0.0.1:0", service_.get(), auth_->auth());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    coordinator_ = v1::Coordinator::NewStub(channel);
    workers_ = v1::WorkerControl::NewStub(channel);
    admin_ = v1::Admin::NewStub(channel);

    // Two workers join; alice's job-1 runs on them, bob's job-2 waits.
    for (std::string* id : {&w1_, &w2_}) {
      v1::RegisterWorkerRequest req;
      req.set_hostname("localhost");
      req.add_devices("cpu");
      v1::RegisterWorkerResponse resp;
      grpc::ClientContext ctx;
      AddToken(&ctx, auth_->join_token);
      ASSERT_TRUE(workers_->RegisterWorker(&ctx, req, &resp).ok());
      *id = resp.worker_id();
      credential_[*id] = resp.worker_credential();
    }
    ASSERT_EQ(Submit(alice_), "job-1");
    ASSERT_EQ(Submit(bob_), "job-2");
    service_->Tick();
    now_ += 2000;  // the expired token's ttl is 1 s
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(1));
    if (service_) service_->Shutdown();
  }

  std::string Submit(const std::string& token) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    grpc::Status s = coordinator_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job().id();
  }

  static void Prepare(grpc::ClientContext* ctx, const std::string& token) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) {
      ctx->AddMetadata("authorization", token.rfind("Bearer", 0) == 0 ? token : "Bearer " + token);
    }
  }

  // Every Coordinator RPC on job `job` as `token`: name -> status; `leaks` collects every job id
  // an answer names.
  std::map<std::string, grpc::Status> CoordinatorCalls(const std::string& token,
                                                       const std::string& job,
                                                       std::vector<std::string>* seen_jobs) {
    std::map<std::string, grpc::Status> out;
    auto note = [&](const std::string& id) {
      if (!id.empty()) seen_jobs->push_back(id);
    };
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::GetJobRequest req;
      req.set_job_id(job);
      v1::Job resp;
      out["GetJob"] = coordinator_->GetJob(&ctx, req, &resp);
      note(resp.id());
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::ListJobsResponse resp;
      out["ListJobs"] = coordinator_->ListJobs(&ctx, {}, &resp);
      for (const v1::Job& j : resp.jobs()) note(j.id());
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::WatchJobRequest req;
      req.set_job_id(job);
      auto reader = coordinator_->WatchJob(&ctx, req);
      v1::JobEvent event;
      if (reader->Read(&event)) {
        note(event.job().id());
        ctx.TryCancel();
        while (reader->Read(&event)) note(event.job().id());
        out["WatchJob"] = grpc::Status::OK;
        (void)reader->Finish();
      } else {
        out["WatchJob"] = reader->Finish();
      }
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::ListWorkersResponse resp;
      out["ListWorkers"] = coordinator_->ListWorkers(&ctx, {}, &resp);
      for (const v1::WorkerInfo& w : resp.workers()) note(w.job_id());
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::PlanJobRequest req;
      req.set_spec_yaml(kSpec);
      v1::PlanJobResponse resp;
      out["PlanJob"] = coordinator_->PlanJob(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::CheckpointJobRequest req;
      req.set_job_id(job);
      v1::CheckpointJobResponse resp;
      out["CheckpointJob"] = coordinator_->CheckpointJob(&ctx, req, &resp);
      note(resp.job().id());
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::GetJobTraceRequest req;
      req.set_job_id(job);
      v1::JobTrace resp;
      out["GetJobTrace"] = coordinator_->GetJobTrace(&ctx, req, &resp);
      note(resp.job_id());
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::GetJobLogsRequest req;
      req.set_job_id(job);
      v1::GetJobLogsResponse resp;
      out["GetJobLogs"] = coordinator_->GetJobLogs(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::WhoAmIResponse resp;
      out["WhoAmI"] = coordinator_->WhoAmI(&ctx, {}, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::SubmitJobRequest req;
      req.set_spec_yaml("name: x\ntrainig: {}\n");  // refused after authentication
      v1::SubmitJobResponse resp;
      grpc::Status s = coordinator_->SubmitJob(&ctx, req, &resp);
      // A valid caller gets the spec's INVALID_ARGUMENT: it passed authentication.
      out["SubmitJob"] = s.error_code() == StatusCode::INVALID_ARGUMENT ? grpc::Status::OK : s;
    }
    {  // Last: it ends the job.
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::CancelJobRequest req;
      req.set_job_id(job);
      v1::Job resp;
      grpc::Status s = coordinator_->CancelJob(&ctx, req, &resp);
      // A job cancelled by an earlier caller of the matrix: FAILED_PRECONDITION after the checks.
      out["CancelJob"] = s.error_code() == StatusCode::FAILED_PRECONDITION ? grpc::Status::OK : s;
      note(resp.id());
    }
    return out;
  }

  // Every WorkerControl RPC as `token`, acting for worker `worker_id` (rank stage 0 of job-1
  // is w1_'s).
  std::map<std::string, grpc::Status> WorkerCalls(const std::string& token,
                                                  const std::string& worker_id) {
    std::map<std::string, grpc::Status> out;
    const std::string job = "job-1";
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::HeartbeatRequest req;
      req.set_worker_id(worker_id);
      v1::HeartbeatResponse resp;
      out["Heartbeat"] = workers_->Heartbeat(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::PublishEndpointRequest req;
      req.set_job_id(job);
      req.set_worker_id(worker_id);
      req.set_stage(0);
      v1::PublishEndpointResponse resp;
      out["PublishEndpoint"] = workers_->PublishEndpoint(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::GetPeersRequest req;
      req.set_job_id(job);
      v1::GetPeersResponse resp;
      out["GetPeers"] = workers_->GetPeers(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::ProgressReport req;
      req.set_worker_id(worker_id);
      req.set_job_id(job);
      req.set_stage(0);
      req.set_kind(v1::PROGRESS_STEP);
      req.set_step(1);
      v1::ProgressAck resp;
      out["ReportProgress"] = workers_->ReportProgress(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::StoreSetRequest req;
      req.set_job_id(job);
      req.set_worker_id(worker_id);
      req.set_key("k");
      req.set_value("v");
      v1::StoreSetResponse resp;
      out["StoreSet"] = workers_->StoreSet(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::StoreGetRequest req;
      req.set_job_id(job);
      req.set_worker_id(worker_id);
      req.add_keys("k");
      v1::StoreGetResponse resp;
      out["StoreGet"] = workers_->StoreGet(&ctx, req, &resp);
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::ReportProfileRequest req;
      req.set_worker_id(worker_id);
      req.set_request_id("profile-none");
      v1::ReportProfileResponse resp;
      grpc::Status s = workers_->ReportProfile(&ctx, req, &resp);
      // The right worker gets NOT_FOUND for the unknown request: it passed the checks.
      out["ReportProfile"] = s.error_code() == StatusCode::NOT_FOUND ? grpc::Status::OK : s;
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      v1::RegisterWorkerResponse resp;
      out["RegisterWorker"] = workers_->RegisterWorker(&ctx, {}, &resp);
    }
    return out;  // DeregisterWorker: see WorkerCredentialsActForTheirOwnWorkerAndRanks
  }

  // Every Admin RPC as `token` (read-only or harmless arguments).
  std::map<std::string, grpc::Status> AdminCalls(const std::string& token) {
    std::map<std::string, grpc::Status> out;
    auto call = [&](const char* name, auto method, const auto& request, auto* response) {
      grpc::ClientContext ctx;
      Prepare(&ctx, token);
      out[name] = ((*admin_).*method)(&ctx, request, response);
    };
    v1::Tenant tenant;
    v1::CreateTenantRequest create;
    create.set_name(absl::StrCat("t-", ++admin_calls_));
    call("CreateTenant", &v1::Admin::Stub::CreateTenant, create, &tenant);
    v1::ListTenantsResponse tenants;
    call("ListTenants", &v1::Admin::Stub::ListTenants, v1::ListTenantsRequest(), &tenants);
    v1::CreateUserRequest user;
    user.set_name(absl::StrCat("u-", admin_calls_));
    user.set_tenant("team-a");
    v1::User created;
    call("CreateUser", &v1::Admin::Stub::CreateUser, user, &created);
    v1::ListUsersResponse users;
    call("ListUsers", &v1::Admin::Stub::ListUsers, v1::ListUsersRequest(), &users);
    v1::IssueTokenRequest issue;
    issue.set_user("alice");
    v1::IssueTokenResponse issued;
    call("IssueToken", &v1::Admin::Stub::IssueToken, issue, &issued);
    v1::ListTokensResponse tokens;
    call("ListTokens", &v1::Admin::Stub::ListTokens, v1::ListTokensRequest(), &tokens);
    v1::RevokeTokenRequest revoke;
    revoke.set_id(issued.info().id().empty() ? "0000000000000000" : issued.info().id());
    v1::RevokeTokenResponse revoked;
    call("RevokeToken", &v1::Admin::Stub::RevokeToken, revoke, &revoked);
    v1::ListAuditResponse audit;
    call("ListAudit", &v1::Admin::Stub::ListAudit, v1::ListAuditRequest(), &audit);
    // Quotas are the scheduler's (CoordinatorService); whatever it answers, an admin got past
    // the checks (UNIMPLEMENTED until it is written).
    v1::SetTenantQuotaRequest quota;
    quota.set_tenant("team-a");
    v1::Tenant quoted;
    call("SetTenantQuota", &v1::Admin::Stub::SetTenantQuota, quota, &quoted);
    v1::SetCohortRequest cohort;
    cohort.mutable_cohort()->set_name("c");
    v1::Cohort set;
    call("SetCohort", &v1::Admin::Stub::SetCohort, cohort, &set);
    for (const char* name : {"SetTenantQuota", "SetCohort"}) {
      const StatusCode code = out[name].error_code();
      if (code != StatusCode::UNAUTHENTICATED && code != StatusCode::PERMISSION_DENIED) {
        out[name] = grpc::Status::OK;
      }
    }
    return out;
  }

  // WatchJob on job-1 as `token`, open (its first snapshot read), then read on a thread.
  std::unique_ptr<OpenWatch> Watch(const std::string& token) {
    auto w = std::make_unique<OpenWatch>();
    Prepare(&w->ctx, token);
    v1::WatchJobRequest req;
    req.set_job_id("job-1");
    w->reader = coordinator_->WatchJob(&w->ctx, req);
    v1::JobEvent first;
    EXPECT_TRUE(w->reader->Read(&first));
    w->thread = std::thread([w = w.get()] {
      v1::JobEvent event;
      while (w->reader->Read(&event)) {
      }
      w->status = w->reader->Finish();
      w->ended_at = std::chrono::steady_clock::now();
      w->ended = true;
    });
    return w;
  }

  // Admin.RevokeToken of `token`'s id, as the admin.
  grpc::Status Revoke(const std::string& token) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth_->admin_token);
    v1::RevokeTokenRequest req;
    req.set_id(token.substr(4, 16));
    v1::RevokeTokenResponse resp;
    return admin_->RevokeToken(&ctx, req, &resp);
  }

  std::atomic<int64_t> now_{kStart};
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<TestGrpcAuth> auth_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  std::unique_ptr<v1::WorkerControl::Stub> workers_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::string alice_, bob_, revoked_, expired_;
  std::string w1_, w2_;
  std::map<std::string, std::string> credential_;
  int admin_calls_ = 0;
};

void ExpectAll(const std::map<std::string, grpc::Status>& answers, StatusCode code,
               const std::string& who) {
  for (const auto& [rpc, status] : answers) {
    EXPECT_EQ(status.error_code(), code) << who << " " << rpc << ": " << status.error_message();
  }
}

TEST_F(IsolationTest, BadTokensAreUnauthenticatedOnEveryRpc) {
  const std::string malformed = "dpl_not-a-token";
  for (const Caller& c :
       {Caller{"no token", ""}, Caller{"malformed", malformed}, Caller{"not bearer", "Basic abc"},
        Caller{"revoked", revoked_}, Caller{"expired", expired_}}) {
    std::vector<std::string> seen;
    ExpectAll(CoordinatorCalls(c.token, "job-1", &seen), StatusCode::UNAUTHENTICATED, c.name);
    ExpectAll(WorkerCalls(c.token, w1_), StatusCode::UNAUTHENTICATED, c.name);
    ExpectAll(AdminCalls(c.token), StatusCode::UNAUTHENTICATED, c.name);
    EXPECT_TRUE(seen.empty()) << c.name;
  }
  // The message says which, never the secret.
  grpc::ClientContext ctx;
  Prepare(&ctx, expired_);
  v1::Job job;
  v1::GetJobRequest req;
  req.set_job_id("job-1");
  grpc::Status s = coordinator_->GetJob(&ctx, req, &job);
  EXPECT_EQ(s.error_message(), "token " + expired_.substr(0, 20) + " expired");
  EXPECT_EQ(s.error_message().find(expired_.substr(21)), std::string::npos);
}

TEST_F(IsolationTest, AnotherTenantsUserIsDeniedTheJobAndSeesNothingOfIt) {
  std::vector<std::string> seen;
  std::map<std::string, grpc::Status> bob = CoordinatorCalls(bob_, "job-1", &seen);
  for (const char* rpc :
       {"GetJob", "WatchJob", "CancelJob", "CheckpointJob", "GetJobTrace", "GetJobLogs"}) {
    EXPECT_EQ(bob[rpc].error_code(), StatusCode::PERMISSION_DENIED) << rpc;
    EXPECT_EQ(bob[rpc].error_message(), "job job-1 belongs to another tenant") << rpc;
  }
  for (const char* rpc : {"ListJobs", "ListWorkers", "PlanJob", "WhoAmI", "SubmitJob"}) {
    EXPECT_TRUE(bob[rpc].ok()) << rpc << ": " << bob[rpc].error_message();
  }
  // Bob's answers name his own job-2 at most: never job-1, in any field.
  for (const std::string& id : seen) EXPECT_EQ(id, "job-2");
  // ... and job-1 still runs: bob's cancel did nothing.
  std::vector<std::string> alice_seen;
  EXPECT_TRUE(CoordinatorCalls(alice_, "job-2", &alice_seen)["ListJobs"].ok());
  for (const std::string& id : alice_seen) EXPECT_EQ(id, "job-1");
}

TEST_F(IsolationTest, TheOwnerAndAnAdminMayDoEverything) {
  std::vector<std::string> seen;
  std::map<std::string, grpc::Status> alice = CoordinatorCalls(alice_, "job-1", &seen);
  ExpectAll(alice, StatusCode::OK, "owner");
  for (const std::string& id : seen) EXPECT_EQ(id, "job-1");
  seen.clear();
  std::map<std::string, grpc::Status> admin = CoordinatorCalls(auth_->admin_token, "job-2", &seen);
  // job-2 is PENDING: a checkpoint needs a running job (after the access check).
  EXPECT_EQ(admin["CheckpointJob"].error_code(), StatusCode::FAILED_PRECONDITION);
  admin.erase("CheckpointJob");
  ExpectAll(admin, StatusCode::OK, "admin");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "job-1"), seen.end());  // admins see all
  ExpectAll(AdminCalls(auth_->admin_token), StatusCode::OK, "admin");
}

TEST_F(IsolationTest, UsersAndWorkersAreDeniedTheServicesNotTheirs) {
  ExpectAll(AdminCalls(alice_), StatusCode::PERMISSION_DENIED, "user on Admin");
  ExpectAll(AdminCalls(credential_[w1_]), StatusCode::PERMISSION_DENIED, "worker on Admin");
  ExpectAll(AdminCalls(auth_->join_token), StatusCode::PERMISSION_DENIED, "join on Admin");
  std::vector<std::string> seen;
  ExpectAll(CoordinatorCalls(credential_[w1_], "job-1", &seen), StatusCode::PERMISSION_DENIED,
            "worker on Coordinator");
  ExpectAll(CoordinatorCalls(auth_->join_token, "job-1", &seen), StatusCode::PERMISSION_DENIED,
            "join on Coordinator");
  EXPECT_TRUE(seen.empty());
  for (const std::string& token : {alice_, auth_->admin_token}) {
    ExpectAll(WorkerCalls(token, w1_), StatusCode::PERMISSION_DENIED, "user/admin on workers");
  }
  // Every refused Admin call is in the audit log.
  grpc::ClientContext ctx;
  Prepare(&ctx, auth_->admin_token);
  v1::ListAuditRequest req;
  req.set_tenant("team-a");
  v1::ListAuditResponse audit;
  ASSERT_TRUE(admin_->ListAudit(&ctx, req, &audit).ok());
  int refused = 0;
  for (const v1::AuditEntry& e : audit.entries()) {
    if (e.user() == "alice" && e.result() == "PERMISSION_DENIED") ++refused;
  }
  EXPECT_GE(refused, 10);
  // A filter naming no tenant is refused, not answered with nothing (a misspelt tenant read as
  // "no audit entries").
  for (const bool users : {false, true}) {
    grpc::ClientContext missing;
    Prepare(&missing, auth_->admin_token);
    grpc::Status s;
    if (users) {
      v1::ListUsersRequest list;
      list.set_tenant("team-zzz");
      v1::ListUsersResponse found;
      s = admin_->ListUsers(&missing, list, &found);
    } else {
      v1::ListAuditRequest list;
      list.set_tenant("team-zzz");
      v1::ListAuditResponse found;
      s = admin_->ListAudit(&missing, list, &found);
    }
    EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND) << users;
    EXPECT_EQ(s.error_message(),
              "no tenant team-zzz: create it first with dapplectl admin tenant create team-zzz");
  }
}

TEST_F(IsolationTest, WorkerCredentialsActForTheirOwnWorkerAndRanks) {
  // w2's credential used for w1's calls: refused on every call naming w1.
  std::map<std::string, grpc::Status> stolen = WorkerCalls(credential_[w2_], w1_);
  EXPECT_TRUE(stolen["GetPeers"].ok());        // names no worker: w2 runs a rank of job-1
  EXPECT_TRUE(stolen["RegisterWorker"].ok());  // registers a new worker
  stolen.erase("GetPeers");
  stolen.erase("RegisterWorker");
  ExpectAll(stolen, StatusCode::PERMISSION_DENIED, "w2 as w1");
  // The join token registers only.
  std::map<std::string, grpc::Status> join = WorkerCalls(auth_->join_token, w1_);
  EXPECT_TRUE(join["RegisterWorker"].ok());
  join.erase("RegisterWorker");
  ExpectAll(join, StatusCode::PERMISSION_DENIED, "join token");
  // w1 for itself and its rank (stage 0 of job-1): every call goes through.
  std::map<std::string, grpc::Status> own = WorkerCalls(credential_[w1_], w1_);
  ExpectAll(own, StatusCode::OK, "w1 as w1");
  // w2 reporting for stage 0, which is w1's: a rank not assigned to it.
  grpc::ClientContext ctx;
  Prepare(&ctx, credential_[w2_]);
  v1::ProgressReport report;
  report.set_worker_id(w2_);
  report.set_job_id("job-1");
  report.set_stage(0);
  report.set_kind(v1::PROGRESS_STEP);
  v1::ProgressAck ack;
  EXPECT_EQ(workers_->ReportProgress(&ctx, report, &ack).error_code(),
            StatusCode::PERMISSION_DENIED);
  // A worker of another job may not use job-1's store (a fresh worker runs no rank).
  v1::RegisterWorkerResponse fresh;
  {
    grpc::ClientContext c;
    Prepare(&c, auth_->join_token);
    ASSERT_TRUE(workers_->RegisterWorker(&c, {}, &fresh).ok());
  }
  std::map<std::string, grpc::Status> outsider =
      WorkerCalls(fresh.worker_credential(), fresh.worker_id());
  for (const char* rpc :
       {"GetPeers", "StoreSet", "StoreGet", "PublishEndpoint", "ReportProgress"}) {
    EXPECT_EQ(outsider[rpc].error_code(), StatusCode::PERMISSION_DENIED) << rpc;
  }
  // Deregistering another worker: refused; itself: OK.
  v1::DeregisterWorkerRequest dereg;
  dereg.set_worker_id(w1_);
  v1::DeregisterWorkerResponse dereg_resp;
  {
    grpc::ClientContext c;
    Prepare(&c, credential_[w2_]);
    EXPECT_EQ(workers_->DeregisterWorker(&c, dereg, &dereg_resp).error_code(),
              StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext c;
    Prepare(&c, credential_[w1_]);
    EXPECT_TRUE(workers_->DeregisterWorker(&c, dereg, &dereg_resp).ok());
  }
}

TEST_F(IsolationTest, HostileMetadataIsRefusedWithoutHarm) {
  auto get = [&](const std::function<void(grpc::ClientContext*)>& prepare) {
    // Each call on its own connection: the oversized header below makes the server reset its
    // connection, and a reset (GOAWAY) can reach a call already sent on a shared channel as
    // UNAVAILABLE even with wait_for_ready. A fresh channel per call keeps every verdict the
    // server's own.
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    auto stub = v1::Coordinator::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);
    prepare(&ctx);
    v1::GetJobRequest req;
    req.set_job_id("job-1");
    v1::Job job;
    return stub->GetJob(&ctx, req, &job);
  };
  // 1 MB of token: gRPC's metadata limit (8 KiB) or the length check refuses it.
  EXPECT_FALSE(get([](grpc::ClientContext* c) {
                 c->AddMetadata("authorization", "Bearer dpl_" + std::string(1 << 20, 'a'));
               }).ok());
  // Binary metadata: a -bin header of the name (gRPC's client refuses to send bytes outside
  // printable ASCII in a text header), and printable garbage of the token's length.
  EXPECT_EQ(get([](grpc::ClientContext* c) {
              c->AddMetadata("authorization", "Bearer " + std::string(85, '%'));
            }).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(get([](grpc::ClientContext* c) {
              c->AddMetadata("authorization-bin", std::string("\x00\xff\x10", 3));
            }).error_code(),
            StatusCode::UNAUTHENTICATED);
  // Two authorization entries: refused, even when one is valid.
  EXPECT_EQ(get([&](grpc::ClientContext* c) {
              c->AddMetadata("authorization", "Bearer " + alice_);
              c->AddMetadata("authorization", "Bearer " + bob_);
            }).error_code(),
            StatusCode::UNAUTHENTICATED);
  // The server is unharmed.
  EXPECT_TRUE(get([&](grpc::ClientContext* c) {
                c->AddMetadata("authorization", "Bearer " + alice_);
              }).ok());
}

// 2000 failed logins (well-formed unknown tokens: each costs a hash and a database lookup, the
// most expensive refusal) from 4 threads while a valid user calls GetJob. The stated bound
// (docs/security.md): the valid user's median call during the flood is at most 5x its median
// before the flood plus 20 ms. Every failure is counted.
TEST_F(IsolationTest, ThousandsOfFailedLoginsDoNotSlowAValidUser) {
  auto valid_call_ms = [&] {
    grpc::ClientContext ctx;
    Prepare(&ctx, alice_);
    v1::GetJobRequest req;
    req.set_job_id("job-1");
    v1::Job job;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status s = coordinator_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> before;
  for (int i = 0; i < 60; ++i) before.push_back(valid_call_ms());
  const int failures_before = auth_->failures.load();
  std::atomic<int> sent{0};
  std::vector<std::thread> flood;
  for (int t = 0; t < 4; ++t) {
    flood.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        grpc::ClientContext ctx;
        Prepare(&ctx, absl::StrCat("dpl_", absl::StrFormat("%016x", t * 1000 + i), "_",
                                   std::string(64, 'a')));
        v1::ListJobsResponse resp;
        (void)coordinator_->ListJobs(&ctx, {}, &resp);
        sent.fetch_add(1);
      }
    });
  }
  std::vector<double> during;
  while (sent.load() < 1900) during.push_back(valid_call_ms());
  for (std::thread& t : flood) t.join();
  if (during.empty()) during.push_back(valid_call_ms());
  const double base = median(before);
  const double flooded = median(during);
  RecordProperty("valid_median_ms_before", absl::StrCat(base));
  RecordProperty("valid_median_ms_during_2000_failures", absl::StrCat(flooded));
  std::printf(
      "valid GetJob median: %.2f ms before, %.2f ms during 2000 failed logins (%zu calls)\n", base,
      flooded, during.size());
  EXPECT_LE(flooded, 5 * base + 20.0);
  EXPECT_EQ(auth_->failures.load() - failures_before, 2000);
}

// A stream opened with a token ends with UNAUTHENTICATED within the bound of docs/security.md
// (1 s) once that token is revoked or expires; another token's revocation ends nothing.
TEST_F(IsolationTest, RevokedOrExpiredTokensEndOpenWatches) {
  auth::CredentialStore& store = *auth_->store;
  const std::string revocable = store.IssueToken("alice", std::nullopt)->token;
  const std::string expiring = store.IssueToken("alice", 5000)->token;
  std::unique_ptr<OpenWatch> revoked = Watch(revocable);
  std::unique_ptr<OpenWatch> expired = Watch(expiring);
  std::unique_ptr<OpenWatch> kept = Watch(alice_);
  auto still_open = [](const OpenWatch& w) {
    // A stream may end by itself only with the job (OK), never UNAUTHENTICATED.
    return !w.ended.load() || w.status.error_code() != StatusCode::UNAUTHENTICATED;
  };
  ASSERT_TRUE(Revoke(bob_).ok());  // moves the store's revocation generation
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(revoked->ended.load());
  EXPECT_FALSE(expired->ended.load());
  EXPECT_TRUE(still_open(*kept));

  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Revoke(revocable).ok());
  ASSERT_TRUE(revoked->WaitEnded(std::chrono::seconds(5)));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(revoked->ended_at - start);
  std::printf("revoked token: its open WatchJob ended %lld ms after RevokeToken\n",
              static_cast<long long>(took.count()));
  EXPECT_LE(took.count(), 1000);
  EXPECT_EQ(revoked->status.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(revoked->status.error_message(), "token " + revocable.substr(0, 20) + " was revoked");
  EXPECT_FALSE(expired->ended.load());
  EXPECT_TRUE(still_open(*kept));

  start = std::chrono::steady_clock::now();
  now_ += 6000;  // past the expiring token's 5 s
  ASSERT_TRUE(expired->WaitEnded(std::chrono::seconds(5)));
  took = std::chrono::duration_cast<std::chrono::milliseconds>(expired->ended_at - start);
  std::printf("expired token: its open WatchJob ended %lld ms after the expiry\n",
              static_cast<long long>(took.count()));
  EXPECT_LE(took.count(), 1000);
  EXPECT_EQ(expired->status.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(expired->status.error_message(), "token " + expiring.substr(0, 20) + " expired");
  EXPECT_TRUE(still_open(*kept));

  // Revoking it again changes nothing and says so.
  const grpc::Status again = Revoke(revocable);
  EXPECT_EQ(again.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(again.error_message(), "token " + revocable.substr(0, 20) + " is already revoked");
}

// A worker busy with another tenant's job: every field of its WorkerInfo as the owner and an
// admin see it, but job id and stage, which are cleared (dapplectl shows BUSY, "-", "-").
TEST_F(IsolationTest, AnotherTenantSeesAWorkerBusyButNotWithWhat) {
  auto workers = [&](const std::string& token) {
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(coordinator_->ListWorkers(&ctx, {}, &resp).ok());
    std::map<std::string, v1::WorkerInfo> by_id;
    for (const v1::WorkerInfo& w : resp.workers()) by_id[w.id()] = w;
    return by_id;
  };
  const std::map<std::string, v1::WorkerInfo> admin = workers(auth_->admin_token);
  const std::map<std::string, v1::WorkerInfo> alice = workers(alice_);
  const std::map<std::string, v1::WorkerInfo> bob = workers(bob_);
  ASSERT_EQ(admin.size(), 2u);
  ASSERT_EQ(bob.size(), 2u);
  std::set<int> stages;
  for (const auto& [id, full] : admin) {
    EXPECT_EQ(full.state(), v1::WORKER_STATE_BUSY) << id;
    EXPECT_EQ(full.job_id(), "job-1") << id;
    stages.insert(full.stage());
    EXPECT_EQ(alice.at(id).SerializeAsString(), full.SerializeAsString()) << id;
    v1::WorkerInfo hidden = full;
    hidden.clear_job_id();
    hidden.clear_stage();
    EXPECT_EQ(bob.at(id).SerializeAsString(), hidden.SerializeAsString())
        << id << ": " << bob.at(id).ShortDebugString();
  }
  EXPECT_EQ(stages, (std::set<int>{0, 1}));  // stage 1 would read as 0 if it were not hidden
}

}  // namespace
}  // namespace dapple::coordinator
