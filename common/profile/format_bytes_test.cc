#include "common/profile/format_bytes.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "gtest/gtest.h"

namespace dapple::profile {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = kKiB << 10;
constexpr int64_t kGiB = kMiB << 10;

TEST(FormatBytesTest, AdaptiveUnitThreeSignificantDigits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(kKiB), "1.00 KiB");
  EXPECT_EQ(FormatBytes(812 * kKiB), "812 KiB");
  EXPECT_EQ(FormatBytes(kMiB), "1.00 MiB");
  EXPECT_EQ(FormatBytes(kGiB), "1.00 GiB");
  EXPECT_EQ(FormatBytes(kGiB + 30 * kMiB), "1.03 GiB");
  EXPECT_EQ(FormatBytes(16 * kGiB), "16.0 GiB");
  EXPECT_EQ(FormatBytes(kGiB * 9996 / 1000), "10.0 GiB");  // rounds up to the next decade
  EXPECT_EQ(FormatBytes(kGiB * 9999 / 100), "100 GiB");
  EXPECT_EQ(FormatBytes(kGiB << 10), "1.00 TiB");
  EXPECT_EQ(FormatBytes(kGiB << 20), "1.00 PiB");
  EXPECT_EQ(FormatBytes(-2 * kMiB), "-2.00 MiB");
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::max()), "8.00 EiB");
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::min()), "-8.00 EiB");
}

TEST(FormatBytesApartTest, DifferentCountsNeverPrintTheSame) {
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(FormatBytesApart(kGiB + 30 * kMiB, kGiB), Pair("1.03 GiB", "1.00 GiB"));
  EXPECT_EQ(FormatBytesApart(kGiB, 812 * kKiB), Pair("1.00 GiB", "812 KiB"));
  EXPECT_EQ(FormatBytesApart(kGiB, kGiB), Pair("1.00 GiB", "1.00 GiB"));
  // 1.0001 GiB vs 1 GiB: two more decimals tell them apart.
  EXPECT_EQ(FormatBytesApart(kGiB + kGiB / 10000, kGiB), Pair("1.0001 GiB", "1.0000 GiB"));
  EXPECT_EQ(FormatBytesApart(16 * kGiB + 1, 16 * kGiB),
            Pair("16.0 GiB (17179869185 B)", "16.0 GiB (17179869184 B)"));
  // Every count near a unit boundary differs from its neighbour.
  for (int64_t base : {kKiB, kMiB, kGiB, 16 * kGiB, kGiB << 10}) {
    for (int64_t delta = -3; delta <= 3; ++delta) {
      const auto [a, b] = FormatBytesApart(base + delta, base + delta + 1);
      EXPECT_NE(a, b) << base + delta;
    }
  }
}

}  // namespace
}  // namespace dapple::profile
