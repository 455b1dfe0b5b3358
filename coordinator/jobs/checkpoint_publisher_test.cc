#include "coordinator/jobs/checkpoint_publisher.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/checkpoint_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Kind = CheckpointPublisher::Outcome::Kind;

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.mutable_model()->add_layers()->set_type("flatten");
  s.mutable_training()->set_global_batch(128);
  s.mutable_training()->set_seed(3);
  s.mutable_training()->set_epochs(1);
  s.mutable_training()->mutable_optimizer()->set_type("sgd");
  s.mutable_training()->mutable_optimizer()->set_lr(0.05);
  return s;
}

v1::ParallelPlanSummary TwoStages() {
  v1::ParallelPlanSummary p;
  v1::PlanStageSummary* a = p.add_stages();
  a->set_first_layer(0);
  a->set_last_layer(2);
  a->set_replicas(1);
  v1::PlanStageSummary* b = p.add_stages();
  b->set_first_layer(3);
  b->set_last_layer(5);
  b->set_replicas(1);
  return p;
}

class CheckpointPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-pub-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    pub_ = std::make_unique<CheckpointPublisher>(2);
    pub_->OnJobStarted("job-1", root_ + "/job-1", Spec(), TwoStages(), 0);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes the shard file a worker would and returns its report.
  v1::ProgressReport Shard(int64_t step, int stage, const std::string& content = "shard-bytes") {
    const std::string dir = root_ + "/job-1/" + PartialCheckpointDirName(step);
    fs::create_directories(dir);
    std::ofstream(dir + "/" + ShardFileName(stage, 0)) << content;
    v1::ProgressReport r;
    r.set_job_id("job-1");
    r.set_kind(v1::PROGRESS_CHECKPOINT);
    r.set_step(step);
    r.set_stage(stage);
    r.set_checkpoint_file(ShardFileName(stage, 0));
    r.set_checkpoint_bytes(static_cast<int64_t>(content.size()));
    return r;
  }

  std::string root_;
  std::unique_ptr<CheckpointPublisher> pub_;
  std::vector<v1::CheckpointInfo> published_;
};

TEST_F(CheckpointPublisherTest, ReplicatedStagesPublishOneShardPerStage) {
  v1::ParallelPlanSummary plan = TwoStages();
  plan.mutable_stages(0)->set_replicas(2);
  plan.mutable_stages(1)->set_replicas(2);
  pub_->OnJobStarted("job-1", root_ + "/job-1", Spec(), plan, 0);
  EXPECT_EQ(pub_->OnReport(Shard(2, 0), published_, 1000).kind, Kind::kWaiting);
  // Replica 0 of each stage writes the stage's shard: two shards publish four ranks' weights.
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(2, 1), published_, 1000);
  ASSERT_EQ(o.kind, Kind::kPublished) << o.message;
  absl::StatusOr<v1::CheckpointManifest> m = ReadCheckpointManifest(o.info.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shards_size(), 2);
  // A shard from another replica is not expected: the checkpoint is abandoned, naming it.
  v1::ProgressReport other = Shard(4, 1);
  other.set_replica(1);
  other.set_checkpoint_file(ShardFileName(1, 1));
  o = pub_->OnReport(other, published_, 2000);
  EXPECT_EQ(o.kind, Kind::kAbandoned);
  EXPECT_NE(o.message.find("stage 1 replica 1 reported a shard: only replica 0 of a stage writes "
                           "one"),
            std::string::npos)
      << o.message;
}

// An interleaved plan (each stage two chunks): one shard per stage, its entry listing the
// stage's chunks, whose layers the loader reads from it (worker/checkpoint/checkpoint_loader.h).
TEST_F(CheckpointPublisherTest, InterleavedStagesListTheirChunks) {
  v1::ParallelPlanSummary plan;
  plan.set_schedule("interleaved");
  const int bounds[2][2][2] = {{{0, 1}, {4, 4}}, {{2, 3}, {5, 5}}};  // [stage][chunk]
  for (const auto& stage_bounds : bounds) {
    v1::PlanStageSummary* stage = plan.add_stages();
    stage->set_replicas(1);
    stage->set_first_layer(stage_bounds[0][0]);
    stage->set_last_layer(stage_bounds[0][1]);
    for (const auto& b : stage_bounds) {
      v1::StageRange* r = stage->add_chunks();
      r->set_first_layer(b[0]);
      r->set_last_layer(b[1]);
    }
  }
  pub_->OnJobStarted("job-1", root_ + "/job-1", Spec(), plan, 0);
  EXPECT_EQ(pub_->OnReport(Shard(2, 0), published_, 1000).kind, Kind::kWaiting);
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(2, 1), published_, 1000);
  ASSERT_EQ(o.kind, Kind::kPublished) << o.message;
  absl::StatusOr<v1::CheckpointManifest> m = ReadCheckpointManifest(o.info.path());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards_size(), 2);
  for (int s = 0; s < 2; ++s) {
    const v1::CheckpointShardEntry& e = m->shards(s);
    EXPECT_EQ(e.first_layer(), bounds[s][0][0]);
    EXPECT_EQ(e.last_layer(), bounds[s][0][1]);
    ASSERT_EQ(e.chunks_size(), 2);
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(e.chunks(c).first_layer(), bounds[s][c][0]);
      EXPECT_EQ(e.chunks(c).last_layer(), bounds[s][c][1]);
    }
  }
}

