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
// A second copy outlives the worker process (issue 17: "a restart that keeps the same workers
// (the process died, the machine did not) does not wait for the disk"): with a host directory
// on a RAM file system (/dev/shm, tmpfs), Put also writes the bytes there, one file per rank
// named by its key and checksum (<job>.s<stage>.r<replica>.l<first>-<last>.step<N>.c<hex>.shard,
// written to a temporary name and renamed), keeping per rank its newest step and per host at most
// kMaxHostShards files (the oldest removed); Find looks there when the process has no copy, so a
// worker restarted on the same host, or another worker process there given the same rank,
// reads RAM instead of the checkpoint folder. A write that fails (a full /dev/shm) only loses
// that copy.
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
  // The job's checkpoint folder (the folder holding its step-<N>/ directories), as
  // CheckpointOrigin gives it: job ids repeat across coordinators (every cluster has a job-1),
  // the folder does not.
  std::string origin;
  std::string job_id;  // the job that wrote the checkpoint (CheckpointManifest.job_id)
  int64_t step = 0;
  int stage = 0;
  int replica = 0;
  int first_layer = 0;
  int last_layer = 0;

  bool operator==(const CachedShardKey&) const = default;
};

// `folder` absolute and lexically normal ("/ckpt/./job-3/" -> "/ckpt/job-3"): the key's origin,
// the same whether given by the writer (the job's checkpoint folder) or the loader (the parent of
// the manifest's step folder).
std::string CheckpointOrigin(const std::string& folder);

// 64-bit FNV-1a over `bytes` (8 bytes at a time, then the tail): a checksum against a copy
// changed in memory, not a cryptographic hash.
uint64_t ShardChecksum(const std::string& bytes);

class ShardMemoryCache {
 public:
  static constexpr int kDefaultMaxJobs = 2;

  static constexpr int kMaxHostShards = 8;

  // The worker process's cache (what the daemon's ranks use), with the host directory
  // DefaultHostDir().
  static ShardMemoryCache& Process();

  // $DAPPLE_SHARD_CACHE_DIR when set (empty: no host copy), else /dev/shm/dapple-shards-<uid>
  // when /dev/shm exists, else "".
  static std::string DefaultHostDir();

  // `host_dir` empty: the in-process copy alone.
  explicit ShardMemoryCache(int max_jobs = kDefaultMaxJobs, std::string host_dir = "")
      : max_jobs_(max_jobs), host_dir_(std::move(host_dir)) {}

  // Stores `bytes` (a whole shard file) for `key`, replacing the job's previous shard.
  void Put(const CachedShardKey& key, std::string bytes);

  // The bytes stored for exactly `key` when they are `expected_bytes` long and still have their
  // checksum, from this process's copy or else the host directory's; nullptr otherwise. The
  // bytes are shared: they stay valid after a later Put.
  std::shared_ptr<const std::string> Find(const CachedShardKey& key, int64_t expected_bytes) const;

  // Jobs held now (tests).
  int size() const;

 private:
  struct Entry {
    CachedShardKey key;
    std::shared_ptr<const std::string> bytes;
    uint64_t checksum = 0;
  };
  void PutOnHost(const CachedShardKey& key, const std::string& bytes, uint64_t checksum) const;
  std::shared_ptr<const std::string> FindOnHost(const CachedShardKey& key,
                                                int64_t expected_bytes) const;

  const int max_jobs_;
  const std::string host_dir_;
  mutable absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);  // most recently stored first
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_CHECKPOINT_SHARD_MEMORY_CACHE_H_
