#include "worker/comm/loopback_allreduce.h"

#include <cmath>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

TEST(LoopbackAllReduceTest, TheLinkReproducesBothTimesUnderTheRingModelOfTwoMembers) {
  // 2 x 0.1 ms + bytes / 1 GB/s: 4096 bytes take 0.204096 ms, 8 MiB 8.588608 ms.
  const double small = 4096, large = 8 << 20;
  absl::StatusOr<LinkEstimate> link =
      LinkFromAllReduceTimes(small, 0.2 + small / 1e6, large, 0.2 + large / 1e6);
  ASSERT_TRUE(link.ok()) << link.status();
  // The small AllReduce's own transfer time is read as latency: 2 us of 100.
  EXPECT_NEAR(link->latency_ms, 0.102048, 1e-9);
  EXPECT_NEAR(link->bandwidth_bytes_per_s, 1e9, 1e-3);
}

TEST(LoopbackAllReduceTest, TimesThatGiveNoLinkAreRefusedWithTheRule) {
  for (const auto& [small_ms, large_ms] : {std::pair{1.0, 1.0}, std::pair{2.0, 1.0},
                                           std::pair{0.0, 1.0}, std::pair{1.0, std::nan("")}}) {
    absl::StatusOr<LinkEstimate> link = LinkFromAllReduceTimes(4096, small_ms, 1 << 20, large_ms);
    ASSERT_FALSE(link.ok()) << small_ms << " " << large_ms;
    EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(link.status().message().find("0 < small ms < large ms"), std::string::npos)
        << link.status();
  }
  EXPECT_FALSE(LinkFromAllReduceTimes(4096, 1, 4096, 2).ok());  // equal sizes
}

TEST(LoopbackAllReduceTest, MeasuresAFiniteLinkOverRealSocketsOn127001) {
  // The default sizes: on a 2-vCPU host a small AllReduce's median can take 4 ms (its four
  // threads wait for a time slice), as long as a 1 MiB one; 8 MiB takes about 10 ms.
  absl::StatusOr<LinkEstimate> link = MeasureLoopbackAllReduce();
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_TRUE(std::isfinite(link->latency_ms));
  EXPECT_GT(link->latency_ms, 0);
  EXPECT_GT(link->bandwidth_bytes_per_s, 0);
  EXPECT_TRUE(std::isfinite(link->bandwidth_bytes_per_s));
}

TEST(LoopbackAllReduceTest, BadOptionsAreRefused) {
  LoopbackOptions options;
  options.trials = 0;
  EXPECT_EQ(MeasureLoopbackAllReduce(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.large_bytes = options.small_bytes;
  EXPECT_EQ(MeasureLoopbackAllReduce(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoopbackAllReduceTest, TheEstimateIsThePerFieldMedianOfValidMeasurements) {
  LinkEstimateMedian median;
  EXPECT_EQ(median.Median().bandwidth_bytes_per_s, 0);
  median.Add({0.1, 1e9});
  median.Add({0.3, 3e9});
  median.Add({0.2, 0.5e9});
  median.Add({-1, 1e9});            // ignored: negative latency
  median.Add({0.1, 0});             // ignored: no bandwidth
  median.Add({0.1, std::nan("")});  // ignored
  EXPECT_EQ(median.count(), 3);
  EXPECT_DOUBLE_EQ(median.Median().latency_ms, 0.2);
  EXPECT_DOUBLE_EQ(median.Median().bandwidth_bytes_per_s, 1e9);
}

}  // namespace
}  // namespace dapple::worker