TEST(DefaultCheckpointRootTest, NextToTheDatabase) {
  EXPECT_EQ(DefaultCheckpointRoot("/var/lib/dapple/dapple.db"), "/var/lib/dapple/checkpoints");
  EXPECT_EQ(DefaultCheckpointRoot("dapple.db"), "checkpoints");
}

TEST_F(CheckpointPublisherTest, PublishesWhenEveryRankReported) {
  EXPECT_EQ(pub_->JobDir("job-1"), root_ + "/job-1");
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(4, 1), published_, 1000);
  EXPECT_EQ(o.kind, Kind::kWaiting);
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step-4"));
  o = pub_->OnReport(Shard(4, 0, "longer shard bytes"), published_, 2000);
  ASSERT_EQ(o.kind, Kind::kPublished) << o.message;
  EXPECT_EQ(o.info.step(), 4);
  EXPECT_EQ(o.info.path(), root_ + "/job-1/step-4");
  EXPECT_EQ(o.info.bytes(), 11 + 18);
  EXPECT_EQ(o.info.reason(), "periodic");
  EXPECT_EQ(o.info.created_unix_ms(), 2000);
  ASSERT_EQ(o.checkpoints.size(), 1u);
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step-4.partial"));

  absl::StatusOr<v1::CheckpointManifest> m = ReadCheckpointManifest(o.info.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->job_id(), "job-1");
  EXPECT_EQ(m->step(), 4);
  EXPECT_EQ(m->epoch(), 1);
  EXPECT_EQ(m->seed(), 3u);
  EXPECT_EQ(m->samples_seen(), 4 * 128);
  EXPECT_EQ(m->learning_rate(), 0.05);
  EXPECT_EQ(m->spec().training().global_batch(), 128);
  EXPECT_EQ(m->plan().stages_size(), 2);
  ASSERT_EQ(m->shards_size(), 2);
  EXPECT_EQ(m->shards(0).stage(), 0);
  EXPECT_EQ(m->shards(0).first_layer(), 0);
  EXPECT_EQ(m->shards(0).last_layer(), 2);
  EXPECT_EQ(m->shards(0).file(), "stage0.replica0.shard");
  EXPECT_EQ(m->shards(0).bytes(), 18);
  EXPECT_EQ(m->shards(1).first_layer(), 3);
  // A late duplicate changes nothing.
  EXPECT_EQ(pub_->OnReport(Shard(4, 1), published_, 3000).kind, Kind::kIgnored);
}

TEST_F(CheckpointPublisherTest, KeepsTheNewest) {
  for (int64_t step : {2, 4, 6}) {
    pub_->OnReport(Shard(step, 0), published_, step);
    CheckpointPublisher::Outcome o = pub_->OnReport(Shard(step, 1), published_, step);
    ASSERT_EQ(o.kind, Kind::kPublished);
    published_ = o.checkpoints;
  }
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(published_[0].step(), 4);
  EXPECT_EQ(published_[1].step(), 6);
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step-2"));
  EXPECT_TRUE(fs::exists(root_ + "/job-1/step-4/manifest.pb"));
}

TEST_F(CheckpointPublisherTest, ARankErrorAbandonsTheStep) {
  pub_->OnReport(Shard(4, 0), published_, 1);
  v1::ProgressReport failed;
  failed.set_job_id("job-1");
  failed.set_kind(v1::PROGRESS_CHECKPOINT);
  failed.set_step(4);
  failed.set_stage(1);
  failed.set_message("stage 1 is already past step 4 (at step 6)");
  CheckpointPublisher::Outcome o = pub_->OnReport(failed, published_, 2);
  ASSERT_EQ(o.kind, Kind::kAbandoned);
  EXPECT_THAT(o.message, HasSubstr("checkpoint after step 4 of job job-1 abandoned: stage 1 "
                                   "replica 0: stage 1 is already past step 4"));
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step-4.partial"));
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step-4"));
  EXPECT_EQ(pub_->OnReport(Shard(4, 1), published_, 3).kind, Kind::kIgnored);
}

TEST_F(CheckpointPublisherTest, AShardOfAnotherSizeOrNameAbandons) {
  v1::ProgressReport r = Shard(4, 0);
  r.set_checkpoint_bytes(999);
  pub_->OnReport(r, published_, 1);
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(4, 1), published_, 2);
  ASSERT_EQ(o.kind, Kind::kAbandoned);
  EXPECT_THAT(o.message, HasSubstr("has 11 bytes, its rank reported 999"));

  r = Shard(6, 0);
  r.set_checkpoint_file("../../etc/passwd");
  o = pub_->OnReport(r, published_, 3);
  ASSERT_EQ(o.kind, Kind::kAbandoned);
  EXPECT_THAT(o.message, HasSubstr("expected 'stage0.replica0.shard'"));
}

