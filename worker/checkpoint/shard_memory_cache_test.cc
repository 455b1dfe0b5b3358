#include "worker/checkpoint/shard_memory_cache.h"

#include <filesystem>
#include <fstream>

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

std::string FreshHostDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/dapple-host-shards-" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

int FilesIn(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

// The host copy outlives the process: a new cache on the same host directory (a restarted
// worker) finds what the old one stored, for the same origin only.
TEST(ShardMemoryCacheTest, TheHostCopyOutlivesTheProcess) {
  const std::string dir = FreshHostDir("outlives");
  CachedShardKey key = Key("job-1", 4);
  key.origin = CheckpointOrigin("/ckpt/./job-1/");
  EXPECT_EQ(key.origin, "/ckpt/job-1");
  {
    ShardMemoryCache before(2, dir);
    before.Put(key, "shard-bytes");
  }
  ShardMemoryCache after(2, dir);
  std::shared_ptr<const std::string> hit = after.Find(key, 11);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, "shard-bytes");
  CachedShardKey elsewhere = key;
  elsewhere.origin = "/other-cluster/job-1";  // another coordinator's job-1
  EXPECT_EQ(after.Find(elsewhere, 11), nullptr);
  EXPECT_EQ(after.Find(key, 12), nullptr);
  // A changed byte in the host file: not trusted.
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('S');
  }
  EXPECT_EQ(ShardMemoryCache(2, dir).Find(key, 11), nullptr);
}

TEST(ShardMemoryCacheTest, TheHostKeepsEachRanksNewestStepWithinItsBound) {
  const std::string dir = FreshHostDir("bound");
  ShardMemoryCache cache(2, dir);
  cache.Put(Key("job-1", 4), "four");
  cache.Put(Key("job-1", 8), "eight");
  EXPECT_EQ(FilesIn(dir), 1);  // the rank's older step went
  EXPECT_EQ(ShardMemoryCache(2, dir).Find(Key("job-1", 4), 4), nullptr);
  EXPECT_NE(ShardMemoryCache(2, dir).Find(Key("job-1", 8), 5), nullptr);
  for (int stage = 0; stage < 12; ++stage) {
    CachedShardKey k = Key("job-2", 2);
    k.stage = stage;
    cache.Put(k, "two");
  }
  EXPECT_EQ(FilesIn(dir), ShardMemoryCache::kMaxHostShards);
}

}  // namespace
}  // namespace dapple::worker
