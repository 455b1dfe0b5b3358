#include "common/edit_distance.h"

#include "gtest/gtest.h"

namespace dapple {
namespace {

TEST(EditDistanceTest, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("--follw", "--follow"), 1u);         // a flag missing a letter
  EXPECT_EQ(EditDistance("micro_bacth", "micro_batch"), 2u);  // two letters swapped
  EXPECT_EQ(EditDistance("sumbit", "submit"), EditDistance("submit", "sumbit"));
}

}  // namespace
}  // namespace dapple
