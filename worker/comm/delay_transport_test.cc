#include "worker/comm/delay_transport.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

// Records what reaches it and answers with `status` (a fake for this unit test only).
class RecordingTransport : public Transport {
 public:
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    log.push_back("send " + std::to_string(peer) + " " + std::to_string(tag) + " " +
                  std::string(static_cast<const char*>(data), bytes));
    return status;
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    log.push_back("recv " + std::to_string(peer) + " " + std::to_string(tag));
    std::fill_n(static_cast<char*>(data), bytes, 'r');
    return status;
  }
  absl::Status WaitSends() override {
    log.push_back("wait");
    return status;
  }
  std::vector<std::string> log;
  absl::Status status;
};

// Delays drawn by `n` Sends through a DelayTransport with `seed` (the wait recorded, not slept).
std::vector<absl::Duration> Draws(uint64_t seed, absl::Duration max_delay, int n) {
  RecordingTransport inner;
  std::vector<absl::Duration> slept;
  DelayTransport::Options o;
  o.max_delay = max_delay;
  o.seed = seed;
  o.sleep = [&](absl::Duration d) { slept.push_back(d); };
  auto t = DelayTransport::Create(&inner, o).value();
  for (int i = 0; i < n; ++i) EXPECT_TRUE(t->Send(1, i, "x", 1).ok());
  return slept;
}

