// GlooCollective over real TCP sockets on 127.0.0.1: every member is a thread of this process
// with its own Gloo device, meeting through an in-process HashStore (the daemon uses the
// coordinator's store instead).
#include "worker/comm/gloo_collective.h"

#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(30);

// Runs body(rank, collective) on `size` threads after each joined `prefix` on `store`.
template <typename Body>
void RunMembers(int size, const std::string& prefix, Body body) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCollective::Create(r, size, store, prefix, "127.0.0.1", kTimeout, "stage 1");
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->rank(), r);
      EXPECT_EQ((*c)->size(), size);
      body(r, **c);
    });
  }
  for (auto& t : threads) t.join();
}

class GlooAllReduceTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(GlooAllReduceTest, SumsAreExactAndBitwiseIdenticalOnEveryMember) {
  const auto [size, count] = GetParam();
  // Integer values (exact in fp32 whatever the order) and random ones (order-dependent
  // rounding: every member must still end with the same bits).
  std::vector<std::vector<float>> exact(size), noisy(size), inputs(size);
  for (int r = 0; r < size; ++r) {
    exact[r].resize(count);
    noisy[r].resize(count);
    std::mt19937 gen(1234 + r);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < count; ++i) {
      exact[r][i] = static_cast<float>((r + 1) * static_cast<int>(i % 97));
      noisy[r][i] = u(gen);
    }
    inputs[r] = noisy[r];
  }
  RunMembers(size, "sum", [&](int r, Collective& c) {
    ASSERT_TRUE(c.AllReduceSum(exact[r].data(), count).ok());
    ASSERT_TRUE(c.AllReduceSum(noisy[r].data(), count).ok());
  });
  const float factor = static_cast<float>(size * (size + 1) / 2);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(exact[r][i], factor * static_cast<float>(i % 97)) << "member " << r << " i " << i;
    }
    ASSERT_EQ(std::memcmp(noisy[r].data(), noisy[0].data(), count * sizeof(float)), 0)
        << "member " << r << " differs from member 0";
  }
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += inputs[r][i];
    ASSERT_NEAR(noisy[0][i], want, 1e-6) << "i " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooAllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(size_t{1}, size_t{1000},
                                                              size_t{1} << 20)),
                         [](const auto& info) {
                           return "D" + std::to_string(std::get<0>(info.param)) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(GlooCollectiveTest, AllGatherIsInRankOrder) {
  const int kSize = 3;
  const size_t kBytes = 5;
  std::vector<std::vector<char>> out(kSize, std::vector<char>(kSize * kBytes));
  RunMembers(kSize, "gather", [&](int r, Collective& c) {
    std::vector<char> in(kBytes, static_cast<char>('a' + r));
    in[0] = static_cast<char>('0' + r);
    ASSERT_TRUE(c.AllGather(in.data(), kBytes, out[r].data()).ok());
  });
  const std::string want = "0aaaa1bbbb2cccc";
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(std::string(out[r].begin(), out[r].end()), want) << "member " << r;
  }
}

TEST(GlooCollectiveTest, ManyCallsInSequence) {
  // Reuse of one mesh for mixed calls (what the runtime does step after step).
  RunMembers(2, "seq", [&](int r, Collective& c) {
    for (int k = 0; k < 50; ++k) {
      float v[3] = {float(r), float(k), 1};
      ASSERT_TRUE(c.AllReduceSum(v, 3).ok());
      EXPECT_EQ(v[0], 1);
      EXPECT_EQ(v[1], 2 * k);
      EXPECT_EQ(v[2], 2);
      int32_t mine = 100 * k + r, all[2];
      ASSERT_TRUE(c.AllGather(&mine, sizeof(mine), all).ok());
      EXPECT_EQ(all[0], 100 * k);
      EXPECT_EQ(all[1], 100 * k + 1);
    }
  });
}

TEST(GlooCollectiveTest, OneMemberIsLocal) {
  gloo::rendezvous::HashStore store;
  auto c = GlooCollective::Create(0, 1, store, "solo", "127.0.0.1", kTimeout, "stage 0");
  ASSERT_TRUE(c.ok()) << c.status();
  float v[2] = {1.5f, -2};
  ASSERT_TRUE((*c)->AllReduceSum(v, 2).ok());
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2);
  int32_t in = 7, out = 0;
  ASSERT_TRUE((*c)->AllGather(&in, sizeof(in), &out).ok());
  EXPECT_EQ(out, 7);
}

TEST(GlooCollectiveTest, BadArgumentsAreRefused) {
  gloo::rendezvous::HashStore store;
  auto bad_rank = GlooCollective::Create(2, 2, store, "p", "127.0.0.1", kTimeout, "stage 1");
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_rank.status().message(), HasSubstr("rank 2 outside a group of 2"));
  auto bad_timeout =
      GlooCollective::Create(0, 2, store, "p", "127.0.0.1", absl::ZeroDuration(), "stage 1");
  EXPECT_EQ(bad_timeout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_timeout.status().message(), HasSubstr("timeout"));
  auto no_host = GlooCollective::Create(0, 2, store, "p", "", kTimeout, "stage 1");
  EXPECT_EQ(no_host.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooCollectiveTest, MemberThatNeverJoinsFailsTheRendezvousInTime) {
  gloo::rendezvous::HashStore store;
  const absl::Duration kShort = absl::Seconds(2);
  const auto start = std::chrono::steady_clock::now();
  auto c = GlooCollective::Create(0, 2, store, "lonely", "127.0.0.1", kShort, "stage 1");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("stage 1 replica 0 of 2"));
  // The rendezvous gives up after its timeout, not Gloo's 30 s default (a correctness bound
  // with a wide margin, not a performance figure).
  EXPECT_LT(waited, 20.0) << c.status();
}

TEST(GlooCollectiveTest, PeerThatDestroysItsCollectiveMidwayFailsTheOther) {
  // Member 1 joins, takes part in one AllReduce, then throws its collective away while member 0
  // is already blocked in the next one: member 0 must get an error, not hang, and keep it.
  gloo::rendezvous::HashStore store;
  const absl::Duration kShort = absl::Seconds(5);
  absl::Status second, third;
  double waited = 0;
  std::thread peer([&] {
    auto c = GlooCollective::Create(1, 2, store, "quit", "127.0.0.1", kShort, "stage 1");
    ASSERT_TRUE(c.ok()) << c.status();
    float v[4] = {1, 1, 1, 1};
    ASSERT_TRUE((*c)->AllReduceSum(v, 4).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c->reset();
  });
  auto c = GlooCollective::Create(0, 2, store, "quit", "127.0.0.1", kShort, "stage 1");
  ASSERT_TRUE(c.ok()) << c.status();
  float v[4] = {1, 1, 1, 1};
  ASSERT_TRUE((*c)->AllReduceSum(v, 4).ok());
  EXPECT_EQ(v[0], 2);
  const auto start = std::chrono::steady_clock::now();
  second = (*c)->AllReduceSum(v, 4);
  waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  peer.join();
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.code() == absl::StatusCode::kUnavailable ||
              second.code() == absl::StatusCode::kDeadlineExceeded)
      << second;
  EXPECT_THAT(second.message(), HasSubstr("stage 1 replica 0 of 2: AllReduce"));
  EXPECT_LT(waited, 30.0) << second;
  // Sticky: the mesh is not waited on again.
  third = (*c)->AllGather(v, 4, v);
  EXPECT_EQ(third, second);
}

}  // namespace
}  // namespace dapple::worker