TEST_F(CheckpointPublisherTest, OnDemandStepLiesAheadAndIsCarriedUntilPublished) {
  EXPECT_EQ(pub_->RequestedStep("job-1"), 0);
  // No step time known yet: the minimum lead.
  pub_->OnStep("job-1", 10, 0, 0);
  EXPECT_EQ(*pub_->RequestOnDemand("job-1", 100), 12);
  EXPECT_EQ(pub_->RequestedStep("job-1"), 12);
  EXPECT_EQ(*pub_->RequestOnDemand("job-1", 100), 12);  // still pending: the same step
  pub_->OnReport(Shard(12, 0), published_, 1);
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(12, 1), published_, 2);
  ASSERT_EQ(o.kind, Kind::kPublished);
  EXPECT_EQ(o.info.reason(), "on demand");
  EXPECT_EQ(pub_->RequestedStep("job-1"), 0);

  // 0.1 s steps: 2 s is 20 steps ahead of the newest report; capped at the last step.
  pub_->OnStep("job-1", 30, 0.1, 0);
  pub_->OnStep("job-1", 31, 0.1, 0);
  EXPECT_EQ(*pub_->RequestOnDemand("job-1", 100), 51);
  pub_->OnReport(Shard(51, 0), published_, 3);
  v1::ProgressReport failed;
  failed.set_job_id("job-1");
  failed.set_step(51);
  failed.set_stage(1);
  failed.set_message("past it");
  EXPECT_EQ(pub_->OnReport(failed, published_, 4).kind, Kind::kAbandoned);
  EXPECT_EQ(pub_->RequestedStep("job-1"), 0);
  EXPECT_EQ(*pub_->RequestOnDemand("job-1", 40), 40);
}

TEST_F(CheckpointPublisherTest, TimedCheckpointsAreRequestedAheadAndRestartTheClock) {
  v1::JobSpec spec = Spec();
  spec.mutable_training()->set_max_steps(100);
  spec.mutable_training()->set_checkpoint_every_minutes(0.5);  // 30 s
  pub_->OnJobStarted("job-1", root_ + "/job-1", spec, TwoStages(), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 1, 1.0, 1000), 0);  // the clock starts at the first report
  EXPECT_EQ(pub_->OnStep("job-1", 20, 1.0, 30999), 0);
  EXPECT_EQ(pub_->RequestedStep("job-1"), 0);
  // 30 s passed: 1 s steps, so 2 s ahead is the minimum lead of 2 steps.
  EXPECT_EQ(pub_->OnStep("job-1", 30, 1.0, 31000), 32);
  EXPECT_EQ(pub_->RequestedStep("job-1"), 32);
  EXPECT_EQ(pub_->OnStep("job-1", 31, 1.0, 90000), 0);  // one request at a time
  EXPECT_EQ(*pub_->RequestOnDemand("job-1", 100), 32);  // dapplectl checkpoint joins it
  pub_->OnReport(Shard(32, 0), published_, 40000);
  CheckpointPublisher::Outcome o = pub_->OnReport(Shard(32, 1), published_, 40000);
  ASSERT_EQ(o.kind, Kind::kPublished);
  EXPECT_EQ(o.info.reason(), "timed");
  EXPECT_EQ(pub_->RequestedStep("job-1"), 0);
  // The publish restarted the clock: due again 30 s after 40 s.
  EXPECT_EQ(pub_->OnStep("job-1", 40, 1.0, 69999), 0);
  // A periodic checkpoint restarts it as well.
  pub_->OnReport(Shard(40, 0), published_, 60000);
  ASSERT_EQ(pub_->OnReport(Shard(40, 1), published_, 60000).kind, Kind::kPublished);
  EXPECT_EQ(pub_->OnStep("job-1", 41, 1.0, 89999), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 42, 1.0, 90000), 44);
  // Near the end the request is capped at the last step; at the last step nothing is due.
  pub_->OnJobStarted("job-1", root_ + "/job-1", spec, TwoStages(), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 99, 1.0, 0), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 99, 1.0, 30000), 100);
  pub_->OnJobStarted("job-1", root_ + "/job-1", spec, TwoStages(), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 100, 1.0, 0), 0);
  EXPECT_EQ(pub_->OnStep("job-1", 100, 1.0, 30000), 0);
}

TEST_F(CheckpointPublisherTest, OnDemandRefusals) {
  absl::StatusOr<int64_t> s = pub_->RequestOnDemand("job-9", 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  pub_->OnStep("job-1", 100, 0.1, 0);
  s = pub_->RequestOnDemand("job-1", 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("already reached its last step 100"));
  pub_->OnJobEnded("job-1");
  EXPECT_EQ(pub_->OnReport(Shard(4, 0), published_, 1).kind, Kind::kIgnored);
}

TEST_F(CheckpointPublisherTest, AResumedJobCountsFromItsFirstStep) {
  pub_->OnJobStarted("job-2", root_ + "/job-2", Spec(), TwoStages(), 40);
  EXPECT_EQ(*pub_->RequestOnDemand("job-2", 100), 42);
}

}  // namespace
}  // namespace dapple::coordinator