TEST(DelayTransportTest, DelaysEverySendAndRecvThenForwards) {
  RecordingTransport inner;
  std::vector<absl::Duration> slept;
  std::vector<size_t> forwarded_before_sleep;
  DelayTransport::Options o;
  o.max_delay = absl::Milliseconds(50);
  o.seed = 1;
  o.sleep = [&](absl::Duration d) {
    slept.push_back(d);
    forwarded_before_sleep.push_back(inner.log.size());
  };
  auto t = DelayTransport::Create(&inner, o).value();
  char buf[3] = {};
  ASSERT_TRUE(t->Send(2, 7, "abc", 3).ok());
  ASSERT_TRUE(t->Recv(0, 9, buf, 3).ok());
  ASSERT_TRUE(t->WaitSends().ok());
  EXPECT_EQ(inner.log, (std::vector<std::string>{"send 2 7 abc", "recv 0 9", "wait"}));
  EXPECT_EQ(std::string(buf, 3), "rrr");
  // One delay before each Send and Recv, none before WaitSends; each wait comes first.
  ASSERT_EQ(slept.size(), 2);
  EXPECT_EQ(forwarded_before_sleep, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(t->delays(), 2);
  EXPECT_EQ(t->total_delay(), slept[0] + slept[1]);
  EXPECT_EQ(t->last_delay(), slept[1]);
}

TEST(DelayTransportTest, DelaysAreUniformInRangeAndReproducible) {
  const absl::Duration max = absl::Milliseconds(50);
  const int n = 4000;
  std::vector<absl::Duration> a = Draws(DelayTransport::RankSeed(42, 0), max, n);
  ASSERT_EQ(a.size(), n);
  EXPECT_EQ(a, Draws(DelayTransport::RankSeed(42, 0), max, n));  // same seed, same delays
  EXPECT_NE(a, Draws(DelayTransport::RankSeed(42, 1), max, n));  // another rank
  EXPECT_NE(a, Draws(DelayTransport::RankSeed(43, 0), max, n));  // another job seed
  double sum_ms = 0;
  int low = 0, high = 0;
  for (absl::Duration d : a) {
    ASSERT_GE(d, absl::ZeroDuration());
    ASSERT_LE(d, max);
    const double ms = absl::ToDoubleMilliseconds(d);
    sum_ms += ms;
    low += ms < 5;    // the lowest tenth of the range
    high += ms > 45;  // the highest tenth
  }
  // Uniform on [0, 50] ms: mean 25 ms (standard error of the mean about 0.23 ms for 4000
  // draws), a tenth of the draws in each tenth of the range (standard deviation about 19).
  EXPECT_NEAR(sum_ms / n, 25.0, 1.5);
  EXPECT_NEAR(low, n / 10, 100);
  EXPECT_NEAR(high, n / 10, 100);
}

TEST(DelayTransportTest, RankSeedsDiffer) {
  EXPECT_NE(DelayTransport::RankSeed(7, 0), DelayTransport::RankSeed(7, 1));
  EXPECT_NE(DelayTransport::RankSeed(7, 1), DelayTransport::RankSeed(8, 0));
  EXPECT_EQ(DelayTransport::RankSeed(7, 3), DelayTransport::RankSeed(7, 3));
}

TEST(DelayTransportTest, ZeroMaxDelayForwardsWithoutWaiting) {
  RecordingTransport inner;
  int sleeps = 0;
  DelayTransport::Options o;
  o.sleep = [&](absl::Duration) { ++sleeps; };
  auto t = DelayTransport::Create(&inner, o).value();
  ASSERT_TRUE(t->Send(1, 1, "a", 1).ok());
  char c;
  ASSERT_TRUE(t->Recv(1, 2, &c, 1).ok());
  EXPECT_EQ(sleeps, 0);
  EXPECT_EQ(t->delays(), 0);
  EXPECT_EQ(inner.log.size(), 2);
}

// The worker delays only the training's activations and gradients (delays_tag): a skipped
// message is forwarded at once and draws nothing, so the others' sequence is unchanged.
TEST(DelayTransportTest, OnlyTheSelectedTagsWait) {
  RecordingTransport inner;
  std::vector<absl::Duration> slept;
  DelayTransport::Options o;
  o.max_delay = absl::Milliseconds(5);
  o.seed = 3;
  o.sleep = [&](absl::Duration d) { slept.push_back(d); };
  o.delays_tag = [](uint64_t tag) { return tag % 2 == 0; };
  auto t = DelayTransport::Create(&inner, o).value();
  char c;
  ASSERT_TRUE(t->Send(1, 1, "a", 1).ok());
  ASSERT_TRUE(t->Recv(1, 3, &c, 1).ok());
  EXPECT_EQ(t->delays(), 0);
  ASSERT_TRUE(t->Send(1, 2, "b", 1).ok());
  ASSERT_TRUE(t->Recv(1, 4, &c, 1).ok());
  EXPECT_EQ(t->delays(), 2);
  EXPECT_EQ(inner.log.size(), 4);
  const std::vector<absl::Duration> two = Draws(3, absl::Milliseconds(5), 2);
  EXPECT_EQ(slept, two);
}

TEST(DelayTransportTest, RejectsBadOptions) {
  RecordingTransport inner;
  DelayTransport::Options o;
  EXPECT_EQ(DelayTransport::Create(nullptr, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_delay = absl::Milliseconds(-1);
  absl::Status s = DelayTransport::Create(&inner, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_delay -1ms must be in 0..10s"), std::string::npos) << s;
  o.max_delay = DelayTransport::kMaxDelay + absl::Milliseconds(1);
  EXPECT_EQ(DelayTransport::Create(&inner, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_delay = DelayTransport::kMaxDelay;
  EXPECT_TRUE(DelayTransport::Create(&inner, o).ok());
}

TEST(DelayTransportTest, TheFirstErrorSticksAndIsNotWaitedOn) {
  RecordingTransport inner;
  int sleeps = 0;
  DelayTransport::Options o;
  o.max_delay = absl::Milliseconds(5);
  o.sleep = [&](absl::Duration) { ++sleeps; };
  auto t = DelayTransport::Create(&inner, o).value();
  inner.status = absl::UnavailableError("stage 1 died");
  EXPECT_EQ(t->Send(1, 1, "a", 1).code(), absl::StatusCode::kUnavailable);
  inner.status = absl::OkStatus();
  char c;
  EXPECT_EQ(t->Recv(1, 1, &c, 1).message(), "stage 1 died");
  EXPECT_EQ(t->WaitSends().message(), "stage 1 died");
  EXPECT_EQ(sleeps, 1);            // only the first call waited
  EXPECT_EQ(inner.log.size(), 1);  // and only it was forwarded
}

TEST(DelayTransportTest, AbortEndsAWaitWithoutForwarding) {
  RecordingTransport inner;
  std::atomic<bool> abort{true};
  DelayTransport::Options o;
  o.max_delay = absl::Milliseconds(20);
  o.abort = &abort;
  auto t = DelayTransport::Create(&inner, o).value();
  absl::Status s = t->Send(3, 1, "a", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "aborted while delaying a send to rank 3");
  char c;
  EXPECT_EQ(t->Recv(2, 1, &c, 1).message(), "aborted while delaying a receive from rank 2");
  EXPECT_TRUE(inner.log.empty());
}

TEST(DelayTransportTest, AbortInterruptsALongSleep) {
  // Real sleeping: a delay drawn from up to 10 s is cut short by the abort flag. Without the
  // check the call would sleep its whole delay and then forward (and return OK).
  RecordingTransport inner;
  std::atomic<bool> abort{false};
  DelayTransport::Options o;
  o.max_delay = DelayTransport::kMaxDelay;
  o.seed = 5;
  o.abort = &abort;
  auto t = DelayTransport::Create(&inner, o).value();
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    abort.store(true);
  });
  char c;
  absl::Status s = t->Recv(1, 1, &c, 1);
  aborter.join();
  ASSERT_GT(t->last_delay(), absl::Milliseconds(500)) << "pick a seed that draws a long delay";
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_TRUE(inner.log.empty());
}

}  // namespace
}  // namespace dapple::worker
