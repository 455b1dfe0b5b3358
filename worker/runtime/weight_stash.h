// PipeDream's weight stashing (Narayanan et al., SOSP 2019, section 3.3) for one stage: the
// backward of a micro-batch must use exactly the weights its forward used, although updates
// were applied in between (asynchronous 1F1B, schedule pipedream). The stash keeps the older
// versions the in-flight micro-batches still need and swaps them into the backend around their
// backward (and, under vertical sync, around their forward too).
//
// Versions count the updates applied to the stage: the live weights are version current();
// OPTIMIZER_STEP turns version v into v + 1. Stashed copies are flat fp32 vectors in HostParams
// order (StageBackend::ReadWeights / WriteWeights). On stage i of P with 1F1B at most P - i
// versions are needed at once (the live one included); with vertical sync the versions stage 0
// used, which can need more (the caller decides what to keep through Prune).
//
// Errors: the backend's (kUnimplemented for a backend without weight access); kInternal for a
// version that is neither live nor stashed. Thread safety: one thread (the rank's).
#ifndef DAPPLE_WORKER_RUNTIME_WEIGHT_STASH_H_
#define DAPPLE_WORKER_RUNTIME_WEIGHT_STASH_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

class WeightStash {
 public:
  // `backend` is not owned and must outlive the stash; `first_version` is the live version at
  // the start (the updates already applied: a resumed job's first step).
  WeightStash(StageBackend* backend, int64_t first_version);

  int64_t current() const { return current_; }
  // The version the backend holds now: the stashed one swapped in by Use, else current().
  int64_t in_use() const { return in_use_ >= 0 ? in_use_ : current_; }

  // Makes `version` the weights in the backend for the next compute (a no-op for current());
  // Restore() puts the live weights back. kInternal when `version` is not stashed.
  absl::Status Use(int64_t version);
  absl::Status Restore();

  // Before an update: stashes the live weights when `keep` (some in-flight or later micro-batch
  // still needs this version). After it: the live version is current() + 1.
  absl::Status BeforeUpdate(bool keep);
  void AfterUpdate() { ++current_; }

  // Forgets every stashed version older than `oldest_needed`.
  void Prune(int64_t oldest_needed);

  // Versions held now (the live one included) and the bytes of the stashed copies.
  int versions() const { return 1 + static_cast<int>(stash_.size()); }
  int64_t stashed_bytes() const;
  // What the stash really holds now: its copies' allocated bytes plus the copy of the live
  // weights it keeps (once a stashed version was swapped in) for Restore.
  int64_t held_bytes() const;
  // The most versions held at once since the last ResetPeak, and their stashed bytes.
  int peak_versions() const { return peak_versions_; }
  int64_t peak_stashed_bytes() const { return peak_bytes_; }
  void ResetPeak();

 private:
  StageBackend* backend_;
  int64_t current_;
  int64_t floats_;
  std::map<int64_t, std::vector<float>> stash_;
  std::vector<float> live_;  // the live weights while a stashed version is in use
  int64_t in_use_ = -1;      // the stashed version swapped in, -1 when the live one is
  int peak_versions_ = 1;
  int64_t peak_bytes_ = 0;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_WEIGHT_STASH_H_
