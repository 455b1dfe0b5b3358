#include "coordinator/auth/bootstrap.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "common/token_file.h"
#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::auth {
namespace {

using ::dapple::coordinator::FreshDbPath;

TEST(BootstrapTest, TheFirstStartWritesTheTokensOnceMode0600) {
  const std::string db = FreshDbPath();
  std::unique_ptr<CredentialStore> store = *CredentialStore::Open(db, [] { return 1000; });
  EXPECT_EQ(DefaultTokenFile("/var/lib/dapple/dapple.db", "admin.token"),
            "/var/lib/dapple/admin.token");
  // Paths of this test alone (the test folder is shared).
  const std::string admin_file = db + ".admin.token";
  const std::string join_file = db + ".join.token";
  EXPECT_EQ(DefaultTokenFile("dapple.db", "join.token"), "join.token");
  absl::StatusOr<bool> first = Bootstrap(*store, admin_file, join_file);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first);
  struct stat st {};
  ASSERT_EQ(stat(admin_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(stat(join_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  absl::StatusOr<Identity> admin = store->Authenticate(*common::ReadTokenFile(admin_file));
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->user, "admin");
  EXPECT_EQ(admin->role, Role::kAdmin);
  EXPECT_EQ(store->Authenticate(*common::ReadTokenFile(join_file))->role, Role::kJoin);
  // Later starts write nothing.
  std::filesystem::remove(admin_file);
  EXPECT_FALSE(*Bootstrap(*store, admin_file, join_file));
  EXPECT_FALSE(std::filesystem::exists(admin_file));
  std::filesystem::remove(join_file);
}

// Every admin token expired: a start writes a new one for the admin to the admin token file;
// while one is valid, nothing is written.
TEST(BootstrapTest, AStartWithoutAValidAdminTokenRecoversOne) {
  const std::string db = FreshDbPath();
  int64_t now = 1000;
  std::unique_ptr<CredentialStore> store = *CredentialStore::Open(db, [&] { return now; });
  const std::string admin_file = db + ".admin.token";
  const std::string join_file = db + ".join.token";
  ASSERT_TRUE(*Bootstrap(*store, admin_file, join_file));
  EXPECT_EQ(*RecoverAdminToken(*store, admin_file), std::nullopt);
  const std::string bootstrap_token = *common::ReadTokenFile(admin_file);
  // The admin moves to an expiring token and revokes the bootstrap one; then it expires.
  absl::StatusOr<CredentialStore::IssuedToken> expiring = store->IssueToken("admin", 5000);
  ASSERT_TRUE(expiring.ok());
  ASSERT_TRUE(store->RevokeToken(store->Authenticate(bootstrap_token)->token_id).ok());
  now += 5000;
  absl::StatusOr<std::optional<std::string>> recovered = RecoverAdminToken(*store, admin_file);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  EXPECT_EQ(*recovered, "admin");
  const std::string token = *common::ReadTokenFile(admin_file);
  EXPECT_NE(token, bootstrap_token);
  absl::StatusOr<Identity> who = store->Authenticate(token);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->role, Role::kAdmin);
  struct stat st {};
  ASSERT_EQ(stat(admin_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::filesystem::remove(admin_file);
  std::filesystem::remove(join_file);
}

TEST(BootstrapTest, AnUnwritableFileLeavesTheDatabaseAsItWas) {
  const std::string db = FreshDbPath();
  std::unique_ptr<CredentialStore> store = *CredentialStore::Open(db, [] { return 1000; });
  absl::StatusOr<bool> r = Bootstrap(*store, "/no/such/folder/admin.token", db + ".join.token");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "cannot write the admin token file '/no/such/folder/admin.token': No such file or "
            "directory");
  EXPECT_FALSE(*store->HasAdmin());
}

// A second database in the folder of a first one: its first start does not overwrite the
// first database's tokens (their admin would lose the only copy of theirs).
TEST(BootstrapTest, AFirstStartNeverOverwritesAToken) {
  const std::string first_db = FreshDbPath();
  const std::string admin_file = first_db + ".admin.token";
  const std::string join_file = first_db + ".join.token";
  std::unique_ptr<CredentialStore> first = *CredentialStore::Open(first_db, [] { return 1000; });
  ASSERT_TRUE(*Bootstrap(*first, admin_file, join_file));
  const std::string first_admin = *common::ReadTokenFile(admin_file);
  std::unique_ptr<CredentialStore> second =
      *CredentialStore::Open(FreshDbPath(), [] { return 1000; });
  absl::StatusOr<bool> r = Bootstrap(*second, admin_file, join_file);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "this database has no admin yet, but the admin token file '" + admin_file +
                "' already holds a token (another database's in the same folder?); a first "
                "start never overwrites one: give this database its own --admin-token-file (or "
                "--db in another folder), or move the file away if its database is gone");
  EXPECT_FALSE(*second->HasAdmin());
  EXPECT_EQ(*common::ReadTokenFile(admin_file), first_admin);
  EXPECT_TRUE(first->Authenticate(first_admin).ok());
  // Its own files: it starts.
  EXPECT_TRUE(*Bootstrap(*second, admin_file + ".2", join_file + ".2"));
  for (const std::string& f : {admin_file, join_file, admin_file + ".2", join_file + ".2"}) {
    std::filesystem::remove(f);
  }
}

TEST(TokenFileTest, ReadsTheTokenAndSaysWhyNot) {
  const std::string base = FreshDbPath();
  EXPECT_EQ(common::ReadTokenFile(base + ".none").status().message(),
            "cannot read token file '" + base + ".none': No such file or directory");
  std::FILE* f = std::fopen((base + ".t").c_str(), "w");
  std::fputs("  dpl_x \n", f);
  std::fclose(f);
  EXPECT_EQ(*common::ReadTokenFile(base + ".t"), "dpl_x");
  f = std::fopen((base + ".e").c_str(), "w");
  std::fclose(f);
  EXPECT_EQ(common::ReadTokenFile(base + ".e").status().message(),
            "token file '" + base + ".e' is empty");
  std::remove((base + ".t").c_str());
  std::remove((base + ".e").c_str());
  // A folder, and a file of two tokens: refused by what is wrong, never echoing the token.
  EXPECT_EQ(common::ReadTokenFile(::testing::TempDir()).status().message(),
            "cannot read token file '" + ::testing::TempDir() + "': Is a directory");
  const std::string secret = "dpl_0123456789abcdef_" + std::string(64, 'a');
  f = std::fopen((base + ".two").c_str(), "w");
  std::fputs((secret + "\n" + secret + "\n").c_str(), f);
  std::fclose(f);
  absl::Status two = common::ReadTokenFile(base + ".two").status();
  EXPECT_EQ(two.message(), "token file '" + base +
                               ".two' holds byte 0x0a at offset 85: a token is one word of "
                               "printable characters (dpl_...); is there a second line or a "
                               "stray character?");
  EXPECT_EQ(two.message().find("dpl_0123"), absl::string_view::npos);
  std::remove((base + ".two").c_str());
}

TEST(TokenFileTest, OnlyPrintableWordsCanBeTokens) {
  EXPECT_TRUE(common::CheckTokenText("dpl_0123456789abcdef_" + std::string(64, 'a')).ok());
  for (const std::string& bad : {std::string("a b"), std::string("a\tb"), std::string("a\x7f"),
                                 std::string("a\0b", 3), std::string("\xc3\xa9")}) {
    EXPECT_EQ(common::CheckTokenText(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace dapple::coordinator::auth
