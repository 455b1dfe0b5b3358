#include "common/median.h"

#include <deque>
#include <vector>

#include "gtest/gtest.h"

namespace dapple {
namespace {

TEST(MedianTest, MiddleValueOrMeanOfTheMiddleTwo) {
  EXPECT_EQ(Median(std::vector<double>{}), 0);
  EXPECT_EQ(Median(std::vector<double>{3.0}), 3.0);
  EXPECT_EQ(Median(std::vector<double>{5.0, 1.0, 3.0}), 3.0);       // unsorted input
  EXPECT_EQ(Median(std::vector<double>{4.0, 1.0, 2.0, 3.0}), 2.5);  // even count
  EXPECT_EQ(Median(std::deque<double>{9.0, 1.0, 1.0}), 1.0);        // an outlier is outvoted
}

}  // namespace
}  // namespace dapple
