#include "worker/data/sample_order.h"

#include <utility>

namespace dapple::worker {
namespace {

// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; constants from Vigna's public-domain reference implementation).
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound] without modulo bias (Lemire, "Fast random integer generation in an
// interval", TOMACS 2019), so the permutation is exactly uniform and identical everywhere.
uint64_t UniformUpTo(uint64_t& state, uint64_t bound) {
  const uint64_t range = bound + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(SplitMix64(state)) * range;
  auto low = static_cast<uint64_t>(m);
  if (low < range) {
    const uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(SplitMix64(state)) * range;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  // Mix seed and epoch through splitmix64 separately so that (seed, epoch) pairs with equal
  // sums or xors still give unrelated streams.
  uint64_t seed_state = seed;
  uint64_t epoch_state = static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ULL;
  uint64_t state = SplitMix64(seed_state) ^ SplitMix64(epoch_state);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformUpTo(state, static_cast<uint64_t>(i)));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace dapple::worker
