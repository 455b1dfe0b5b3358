#include "dapplectl/log_views.h"

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

v1::JobLogLine Line(int stage, int replica, const std::string& worker, const std::string& level,
                    const std::string& text, int64_t unix_ms) {
  v1::JobLogLine line;
  line.set_stage(stage);
  line.set_replica(replica);
  line.set_worker_id(worker);
  line.set_level(level);
  line.set_text(text);
  line.set_unix_ms(unix_ms);
  return line;
}

TEST(LogViewsTest, ParseRank) {
  EXPECT_EQ(*ParseRank("1/0"), std::make_pair(1, 0));
  EXPECT_EQ(*ParseRank("0/3"), std::make_pair(0, 3));
  EXPECT_EQ(*ParseRank("2"), std::make_pair(2, 0));
  for (const char* bad :
       {"", "x", "1/", "/1", "-1/0", "1/-1", "1/0/0", "a/b", " 1/0", "1/0 ", "+1"}) {
    absl::StatusOr<std::pair<int, int>> r = ParseRank(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("--rank must be STAGE/REPLICA, e.g. 1/0: got '") + bad + "'");
  }
}

// --tail N prints N printed lines, also when a logged line has several (a generated sample).
TEST(LogViewsTest, LastLines) {
  EXPECT_EQ(LastLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc\n", 3), "a\nb\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc\n", 9), "a\nb\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc\n", 1), "c\n");
  EXPECT_EQ(LastLines("a\nb\nc\n", 0), "");
  EXPECT_EQ(LastLines("", 2), "");
  EXPECT_EQ(LastLines("a\n\nc\n", 2), "\nc\n");
  EXPECT_EQ(LastLines("a\nb", 1), "b");
}

TEST(LogViewsTest, EveryLineNamesItsRankAndWorker) {
  google::protobuf::RepeatedPtrField<v1::JobLogLine> lines;
  *lines.Add() = Line(0, 0, "w-1", "info", "job-1: starting stage 0", 1000);
  *lines.Add() = Line(1, 0, "w-2", "warning", "slow link", 1100);
  *lines.Add() = Line(1, 0, "w-2", "error", "first\nsecond", 1200);
  EXPECT_EQ(RenderLogLines(lines, /*collapse=*/false),
            "[0/0 w-1] job-1: starting stage 0\n"
            "[1/0 w-2] WARNING: slow link\n"
            "[1/0 w-2] ERROR: first\n"
            "[1/0 w-2] ERROR: second\n");
}

TEST(LogViewsTest, CollapseMergesTheSameLineOfSeveralRanksCloseInTime) {
  google::protobuf::RepeatedPtrField<v1::JobLogLine> lines;
  *lines.Add() = Line(0, 0, "w-1", "info", "AllReduce over Gloo", 1000);
  *lines.Add() = Line(0, 1, "w-2", "info", "AllReduce over Gloo", 1500);
  *lines.Add() = Line(0, 1, "w-2", "info", "only mine", 1600);
  // The same rank again: a line of its own.
  *lines.Add() = Line(0, 0, "w-1", "info", "AllReduce over Gloo", 1700);
  // Another rank, too late for the first group: joins the group opened just before.
  *lines.Add() = Line(1, 0, "w-3", "info", "AllReduce over Gloo", 3500);
  // Same text, another level: not merged.
  *lines.Add() = Line(1, 1, "w-4", "warning", "AllReduce over Gloo", 3500);
  EXPECT_EQ(RenderLogLines(lines, /*collapse=*/true),
            "[0/0 w-1, 0/1 w-2] AllReduce over Gloo\n"
            "[0/1 w-2] only mine\n"
            "[0/0 w-1, 1/0 w-3] AllReduce over Gloo\n"
            "[1/1 w-4] WARNING: AllReduce over Gloo\n");
}

}  // namespace
}  // namespace dapple::ctl
