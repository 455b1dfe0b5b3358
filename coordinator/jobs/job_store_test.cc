#include "coordinator/jobs/job_store.h"

#include <fstream>

#include "coordinator/jobs/test_db.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

v1::Job MakeJob(int n, v1::JobState state) {
  v1::Job job;
  job.set_id(absl::StrCat("job-", n));
  job.set_name(absl::StrCat("name-", n));
  job.set_state(state);
  job.set_created_unix_ms(1000 + n);
  job.set_updated_unix_ms(2000 + n);
  job.mutable_metrics()->set_loss(0.5 * n);
  job.add_step_losses(2.0);
  job.add_step_losses(1.5);
  return job;
}

TEST(JobStoreTest, PutThenLoadRoundTripsInSequenceOrder) {
  const std::string path = FreshDbPath();
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(MakeJob(10, v1::JOB_STATE_PENDING)).ok());
    ASSERT_TRUE((*store)->Put(MakeJob(2, v1::JOB_STATE_RUNNING)).ok());
    v1::Job replaced = MakeJob(2, v1::JOB_STATE_FAILED);
    replaced.set_message("boom");
    ASSERT_TRUE((*store)->Put(replaced).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id(), "job-2");
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ((*jobs)[0].message(), "boom");
  EXPECT_EQ((*jobs)[0].step_losses_size(), 2);
  EXPECT_EQ((*jobs)[1].id(), "job-10");
  EXPECT_DOUBLE_EQ((*jobs)[1].metrics().loss(), 5.0);
  EXPECT_EQ((*jobs)[1].created_unix_ms(), 1010);
}

// The plan made at submission, with the simulator's prediction, is part of the stored job.
TEST(JobStoreTest, ThePlansPredictionRoundTrips) {
  const std::string path = FreshDbPath();
  v1::Job job = MakeJob(1, v1::JOB_STATE_PENDING);
  v1::ParallelPlanSummary* plan = job.mutable_plan();
  plan->set_planner("dapple");
  plan->set_predicted_step_ms(12.5);
  plan->set_predicted_samples_per_second(20480);
  plan->set_profile_source("estimated from FLOPs at 50 GFLOP/s");
  plan->set_cluster_source("2 registered workers on 1 host");
  plan->set_placement_policy("fresh_first");
  plan->add_notes("one replica per stage: the worker runtime has no stage replication yet");
  plan->set_num_devices(2);
  v1::PlanStageSummary* stage = plan->add_stages();
  stage->set_forward_ms(1.25);
  stage->set_backward_ms(2.5);
  stage->set_compute_ms(30);
  stage->set_idle_ms(4);
  stage->set_comm_ms(0.5);
  stage->set_allreduce_ms(0.25);
  stage->set_peak_memory_bytes(int64_t{3} << 30);
  stage->set_peak_in_flight(2);
  stage->add_placement("local/0");
  stage->set_bubble_fraction(0.125);
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].plan().SerializeAsString(), job.plan().SerializeAsString())
      << (*jobs)[0].plan().DebugString();
  EXPECT_DOUBLE_EQ((*jobs)[0].plan().predicted_step_ms(), 12.5);
  EXPECT_EQ((*jobs)[0].plan().stages(0).peak_memory_bytes(), int64_t{3} << 30);
}

// A job stored before typed layer parameters held linear's width in LayerSpec field 2
// (legacy_out): it reads back with linear.out set.
TEST(JobStoreTest, JobsStoredBeforeTypedLayerParametersAreUpgraded) {
  const std::string path = FreshDbPath();
  v1::Job job = MakeJob(3, v1::JOB_STATE_SUCCEEDED);
  v1::LayerSpec* flatten = job.mutable_spec()->mutable_model()->add_layers();
  flatten->set_type("flatten");
  v1::LayerSpec* linear = job.mutable_spec()->mutable_model()->add_layers();
  linear->set_type("linear");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  linear->set_legacy_out(10);
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  const v1::ModelSpec& model = (*jobs)[0].spec().model();
  EXPECT_FALSE(model.layers(0).has_linear());
  EXPECT_EQ(model.layers(1).linear().out(), 10);
  EXPECT_EQ(model.layers(1).legacy_out(), 0);
#pragma GCC diagnostic pop
}

TEST(JobStoreTest, RejectsIdsNotOfTheJobForm) {
  auto store = JobStore::Open(FreshDbPath());
  ASSERT_TRUE(store.ok());
  v1::Job job = MakeJob(1, v1::JOB_STATE_PENDING);
  job.set_id("jobx");
  absl::Status s = (*store)->Put(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'jobx'"));
}

TEST(JobStoreTest, SequenceOf) {
  EXPECT_EQ(JobStore::SequenceOf("job-1"), 1);
  EXPECT_EQ(JobStore::SequenceOf("job-1234"), 1234);
  EXPECT_EQ(JobStore::SequenceOf("job-0"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-01"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job--1"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-"), -1);
  EXPECT_EQ(JobStore::SequenceOf("w-1"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-1x"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-1 "), -1);
  EXPECT_EQ(JobStore::SequenceOf("job- 1"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-+1"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-1\n"), -1);
  EXPECT_EQ(JobStore::SequenceOf("job-99999999999999999999"), -1);
}

TEST(JobStoreTest, MissingDirectoryIsAClearError) {
  auto store = JobStore::Open("/nonexistent-dapple-dir/sub/jobs.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("cannot open job database '/nonexistent-dapple-dir/sub/jobs.db'"));
}

TEST(JobStoreTest, AFileThatIsNotADatabaseIsAClearError) {
  const std::string path = FreshDbPath();
  {
    std::ofstream out(path);
    out << "this is not a sqlite database, just some text that is long enough to matter\n";
  }
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

}  // namespace
}  // namespace dapple::coordinator
