// ASSERT_OK(status_expr) for GoogleTest: fails the test (and returns) printing the Status.
#ifndef DAPPLE_COMMON_TESTING_ASSERT_OK_H_
#define DAPPLE_COMMON_TESTING_ASSERT_OK_H_

#include "absl/status/status.h"
#include "gtest/gtest.h"

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const absl::Status assert_status_ = (expr);         \
    ASSERT_TRUE(assert_status_.ok()) << assert_status_; \
  } while (0)

#endif  // DAPPLE_COMMON_TESTING_ASSERT_OK_H_
