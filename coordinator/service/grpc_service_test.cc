#include "coordinator/service/grpc_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/grpc_auth_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: grpc-demo
model:
  input_shape: [784]
  layers:
    - {type: linear, out: 8}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training: {global_batch: 8, micro_batch: 4, epochs: 1, optimizer: {type: sgd, lr: 0.1}}
parallel: {schedule: gpipe, planner: uniform, stages: 2, devices: 2}
)";

std::chrono::system_clock::time_point Deadline(int seconds = 10) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

TEST(ToGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  grpc::Status s = ToGrpcStatus(absl::NotFoundError("no job job-9"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no job job-9");
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A new user's 100000-character job id came back as RESOURCE_EXHAUSTED "received initial
// metadata size exceeds limit" instead of "no job ...": a message is cut to fit, at a whole
// UTF-8 character.
TEST(ToGrpcStatusTest, AHugeMessageIsCutToFitTheMetadata) {
  const std::string id = "job-" + std::string(100000, 'x');
  grpc::Status s = ToGrpcStatus(absl::NotFoundError("no job " + id));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no job job-" + std::string(kMaxStatusMessageBytes - 11, 'x') +
                                   " ... (" + std::to_string(100011 - kMaxStatusMessageBytes) +
                                   " more bytes)");
  // "é" is 2 bytes: a cut between them moves before the character.
  std::string accents;
  while (accents.size() < kMaxStatusMessageBytes + 10) accents += "\xC3\xA9";
  const std::string cut = ToGrpcStatus(absl::InvalidArgumentError("x" + accents)).error_message();
  EXPECT_EQ(cut.substr(0, cut.find(" ... ")).size(), kMaxStatusMessageBytes - 1);
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.measure_profiles = false;  // MeasuredProfileTest plays the measuring worker
    options.db_path = FreshDbPath();
    options.tick_interval_ms = 20;
    options.watch_min_interval_ms = 10;
    auto svc = CoordinatorService::Create(options);
    ASSERT_TRUE(svc.ok()) << svc.status();
    service_ = std::move(*svc);
    service_->Start();
    auth_ = std::make_unique<TestGrpcAuth>(options.db_path);
    auto server = GrpcServer::Start("127.0.0.1:0", service_.get(), auth_->auth());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    coordinator_ = v1::Coordinator::NewStub(channel);
    workers_ = v1::WorkerControl::NewStub(channel);
  }

  void TearDown() override {
    if (service_) service_->Shutdown();
    if (server_) server_->Shutdown(absl::Seconds(2));
  }

  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<TestGrpcAuth> auth_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  std::unique_ptr<v1::WorkerControl::Stub> workers_;
};

// Found by a security review: `dapplectl workers` shows every user a worker's host and pid, and
// a registration from them with the join token was taken for that worker's own retry, answered
// with its id and a fresh credential (then used to forge its reports). Only the worker
// process's secret instance key makes a retry. And a worker named after a user is refused
// without being listed as a worker.
TEST_F(GrpcServiceTest, ALiveWorkersHostAndPidGetNeitherItsIdNorACredential) {
  ASSERT_TRUE(auth_->store->CreateTenant("team-b").ok());
  ASSERT_TRUE(auth_->store->CreateUser("team-b", "bob", auth::Role::kUser).ok());
  auto reg = [&](const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp) {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->join_token);
    return workers_->RegisterWorker(&ctx, req, resp);
  };
  v1::RegisterWorkerRequest genuine;
  genuine.set_hostname("node-9");
  genuine.set_pid(3219);
  genuine.add_devices("cpu");
  genuine.set_instance_key("00112233445566778899aabbccddeeff");
  v1::RegisterWorkerResponse first;
  ASSERT_TRUE(reg(genuine, &first).ok());
  for (const char* key : {"", "ffeeddccbbaa99887766554433221100"}) {
    v1::RegisterWorkerRequest forged = genuine;
    forged.set_instance_key(key);
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(reg(forged, &resp).ok());
    EXPECT_NE(resp.worker_id(), first.worker_id()) << key;
  }
  v1::RegisterWorkerResponse retried;
  ASSERT_TRUE(reg(genuine, &retried).ok());
  EXPECT_EQ(retried.worker_id(), first.worker_id());

  v1::RegisterWorkerRequest squatter = genuine;
  squatter.set_name("bob");
  squatter.set_instance_key("0123");
  v1::RegisterWorkerResponse refused;
  const grpc::Status s = reg(squatter, &refused);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.error_message(), "worker id bob is the name of a user, not of a worker");
  v1::ListWorkersResponse listed;
  ASSERT_TRUE(service_->ListWorkers(auth::TestAdmin(), {}, &listed).ok());
  for (const v1::WorkerInfo& w : listed.workers()) EXPECT_NE(w.id(), "bob");
}

