#include "dapplectl/format.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(FormatTest, JobStateNames) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_PENDING), "PENDING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_PLANNING), "PLANNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_FAILED), "FAILED");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_EQ(JobStateName(static_cast<v1::JobState>(42)), "STATE_42");
}

TEST(FormatTest, WorkerStateNames) {
  EXPECT_EQ(WorkerStateName(v1::WORKER_STATE_IDLE), "IDLE");
  EXPECT_EQ(WorkerStateName(v1::WORKER_STATE_BUSY), "BUSY");
  EXPECT_EQ(WorkerStateName(v1::WORKER_STATE_DEAD), "DEAD");
}

TEST(FormatTest, Terminal) {
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_PENDING));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_PLANNING));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_RUNNING));
}

TEST(FormatTest, ClockForEta) {
  EXPECT_EQ(FormatClock(0), "0:00");
  EXPECT_EQ(FormatClock(7), "0:07");
  EXPECT_EQ(FormatClock(42), "0:42");
  EXPECT_EQ(FormatClock(41.6), "0:42");  // rounded to the nearest second
  EXPECT_EQ(FormatClock(59.4), "0:59");
  EXPECT_EQ(FormatClock(60), "1:00");
  EXPECT_EQ(FormatClock(725), "12:05");
  EXPECT_EQ(FormatClock(3599), "59:59");
  EXPECT_EQ(FormatClock(3600), "1:00:00");
  EXPECT_EQ(FormatClock(3723), "1:02:03");
  EXPECT_EQ(FormatClock(100 * 3600 + 61), "100:01:01");
  EXPECT_EQ(FormatClock(-1), "-");
  EXPECT_EQ(FormatClock(std::nan("")), "-");
  EXPECT_EQ(FormatClock(std::numeric_limits<double>::infinity()), "-");
}

TEST(FormatTest, Age) {
  EXPECT_EQ(FormatAge(0), "0s");
  EXPECT_EQ(FormatAge(59.9), "59s");
  EXPECT_EQ(FormatAge(60), "1m");
  EXPECT_EQ(FormatAge(3599), "59m");
  EXPECT_EQ(FormatAge(3600), "1h");
  EXPECT_EQ(FormatAge(86399), "23h");
  EXPECT_EQ(FormatAge(86400 * 400), "400d");
  EXPECT_EQ(FormatAge(-5), "0s");
  EXPECT_EQ(FormatAge(std::nan("")), "-");
}

TEST(FormatTest, Remaining) {
  EXPECT_EQ(FormatRemaining(0), "0s");
  EXPECT_EQ(FormatRemaining(59.4), "59s");
  EXPECT_EQ(FormatRemaining(59.6), "1m");
  EXPECT_EQ(FormatRemaining(89), "1m");
  EXPECT_EQ(FormatRemaining(90), "2m");
  EXPECT_EQ(FormatRemaining(3569), "59m");
  EXPECT_EQ(FormatRemaining(3570), "1h");
  EXPECT_EQ(FormatRemaining(5400), "2h");
  EXPECT_EQ(FormatRemaining(84599), "23h");
  EXPECT_EQ(FormatRemaining(86399), "1d");  // --expires 24h, a second later
  EXPECT_EQ(FormatRemaining(30 * 86400 - 10), "30d");
  EXPECT_EQ(FormatRemaining(-5), "0s");
  EXPECT_EQ(FormatRemaining(std::nan("")), "-");
  EXPECT_EQ(FormatRemaining(std::numeric_limits<double>::infinity()), "-");
}

TEST(FormatTest, Numbers) {
  EXPECT_EQ(FormatPercent(0.87123), "87.12%");
  EXPECT_EQ(FormatPercent(1.0), "100.00%");
  EXPECT_EQ(FormatPercent(0.0), "0.00%");
  EXPECT_EQ(FormatLoss(0.42131), "0.4213");
  EXPECT_EQ(FormatLoss(2.302585), "2.3026");
  EXPECT_EQ(FormatLoss(std::nan("")), "nan");
  EXPECT_EQ(FormatLoss(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(FormatRate(1234.4), "1234");
  EXPECT_EQ(FormatRate(100), "100");
  EXPECT_EQ(FormatRate(12.46), "12.5");
  EXPECT_EQ(FormatSteps(120, 702), "120/702");
  EXPECT_EQ(FormatSteps(120, 0), "120");
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 bytes");
  EXPECT_EQ(FormatBytes(1), "1 byte");
  EXPECT_EQ(FormatBytes(1023), "1023 bytes");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes((1 << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(FormatBytes(int64_t{70} << 20), "70.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 40), "5.0 TiB");
  EXPECT_EQ(FormatBytes(-1), "-");
}

TEST(FormatTest, ByteListGivesEachValueItsUnit) {
  EXPECT_EQ(FormatByteList({}), "-");
  EXPECT_EQ(FormatByteList({512, 100}), "512 bytes, 100 bytes");
  EXPECT_EQ(FormatByteList({int64_t{5} << 29, int64_t{900} << 20}), "2.5 GiB, 900.0 MiB");
  // A plan's stages of different sizes: each value names its own unit.
  EXPECT_EQ(FormatByteList({643584, 35123, -1}), "628.5 KiB, 34.3 KiB, -");
}

}  // namespace
}  // namespace dapple::ctl
