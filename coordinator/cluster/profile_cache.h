// Measured model profiles, cached by (model fingerprint, device kind), and the
// profiling requests that fill the cache (design.md, "Planner": the coordinator profiles a job's
// model on a worker before planning it):
//
//   Request(worker, spec, device, batch) ──▶ pending ──TakeFor(worker)──▶ sent ──Report──▶ cached
//                                                                            └──▶ failed (error)
//
// The service hands a pending request to its worker in the next heartbeat reply (TakeFor), the
// worker measures (worker/runtime/layer_profiler.h) and calls ReportProfile. A request whose
// worker dies or does not answer by its deadline fails (Expire), so a job never waits forever.
// A ready profile is refined by the measured steps of the jobs planned on it (Refine,
// profile_refinement.h); Lookup returns it refined. Saved / Restore carry a ready profile and its
// refinement to and from the coordinator's database (profile_store.h).
// Thread-safe (one internal mutex); no I/O.
#ifndef DAPPLE_COORDINATOR_CLUSTER_PROFILE_CACHE_H_
#define DAPPLE_COORDINATOR_CLUSTER_PROFILE_CACHE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster/profile_refinement.h"
#include "dapple/v1/profile.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

// "cpu", or "cuda" for any "cuda:N" device: profiles are shared by devices of one kind.
std::string DeviceKindOf(const std::string& device);

class ProfileCache {
 public:
  // A profile at any batch size serves every batch size: planners scale times linearly.
  struct Key {
    std::string fingerprint;  // profile::ModelFingerprint(model)
    std::string device_kind;  // DeviceKindOf(device)
    auto Tie() const { return std::tie(fingerprint, device_kind); }
    bool operator<(const Key& o) const { return Tie() < o.Tie(); }
  };
  // Where a key stands: kMissing (never asked, or the last request failed and was forgotten by
  // Lookup's caller), kPending (asked, no answer yet), kReady, kFailed (see error()).
  enum class State { kMissing, kPending, kReady, kFailed };

  // Measurements are kept per tenant: the operator's jobs (tenant "") key on the model's
  // fingerprint, a tenant's on "<fingerprint>@<tenant>" (ScopedFingerprint), so that a tenant's
  // plans never show that another tenant measured or refined a model (docs/security.md).
  static std::string ScopedFingerprint(const std::string& model_fingerprint,
                                       const std::string& tenant);
  static Key KeyOf(const v1::ModelSpec& model, const std::string& device,
                   const std::string& tenant = "");
  // The key a measured profile is cached under: its model_fingerprint (scoped already) and
  // DeviceKindOf(device_kind).
  static Key KeyOf(const v1::ModelProfile& profile);

  // Caches `profile` (ready) under its model_fingerprint and DeviceKindOf(device_kind),
  // replacing what was there.
  void Insert(const v1::ModelProfile& profile);

  State StateOf(const Key& key) const;
  // Refinements of one key kept for Refine: a job planned more refinements ago than this (or
  // before the model was measured again) is not taken.
  static constexpr int kGenerationsKept = 16;

  // The cached profile for `key`, if measured, refined by the jobs planned on it
  // (ProfileRefinement::Apply). `generation`, when not null, gets the refinement's generation
  // (with the profile, atomically): a number unique to this profile and refinement, which a
  // job planned on it passes to Refine when it ends.
  std::optional<v1::ModelProfile> Lookup(const Key& key, int64_t* generation = nullptr) const;
  // The generation Lookup would return for `key` now, without the profile; 0 unless ready. A
  // plan made on an older one was made on layer times the jobs have refined since.
  int64_t Generation(const Key& key) const;

  // A job planned on generation `generation` of key's profile measured `stages` per step
  // (ProfileRefinement::Observe, which fills `not_taken`). Returns the stages taken (0: nothing
  // changed); a change makes a new generation. kNotFound when key has no ready profile;
  // kFailedPrecondition when `generation` is not one of its last kGenerationsKept (the model was
  // measured again since, or many jobs refined it meanwhile); Observe's kInvalidArgument.
  absl::StatusOr<int> Refine(const Key& key, int64_t generation,
                             const std::vector<StageMeasurement>& stages,
                             std::vector<std::string>* not_taken = nullptr);
  // A ready profile as measured (not refined) and its refinement: what the database keeps.
  struct SavedProfile {
    v1::ModelProfile profile;
    v1::ProfileRefinementState refinement;
  };
  // key's ready profile and refinement; nullopt unless StateOf(key) is kReady.
  std::optional<SavedProfile> Saved(const Key& key) const;
  // Caches `saved.profile` (ready) under its key as Insert does, with its refinement under a new
  // generation. kInvalidArgument (ProfileRefinement::FromState's, or a profile without layers
  // or model_fingerprint), changing nothing.
  absl::Status Restore(const SavedProfile& saved);

