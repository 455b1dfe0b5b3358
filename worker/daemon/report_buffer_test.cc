#include "worker/daemon/report_buffer.h"

#include <vector>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

v1::ProgressReport Step(int64_t step, bool loss = false, bool trace = false) {
  v1::ProgressReport r;
  r.set_kind(v1::PROGRESS_STEP);
  r.set_step(step);
  if (loss) r.set_loss(1.0 / static_cast<double>(step));
  if (trace) r.mutable_trace()->set_job_id("job-1");
  return r;
}

v1::ProgressReport OfKind(v1::ProgressKind kind, int64_t step) {
  v1::ProgressReport r;
  r.set_kind(kind);
  r.set_step(step);
  return r;
}

std::vector<int64_t> DeliverAll(ReportBuffer* b) {
  std::vector<int64_t> steps;
  while (!b->empty()) {
    steps.push_back(b->front().step());
    b->PopDelivered();
  }
  return steps;
}

TEST(ReportBufferTest, HistoryKindsAreTheOnesTheCoordinatorKeeps) {
  EXPECT_TRUE(IsHistoryReport(Step(1, /*loss=*/true)));
  EXPECT_FALSE(IsHistoryReport(Step(1)));
  EXPECT_FALSE(IsHistoryReport(Step(1, false, /*trace=*/true)));  // stored when it arrived
  EXPECT_TRUE(IsHistoryReport(OfKind(v1::PROGRESS_EVAL, 1)));
  EXPECT_TRUE(IsHistoryReport(OfKind(v1::PROGRESS_SAMPLE, 1)));
  EXPECT_TRUE(IsHistoryReport(OfKind(v1::PROGRESS_CHECKPOINT, 1)));
  EXPECT_FALSE(IsHistoryReport(OfKind(v1::PROGRESS_DONE, 1)));
}

TEST(ReportBufferTest, ReplayPutsDeliveredHistoryBackInFrontInOrder) {
  ReportBuffer b;
  for (int64_t s = 1; s <= 4; ++s) b.Push(Step(s, /*loss=*/s != 2));
  v1::ProgressReport with_lines = OfKind(v1::PROGRESS_CHECKPOINT, 4);
  with_lines.add_log_lines()->set_text("saved");
  b.Push(with_lines);
  EXPECT_EQ(DeliverAll(&b), (std::vector<int64_t>{1, 2, 3, 4, 4}));
  b.Push(Step(5, true));      // pending while the coordinator restarted
  EXPECT_EQ(b.Replay(), 4u);  // steps 1, 3, 4 with a loss, the checkpoint of step 4
  std::vector<v1::ProgressReport> out;
  while (!b.empty()) {
    out.push_back(b.front());
    b.PopDelivered();
  }
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].step(), 1);
  EXPECT_EQ(out[1].step(), 3);
  EXPECT_EQ(out[2].step(), 4);
  EXPECT_EQ(out[3].kind(), v1::PROGRESS_CHECKPOINT);
  EXPECT_EQ(out[3].log_lines_size(), 0);  // the coordinator stored them once already
  EXPECT_EQ(out[4].step(), 5);
  // Delivered again, they are history again (a second restart replays them too).
  EXPECT_EQ(b.Replay(), 5u);
}

TEST(ReportBufferTest, HistoryKeepsTheNewestReports) {
  ReportBuffer b;
  const int64_t n = static_cast<int64_t>(ReportBuffer::kMaxHistory) + 10;
  for (int64_t s = 1; s <= n; ++s) {
    b.Push(Step(s, true, /*trace=*/true));
    b.PopDelivered();
  }
  EXPECT_EQ(b.Replay(), ReportBuffer::kMaxHistory);
  EXPECT_EQ(b.front().step(), 11);
  EXPECT_FALSE(b.front().has_trace());
}

TEST(ReportBufferTest, OverflowDropsStatisticsFirstThenOldestLossesNeverOtherKinds) {
  ReportBuffer b;
  const size_t max = ReportBuffer::kMaxPending;
  b.Push(Step(1));  // the front: may be in flight, never dropped
  b.Push(OfKind(v1::PROGRESS_CHECKPOINT, 1));
  for (size_t i = 2; i < max; ++i) b.Push(Step(static_cast<int64_t>(i), /*loss=*/i % 2 == 0));
  ASSERT_EQ(b.pending(), max);
  b.Push(Step(static_cast<int64_t>(max), true));
  EXPECT_EQ(b.pending(), max);
  EXPECT_EQ(b.dropped(), 1);
  EXPECT_EQ(b.TakeNewlyDropped(), 1);
  EXPECT_EQ(b.TakeNewlyDropped(), 0);
  // Step 3 (statistics only) went; the losses of steps 2 and 4 stay.
  std::vector<int64_t> steps = DeliverAll(&b);
  EXPECT_EQ(steps[0], 1);
  EXPECT_EQ(steps[1], 1);  // the checkpoint
  EXPECT_EQ(steps[2], 2);
  EXPECT_EQ(steps[3], 4);

  // Only history pending: the oldest loss report goes, the checkpoint stays.
  ReportBuffer h;
  h.Push(Step(1, true));
  h.Push(OfKind(v1::PROGRESS_CHECKPOINT, 1));
  for (size_t i = 2; i < max; ++i) h.Push(Step(static_cast<int64_t>(i), true));
  h.Push(Step(static_cast<int64_t>(max), true));
  EXPECT_EQ(h.dropped(), 1);
  steps = DeliverAll(&h);
  ASSERT_EQ(steps.size(), max);
  EXPECT_EQ(steps[0], 1);
  EXPECT_EQ(steps[1], 1);
  EXPECT_EQ(steps[2], 3);  // step 2's loss was dropped
}

TEST(ReportBufferTest, ClearForgetsPendingOnly) {
  ReportBuffer b;
  b.Push(Step(1, true));
  b.PopDelivered();
  b.Push(Step(2, true));
  EXPECT_EQ(b.Clear(), 1u);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.Replay(), 1u);
}

}  // namespace
}  // namespace dapple::worker
