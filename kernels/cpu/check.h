// Internal invariant checks for the kernels. A failed check is a bug in dapple (the spec was
// validated by common/model_info, and the runtime checks peer-supplied shapes before calling a
// kernel), so it prints the condition and the shapes involved and aborts the process.
#ifndef DAPPLE_KERNELS_CPU_CHECK_H_
#define DAPPLE_KERNELS_CPU_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace dapple::kernels::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const std::string& message) {
  std::fprintf(stderr, "%s:%d: kernel check failed: %s: %s\n", file, line, condition,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace dapple::kernels::internal

// DAPPLE_KERNEL_CHECK(cond, parts...): aborts with absl::StrCat(parts...) when !cond.
#define DAPPLE_KERNEL_CHECK(cond, ...)                                       \
  do {                                                                       \
    if (!(cond)) {                                                           \
      ::dapple::kernels::internal::CheckFailed(__FILE__, __LINE__, #cond,    \
                                               ::absl::StrCat(__VA_ARGS__)); \
    }                                                                        \
  } while (0)

#endif  // DAPPLE_KERNELS_CPU_CHECK_H_
