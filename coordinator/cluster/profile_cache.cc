#include "coordinator/cluster/profile_cache.h"

#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/profile/model_profile.h"
#include "common/status.h"

namespace dapple::coordinator {

std::string DeviceKindOf(const std::string& device) {
  return absl::StartsWith(device, "cuda") ? "cuda" : device;
}

std::string ProfileCache::NewSession() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random() & 0xffffff, absl::kZeroPad6));
}

std::string ProfileCache::ScopedFingerprint(const std::string& model_fingerprint,
                                            const std::string& tenant) {
  return tenant.empty() ? model_fingerprint : absl::StrCat(model_fingerprint, "@", tenant);
}

ProfileCache::Key ProfileCache::KeyOf(const v1::ModelSpec& model, const std::string& device,
                                      const std::string& tenant) {
  return Key{ScopedFingerprint(profile::ModelFingerprint(model), tenant), DeviceKindOf(device)};
}

ProfileCache::Key ProfileCache::KeyOf(const v1::ModelProfile& profile) {
  return Key{profile.model_fingerprint(), DeviceKindOf(profile.device_kind())};
}

void ProfileCache::ReadyLocked(Entry& e, const v1::ModelProfile& profile,
                               ProfileRefinement refinement) {
  e.state = State::kReady;
  e.profile = profile;
  e.refinement = std::move(refinement);
  e.generations.clear();
  e.generations[next_generation_++] = e.refinement.Factors();
}

void ProfileCache::Insert(const v1::ModelProfile& profile) {
  absl::MutexLock l(&mu_);
  Entry& e = entries_[KeyOf(profile)];
  e = Entry{};
  ReadyLocked(e, profile, ProfileRefinement(profile.layers_size()));
}

std::optional<ProfileCache::SavedProfile> ProfileCache::Saved(const Key& key) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != State::kReady) return std::nullopt;
  return SavedProfile{it->second.profile, it->second.refinement.State()};
}

absl::Status ProfileCache::Restore(const SavedProfile& saved) {
  if (saved.profile.layers_size() == 0 || saved.profile.model_fingerprint().empty()) {
    return absl::InvalidArgumentError(
        "a saved profile needs its model fingerprint and at least one layer");
  }
  DAPPLE_ASSIGN_OR_RETURN(
      ProfileRefinement refinement,
      ProfileRefinement::FromState(saved.profile.layers_size(), saved.refinement));
  absl::MutexLock l(&mu_);
  Entry& e = entries_[KeyOf(saved.profile)];
  e = Entry{};
  ReadyLocked(e, saved.profile, std::move(refinement));
  return absl::OkStatus();
}

ProfileCache::State ProfileCache::StateOf(const Key& key) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? State::kMissing : it->second.state;
}

std::optional<v1::ModelProfile> ProfileCache::Lookup(const Key& key, int64_t* generation) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != State::kReady) return std::nullopt;
  if (generation != nullptr) *generation = it->second.generations.rbegin()->first;
  return it->second.refinement.Apply(it->second.profile);
}

int64_t ProfileCache::Generation(const Key& key) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != State::kReady) return 0;
  return it->second.generations.rbegin()->first;
}

absl::StatusOr<int> ProfileCache::Refine(const Key& key, int64_t generation,
                                         const std::vector<StageMeasurement>& stages,
                                         std::vector<std::string>* not_taken) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != State::kReady) {
    return absl::NotFoundError(absl::StrCat("no measured profile of model ", key.fingerprint,
                                            " on ", key.device_kind, " to refine"));
  }
  Entry& e = it->second;
  auto planned = e.generations.find(generation);
  if (planned == e.generations.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refinement ", generation, " of the profile of model ", key.fingerprint,
                     " on ", key.device_kind, " is gone (measured again, or refined ",
                     kGenerationsKept, " times since)"));
  }
  absl::StatusOr<int> taken = e.refinement.Observe(planned->second, stages, not_taken);
  if (!taken.ok() || *taken == 0) return taken;
  e.generations[next_generation_++] = e.refinement.Factors();
  while (static_cast<int>(e.generations.size()) > kGenerationsKept) {
    e.generations.erase(e.generations.begin());
  }
  return taken;
}

std::string ProfileCache::Error(const Key& key) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() || it->second.state != State::kFailed ? "" : it->second.error;
}

bool ProfileCache::WorthAskingAgain(const Key& key) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.state == State::kFailed && it->second.worker_lost &&
         it->second.attempts < kMeasureAttempts;
}

ProfileCache::Key ProfileCache::Request(const std::string& worker_id, const v1::JobSpec& spec,
                                        const std::string& device, int64_t batch_size,
                                        int64_t deadline_unix_ms, const std::string& tenant) {
  const Key key = KeyOf(spec.model(), device, tenant);
  absl::MutexLock l(&mu_);
  Entry& e = entries_[key];
  if (e.state == State::kPending || e.state == State::kReady) return key;
  const int attempts = e.state == State::kFailed ? e.attempts + 1 : 1;
  e = Entry{};
  e.attempts = attempts;
  e.state = State::kPending;
  e.request_id = absl::StrCat("profile-", session_, "-", next_request_++);
  e.worker_id = worker_id;
  e.tenant = tenant;
  e.deadline_unix_ms = deadline_unix_ms;
  e.request.set_request_id(e.request_id);
  *e.request.mutable_spec() = spec;
  e.request.set_device(device);
  e.request.set_batch_size(batch_size);
  return key;
}

