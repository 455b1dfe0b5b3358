#include "worker/daemon/host_capacity.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

TEST(HostCapacityTest, FromTimes) {
  // Two copies at once in the time of one: two cores; in twice the time: one core.
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 10.0), 2.0);
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 20.0), 1.0);
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 16.0), 1.25);
  EXPECT_DOUBLE_EQ(CapacityFromTimes(4, 10.0, 20.0), 2.0);
}

TEST(HostCapacityTest, FromTimesClampsNoiseAndBadInput) {
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 8.0), 2.0);   // faster together: noise
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 40.0), 1.0);  // slower than serial: other load
  EXPECT_DOUBLE_EQ(CapacityFromTimes(1, 10.0, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 0.0, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(CapacityFromTimes(2, 10.0, 0.0), 1.0);
}

TEST(HostCapacityTest, TheEstimateIsTheMedianOfTheMeasurements) {
  HostCapacityEstimate estimate;
  EXPECT_EQ(estimate.Median(), 0);  // nothing measured
  estimate.Add(1.0);                // measured while other processes started
  EXPECT_DOUBLE_EQ(estimate.Median(), 1.0);
  estimate.Add(1.9);
  EXPECT_DOUBLE_EQ(estimate.Median(), 1.45);
  estimate.Add(2.0);
  EXPECT_DOUBLE_EQ(estimate.Median(), 1.9);  // the low one is outvoted
  estimate.Add(1.95);
  EXPECT_DOUBLE_EQ(estimate.Median(), 1.925);
  // Not a capacity: ignored.
  estimate.Add(0.5);
  estimate.Add(std::nan(""));
  EXPECT_EQ(estimate.count(), 4);
  EXPECT_DOUBLE_EQ(estimate.Median(), 1.925);
}

TEST(HostCapacityTest, MeasureRunsTheWorkOnEveryThreadAndStaysInRange) {
  std::atomic<int> calls{0};
  const double capacity = MeasureHostComputeCapacity(3, 2, [&] { calls.fetch_add(1); });
  EXPECT_GE(capacity, 1.0);
  EXPECT_LE(capacity, 3.0);
  // A warm-up on 3 threads, then per trial 1 and 3 threads, 4 work items each.
  EXPECT_EQ(calls.load(), 4 * (3 + 2 * (1 + 3)));
  EXPECT_DOUBLE_EQ(MeasureHostComputeCapacity(1, 2, [] {}), 1.0);
}

// Co-located workers measure one after the other (the host-wide flock): of two measurements
// started at once, one's work all ends before the other's begins.
TEST(HostCapacityTest, MeasurementsOnOneHostDoNotOverlap) {
  using Clock = std::chrono::steady_clock;
  struct Span {
    std::mutex mu;
    Clock::time_point first = Clock::time_point::max();
    Clock::time_point last = Clock::time_point::min();
  };
  Span spans[2];
  auto measure = [&](int id) {
    MeasureHostComputeCapacity(2, 2, [&, id] {
      const Clock::time_point start = Clock::now();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      const Clock::time_point end = Clock::now();
      std::lock_guard<std::mutex> lock(spans[id].mu);
      spans[id].first = std::min(spans[id].first, start);
      spans[id].last = std::max(spans[id].last, end);
    });
  };
  std::thread a(measure, 0);
  std::thread b(measure, 1);
  a.join();
  b.join();
  EXPECT_TRUE(spans[0].last <= spans[1].first || spans[1].last <= spans[0].first);
}

// The lock files live in $TMPDIR: a private one keeps the workers of tests running at the same
// time on this host out of these.
class HostJobLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/host_job_lock_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("TMPDIR");
    std::remove((dir_ + "/dapple-host-jobs.lock").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(HostJobLockTest, TheHostRunsAJobWhileAnyWorkerHoldsTheLock) {
  EXPECT_FALSE(HostRunsJob());
  {
    const HostJobLock first;
    EXPECT_TRUE(HostRunsJob());
    {
      const HostJobLock second;  // two workers' jobs at once: shared
      EXPECT_TRUE(HostRunsJob());
    }
    EXPECT_TRUE(HostRunsJob());
  }
  EXPECT_FALSE(HostRunsJob());
}

TEST_F(HostJobLockTest, AnotherProcesssJobIsSeen) {
  int held[2], release[2];
  ASSERT_EQ(pipe(held), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const HostJobLock lock;
    char c = 1;
    if (write(held[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(held[0], &c, 1), 1);
  EXPECT_TRUE(HostRunsJob());
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(HostRunsJob());  // the process ended, its lock with it
  for (int fd : {held[0], held[1], release[0], release[1]}) close(fd);
}

}  // namespace
}  // namespace dapple::worker
