// The median of a set of measurements (times, capacities): the middle value after sorting, the
// mean of the middle two for an even count, 0 for none. Pure; thread-safe.
#ifndef DAPPLE_COMMON_MEDIAN_H_
#define DAPPLE_COMMON_MEDIAN_H_

#include <algorithm>
#include <cstddef>

namespace dapple {

// `values` is taken by value and sorted: any container of doubles with random access
// (std::vector, std::deque).
template <typename Container>
double Median(Container values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace dapple

#endif  // DAPPLE_COMMON_MEDIAN_H_
