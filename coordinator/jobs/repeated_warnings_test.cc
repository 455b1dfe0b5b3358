#include "coordinator/jobs/repeated_warnings.h"

#include <gtest/gtest.h>

#include <string>

namespace dapple::coordinator {
namespace {

constexpr char kFull[] =
    "job job-5: change not saved yet: writing job job-5 to '/var/lib/dapple/dapple.db': database "
    "or disk is full";

// The SRE's report: a full database disk, one failed write per progress report (~65 a second
// for one job) for two minutes, then the disk freed.
TEST(RepeatedWarningsTest, AFullDiskLogsTheFirstFailureACountPerMinuteAndTheRecovery) {
  RepeatedWarnings w;
  std::vector<std::string> lines;
  int64_t now = 1'000'000;
  for (int i = 0; i <= 65 * 120; ++i) {  // from 0 s to 120 s
    now = 1'000'000 + i * 1000 / 65;
    if (std::string line = w.Failed("job-5 write", kFull, now); !line.empty()) {
      lines.push_back(line);
    }
  }
  ASSERT_EQ(lines.size(), 3u);  // the first, then one per minute
  EXPECT_EQ(lines[0], kFull);
  EXPECT_EQ(lines[1], std::string(kFull) + " (repeated 3900 times in the last 60 s)");
  EXPECT_EQ(lines[2], std::string(kFull) + " (repeated 3900 times in the last 60 s)");
  EXPECT_TRUE(w.Failing("job-5 write"));
  EXPECT_EQ(w.Succeeded("job-5 write", 1'000'000 + 121'000),
            std::string("after 7801 failures over 121 s; the last: ") + kFull);
  EXPECT_FALSE(w.Failing("job-5 write"));
  // Recovered: the next failure is a first one again, logged at once.
  EXPECT_EQ(w.Failed("job-5 write", kFull, 1'000'000 + 122'000), kFull);
}

TEST(RepeatedWarningsTest, ASuccessWithoutFailuresSaysNothing) {
  RepeatedWarnings w;
  EXPECT_EQ(w.Succeeded("job-1 write", 5), "");
  EXPECT_EQ(w.Failed("job-1 write", "boom", 10), "boom");
  EXPECT_EQ(w.Succeeded("job-1 write", 10), "after 1 failure over 1 s; the last: boom");
}

TEST(RepeatedWarningsTest, ADifferentWarningIsLoggedAtOnceWithThePreviousCount) {
  RepeatedWarnings w(/*interval_ms=*/60'000);
  EXPECT_EQ(w.Failed("k", "disk full", 0), "disk full");
  EXPECT_EQ(w.Failed("k", "disk full", 1), "");
  EXPECT_EQ(w.Failed("k", "disk full", 2), "");
  EXPECT_EQ(w.Failed("k", "database is locked", 3),
            "database is locked (the previous warning repeated 2 more times: disk full)");
  EXPECT_EQ(w.Failed("k", "database is locked", 4), "");
}

TEST(RepeatedWarningsTest, KeysAreIndependent) {
  RepeatedWarnings w;
  EXPECT_EQ(w.Failed("job-1 write", "full", 0), "full");
  EXPECT_EQ(w.Failed("job-2 write", "full", 1), "full");
  EXPECT_EQ(w.Failed("job-1 write", "full", 2), "");
  EXPECT_NE(w.Succeeded("job-2 write", 3), "");
  EXPECT_TRUE(w.Failing("job-1 write"));
}

}  // namespace
}  // namespace dapple::coordinator
