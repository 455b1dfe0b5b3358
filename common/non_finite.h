// Whether a buffer of floats holds a NaN or an infinity, at memory speed: the check every
// replicated stage runs on its gradients before each AllReduce (worker/runtime/
// gradient_exchange.h), so that a non-finite gradient is named by the replica that made it.
// Pure; thread-safe.
#ifndef DAPPLE_COMMON_NON_FINITE_H_
#define DAPPLE_COMMON_NON_FINITE_H_

#include <cstdint>

namespace dapple {

// Whether any of data[0, n) is NaN or +-infinity (IEEE-754 binary32: an exponent of all ones).
// n >= 0; data may be unaligned. Denormals and the largest finite values are finite.
bool AnyNonFinite(const float* data, int64_t n);

}  // namespace dapple

#endif  // DAPPLE_COMMON_NON_FINITE_H_
