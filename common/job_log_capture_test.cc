#include "common/job_log_capture.h"

#include <memory>

#include "gtest/gtest.h"
#include "spdlog/logger.h"

namespace dapple {
namespace {

TEST(JobLogCaptureTest, KeepsLinesOnlyBetweenBeginAndEnd) {
  auto capture = std::make_shared<JobLogCapture>();
  spdlog::logger logger("test", capture);
  logger.info("before");
  capture->Begin();
  logger.info("step {}", 1);
  logger.warn("slow");
  capture->End();
  logger.info("after");
  int64_t dropped = -1;
  std::vector<CapturedLogLine> lines = capture->TakeLines(10, &dropped);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "step 1");
  EXPECT_EQ(lines[0].level, "info");
  EXPECT_EQ(lines[1].text, "slow");
  EXPECT_EQ(lines[1].level, "warning");
  EXPECT_GT(lines[1].unix_ms, 1'600'000'000'000);
  EXPECT_EQ(dropped, 0);
  EXPECT_TRUE(capture->TakeLines(10, nullptr).empty());
}

TEST(JobLogCaptureTest, TakesTheOldestFirstInBatches) {
  auto capture = std::make_shared<JobLogCapture>();
  spdlog::logger logger("test", capture);
  capture->Begin();
  for (int i = 0; i < 5; ++i) logger.info("line {}", i);
  std::vector<CapturedLogLine> first = capture->TakeLines(3, nullptr);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].text, "line 0");
  std::vector<CapturedLogLine> rest = capture->TakeLines(3, nullptr);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[1].text, "line 4");
}

TEST(JobLogCaptureTest, AFullBufferDropsNewLinesAndCountsThem) {
  auto capture = std::make_shared<JobLogCapture>();
  spdlog::logger logger("test", capture);
  capture->Begin();
  for (int i = 0; i < JobLogCapture::kCapacity + 7; ++i) logger.info("line {}", i);
  int64_t dropped = 0;
  std::vector<CapturedLogLine> lines = capture->TakeLines(JobLogCapture::kCapacity + 10, &dropped);
  EXPECT_EQ(static_cast<int>(lines.size()), JobLogCapture::kCapacity);
  EXPECT_EQ(lines.back().text, "line " + std::to_string(JobLogCapture::kCapacity - 1));
  EXPECT_EQ(dropped, 7);
  capture->TakeLines(1, &dropped);
  EXPECT_EQ(dropped, 0);  // reset by the previous take
}

TEST(JobLogCaptureTest, BeginDiscardsAnEarlierJobsLinesAndCutsLongLines) {
  auto capture = std::make_shared<JobLogCapture>();
  spdlog::logger logger("test", capture);
  capture->Begin();
  logger.info("old job");
  capture->Begin();
  logger.info("{}", std::string(JobLogCapture::kMaxLineBytes + 100, 'x'));
  std::vector<CapturedLogLine> lines = capture->TakeLines(10, nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text.size(), JobLogCapture::kMaxLineBytes);
}

}  // namespace
}  // namespace dapple
