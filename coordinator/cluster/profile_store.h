// What the coordinator measured and learned about models and the cluster, kept in its SQLite
// database so that a restarted coordinator (same --db) plans as well as before: the measured
// model profiles (ProfileCache) with their refinements by the jobs' steps (profile_refinement.h)
// and the cluster's collective overhead (collective_refinement.h). Without it a restarted
// coordinator measured every model again and planned its first jobs on unrefined layer times and
// no collective overhead (on this project's 2-vCPU host a fresh coordinator's first 2-stage job
// ran 1.21x its prediction: docs/benchmarks.md, "Predicted against measured step time").
//
// Schema: the store owns two tables, created when missing:
//   measured_profiles: fingerprint TEXT, device_kind TEXT (ProfileCache::Key; the primary key),
//     profile BLOB (a serialized ModelProfile, as measured), refinement BLOB (a serialized
//     ProfileRefinementState), measured_unix_ms INTEGER (when the worker reported the profile)
//   collective_overhead: name TEXT PRIMARY KEY ("cluster": one row), state BLOB (a serialized
//     CollectiveRefinementState)
//
// The store has its own connection to the file (WAL mode; writers wait up to 5 s for each
// other). Every write is one statement, durable when it returns OK.
//
// Thread safety: thread-safe (one internal mutex).
#ifndef DAPPLE_COORDINATOR_CLUSTER_PROFILE_STORE_H_
#define DAPPLE_COORDINATOR_CLUSTER_PROFILE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster/profile_cache.h"
#include "dapple/v1/profile.pb.h"

struct sqlite3;

namespace dapple::coordinator {

class ProfileStore {
 public:
  // Opens (creating if needed) the database at `db_path` and the tables.
  // kFailedPrecondition "cannot open profile tables in '<path>': <sqlite message>".
  static absl::StatusOr<std::unique_ptr<ProfileStore>> Open(const std::string& db_path);

  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  struct Loaded {
    std::vector<ProfileCache::SavedProfile> profiles;  // measured at or after the cut-off
    // One line per row not returned: "the profile of model 3f2a... on cpu was measured 200.0 h
    // ago" (kept in the table) or "the stored profile of model 3f2a... on cpu does not parse
    // (deleted)" (its blobs do not parse, or name another key than the row's).
    std::vector<std::string> dropped;
  };
  // Every saved profile measured at or after `measured_since_unix_ms`; older ones stay stored
  // (the next measurement of the model replaces them), unreadable ones are deleted. A row whose
  // refinement ProfileCache::Restore refuses is the caller's to Forget (its key is the
  // profile's). kInternal naming the file and SQLite's message for a read or delete error.
  absl::StatusOr<Loaded> LoadProfiles(int64_t measured_since_unix_ms, int64_t now_unix_ms);

  // Stores (replaces) `saved` under its key, measured at `measured_unix_ms`. kInternal naming
  // the file and SQLite's message when the write fails (nothing changes then).
  absl::Status SaveProfile(const ProfileCache::SavedProfile& saved, int64_t measured_unix_ms);
  // Replaces the refinement of key's stored profile; OK and no change when none is stored (it
  // was dropped at start or never saved). kInternal as SaveProfile.
  absl::Status SaveRefinement(const ProfileCache::Key& key,
                              const v1::ProfileRefinementState& refinement);
  // Deletes key's stored profile (none: OK). kInternal as SaveProfile.
  absl::Status Forget(const ProfileCache::Key& key);

  // The stored collective overhead; nullopt when none was saved. kInternal for a read error;
  // kDataLoss when the stored blob does not parse.
  absl::StatusOr<std::optional<v1::CollectiveRefinementState>> LoadCollectives() const;
  // Stores (replaces) the collective overhead. kInternal as SaveProfile.
  absl::Status SaveCollectives(const v1::CollectiveRefinementState& state);

 private:
  ProfileStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status ForgetLocked(const ProfileCache::Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `sql` with `bind` binding its parameters; `what` names the change in the error.
  template <typename Bind>
  absl::Status WriteLocked(const char* sql, const std::string& what, const Bind& bind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_PROFILE_STORE_H_
