#include "worker/checkpoint/async_shard_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace dapple::worker {

CheckpointReport SaveShard(const std::string& checkpoint_dir, const std::string& job_id,
                           int64_t step, const ShardLocation& where, const StageState& snapshot,
                           ShardMemoryCache* cache) {
  const absl::Time start = absl::Now();
  CheckpointReport out;
  out.step = step;
  std::string bytes = EncodeShard(job_id, step, where, snapshot);
  absl::StatusOr<WrittenShard> written = WriteEncodedShard(checkpoint_dir, step, where, bytes);
  out.write_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!written.ok()) {
    out.error = absl::StrCat("stage ", where.stage, ": ", written.status().message());
    DAPPLE_LOG_WARN("{}: checkpoint after step {}: {}", job_id, step, out.error);
    return out;
  }
  out.file = written->file;
  out.bytes = written->bytes;
  if (cache != nullptr) {
    CachedShardKey key;
    key.origin = CheckpointOrigin(checkpoint_dir);
    key.job_id = job_id;
    key.step = step;
    key.stage = where.stage;
    key.replica = where.replica;
    key.first_layer = where.first_layer;
    key.last_layer = where.last_layer;
    cache->Put(key, std::move(bytes));
  }
  return out;
}

AsyncShardWriter::AsyncShardWriter(std::string checkpoint_dir, std::string job_id,
                                   ShardLocation where, Sink sink, ShardMemoryCache* cache)
    : checkpoint_dir_(std::move(checkpoint_dir)),
      job_id_(std::move(job_id)),
      where_(where),
      sink_(std::move(sink)),
      cache_(cache) {
  thread_ = std::thread([this] { Loop(); });
}

AsyncShardWriter::~AsyncShardWriter() {
  Finish();
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

double AsyncShardWriter::Submit(int64_t step, StageState snapshot) {
  absl::MutexLock l(&mu_);
  double waited = 0;
  if (pending_.has_value()) {
    const absl::Time start = absl::Now();
    mu_.Await(absl::Condition(
        +[](std::optional<std::pair<int64_t, StageState>>* p) { return !p->has_value(); },
        &pending_));
    waited = absl::ToDoubleSeconds(absl::Now() - start);
  }
  pending_.emplace(step, std::move(snapshot));
  return waited;
}

void AsyncShardWriter::Finish() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<std::pair<int64_t, StageState>>* p) { return !p->has_value(); },
      &pending_));
}

void AsyncShardWriter::Loop() {
  for (;;) {
    int64_t step = 0;
    const StageState* snapshot = nullptr;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](AsyncShardWriter* w)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->stop_ || w->pending_.has_value(); },
          this));
      if (!pending_.has_value()) return;  // stopping, nothing in flight
      step = pending_->first;
      // Stable while pending_ is set: Submit waits for it to clear before replacing it.
      snapshot = &pending_->second;
    }
    CheckpointReport report = SaveShard(checkpoint_dir_, job_id_, step, where_, *snapshot, cache_);
    if (report.error.empty()) {
      DAPPLE_LOG_INFO(
          "{}: stage {}: checkpoint after step {} written in the background ({} bytes, "
          "{:.1f} ms)",
          job_id_, where_.stage, step, report.bytes, report.write_seconds * 1e3);
    }
    sink_(std::move(report));
    absl::MutexLock l(&mu_);
    pending_.reset();  // frees the snapshot; wakes Submit / Finish
  }
}

}  // namespace dapple::worker
