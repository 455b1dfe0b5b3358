#include "dapplectl/event_views.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'700'000'600'000;

v1::JobEventRecord Event(const std::string& type, const std::string& reason,
                         const std::string& message, int64_t count, int64_t first_ms_ago,
                         int64_t last_ms_ago) {
  v1::JobEventRecord e;
  e.set_type(type);
  e.set_reason(reason);
  e.set_message(message);
  e.set_count(count);
  e.set_first_unix_ms(kNow - first_ms_ago);
  e.set_last_unix_ms(kNow - last_ms_ago);
  return e;
}

TEST(EventViewsTest, AgeOfACoalescedEventSaysHowOftenAndSinceWhen) {
  EXPECT_EQ(EventAge(Event("Normal", "Started", "x", 1, 45'000, 45'000), kNow), "45s");
  EXPECT_EQ(EventAge(Event("Warning", "SkippedStep", "x", 3, 300'000, 45'000), kNow),
            "45s (x3 over 5m)");
}

TEST(EventViewsTest, EventsTableNewestLast) {
  v1::Job job;
  *job.add_events() = Event("Normal", "Submitted", "submitted as PENDING", 1, 600'000, 600'000);
  *job.add_events() = Event("Warning", "SkippedStep", "stage 1 skipped", 2, 120'000, 60'000);
  *job.add_events() = Event("Normal", "Succeeded", "10/10 steps", 1, 1'000, 1'000);
  EXPECT_EQ(RenderJobEvents(job.events(), kNow),
            "EVENTS\n"
            "  TYPE      REASON        AGE               MESSAGE\n"
            "  Normal    Submitted     10m               submitted as PENDING\n"
            "  Warning   SkippedStep   1m (x2 over 2m)   stage 1 skipped\n"
            "  Normal    Succeeded     1s                10/10 steps\n");
}

TEST(EventViewsTest, NoEvents) {
  v1::Job job;
  EXPECT_EQ(RenderJobEvents(job.events(), kNow), "EVENTS        <none>\n");
}

TEST(EventViewsTest, DescribeIsTheDetailsThenTheEvents) {
  v1::Job job;
  job.set_id("job-4");
  job.set_name("mlp");
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_message("worker w-2 shut down");
  *job.add_events() = Event("Warning", "Failed", "worker w-2 shut down", 1, 5'000, 5'000);
  const std::string text = RenderDescribe(job, kNow);
  EXPECT_THAT(text, HasSubstr("job-4"));
  EXPECT_THAT(text, HasSubstr("FAILED"));
  EXPECT_LT(text.find("FAILED"), text.find("EVENTS"));
  EXPECT_THAT(text, HasSubstr("  Warning   Failed   5s    worker w-2 shut down\n"));
}

}  // namespace
}  // namespace dapple::ctl