std::optional<v1::ProfileRequest> ProfileCache::TakeFor(const std::string& worker_id) {
  absl::MutexLock l(&mu_);
  for (auto& [key, e] : entries_) {
    if (e.state == State::kPending && !e.sent && e.worker_id == worker_id) {
      e.sent = true;
      return e.request;
    }
  }
  return std::nullopt;
}

bool ProfileCache::HasOutstanding(const std::string& worker_id) const {
  absl::MutexLock l(&mu_);
  for (const auto& [key, e] : entries_) {
    if (e.state == State::kPending && e.worker_id == worker_id) return true;
  }
  return false;
}

absl::Status ProfileCache::Report(const v1::ReportProfileRequest& report, Key* key_out) {
  absl::MutexLock l(&mu_);
  for (auto& [key, e] : entries_) {
    if (e.state != State::kPending || e.request_id != report.request_id()) continue;
    if (e.worker_id != report.worker_id()) {
      return absl::PermissionDeniedError(absl::StrCat("profile request ", report.request_id(),
                                                      " was sent to worker ", e.worker_id, ", not ",
                                                      report.worker_id()));
    }
    if (key_out != nullptr) *key_out = key;
    if (!report.busy_with_request_id().empty()) {
      // Not measured, and nothing failed: the key is asked again (attempts unchanged).
      e.state = State::kMissing;
      e.sent = false;
      return absl::OkStatus();
    }
    if (!report.error().empty()) {
      e.state = State::kFailed;
      e.error =
          absl::StrCat("worker ", e.worker_id, " could not profile the model: ", report.error());
      return absl::OkStatus();
    }
    const v1::ModelProfile& p = report.profile();
    if (ScopedFingerprint(p.model_fingerprint(), e.tenant) != key.fingerprint ||
        DeviceKindOf(p.device_kind()) != key.device_kind ||
        p.batch_size() != e.request.batch_size() || p.layers_size() == 0) {
      e.state = State::kFailed;
      e.error = absl::StrCat("worker ", e.worker_id, " reported a profile of another model, ",
                             "device or batch size (", p.device_kind(), ", batch ", p.batch_size(),
                             ", ", p.layers_size(), " layers) than asked (", key.device_kind,
                             ", batch ", e.request.batch_size(), ")");
      return absl::InvalidArgumentError(e.error);
    }
    v1::ModelProfile scoped = p;
    scoped.set_model_fingerprint(key.fingerprint);
    ReadyLocked(e, scoped, ProfileRefinement(p.layers_size()));
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat("profile request '", report.request_id(), "' is unknown or answered"));
}

absl::StatusOr<std::vector<ProfileCache::Key>> ProfileCache::Adopt(
    const v1::ReportProfileRequest& report, const std::vector<Key>& waiting) {
  const v1::ModelProfile& p = report.profile();
  if (!report.error().empty() || p.layers_size() == 0 || p.model_fingerprint().empty() ||
      p.device_kind().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("profile request '", report.request_id(),
                                                   "' is unknown and its answer holds no profile"));
  }
  absl::MutexLock l(&mu_);
  std::vector<Key> filled;
  for (const Key& key : waiting) {
    const std::string& scoped = key.fingerprint;
    const bool same_model =
        scoped == p.model_fingerprint() || (absl::StartsWith(scoped, p.model_fingerprint()) &&
                                            scoped.size() > p.model_fingerprint().size() &&
                                            scoped[p.model_fingerprint().size()] == '@');
    if (!same_model || key.device_kind != DeviceKindOf(p.device_kind())) continue;
    Entry& e = entries_[key];
    if (e.state == State::kReady) continue;
    e = Entry{};
    v1::ModelProfile profile = p;
    profile.set_model_fingerprint(key.fingerprint);
    ReadyLocked(e, profile, ProfileRefinement(p.layers_size()));
    filled.push_back(key);
  }
  if (filled.empty()) {
    return absl::NotFoundError(absl::StrCat("profile request '", report.request_id(),
                                            "' is unknown and no job waits for its model"));
  }
  return filled;
}

int ProfileCache::Expire(const std::string& dead_worker_id, int64_t now_unix_ms) {
  absl::MutexLock l(&mu_);
  int failed = 0;
  for (auto& [key, e] : entries_) {
    if (e.state != State::kPending) continue;
    if (!dead_worker_id.empty() && e.worker_id == dead_worker_id) {
      e.error = absl::StrCat("worker ", e.worker_id, " died before reporting the profile");
      e.worker_lost = true;
    } else if (now_unix_ms >= e.deadline_unix_ms) {
      e.error =
          absl::StrCat("worker ", e.worker_id, " did not report the profile before its deadline");
    } else {
      continue;
    }
    e.state = State::kFailed;
    ++failed;
  }
  return failed;
}

int ProfileCache::FailWorker(const std::string& worker_id, const std::string& why) {
  absl::MutexLock l(&mu_);
  int failed = 0;
  for (auto& [key, e] : entries_) {
    if (e.state != State::kPending || e.worker_id != worker_id) continue;
    e.state = State::kFailed;
    e.error = absl::StrCat("worker ", e.worker_id, " ", why, " before reporting the profile");
    e.worker_lost = true;
    ++failed;
  }
  return failed;
}

}  // namespace dapple::coordinator
