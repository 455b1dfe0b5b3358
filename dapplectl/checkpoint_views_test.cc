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

TEST(CheckpointViewsTest, Requested) {
  v1::CheckpointJobResponse r;
  r.mutable_job()->set_id("job-3");
  r.set_step(120);
  EXPECT_EQ(RenderCheckpointRequested(r), "job-3: checkpoint after step 120 requested\n");
}

}  // namespace
}  // namespace dapple::ctl
