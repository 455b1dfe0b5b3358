// CoordinatorService running jobs with replicated stages (DAPPLE's split-concat, PipeDream's
// 1F1B-RR): one worker per rank, a dead replica, and the store served to a job's ranks only;
// through direct handler calls.

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/profile/model_profile.h"
#include "coordinator/auth/test_identities.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/jobs/test_db.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/coordinator_service_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The demo on 2 stages x 2 replicas (planner balanced: D = devices / stages).
std::string ReplicatedSpec() {
  return absl::StrReplaceAll(kSpec, {{"stages: {P}", "stages: 2"}, {"devices: {P}", "devices: 4"}});
}

absl::Status Publish(CoordinatorService* svc, const std::string& job, const std::string& worker,
                     int stage, int replica) {
  v1::PublishEndpointRequest pub;
  pub.set_job_id(job);
  pub.set_worker_id(worker);
  pub.set_stage(stage);
  pub.set_replica(replica);
  pub.set_ucx_address(absl::StrCat("addr-", stage, "-", replica));
  v1::PublishEndpointResponse resp;
  return svc->PublishEndpoint(auth::TestWorker((pub).worker_id()), pub, &resp);
}
TEST_F(CoordinatorServiceTest, ReplicatedStagesRunOneWorkerPerRank) {
  // Plan, placement and assignments: (stage, replica) by rank index; every program all-reduces
  // once per step.
  const std::vector<std::string> w = StartTwoByTwo(ReplicatedSpec(), "dapple");
  ASSERT_EQ(w.size(), 4u);
  v1::Job job = Get("job-1");
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.plan().stages(1).devices_size(), 2);
  EXPECT_EQ(job.plan().stages(1).hostnames_size(), 2);

  // Rendezvous: complete once all four ranks published; a rank outside the plan is refused.
  v1::GetPeersRequest peers_req;
  peers_req.set_job_id("job-1");
  v1::GetPeersResponse peers;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(svc_->GetPeers(auth::TestWorker("w-1"), peers_req, &peers).ok());
    EXPECT_FALSE(peers.complete());
    ASSERT_TRUE(Publish(svc_.get(), "job-1", w[i], i / 2, i % 2).ok()) << w[i];
  }
  peers.Clear();
  ASSERT_TRUE(svc_->GetPeers(auth::TestWorker("w-1"), peers_req, &peers).ok());
  EXPECT_TRUE(peers.complete());
  ASSERT_EQ(peers.peers_size(), 4);
  EXPECT_EQ(peers.peers(3).replica(), 1);
  EXPECT_EQ(peers.peers(3).worker_id(), "w-4");
  absl::Status s = Publish(svc_.get(), "job-1", w[0], 0, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job job-1 has replicas 0..1 of stage 0, got replica 2");
  s = Publish(svc_.get(), "job-1", w[0], 1, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "worker w-1 is not stage 1 replica 1 of job job-1 (w-4 is)");

  // Only replica 0 of the last stage counts the loss; replica 1's report is stats only.
  for (int replica : {0, 1}) {
    ASSERT_TRUE(Report(w[2 + replica], "job-1", 1, v1::PROGRESS_STEP, [&](v1::ProgressReport* r) {
                  r->set_replica(replica);
                  r->set_step(1);
                  r->set_loss(replica == 0 ? 2.3 : 99.0);
                  r->set_step_seconds(0.5);
                  r->mutable_stats()->set_step(1);
                }).ok());
  }
  job = Get("job-1");
  EXPECT_EQ(job.metrics().step(), 1);
  EXPECT_THAT(job.step_losses(), ElementsAre(2.3));
  EXPECT_EQ(job.stage_metrics_size(), 2);  // both last-stage ranks' stats

  // DONE from every rank (not every stage) ends it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Report(w[i], "job-1", i / 2, v1::PROGRESS_DONE, [&](v1::ProgressReport* r) {
                  r->set_replica(i % 2);
                }).ok());
    EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING) << i;
  }
  ASSERT_TRUE(Report(w[3], "job-1", 1, v1::PROGRESS_DONE, [&](v1::ProgressReport* r) {
                r->set_replica(1);
              }).ok());
  EXPECT_EQ(Get("job-1").state(), v1::JOB_STATE_SUCCEEDED);
}

