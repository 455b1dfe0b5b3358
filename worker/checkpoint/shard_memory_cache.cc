#include "worker/checkpoint/shard_memory_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

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

namespace {

// "<job>.o<origin hash>.s<stage>.r<replica>.": every file of one rank (all steps).
std::string RankPrefix(const CachedShardKey& key) {
  return absl::StrCat(key.job_id, ".o", absl::Hex(ShardChecksum(key.origin)), ".s", key.stage, ".r",
                      key.replica, ".");
}

// "<job>.s<stage>.r<replica>.l<first>-<last>.step<N>.c": the key up to the checksum.
std::string KeyPrefix(const CachedShardKey& key) {
  return absl::StrCat(RankPrefix(key), "l", key.first_layer, "-", key.last_layer, ".step", key.step,
                      ".c");
}

// Job ids are "job-N"; anything else (a path separator, a dot that would confuse the names) is
// not cached on the host.
bool SafeJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  }
  return true;
}

}  // namespace

std::string CheckpointOrigin(const std::string& folder) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(folder, ec);
  if (ec) p = folder;
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string ShardMemoryCache::DefaultHostDir() {
  if (const char* dir = std::getenv("DAPPLE_SHARD_CACHE_DIR"); dir != nullptr) return dir;
  struct stat st;
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return absl::StrCat("/dev/shm/dapple-shards-", getuid());
}

ShardMemoryCache& ShardMemoryCache::Process() {
  // Never destroyed: threads may use it.
  static ShardMemoryCache* cache = new ShardMemoryCache(kDefaultMaxJobs, DefaultHostDir());
  return *cache;
}

void ShardMemoryCache::PutOnHost(const CachedShardKey& key, const std::string& bytes,
                                 uint64_t checksum) const {
  if (host_dir_.empty() || !SafeJobId(key.job_id)) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(host_dir_, ec);
  chmod(host_dir_.c_str(), 0700);  // the user's own shards
  const std::string name = absl::StrCat(KeyPrefix(key), absl::Hex(checksum), ".shard");
  const std::string path = absl::StrCat(host_dir_, "/", name);
  const std::string tmp = absl::StrCat(path, ".tmp", getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      DAPPLE_LOG_WARN("no host copy of the {} checkpoint shard in {} (full?): {}", key.job_id,
                      host_dir_, std::strerror(errno));
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return;
  }
  // The rank's older steps go; then the host's oldest files beyond the bound.
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  const std::string rank = RankPrefix(key);
  for (const fs::directory_entry& e : fs::directory_iterator(host_dir_, ec)) {
    const std::string file = e.path().filename().string();
    if (!absl::EndsWith(file, ".shard")) continue;
    if (file != name && absl::StartsWith(file, rank)) {
      fs::remove(e.path(), ec);
      continue;
    }
    files.emplace_back(e.last_write_time(ec), e.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + kMaxHostShards < files.size(); ++i) {
    if (files[i].second.filename() != name) fs::remove(files[i].second, ec);
  }
}

std::shared_ptr<const std::string> ShardMemoryCache::FindOnHost(const CachedShardKey& key,
                                                                int64_t expected_bytes) const {
  if (host_dir_.empty() || !SafeJobId(key.job_id)) return nullptr;
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string prefix = KeyPrefix(key);
  for (const fs::directory_entry& e : fs::directory_iterator(host_dir_, ec)) {
    const std::string file = e.path().filename().string();
    if (!absl::StartsWith(file, prefix) || !absl::EndsWith(file, ".shard")) continue;
    uint64_t checksum = 0;
    const std::string hex = file.substr(prefix.size(), file.size() - prefix.size() - 6);
    if (!absl::SimpleHexAtoi(hex, &checksum)) continue;
    if (static_cast<int64_t>(e.file_size(ec)) != expected_bytes || ec) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    auto bytes = std::make_shared<const std::string>(text.str());
    if (static_cast<int64_t>(bytes->size()) != expected_bytes ||
        ShardChecksum(*bytes) != checksum) {
      continue;
    }
    return bytes;
  }
  return nullptr;
}

void ShardMemoryCache::Put(const CachedShardKey& key, std::string bytes) {
  Entry e;
  e.key = key;
  e.checksum = ShardChecksum(bytes);
  e.bytes = std::make_shared<const std::string>(std::move(bytes));
  PutOnHost(key, *e.bytes, e.checksum);
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
    return FindOnHost(key, expected_bytes);
  }
  return hit.bytes;
}

int ShardMemoryCache::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace dapple::worker
