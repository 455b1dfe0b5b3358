#include "worker/comm/compressed_allreduce.h"

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"

namespace dapple::worker {
namespace {

using testing::LocalCollective;
using testing::LocalCollectiveGroup;

// Runs CompressedAllReduce on D threads; inputs[r] is member r's vector, returned in place.
std::vector<absl::Status> RunAll(Compression compression, std::vector<std::vector<float>>& inputs) {
  const int d = static_cast<int>(inputs.size());
  LocalCollectiveGroup group(d);
  std::vector<absl::Status> status(d);
  std::vector<std::thread> threads;
  for (int r = 0; r < d; ++r) {
    threads.emplace_back([&, r] {
      LocalCollective member(&group, r);
      status[r] = CompressedAllReduce(member, compression, inputs[r].data(), inputs[r].size());
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

TEST(CompressionNames, ParseAndName) {
  EXPECT_EQ(ParseCompression("none").value(), Compression::kNone);
  EXPECT_EQ(ParseCompression("").value(), Compression::kNone);
  EXPECT_EQ(ParseCompression("fp16").value(), Compression::kFp16);
  EXPECT_EQ(ParseCompression("int8").value(), Compression::kInt8);
  absl::StatusOr<Compression> bad = ParseCompression("bf16");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"bf16\""), std::string::npos);
  EXPECT_EQ(CompressionName(Compression::kInt8), "int8");
}

TEST(HalfConversion, HandComputedValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // below the halfway point to 2^16
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // halfway: to even, which is inf
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  // 1/3 = 0x3555 (0.333251953125): the 11th significant bit rounds down.
  EXPECT_EQ(FloatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even (1); 1 + 3 * 2^-11: up to 1 + 2^-9.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormals: 2^-24 is the smallest (0x0001); 2^-25 is halfway to 0 and rounds to even (0);
  // 1.5 * 2^-24 rounds to 2 * 2^-24; 2^-14 - 2^-24 is the largest subnormal 0x03ff.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24)), 0x03ff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8400), -std::ldexp(1.0f, -14));
}

TEST(HalfConversion, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(CompressedAllReduce, NoneIsTheExactSum) {
  std::vector<std::vector<float>> in = {{1.5f, -2.0f, 0.25f}, {0.5f, 4.0f, -0.25f}};
  for (const absl::Status& s : RunAll(Compression::kNone, in)) ASSERT_TRUE(s.ok()) << s;
  for (const auto& v : in) EXPECT_EQ(v, (std::vector<float>{2.0f, 2.0f, 0.0f}));
}

TEST(CompressedAllReduce, Fp16HandComputed) {
  // D = 2: halves of 1/3 (0.333251953125) and 1 + 2^-12 (-> 1) and exact values.
  std::vector<std::vector<float>> in = {{1.0f / 3.0f, 0.5f, 100.0f},
                                        {1.0f + std::ldexp(1.0f, -12), -0.25f, 1e6f}};
  for (const absl::Status& s : RunAll(Compression::kFp16, in)) ASSERT_TRUE(s.ok()) << s;
  for (const auto& v : in) {
    EXPECT_EQ(v[0], 0.333251953125f + 1.0f);
    EXPECT_EQ(v[1], 0.25f);
    EXPECT_TRUE(std::isinf(v[2]));  // 1e6 is beyond half's range: inf, as documented
  }
}

TEST(CompressedAllReduce, Int8HandComputed) {
  // Member 0: max 1 -> scale 1/127; 1 -> 127, -0.5 -> -63.5 -> -64 (away from zero),
  // 0.25 -> 31.75 -> 32, 0 -> 0. Member 1: all zero -> scale 0. Member 2: max 2 -> scale
  // 2/127; 2 -> 127, 0.01 -> 0.635 -> 1, -1 -> -63.5 -> -64, 0.5 -> 31.75 -> 32.
  std::vector<std::vector<float>> in = {
      {1.0f, -0.5f, 0.25f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}, {2.0f, 0.01f, -1.0f, 0.5f}};
  for (const absl::Status& s : RunAll(Compression::kInt8, in)) ASSERT_TRUE(s.ok()) << s;
  const float s0 = 1.0f / 127.0f;
  const float s2 = 2.0f / 127.0f;
  // Rank order: (q0 * s0 + 0 * 0) + q2 * s2.
  const std::vector<float> expected = {
      (127.0f * s0 + 0.0f) + 127.0f * s2, (-64.0f * s0 + 0.0f) + 1.0f * s2,
      (32.0f * s0 + 0.0f) + -64.0f * s2, (0.0f * s0 + 0.0f) + 32.0f * s2};
  for (const auto& v : in) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(Bits(v[i]), Bits(expected[i])) << i;
  }
  EXPECT_NEAR(in[0][0], 3.0f, 1e-6);
  EXPECT_NEAR(in[0][1], -62.0f / 127.0f, 1e-6);  // -0.5 quantized to -64/127: error 1/254
}

TEST(CompressedAllReduce, Int8NonFiniteMakesEveryResultNan) {
  std::vector<std::vector<float>> in = {{1.0f, NAN}, {1.0f, 2.0f}};
  for (const absl::Status& s : RunAll(Compression::kInt8, in)) ASSERT_TRUE(s.ok()) << s;
  for (const auto& v : in) {
    EXPECT_TRUE(std::isnan(v[0]));
    EXPECT_TRUE(std::isnan(v[1]));
  }
}

// Random vectors of mixed magnitudes: results within the documented bounds and bitwise
// identical on every member, for D = 2 and 3.
TEST(CompressedAllReduce, WithinDocumentedBoundsAndIdenticalOnEveryMember) {
  for (int d : {2, 3}) {
    for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kInt8}) {
      std::mt19937 rng(1234 + d);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const size_t n = 4099;
      std::vector<std::vector<float>> in(d, std::vector<float>(n));
      for (int r = 0; r < d; ++r) {
        for (size_t i = 0; i < n; ++i) {
          // Magnitudes from 1e-9 (half subnormals and below) to 1e3.
          in[r][i] = normal(rng) * std::pow(10.0f, static_cast<float>(i % 13) - 9.0f);
        }
      }
      const std::vector<std::vector<float>> original = in;
      for (const absl::Status& s : RunAll(c, in)) ASSERT_TRUE(s.ok()) << s;
      for (int r = 1; r < d; ++r) {
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(Bits(in[r][i]), Bits(in[0][i])) << "member " << r << " element " << i;
        }
      }
      std::vector<double> max_abs(d, 0.0);
      for (int r = 0; r < d; ++r) {
        for (float x : original[r]) max_abs[r] = std::max(max_abs[r], std::fabs(double{x}));
      }
      for (size_t i = 0; i < n; ++i) {
        double exact = 0, sum_abs = 0, bound = 0;
        for (int r = 0; r < d; ++r) {
          exact += original[r][i];
          sum_abs += std::fabs(original[r][i]);
        }
        const double additions = (d - 1) * std::ldexp(1.0, -24) * sum_abs;
        switch (c) {
          case Compression::kNone:
            bound = additions;
            break;
          case Compression::kFp16:
            bound = std::ldexp(1.0, -11) * sum_abs + d * std::ldexp(1.0, -25) + additions;
            break;
          case Compression::kInt8:
            bound = additions;
            for (int r = 0; r < d; ++r) bound += max_abs[r] / 254.0 * (1.0 + std::ldexp(1.0, -20));
            break;
        }
        ASSERT_LE(std::fabs(in[0][i] - exact), bound)
            << CompressionName(c) << " D=" << d << " element " << i;
      }
    }
  }
}

TEST(CompressedAllReduce, CollectiveErrorsComeBackUnchanged) {
  LocalCollectiveGroup group(2);
  group.Break(absl::UnavailableError("stage 0 replica 1 died"));
  LocalCollective member(&group, 0);
  std::vector<float> v = {1.0f};
  for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kInt8}) {
    absl::Status s = CompressedAllReduce(member, c, v.data(), v.size());
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(s.message(), "stage 0 replica 1 died");
  }
  EXPECT_EQ(CompressedAllReduce(member, Compression::kNone, nullptr, 3).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LocalCollective, MismatchedCallsFailOnEveryMember) {
  LocalCollectiveGroup group(2, absl::Seconds(5));
  absl::Status s0, s1;
  std::thread t([&] {
    LocalCollective m(&group, 1);
    std::vector<float> v(3);
    s1 = m.AllReduceSum(v.data(), v.size());
  });
  LocalCollective m(&group, 0);
  std::vector<float> v(2);
  s0 = m.AllReduceSum(v.data(), v.size());
  t.join();
  EXPECT_EQ(s0.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s1.code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalCollective, AMissingMemberTimesOut) {
  LocalCollectiveGroup group(2, absl::Milliseconds(50));
  LocalCollective m(&group, 0);
  float x = 1;
  EXPECT_EQ(m.AllReduceSum(&x, 1).code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace dapple::worker