// PipeDream's 1F1B-RR: the demo on 2 stages x 2 replicas under schedule pipedream (M = 8).
TEST_F(CoordinatorServiceTest, PipeDreamStagesRunReplicasOneWorkerPerRank) {
  const std::string spec =
      absl::StrReplaceAll(ReplicatedSpec(), {{"schedule: dapple", "schedule: pipedream"}});
  StartTwoByTwo(spec, "pipedream");
  EXPECT_EQ(Get("job-1").plan().micro_batches(), 8);

  // More replicas per stage than micro-batches per step: refused at submit, nothing stored.
  auto refused = Submit(absl::StrReplaceAll(
      spec, {{"devices: 4", "devices: 8"}, {"micro_batch: 32", "micro_batch: 128"}}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("parallel.devices 8 with parallel.stages 2 gives 4 replicas per stage, but "
                        "parallel.schedule pipedream sends whole micro-batches round-robin"));
  // Planner pipedream chooses replicas itself, at most M = 2 per stage.
  auto chosen = Submit(absl::StrReplaceAll(spec, {{"planner: balanced", "planner: pipedream"},
                                                  {"stages: 2", "stages: auto"},
                                                  {"micro_batch: 32", "micro_batch: 128"}}));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  for (const v1::PlanStageSummary& stage : chosen->plan().stages()) {
    EXPECT_LE(stage.replicas(), 2);
  }
}

TEST_F(CoordinatorServiceTest, DeadReplicaFailsTheJobNamingIt) {
  std::vector<std::string> w;
  for (int i = 0; i < 4; ++i) w.push_back(Register());
  ASSERT_TRUE(Submit(ReplicatedSpec()).ok());
  svc_->Tick();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Heartbeat(w[i]).has_assignment());
  now_ += 3000;
  for (int i : {0, 1, 3}) Heartbeat(w[i], "job-1");
  now_ += 3000;  // w-3 (stage 1 replica 0) silent for 6 s
  svc_->Tick();
  v1::Job job = Get("job-1");
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("worker w-3 (stage 1 replica 0 of job job-1) stopped "
                                       "heartbeating"));
}

TEST_F(CoordinatorServiceTest, StoreServesOnlyTheJobsRanksWhileItRuns) {
  std::vector<std::string> w;
  for (int i = 0; i < 4; ++i) w.push_back(Register());
  const std::string outsider = Register();
  ASSERT_TRUE(Submit(ReplicatedSpec()).ok());
  svc_->Tick();
  ASSERT_EQ(Get("job-1").state(), v1::JOB_STATE_RUNNING);

  auto set = [&](const std::string& worker, const std::string& key, const std::string& value) {
    v1::StoreSetRequest req;
    req.set_job_id("job-1");
    req.set_worker_id(worker);
    req.set_key(key);
    req.set_value(value);
    v1::StoreSetResponse resp;
    return svc_->StoreSet(auth::TestWorker((req).worker_id()), req, &resp);
  };
  auto get = [&](const std::string& worker, std::vector<std::string> keys,
                 v1::StoreGetResponse* resp) {
    v1::StoreGetRequest req;
    req.set_job_id("job-1");
    req.set_worker_id(worker);
    for (const std::string& k : keys) req.add_keys(k);
    resp->Clear();
    return svc_->StoreGet(auth::TestWorker((req).worker_id()), req, resp);
  };
  v1::StoreGetResponse resp;
  ASSERT_TRUE(get(w[0], {"job-1/stage-0/1"}, &resp).ok());
  EXPECT_FALSE(resp.ready());
  EXPECT_FALSE(resp.job_ended());
  ASSERT_TRUE(set(w[1], "job-1/stage-0/1", std::string("b\0b", 3)).ok());
  ASSERT_TRUE(set(w[0], "job-1/stage-0/0", "a").ok());
  ASSERT_TRUE(get(w[0], {"job-1/stage-0/1", "job-1/stage-0/0"}, &resp).ok());
  EXPECT_TRUE(resp.ready());
  EXPECT_THAT(resp.values(), ElementsAre(std::string("b\0b", 3), "a"));

  // Only the job's workers; bounded keys and values; clear errors.
  absl::Status s = set(outsider, "k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "worker w-5 runs no rank of job job-1: it may not use its store");
  EXPECT_EQ(get(outsider, {"k"}, &resp).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(set("w-9", "k", "v").code(), absl::StatusCode::kNotFound);
  s = set(w[0], "", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "store key of 0 bytes: a key must have 1..1024 bytes");
  s = set(w[0], "big", std::string(CoordinatorService::kMaxStoreValueBytes + 1, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("store value of key 'big' has 1048577 bytes, more than the "
                                     "maximum 1048576"));
  EXPECT_EQ(get(w[0], {}, &resp).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 2; i < CoordinatorService::kMaxStoreKeys; ++i) {
    ASSERT_TRUE(set(w[2], absl::StrCat("k", i), "").ok()) << i;
  }
  s = set(w[2], "one-too-many", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 store is full: 4096 keys (the most a job may set)");
  EXPECT_TRUE(set(w[2], "k2", "replaced").ok());  // replacing needs no new key

  // Forgotten when the job ends: waiting ranks are told, setters refused.
  ASSERT_TRUE(Cancel("job-1").ok());
  ASSERT_TRUE(get(w[0], {"job-1/stage-0/0"}, &resp).ok());
  EXPECT_TRUE(resp.job_ended());
  EXPECT_FALSE(resp.ready());
  s = set(w[0], "k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 is not running (CANCELLED): its store is gone");
}

}  // namespace
}  // namespace dapple::coordinator
