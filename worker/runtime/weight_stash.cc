#include "worker/runtime/weight_stash.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dapple::worker {

WeightStash::WeightStash(StageBackend* backend, int64_t first_version)
    : backend_(backend), current_(first_version), floats_(backend->WeightFloats()) {}

absl::Status WeightStash::Use(int64_t version) {
  if (version == current_) return Restore();
  auto it = stash_.find(version);
  if (it == stash_.end()) {
    return absl::InternalError(
        absl::StrCat("weight version ", version, " is not stashed (live version ", current_, ")"));
  }
  if (in_use_ == version) return absl::OkStatus();
  if (in_use_ < 0) {
    live_.resize(static_cast<size_t>(floats_));
    DAPPLE_RETURN_IF_ERROR(backend_->ReadWeights(live_.data()));
  }
  DAPPLE_RETURN_IF_ERROR(backend_->WriteWeights(it->second.data()));
  in_use_ = version;
  return absl::OkStatus();
}

absl::Status WeightStash::Restore() {
  if (in_use_ < 0) return absl::OkStatus();
  DAPPLE_RETURN_IF_ERROR(backend_->WriteWeights(live_.data()));
  in_use_ = -1;
  return absl::OkStatus();
}

absl::Status WeightStash::BeforeUpdate(bool keep) {
  // The update must apply to the live weights, never to a stashed copy swapped in.
  DAPPLE_RETURN_IF_ERROR(Restore());
  if (!keep) return absl::OkStatus();
  std::vector<float>& copy = stash_[current_];
  copy.resize(static_cast<size_t>(floats_));
  DAPPLE_RETURN_IF_ERROR(backend_->ReadWeights(copy.data()));
  peak_versions_ = std::max(peak_versions_, versions());
  peak_bytes_ = std::max(peak_bytes_, stashed_bytes());
  return absl::OkStatus();
}

void WeightStash::Prune(int64_t oldest_needed) {
  while (!stash_.empty() && stash_.begin()->first < oldest_needed &&
         stash_.begin()->first != in_use_) {
    stash_.erase(stash_.begin());
  }
}

int64_t WeightStash::stashed_bytes() const {
  return static_cast<int64_t>(stash_.size()) * floats_ * static_cast<int64_t>(sizeof(float));
}

int64_t WeightStash::held_bytes() const {
  size_t floats = live_.capacity();
  for (const auto& [version, copy] : stash_) floats += copy.capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

void WeightStash::ResetPeak() {
  peak_versions_ = versions();
  peak_bytes_ = stashed_bytes();
}

}  // namespace dapple::worker