  // Why the last request for `key` failed ("" unless StateOf is kFailed).
  std::string Error(const Key& key) const;
  // Whether `key` failed because its worker died or shut down before answering (Expire with a
  // dead worker, FailWorker), not because measuring failed or timed out, on fewer than
  // kMeasureAttempts requests in a row: another worker is worth asking (Request asks again).
  static constexpr int kMeasureAttempts = 2;
  bool WorthAskingAgain(const Key& key) const;

  // Asks `worker_id` to measure spec.model() on `device` at `batch_size` samples for a job of
  // `tenant`, answering by `deadline_unix_ms`, unless the key is pending or ready already (then
  // a no-op). A failed key is asked again. Returns the key.
  Key Request(const std::string& worker_id, const v1::JobSpec& spec, const std::string& device,
              int64_t batch_size, int64_t deadline_unix_ms, const std::string& tenant = "");

  // The request to send `worker_id` in its heartbeat reply, once; nullopt when none.
  std::optional<v1::ProfileRequest> TakeFor(const std::string& worker_id);

  // Whether `worker_id` has been asked to measure and has not answered (a pending request,
  // sent or not): a worker measures one model at a time, so the service asks another one.
  bool HasOutstanding(const std::string& worker_id) const;

  // A worker's answer. kNotFound for an unknown or already answered request id;
  // kPermissionDenied when `report.worker_id` is not the worker asked; kInvalidArgument when the
  // profile is for another model, device kind or batch size than asked, or has no layers (the
  // key turns kFailed). An answer with busy_with_request_id (the worker measures another
  // request) turns the key kMissing: it is asked again, and counts as no attempt. The worker's
  // profile names the model's own fingerprint; the cached one its key's (scoped). `key`, when
  // not null, gets the request's key (also on errors past kNotFound/kPermissionDenied).
  absl::Status Report(const v1::ReportProfileRequest& report, Key* key = nullptr);

  // The answer to a request this cache never made: one a previous coordinator sent, which the
  // worker said it was measuring when it registered here. Its profile is cached, as Insert does,
  // under every key in `waiting` (the keys jobs wait for; their model fingerprint, unscoped,
  // must be the profile's and their device kind its) that is not ready; a request pending for
  // such a key is dropped (its answer will be kNotFound). Returns the keys it filled.
  // kInvalidArgument when the report has an error or no profile with layers, a model
  // fingerprint and a device kind; kNotFound when no waiting key is the profile's.
  absl::StatusOr<std::vector<Key>> Adopt(const v1::ReportProfileRequest& report,
                                         const std::vector<Key>& waiting);

  // Fails every request of `worker_id` (it died: "worker w-1 died before reporting the profile")
  // and every request past its deadline at `now_unix_ms`. Returns how many failed.
  int Expire(const std::string& dead_worker_id, int64_t now_unix_ms);

  // Fails every pending request of `worker_id` at once, with "worker w-1 <why> before reporting
  // the profile" (why: e.g. "shut down"). Returns how many failed.
  int FailWorker(const std::string& worker_id, const std::string& why);

 private:
  struct Entry {
    State state = State::kMissing;
    std::string request_id;
    std::string worker_id;
    std::string tenant;  // whose jobs the measurement serves (ScopedFingerprint)
    bool sent = false;
    int64_t deadline_unix_ms = 0;
    v1::ProfileRequest request;
    v1::ModelProfile profile;
    std::string error;
    bool worker_lost = false;  // kFailed: the worker died or shut down before answering
    int attempts = 0;          // requests in a row, this one included
    // kReady: the refinement, and the factors of its generations, newest last.
    ProfileRefinement refinement;
    std::map<int64_t, std::vector<double>> generations;
  };
  // Sets e ready with `profile` and `refinement` (a profile's first: every factor 1) under a new
  // generation.
  void ReadyLocked(Entry& e, const v1::ModelProfile& profile, ProfileRefinement refinement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  // Request ids are "profile-<session>-<n>": an answer to a request of a coordinator that
  // restarted since (same n, another model) is unknown here, not taken for another request.
  const std::string session_ = NewSession();
  static std::string NewSession();
  int64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_PROFILE_CACHE_H_
