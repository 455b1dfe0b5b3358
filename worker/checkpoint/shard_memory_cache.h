// The worker's in-memory copy of its newest checkpoint shards (docs/operations.md,
// "Checkpoints", "In-memory copy"): after a rank wrote its shard, it keeps the shard's bytes here,
// so that a job resumed onto the same worker process with the same layer range (a restart that
// kept the worker) loads them from memory instead of the checkpoint folder. The loader
// (checkpoint_loader.h) asks with the manifest's job, step, and the entry's stage, replica,
// layer range and size; a hit must also match the checksum taken when the bytes were stored, else
// the loader reads the file. The bytes are exactly the file's, so both sources decode alike.
//
// Bounded: one shard per job (the newest step; a worker runs one rank at a time) and at most
// `max_jobs` jobs (the least recently stored is dropped), so a worker holds at most
// max_jobs x its largest shard.
//
// Thread safety: thread-safe (the rank's background writer stores, a later rank's loader finds).
#ifndef DAPPLE_WORKER_CHECKPOINT_SHARD_MEMORY_CACHE_H_
#define DAPPLE_WORKER_CHECKPOINT_SHARD_MEMORY_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dapple::worker {

struct CachedShardKey {
  std::string job_id;  // the job that wrote the checkpoint (CheckpointManifest.job_id)
  int64_t step = 0;
  int stage = 0;
  int replica = 0;
  int first_layer = 0;
  int last_layer = 0;

  bool operator==(const CachedShardKey&) const = default;
};

// 64-bit FNV-1a over `bytes` (8 bytes at a time, then the tail): a checksum against a copy
// changed in memory, not a cryptographic hash.
uint64_t ShardChecksum(const std::string& bytes);

class ShardMemoryCache {
 public:
  static constexpr int kDefaultMaxJobs = 2;

  // The worker process's cache (what the daemon's ranks use).
  static ShardMemoryCache& Process();

  explicit ShardMemoryCache(int max_jobs = kDefaultMaxJobs) : max_jobs_(max_jobs) {}

  // Stores `bytes` (a whole shard file) for `key`, replacing the job's previous shard.
  void Put(const CachedShardKey& key, std::string bytes);

  // The bytes stored for exactly `key` when they are `expected_bytes` long and still have their
  // checksum; nullptr otherwise. The bytes are shared: they stay valid after a later Put.
  std::shared_ptr<const std::string> Find(const CachedShardKey& key, int64_t expected_bytes) const;

  // Jobs held now (tests).
  int size() const;

 private:
  struct Entry {
    CachedShardKey key;
    std::shared_ptr<const std::string> bytes;
    uint64_t checksum = 0;
  };
  const int max_jobs_;
  mutable absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);  // most recently stored first
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_SHARD_MEMORY_CACHE_H_