TEST_F(GrpcServiceTest, SubmitGetAndWatchThroughARealStub) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(kSpec);
  submit.set_source_name("demo.yaml");
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->admin_token);
    ctx.set_deadline(Deadline());
    grpc::Status s = coordinator_->SubmitJob(&ctx, submit, &submitted);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(submitted.job().id(), "job-1");
  EXPECT_EQ(submitted.job().state(), v1::JOB_STATE_PENDING);

  v1::GetJobRequest get;
  get.set_job_id("job-1");
  v1::Job job;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->admin_token);
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(coordinator_->GetJob(&ctx, get, &job).ok());
  }
  EXPECT_EQ(job.name(), "grpc-demo");
  EXPECT_EQ(job.spec_yaml(), kSpec);

  // Watch: the first event is the PENDING snapshot; a cancel ends the stream with CANCELLED.
  grpc::ClientContext watch_ctx;
  AddToken(&watch_ctx, auth_->admin_token);
  watch_ctx.set_deadline(Deadline());
  v1::WatchJobRequest watch;
  watch.set_job_id("job-1");
  auto reader = coordinator_->WatchJob(&watch_ctx, watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.job().state(), v1::JOB_STATE_PENDING);
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->admin_token);
    ctx.set_deadline(Deadline());
    v1::CancelJobRequest cancel;
    cancel.set_job_id("job-1");
    v1::Job cancelled;
    ASSERT_TRUE(coordinator_->CancelJob(&ctx, cancel, &cancelled).ok());
  }
  v1::JobState last = event.job().state();
  while (reader->Read(&event)) last = event.job().state();
  EXPECT_EQ(last, v1::JOB_STATE_CANCELLED);
  grpc::Status finished = reader->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
}

TEST_F(GrpcServiceTest, ErrorsArriveWithTheirCodeAndMessage) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: x\ntrainig: {}\n");
  submit.set_source_name("bad.yaml");
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  AddToken(&ctx, auth_->admin_token);
  ctx.set_deadline(Deadline());
  grpc::Status s = coordinator_->SubmitJob(&ctx, submit, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("bad.yaml"));
  EXPECT_THAT(s.error_message(), HasSubstr("trainig"));

  grpc::ClientContext ctx2;
  AddToken(&ctx2, auth_->admin_token);
  ctx2.set_deadline(Deadline());
  v1::GetJobRequest get;
  get.set_job_id("job-9");
  v1::Job job;
  s = coordinator_->GetJob(&ctx2, get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no job job-9");

  // Both services share the port.
  grpc::ClientContext ctx3;
  AddToken(&ctx3, auth_->store->IssueWorkerCredential("w-5")->token);
  ctx3.set_deadline(Deadline());
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w-5");
  v1::HeartbeatResponse hb_resp;
  ASSERT_TRUE(workers_->Heartbeat(&ctx3, hb, &hb_resp).ok());
  EXPECT_TRUE(hb_resp.unknown_worker());
}

TEST_F(GrpcServiceTest, ShutdownEndsAnOpenWatchPromptly) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(kSpec);
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->admin_token);
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(coordinator_->SubmitJob(&ctx, submit, &submitted).ok());
  }
  grpc::ClientContext watch_ctx;
  AddToken(&watch_ctx, auth_->admin_token);
  watch_ctx.set_deadline(Deadline());
  v1::WatchJobRequest watch;
  watch.set_job_id("job-1");
  auto reader = coordinator_->WatchJob(&watch_ctx, watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));

  const absl::Time start = absl::Now();
  service_->Shutdown();
  server_->Shutdown(absl::Seconds(2));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  while (reader->Read(&event)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

// The server alone (as main.cc shuts down: server first, then the service) must end an open
// watch with UNAVAILABLE, the code clients reconnect on, and not leave it to be cancelled
// (CANCELLED) when the grace runs out.
TEST_F(GrpcServiceTest, ServerShutdownEndsAnOpenWatchWithUnavailableWellBeforeTheGrace) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(kSpec);
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->admin_token);
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(coordinator_->SubmitJob(&ctx, submit, &submitted).ok());
  }
  grpc::ClientContext watch_ctx;
  AddToken(&watch_ctx, auth_->admin_token);
  watch_ctx.set_deadline(Deadline());
  v1::WatchJobRequest watch;
  watch.set_job_id("job-1");
  auto reader = coordinator_->WatchJob(&watch_ctx, watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));

  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  while (reader->Read(&event)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(s.error_message(), "coordinator is shutting down");
}

}  // namespace
}  // namespace dapple::coordinator

namespace dapple::coordinator {
namespace {

TEST_F(GrpcServiceTest, APortInUseIsRefusedNamingTheReason) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->port());
  auto second = GrpcServer::Start(address, service_.get(), auth_->auth());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot listen on ", address, ": address already in use"));
}

TEST_F(GrpcServiceTest, DeregisterWorkerThroughARealStub) {
  v1::RegisterWorkerResponse registered;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, auth_->join_token);
    ctx.set_deadline(Deadline());
    ASSERT_TRUE(workers_->RegisterWorker(&ctx, {}, &registered).ok());
  }
  EXPECT_EQ(registered.worker_credential().size(), 85u);
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(registered.worker_id());
  v1::DeregisterWorkerResponse resp;
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, registered.worker_credential());
    ctx.set_deadline(Deadline());
    grpc::Status s = workers_->DeregisterWorker(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  grpc::ClientContext ctx;
  AddToken(&ctx, registered.worker_credential());
  ctx.set_deadline(Deadline());
  grpc::Status again = workers_->DeregisterWorker(&ctx, req, &resp);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(again.error_message(), "unknown worker " + registered.worker_id());
}

}  // namespace
}  // namespace dapple::coordinator
