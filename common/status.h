// Status helpers shared by every role. Debian's Abseil (20220623) has absl::Status and
// absl::StatusOr but not status_macros.h, so dapple carries its own two macros.
//
// Status codes by what the caller should do (design.md, "Errors and logs"):
//   kUnavailable        retry the call
//   kAborted            restart the step or the job
//   kFailedPrecondition don't retry
//   kInvalidArgument    fix the input
#ifndef DAPPLE_COMMON_STATUS_H_
#define DAPPLE_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DAPPLE_STATUS_CONCAT_INNER_(a, b) a##b
#define DAPPLE_STATUS_CONCAT_(a, b) DAPPLE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define DAPPLE_RETURN_IF_ERROR(expr)             \
  do {                                           \
    ::absl::Status dapple_status_ = (expr);      \
    if (!dapple_status_.ok()) return dapple_status_; \
  } while (0)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its error.
#define DAPPLE_ASSIGN_OR_RETURN(lhs, rexpr) \
  DAPPLE_ASSIGN_OR_RETURN_IMPL_(DAPPLE_STATUS_CONCAT_(dapple_statusor_, __LINE__), lhs, rexpr)
#define DAPPLE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // DAPPLE_COMMON_STATUS_H_
