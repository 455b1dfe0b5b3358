#include "worker/checkpoint/stage_checkpointer.h"

#include <unistd.h>

#include <filesystem>

#include "common/checkpoint_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class StageCheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckpt-stage-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    parity::SpecOptions o;
    o.hidden1 = 8;
    o.hidden2 = 4;
    v1::JobSpec spec = parity::ParitySpec(o);
    spec.mutable_training()->set_checkpoint_every_steps(3);
    const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
    assignment_ = parity::Assignment(spec, plan, 1, v1::RankProgram());
    assignment_.set_job_id("job-4");
    assignment_.set_checkpoint_dir(dir_ + "/job-4");
    auto backend =
        MakeCpuStageBackend(spec, plan.stages(1).first_layer(), plan.stages(1).last_layer());
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(*backend);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  v1::StageAssignment assignment_;
  std::unique_ptr<StageBackend> backend_;
  std::atomic<int64_t> requested_{0};
};

TEST_F(StageCheckpointerTest, PeriodicAndOnDemand) {
  StageCheckpointer c(assignment_, &requested_);
  EXPECT_FALSE(c.AfterStep(1, *backend_).has_value());
  EXPECT_FALSE(c.AfterStep(2, *backend_).has_value());
  std::optional<CheckpointReport> r = c.AfterStep(3, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 3);
  EXPECT_EQ(r->file, "stage1.replica0.shard");
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir_ + "/job-4/step-3.partial/" + r->file)),
            r->bytes);

  requested_ = 5;
  EXPECT_FALSE(c.AfterStep(4, *backend_).has_value());
  r = c.AfterStep(5, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 5);
  EXPECT_TRUE(fs::exists(dir_ + "/job-4/step-5.partial/stage1.replica0.shard"));
}

TEST_F(StageCheckpointerTest, AMissedRequestIsReportedOnce) {
  StageCheckpointer c(assignment_, &requested_);
  requested_ = 7;  // learnt only after step 8
  std::optional<CheckpointReport> r = c.AfterStep(8, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 7);
  EXPECT_EQ(r->file, "");
  EXPECT_EQ(r->error, "stage 1 is already past step 7 (at step 8)");
  EXPECT_FALSE(c.AfterStep(10, *backend_).has_value());
}

TEST_F(StageCheckpointerTest, ASavedRequestIsNotReportedMissedWhileAcksStillCarryIt) {
  StageCheckpointer c(assignment_, &requested_);
  requested_ = 4;
  std::optional<CheckpointReport> r = c.AfterStep(4, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 4);
  EXPECT_EQ(r->error, "");
  EXPECT_EQ(r->file, "stage1.replica0.shard");
  // The coordinator has not published step 4 yet, so the next acks still ask for it.
  EXPECT_FALSE(c.AfterStep(5, *backend_).has_value());
  EXPECT_FALSE(c.AfterStep(7, *backend_).has_value());
}

TEST_F(StageCheckpointerTest, AWriteErrorIsReportedNotFatal) {
  assignment_.set_checkpoint_dir("/proc/no-checkpoints-here");
  StageCheckpointer c(assignment_, &requested_);
  std::optional<CheckpointReport> r = c.AfterStep(3, *backend_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->file, "");
  EXPECT_THAT(r->error, HasSubstr("stage 1: cannot create checkpoint folder"));
}

TEST_F(StageCheckpointerTest, ResumeChecksTheStep) {
  StageCheckpointer writer(assignment_, &requested_);
  ASSERT_TRUE(writer.AfterStep(3, *backend_).has_value());
  // Publish by hand (the coordinator's part) with a manifest of one shard holding this stage.
  v1::CheckpointManifest m;
  m.set_format_version(kCheckpointFormatVersion);
  m.set_step(3);
  *m.mutable_spec() = assignment_.spec();
  v1::CheckpointShardEntry* e = m.add_shards();
  e->set_stage(1);
  e->set_first_layer(assignment_.plan().stages(1).first_layer());
  e->set_last_layer(assignment_.plan().stages(1).last_layer());
  e->set_file("stage1.replica0.shard");
  e->set_bytes(fs::file_size(dir_ + "/job-4/step-3.partial/stage1.replica0.shard"));
  ASSERT_TRUE(
      WriteFileAtomically(dir_ + "/job-4/step-3.partial/manifest.pb", m.SerializeAsString()).ok());
  fs::rename(dir_ + "/job-4/step-3.partial", dir_ + "/job-4/step-3");

  v1::StageAssignment resumed = assignment_;
  resumed.set_resume_manifest(dir_ + "/job-4/step-3/manifest.pb");
  resumed.set_first_step(3);
  EXPECT_TRUE(StageCheckpointer(resumed, nullptr).Resume(*backend_).ok());
  resumed.set_first_step(4);
  absl::Status s = StageCheckpointer(resumed, nullptr).Resume(*backend_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("resume from '" + dir_ +
                                     "/job-4/step-3/manifest.pb': the "
                                     "checkpoint was taken after step 3"));
}

}  // namespace
}  // namespace dapple::worker
