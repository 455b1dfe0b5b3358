#include "coordinator/cluster/profile_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator {
namespace {

constexpr char kCreateTables[] =
    "CREATE TABLE IF NOT EXISTS measured_profiles ("
    "  fingerprint TEXT NOT NULL,"
    "  device_kind TEXT NOT NULL,"
    "  profile BLOB NOT NULL,"
    "  refinement BLOB NOT NULL,"
    "  measured_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (fingerprint, device_kind));"
    "CREATE TABLE IF NOT EXISTS collective_overhead ("
    "  name TEXT PRIMARY KEY,"
    "  state BLOB NOT NULL)";

constexpr char kSelectProfiles[] =
    "SELECT fingerprint, device_kind, profile, refinement, measured_unix_ms "
    "FROM measured_profiles ORDER BY fingerprint, device_kind";
constexpr char kSaveProfile[] =
    "INSERT OR REPLACE INTO measured_profiles "
    "(fingerprint, device_kind, profile, refinement, measured_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr char kSaveRefinement[] =
    "UPDATE measured_profiles SET refinement = ?3 WHERE fingerprint = ?1 AND device_kind = ?2";
constexpr char kForget[] =
    "DELETE FROM measured_profiles WHERE fingerprint = ?1 AND device_kind = ?2";
constexpr char kSelectCollectives[] =
    "SELECT state FROM collective_overhead WHERE name = 'cluster'";
constexpr char kSaveCollectives[] =
    "INSERT OR REPLACE INTO collective_overhead (name, state) VALUES ('cluster', ?1)";

void BindBlob(sqlite3_stmt* stmt, int index, const std::string& bytes) {
  sqlite3_bind_blob(stmt, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
}

std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt, column));
  return p == nullptr ? std::string()
                      : std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
}

std::string Describe(const std::string& fingerprint, const std::string& device_kind) {
  return absl::StrCat("model ", fingerprint, " on ", device_kind);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProfileStore>> ProfileStore::Open(const std::string& db_path) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqliteTables(db_path, kCreateTables, "profile tables"));
  std::unique_ptr<ProfileStore> store(new ProfileStore(db, db_path));
  return store;
}

ProfileStore::~ProfileStore() { sqlite3_close(db_); }

template <typename Bind>
absl::Status ProfileStore::WriteLocked(const char* sql, const std::string& what, const Bind& bind) {
  SqliteStatement write;
  if (sqlite3_prepare_v2(db_, sql, -1, &write.stmt, nullptr) == SQLITE_OK) {
    bind(write.stmt);
    if (sqlite3_step(write.stmt) == SQLITE_DONE) return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(what, " in '", path_, "': ", sqlite3_errmsg(db_)));
}

