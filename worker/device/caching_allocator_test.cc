#include "worker/device/caching_allocator.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"

namespace dapple::worker {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPiB = size_t{1} << 50;

// ---- No GPU needed ----

TEST(CachingAllocatorRoundTest, RoundsTo512UpTo1MiBAnd2MiBAbove) {
  struct Case {
    size_t in, want;
  };
  for (const Case& c :
       {Case{0, 512}, Case{1, 512}, Case{512, 512}, Case{513, 1024}, Case{1000, 1024},
        Case{kMiB - 1, kMiB}, Case{kMiB, kMiB}, Case{kMiB + 1, 2 * kMiB}, Case{2 * kMiB, 2 * kMiB},
        Case{2 * kMiB + 1, 4 * kMiB}, Case{5 * kMiB, 6 * kMiB},
        Case{std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max()}}) {
    EXPECT_EQ(CachingAllocator::RoundSize(c.in), c.want) << "RoundSize(" << c.in << ")";
  }
}

TEST(CachingAllocatorDeathTest, FreeOfForeignPointerAborts) {
  // Free finds no block and aborts before any CUDA call, so this runs without a GPU too.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CachingAllocator a(0);
        int x = 0;
        a.Free(&x);
      },
      "CachingAllocator\\(cuda:0\\): Free\\(.*\\) of a pointer it did not allocate");
}

// ---- GPU ----

class CachingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no usable GPU: " << ProbeCuda().reason;
  }

  static void ExpectStats(const CachingAllocator& a, int64_t in_use, int64_t peak, int64_t cached,
                          int64_t allocations) {
    const AllocatorStats s = a.Stats();
    EXPECT_EQ(s.bytes_in_use, in_use) << "bytes_in_use";
    EXPECT_EQ(s.peak_bytes_in_use, peak) << "peak_bytes_in_use";
    EXPECT_EQ(s.bytes_cached, cached) << "bytes_cached";
    EXPECT_EQ(s.device_allocations, allocations) << "device_allocations";
  }
};

TEST_F(CachingAllocatorTest, FreedBlockIsReusedWithoutCudaMalloc) {
  CachingAllocator a(0);
  absl::StatusOr<void*> p = a.Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 256, 0u) << *p;
  ASSERT_EQ(cudaMemset(*p, 0, 1000), cudaSuccess);  // real device memory
  ExpectStats(a, 1024, 1024, 0, 1);
  a.Free(*p);
  ExpectStats(a, 0, 1024, 1024, 1);

  absl::StatusOr<void*> q = a.Allocate(700);  // rounds to 1024 as well
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, *p);
  ExpectStats(a, 1024, 1024, 0, 1);
  a.Free(*q);
}

TEST_F(CachingAllocatorTest, BestFitAtMostTwiceTheRequest) {
  CachingAllocator a(0);
  absl::StatusOr<void*> b2 = a.Allocate(2 * kMiB);
  absl::StatusOr<void*> b6 = a.Allocate(6 * kMiB);
  absl::StatusOr<void*> b16 = a.Allocate(16 * kMiB);
  ASSERT_TRUE(b2.ok() && b6.ok() && b16.ok());
  a.Free(*b2);
  a.Free(*b6);
  a.Free(*b16);
  ExpectStats(a, 0, 24 * kMiB, 24 * kMiB, 3);

  // 3 MiB rounds to 4 MiB: the 2 MiB block is too small, 6 MiB is the smallest fit (<= 8 MiB).
  absl::StatusOr<void*> r4 = a.Allocate(3 * kMiB);
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(*r4, *b6);
  // 1.5 MiB rounds to 2 MiB: exact fit.
  absl::StatusOr<void*> r2 = a.Allocate(3 * kMiB / 2);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, *b2);
  // 5 MiB rounds to 6 MiB: only the 16 MiB block is left, more than twice as large: cudaMalloc.
  absl::StatusOr<void*> r6 = a.Allocate(5 * kMiB);
  ASSERT_TRUE(r6.ok());
  EXPECT_NE(*r6, *b16);
  ExpectStats(a, 14 * kMiB, 24 * kMiB, 16 * kMiB, 4);
  // 8 MiB: the 16 MiB block is exactly twice as large, so it is taken.
  absl::StatusOr<void*> r8 = a.Allocate(8 * kMiB);
  ASSERT_TRUE(r8.ok());
  EXPECT_EQ(*r8, *b16);
  ExpectStats(a, 30 * kMiB, 30 * kMiB, 0, 4);
  for (void* p : {*r4, *r2, *r6, *r8}) a.Free(p);
  ExpectStats(a, 0, 30 * kMiB, 30 * kMiB, 4);
}

