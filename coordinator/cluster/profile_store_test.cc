#include "coordinator/cluster/profile_store.h"

#include <sqlite3.h>

#include "coordinator/jobs/sqlite_db.h"
#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

ProfileCache::SavedProfile Saved(const std::string& fingerprint, const std::string& device,
                                 double factor) {
  ProfileCache::SavedProfile saved;
  saved.profile.set_model_fingerprint(fingerprint);
  saved.profile.set_device_kind(device);
  saved.profile.set_source("measured on cpu by worker w-1");
  saved.profile.add_layers()->set_forward_ms(2.0);
  saved.refinement.add_layers()->add_observations(factor);
  saved.refinement.set_jobs(1);
  return saved;
}

// Runs `sql` on its own connection to `path`, as another process (or a damaged file) would.
void Exec(const std::string& path, const char* sql) {
  absl::StatusOr<sqlite3*> db = OpenSqliteDatabase(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_TRUE(ExecSql(*db, sql).ok());
  sqlite3_close(*db);
}

TEST(ProfileStoreTest, ProfilesAndRefinementsOutliveTheStore) {
  const std::string path = FreshDbPath();
  {
    auto store = ProfileStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<ProfileStore::Loaded> empty = (*store)->LoadProfiles(0, 1000);
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_TRUE(empty->profiles.empty());
    ASSERT_TRUE((*store)->SaveProfile(Saved("m1", "cpu", 1.1), 500).ok());
    // A cuda device's profile is kept under its kind, as the cache keys it.
    ASSERT_TRUE((*store)->SaveProfile(Saved("m1", "cuda:NVIDIA H200", 0.9), 600).ok());
    v1::ProfileRefinementState refined = Saved("m1", "cpu", 1.3).refinement;
    refined.set_jobs(2);
    ASSERT_TRUE((*store)->SaveRefinement({"m1", "cpu"}, refined).ok());
    // A refinement of a profile not stored changes nothing.
    ASSERT_TRUE((*store)->SaveRefinement({"m2", "cpu"}, refined).ok());
  }
  auto store = ProfileStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<ProfileStore::Loaded> loaded = (*store)->LoadProfiles(0, 1000);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->profiles.size(), 2u);
  EXPECT_TRUE(loaded->dropped.empty());
  for (const ProfileCache::SavedProfile& saved : loaded->profiles) {
    if (saved.profile.device_kind() == "cpu") {
      EXPECT_EQ(saved.refinement.jobs(), 2);
      EXPECT_EQ(saved.refinement.layers(0).observations(0), 1.3);
    } else {
      EXPECT_EQ(saved.refinement.layers(0).observations(0), 0.9);
    }
    EXPECT_EQ(saved.profile.layers(0).forward_ms(), 2.0);
  }
  ASSERT_TRUE((*store)->Forget({"m1", "cuda"}).ok());
  EXPECT_EQ((*store)->LoadProfiles(0, 1000)->profiles.size(), 1u);
}

TEST(ProfileStoreTest, OldProfilesAreSkippedUnreadableOnesDeletedEachNamed) {
  const std::string path = FreshDbPath();
  auto store = ProfileStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->SaveProfile(Saved("old", "cpu", 1.0), 0).ok());
  ASSERT_TRUE((*store)->SaveProfile(Saved("new", "cpu", 1.0), 7'200'000).ok());
  ASSERT_TRUE((*store)->SaveProfile(Saved("bad", "cpu", 1.0), 7'200'000).ok());
  ASSERT_TRUE((*store)->SaveProfile(Saved("empty", "cpu", 1.0), 7'200'000).ok());
  Exec(path, "UPDATE measured_profiles SET profile = x'ffff' WHERE fingerprint = 'bad'");
  // An empty blob parses (as a profile of no model): it does not match its row's key.
  Exec(path, "UPDATE measured_profiles SET profile = x'' WHERE fingerprint = 'empty'");
  absl::StatusOr<ProfileStore::Loaded> loaded = (*store)->LoadProfiles(3'600'000, 7'200'000);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->profiles.size(), 1u);
  EXPECT_EQ(loaded->profiles[0].profile.model_fingerprint(), "new");
  EXPECT_EQ(
      loaded->dropped,
      (std::vector<std::string>{"the stored profile of model bad on cpu does not parse (deleted)",
                                "the stored profile of model empty on cpu does not parse (deleted)",
                                "the profile of model old on cpu was measured 2.0 h ago"}));
  // The old one stays for a start with a longer age; the unreadable ones are gone.
  loaded = (*store)->LoadProfiles(0, 7'200'000);
  EXPECT_EQ(loaded->profiles.size(), 2u);
  EXPECT_TRUE(loaded->dropped.empty());
}

TEST(ProfileStoreTest, TheCollectiveOverheadOutlivesTheStore) {
  const std::string path = FreshDbPath();
  v1::CollectiveRefinementState state;
  state.add_observations_ms(4.5);
  state.add_observations_ms(5.5);
  state.set_jobs(2);
  {
    auto store = ProfileStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::optional<v1::CollectiveRefinementState>> none = (*store)->LoadCollectives();
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value());
    ASSERT_TRUE((*store)->SaveCollectives(state).ok());
  }
  auto store = ProfileStore::Open(path);
  absl::StatusOr<std::optional<v1::CollectiveRefinementState>> loaded = (*store)->LoadCollectives();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->SerializeAsString(), state.SerializeAsString());
  Exec(path, "UPDATE collective_overhead SET state = x'ffff'");
  EXPECT_EQ((*store)->LoadCollectives().status().code(), absl::StatusCode::kDataLoss);
}

TEST(ProfileStoreTest, AnUnopenableFileIsAFailedPreconditionNamingIt) {
  auto store = ProfileStore::Open("/nonexistent-dir/x.db");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("cannot open profile tables in '/nonexistent-dir/x.db'"),
            std::string::npos);
}

}  // namespace
}  // namespace dapple::coordinator
