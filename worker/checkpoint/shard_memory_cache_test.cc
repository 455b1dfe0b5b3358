#include "worker/checkpoint/shard_memory_cache.h"

#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

CachedShardKey Key(const std::string& job, int64_t step) {
  CachedShardKey k;
  k.job_id = job;
  k.step = step;
  k.stage = 1;
  k.first_layer = 3;
  k.last_layer = 5;
  return k;
}

TEST(ShardMemoryCacheTest, FindsExactlyTheKeyAndSize) {
  ShardMemoryCache cache;
  cache.Put(Key("job-1", 4), "shard-bytes");
  std::shared_ptr<const std::string> hit = cache.Find(Key("job-1", 4), 11);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, "shard-bytes");
  EXPECT_EQ(cache.Find(Key("job-1", 4), 12), nullptr);  // the manifest says another size
  EXPECT_EQ(cache.Find(Key("job-1", 8), 11), nullptr);  // another step
  EXPECT_EQ(cache.Find(Key("job-2", 4), 11), nullptr);  // another job
  CachedShardKey other_range = Key("job-1", 4);
  other_range.last_layer = 6;
  EXPECT_EQ(cache.Find(other_range, 11), nullptr);
  CachedShardKey other_replica = Key("job-1", 4);
  other_replica.replica = 1;
  EXPECT_EQ(cache.Find(other_replica, 11), nullptr);
}

TEST(ShardMemoryCacheTest, KeepsTheNewestShardPerJobAndBoundsTheJobs) {
  ShardMemoryCache cache(/*max_jobs=*/2);
  cache.Put(Key("job-1", 4), "four");
  std::shared_ptr<const std::string> held = cache.Find(Key("job-1", 4), 4);
  cache.Put(Key("job-1", 8), "eight");
  EXPECT_EQ(cache.Find(Key("job-1", 4), 4), nullptr);
  EXPECT_NE(cache.Find(Key("job-1", 8), 5), nullptr);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(*held, "four");  // a caller's copy outlives the replacement
  cache.Put(Key("job-2", 2), "two");
  cache.Put(Key("job-3", 3), "three");
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.Find(Key("job-1", 8), 5), nullptr);  // the least recently stored went
  EXPECT_NE(cache.Find(Key("job-2", 2), 3), nullptr);
  EXPECT_NE(cache.Find(Key("job-3", 3), 5), nullptr);
}

TEST(ShardMemoryCacheTest, ChecksumSeesEveryByte) {
  const std::string a(1001, 'x');
  std::string b = a;
  b[1000] = 'y';  // in the tail
  std::string c = a;
  c[3] = 'y';  // in a word
  EXPECT_NE(ShardChecksum(a), ShardChecksum(b));
  EXPECT_NE(ShardChecksum(a), ShardChecksum(c));
  EXPECT_EQ(ShardChecksum(a), ShardChecksum(std::string(1001, 'x')));
}

}  // namespace
}  // namespace dapple::worker
