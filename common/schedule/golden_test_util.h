// Test-only: golden files under common/schedule/testdata/.
#ifndef DAPPLE_COMMON_SCHEDULE_GOLDEN_TEST_UTIL_H_
#define DAPPLE_COMMON_SCHEDULE_GOLDEN_TEST_UTIL_H_

#include <string>

#include "gtest/gtest.h"

namespace dapple::schedule::testing {

// The testdata folder: $DAPPLE_SOURCE_DIR/common/schedule/testdata (ctest sets the variable),
// else the absolute path CMake compiles in (DAPPLE_SCHEDULE_TESTDATA_DIR), else the folder of
// this source file + /testdata.
std::string TestdataDir();

// Success when testdata/<name> holds exactly `actual`; otherwise a failure naming the first
// differing line. With DAPPLE_UPDATE_GOLDEN=1 it writes `actual` to the file instead (and
// succeeds only if the write worked): review the diff before committing it.
::testing::AssertionResult MatchesGolden(const std::string& name, const std::string& actual);

}  // namespace dapple::schedule::testing

#endif  // DAPPLE_COMMON_SCHEDULE_GOLDEN_TEST_UTIL_H_
