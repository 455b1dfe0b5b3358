#include "dapplectl/checkpoint_views.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointViewsTest, NoCheckpoints) {
  v1::Job job;
  EXPECT_EQ(RenderCheckpoints(job, 0), "CHECKPOINTS   none\n");
}

TEST(CheckpointViewsTest, ResumedAndPublished) {
  v1::Job job;
  job.set_resumed_from("/ckpt/job-1/step-40");
  v1::CheckpointInfo* c = job.add_checkpoints();
  c->set_step(60);
  c->set_path("/ckpt/job-2/step-60");
  c->set_bytes(3 * 1024 * 1024);
  c->set_reason("periodic");
  c->set_created_unix_ms(10'000);
  const std::string text = RenderCheckpoints(job, 130'000);
  EXPECT_THAT(text, HasSubstr("RESUMED FROM  /ckpt/job-1/step-40\n"));
  EXPECT_THAT(text, HasSubstr("CHECKPOINTS   1\n"));
  EXPECT_THAT(text, HasSubstr("STEP"));
  EXPECT_THAT(text, HasSubstr("/ckpt/job-2/step-60"));
  EXPECT_THAT(text, HasSubstr("3.0 MiB"));
  EXPECT_THAT(text, HasSubstr("periodic"));
  EXPECT_THAT(text, HasSubstr("2m"));
}

TEST(CheckpointViewsTest, RestartsBeforeTheCheckpoints) {
  v1::Job job;
  job.set_restarts(2);
  job.set_steps_redone(7);
  v1::JobRestart* r = job.add_restart_history();
  r->set_cause("worker_lost");
  r->set_failed_after_step(45);
  r->set_resumed_after_step(40);
  r->set_steps_redone(5);
  r->set_plan("2 stages x 1 replica");
  r->set_resumed_unix_ms(1);
  r = job.add_restart_history();  // still RESTARTING: not resumed yet
  r->set_cause("rank_error");
  r->set_failed_after_step(60);
  const std::string text = RenderCheckpoints(job, 0);
  EXPECT_THAT(text, HasSubstr("RESTARTS      2 (7 steps redone)\n"));
  EXPECT_THAT(text, HasSubstr("CAUSE"));
  EXPECT_THAT(
      text,
      HasSubstr("worker_lost   45             40              5        2 stages x 1 replica"));
  EXPECT_THAT(text, HasSubstr("rank_error    60             -               -        -"));
  EXPECT_LT(text.find("RESTARTS"), text.find("CHECKPOINTS"));
}

TEST(CheckpointViewsTest, Requested) {
  v1::CheckpointJobResponse r;
  r.mutable_job()->set_id("job-3");
  r.set_step(120);
  EXPECT_EQ(RenderCheckpointRequested(r), "job-3: checkpoint after step 120 requested\n");
}

}  // namespace
}  // namespace dapple::ctl
