#include "worker/checkpoint/shard_memory_cache.h"

#include <cstring>
#include <utility>

namespace dapple::worker {

uint64_t ShardChecksum(const std::string& bytes) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t h = 14695981039346656037ULL;
  size_t i = 0;
  // Word at a time: a shard is megabytes, and the loader recomputes this before trusting a hit.
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h;
}

ShardMemoryCache& ShardMemoryCache::Process() {
  static ShardMemoryCache* cache = new ShardMemoryCache();  // never destroyed: threads may use it
  return *cache;
}

void ShardMemoryCache::Put(const CachedShardKey& key, std::string bytes) {
  Entry e;
  e.key = key;
  e.checksum = ShardChecksum(bytes);
  e.bytes = std::make_shared<const std::string>(std::move(bytes));
  absl::MutexLock l(&mu_);
  entries_.remove_if([&](const Entry& old) { return old.key.job_id == key.job_id; });
  entries_.push_front(std::move(e));
  while (static_cast<int>(entries_.size()) > max_jobs_) entries_.pop_back();
}

std::shared_ptr<const std::string> ShardMemoryCache::Find(const CachedShardKey& key,
                                                          int64_t expected_bytes) const {
  Entry hit;
  {
    absl::MutexLock l(&mu_);
    for (const Entry& e : entries_) {
      if (e.key == key) hit = e;
    }
  }
  if (hit.bytes == nullptr || static_cast<int64_t>(hit.bytes->size()) != expected_bytes ||
      ShardChecksum(*hit.bytes) != hit.checksum) {
    return nullptr;
  }
  return hit.bytes;
}

int ShardMemoryCache::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace dapple::worker