absl::StatusOr<ProfileStore::Loaded> ProfileStore::LoadProfiles(int64_t measured_since_unix_ms,
                                                                int64_t now_unix_ms) {
  absl::MutexLock lock(&mu_);
  Loaded loaded;
  std::vector<ProfileCache::Key> unreadable;
  {
    SqliteStatement select;
    if (sqlite3_prepare_v2(db_, kSelectProfiles, -1, &select.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(
          absl::StrCat("reading measured profiles from '", path_, "': ", sqlite3_errmsg(db_)));
    }
    int rc;
    while ((rc = sqlite3_step(select.stmt)) == SQLITE_ROW) {
      ProfileCache::Key key{ColumnText(select.stmt, 0), ColumnText(select.stmt, 1)};
      const int64_t measured = sqlite3_column_int64(select.stmt, 4);
      ProfileCache::SavedProfile saved;
      if (!saved.profile.ParseFromString(ColumnBlob(select.stmt, 2)) ||
          !saved.refinement.ParseFromString(ColumnBlob(select.stmt, 3)) ||
          ProfileCache::KeyOf(saved.profile).Tie() != key.Tie()) {
        loaded.dropped.push_back(absl::StrCat("the stored profile of ",
                                              Describe(key.fingerprint, key.device_kind),
                                              " does not parse (deleted)"));
        unreadable.push_back(std::move(key));
      } else if (measured < measured_since_unix_ms) {
        // Kept: a later start with a longer --profile-max-age-h may reuse it, and the next
        // measurement of the model replaces it.
        loaded.dropped.push_back(absl::StrFormat("the profile of %s was measured %.1f h ago",
                                                 Describe(key.fingerprint, key.device_kind),
                                                 (now_unix_ms - measured) / 3.6e6));
      } else {
        loaded.profiles.push_back(std::move(saved));
      }
    }
    if (rc != SQLITE_DONE) {
      return absl::InternalError(
          absl::StrCat("reading measured profiles from '", path_, "': ", sqlite3_errmsg(db_)));
    }
  }
  for (const ProfileCache::Key& key : unreadable) DAPPLE_RETURN_IF_ERROR(ForgetLocked(key));
  return loaded;
}

absl::Status ProfileStore::SaveProfile(const ProfileCache::SavedProfile& saved,
                                       int64_t measured_unix_ms) {
  const ProfileCache::Key key = ProfileCache::KeyOf(saved.profile);
  const std::string profile = saved.profile.SerializeAsString();
  const std::string refinement = saved.refinement.SerializeAsString();
  absl::MutexLock lock(&mu_);
  return WriteLocked(
      kSaveProfile,
      absl::StrCat("saving the profile of ", Describe(key.fingerprint, key.device_kind)),
      [&](sqlite3_stmt* stmt) {
        BindText(stmt, 1, key.fingerprint);
        BindText(stmt, 2, key.device_kind);
        BindBlob(stmt, 3, profile);
        BindBlob(stmt, 4, refinement);
        sqlite3_bind_int64(stmt, 5, measured_unix_ms);
      });
}

absl::Status ProfileStore::SaveRefinement(const ProfileCache::Key& key,
                                          const v1::ProfileRefinementState& refinement) {
  const std::string bytes = refinement.SerializeAsString();
  absl::MutexLock lock(&mu_);
  return WriteLocked(
      kSaveRefinement,
      absl::StrCat("saving the refinement of ", Describe(key.fingerprint, key.device_kind)),
      [&](sqlite3_stmt* stmt) {
        BindText(stmt, 1, key.fingerprint);
        BindText(stmt, 2, key.device_kind);
        BindBlob(stmt, 3, bytes);
      });
}

absl::Status ProfileStore::Forget(const ProfileCache::Key& key) {
  absl::MutexLock lock(&mu_);
  return ForgetLocked(key);
}

absl::Status ProfileStore::ForgetLocked(const ProfileCache::Key& key) {
  return WriteLocked(
      kForget, absl::StrCat("deleting the profile of ", Describe(key.fingerprint, key.device_kind)),
      [&](sqlite3_stmt* stmt) {
        BindText(stmt, 1, key.fingerprint);
        BindText(stmt, 2, key.device_kind);
      });
}

absl::StatusOr<std::optional<v1::CollectiveRefinementState>> ProfileStore::LoadCollectives() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement select;
  if (sqlite3_prepare_v2(db_, kSelectCollectives, -1, &select.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("reading the collective overhead from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  const int rc = sqlite3_step(select.stmt);
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) {
    return absl::InternalError(
        absl::StrCat("reading the collective overhead from '", path_, "': ", sqlite3_errmsg(db_)));
  }
  v1::CollectiveRefinementState state;
  if (!state.ParseFromString(ColumnBlob(select.stmt, 0))) {
    return absl::DataLossError(
        absl::StrCat("the collective overhead stored in '", path_, "' does not parse"));
  }
  return state;
}

absl::Status ProfileStore::SaveCollectives(const v1::CollectiveRefinementState& state) {
  const std::string bytes = state.SerializeAsString();
  absl::MutexLock lock(&mu_);
  return WriteLocked(kSaveCollectives, "saving the collective overhead",
                     [&](sqlite3_stmt* stmt) { BindBlob(stmt, 1, bytes); });
}

}  // namespace dapple::coordinator