TEST_F(CachingAllocatorTest, EmptyCacheReleasesOnlyFreeBlocks) {
  CachingAllocator a(0);
  absl::StatusOr<void*> x = a.Allocate(kMiB);
  absl::StatusOr<void*> y = a.Allocate(kMiB);
  ASSERT_TRUE(x.ok() && y.ok());
  a.Free(*x);
  a.EmptyCache();
  ExpectStats(a, kMiB, 2 * kMiB, 0, 2);
  absl::StatusOr<void*> z = a.Allocate(kMiB);  // nothing cached: a new block
  ASSERT_TRUE(z.ok());
  ExpectStats(a, 2 * kMiB, 2 * kMiB, 0, 3);
  a.Free(*y);
  a.Free(*z);
}

TEST_F(CachingAllocatorTest, OutOfMemoryEmptiesCacheAndNamesDevice) {
  CachingAllocator a(0);
  absl::StatusOr<void*> held = a.Allocate(1000);
  absl::StatusOr<void*> cached = a.Allocate(4 * kMiB);
  ASSERT_TRUE(held.ok() && cached.ok());
  a.Free(*cached);
  ExpectStats(a, 1024, 1024 + 4 * kMiB, 4 * kMiB, 2);

  absl::StatusOr<void*> huge = a.Allocate(kPiB);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  // The retry released the cache before giving up, so the message shows it empty.
  EXPECT_EQ(huge.status().message(),
            "cuda:0: out of memory allocating 1.0 PiB (in use 1.0 KiB, cached 0 B)");
  ExpectStats(a, 1024, 1024 + 4 * kMiB, 0, 2);
  // The failure must not linger for the next launch check.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  absl::StatusOr<void*> after = a.Allocate(4 * kKiB);
  ASSERT_TRUE(after.ok()) << after.status();
  a.Free(*after);
  a.Free(*held);
}

TEST_F(CachingAllocatorTest, PeakAndResetPeak) {
  CachingAllocator a(0);
  absl::StatusOr<void*> x = a.Allocate(kMiB);
  absl::StatusOr<void*> y = a.Allocate(kMiB);
  ASSERT_TRUE(x.ok() && y.ok());
  a.Free(*x);
  EXPECT_EQ(a.Stats().peak_bytes_in_use, static_cast<int64_t>(2 * kMiB));
  a.ResetPeak();
  EXPECT_EQ(a.Stats().peak_bytes_in_use, static_cast<int64_t>(kMiB));
  a.Free(*y);
  EXPECT_EQ(a.Stats().peak_bytes_in_use, static_cast<int64_t>(kMiB));
}

TEST_F(CachingAllocatorTest, ZeroBytesIsInvalid) {
  CachingAllocator a(0);
  absl::StatusOr<void*> p = a.Allocate(0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectStats(a, 0, 0, 0, 0);
}

TEST_F(CachingAllocatorTest, ConcurrentUseHandsOutEachBlockOnce) {
  CachingAllocator a(0);
  constexpr int kThreads = 4, kIters = 100, kHeld = 3;
  const size_t sizes[] = {512, 4 * kKiB, kMiB, 3 * kMiB};
  std::mutex mu;
  std::set<void*> live;  // blocks handed out and not yet freed, over all threads
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < kIters; ++i) {
        absl::StatusOr<void*> p = a.Allocate(sizes[(t + i) % 4]);
        std::lock_guard<std::mutex> lock(mu);
        if (!p.ok()) {
          errors.push_back(std::string(p.status().message()));
          break;
        }
        if (!live.insert(*p).second) errors.push_back("block handed out twice");
        mine.push_back(*p);
        if (mine.size() == kHeld) {
          live.erase(mine.front());
          a.Free(mine.front());
          mine.erase(mine.begin());
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      for (void* p : mine) {
        live.erase(p);
        a.Free(p);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(errors, ::testing::IsEmpty());
  const AllocatorStats s = a.Stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  // Each size class only reuses its own blocks, and at most kThreads * kHeld are live at once.
  EXPECT_LE(s.device_allocations, 4 * kThreads * kHeld);
  EXPECT_GT(s.bytes_cached, 0);
}

}  // namespace
}  // namespace dapple::worker
