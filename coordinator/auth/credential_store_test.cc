#include "coordinator/auth/credential_store.h"

#include <cstdio>
#include <string>

#include "coordinator/jobs/test_db.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::auth {
namespace {

using ::dapple::coordinator::FreshDbPath;

using ::testing::HasSubstr;
using ::testing::Not;

class CredentialStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CredentialStore>> store =
        CredentialStore::Open(path_, [this] { return now_; });
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(store_->CreateTenant("team-a").ok());
    ASSERT_TRUE(store_->CreateUser("team-a", "alice", Role::kUser).ok());
    ASSERT_TRUE(store_->CreateUser("", "root", Role::kAdmin).ok());
  }

  int64_t now_ = 1000000;
  const std::string path_ = FreshDbPath();
  std::unique_ptr<CredentialStore> store_;
};

TEST_F(CredentialStoreTest, AnIssuedTokenProvesItsUser) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueToken("alice", std::nullopt);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->token.size(), 85u);
  EXPECT_EQ(token->token.substr(0, 4), "dpl_");
  absl::StatusOr<Identity> who = store_->Authenticate(token->token);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->user, "alice");
  EXPECT_EQ(who->tenant, "team-a");
  EXPECT_EQ(who->role, Role::kUser);
  EXPECT_EQ(who->token_id, token->id);
  absl::StatusOr<CredentialStore::IssuedToken> admin = store_->IssueToken("root", std::nullopt);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(store_->Authenticate(admin->token)->role, Role::kAdmin);
  EXPECT_EQ(store_->failed_authentications(), 0);
}

TEST_F(CredentialStoreTest, OnlyTheHashIsStored) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueToken("alice", std::nullopt);
  ASSERT_TRUE(token.ok());
  // The database file never holds the secret half of the token.
  const std::string secret = token->token.substr(21);
  std::string bytes;
  for (const char* suffix : {"", "-wal"}) {
    std::FILE* f = std::fopen((path_ + suffix).c_str(), "rb");
    if (f == nullptr) continue;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.append(buffer, n);
    std::fclose(f);
  }
  EXPECT_FALSE(bytes.empty());
  EXPECT_THAT(bytes, Not(HasSubstr(secret)));
  EXPECT_THAT(bytes, HasSubstr(token->id));
}

TEST_F(CredentialStoreTest, RefusalsSayWhyAndAreCounted) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueToken("alice", 60000);
  ASSERT_TRUE(token.ok());
  auto refused = [&](const std::string& presented) {
    absl::StatusOr<Identity> who = store_->Authenticate(presented);
    EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << presented.size();
    return std::string(who.status().message());
  };
  EXPECT_THAT(refused(""), HasSubstr("malformed token"));
  EXPECT_THAT(refused(std::string(1 << 20, 'x')), HasSubstr("malformed token"));
  EXPECT_THAT(refused(std::string("dpl_\0\xff", 6)), HasSubstr("malformed token"));
  std::string wrong_secret = token->token;
  wrong_secret.back() = wrong_secret.back() == '0' ? '1' : '0';
  EXPECT_EQ(refused(wrong_secret), "unknown token");
  std::string wrong_id = token->token;
  wrong_id[4] = wrong_id[4] == '0' ? '1' : '0';
  EXPECT_EQ(refused(wrong_id), "unknown token");
  now_ += 60000;
  EXPECT_EQ(refused(token->token), "token dpl_" + token->id + " expired");
  absl::StatusOr<CredentialStore::IssuedToken> other = store_->IssueToken("alice", std::nullopt);
  ASSERT_TRUE(store_->RevokeToken(other->id).ok());
  ASSERT_TRUE(store_->RevokeToken(other->id).ok());  // twice is fine
  EXPECT_EQ(refused(other->token), "token dpl_" + other->id + " was revoked");
  EXPECT_EQ(store_->RevokeToken("0123456789abcdef").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->failed_authentications(), 7);
  // No message echoes the presented secret.
  EXPECT_THAT(refused(wrong_secret), Not(HasSubstr(wrong_secret.substr(21))));
}

// The only admin token that authenticates now cannot be revoked; once another exists it can.
// Expired and revoked admin tokens do not count, users' tokens are never held back.
TEST_F(CredentialStoreTest, TheLastValidAdminTokenIsKept) {
  absl::StatusOr<CredentialStore::IssuedToken> first = store_->IssueToken("root", std::nullopt);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<CredentialStore::IssuedToken> expiring = store_->IssueToken("root", 1000);
  ASSERT_TRUE(expiring.ok());
  now_ += 1000;  // `expiring` no longer authenticates
  absl::Status s = store_->RevokeToken(first->id);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "token " + first->id +
                             " is the last valid admin token: revoking it would leave nobody "
                             "able to administer the cluster; issue another admin token first "
                             "(dapplectl admin token issue <admin>), then revoke this one");
  EXPECT_TRUE(store_->Authenticate(first->token).ok());
  EXPECT_EQ(*store_->RecoverableAdmin(), std::nullopt);
  ASSERT_TRUE(store_->CreateUser("", "ops", Role::kAdmin).ok());
  absl::StatusOr<CredentialStore::IssuedToken> second = store_->IssueToken("ops", std::nullopt);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(store_->RevokeToken(first->id).ok());
  EXPECT_EQ(store_->RevokeToken(second->id).code(), absl::StatusCode::kFailedPrecondition);
  // A user's last token is theirs to revoke.
  absl::StatusOr<CredentialStore::IssuedToken> alice = store_->IssueToken("alice", std::nullopt);
  EXPECT_TRUE(store_->RevokeToken(alice->id).ok());
}

// When every admin token expired, a restart recovers one for an admin (bootstrap.h).
TEST_F(CredentialStoreTest, AnAdminWithoutAValidTokenIsRecoverable) {
  EXPECT_EQ(*store_->RecoverableAdmin(), "root");  // root has no token at all
  ASSERT_TRUE(store_->CreateUser("", "admin", Role::kAdmin).ok());
  EXPECT_EQ(*store_->RecoverableAdmin(), "admin");  // the bootstrap admin first
  ASSERT_TRUE(store_->IssueToken("root", 500).ok());
  EXPECT_EQ(*store_->RecoverableAdmin(), std::nullopt);
  now_ += 500;
  EXPECT_EQ(*store_->RecoverableAdmin(), "admin");
}

TEST_F(CredentialStoreTest, WorkersGetTheirOwnCredential) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueWorkerCredential("w-3");
  ASSERT_TRUE(token.ok()) << token.status();
  absl::StatusOr<Identity> who = store_->Authenticate(token->token);
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->user, "w-3");
  EXPECT_EQ(who->role, Role::kWorker);
  EXPECT_EQ(who->tenant, "");
  // A second registration of the same worker id gets a new credential; both are valid until
  // revoked.
  EXPECT_TRUE(store_->IssueWorkerCredential("w-3").ok());
}

TEST_F(CredentialStoreTest, NamesAndRolesAreChecked) {
  EXPECT_EQ(store_->CreateTenant("team-a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(store_->CreateTenant("Team A").message(),
              HasSubstr("must be 1-63 characters of a-z, 0-9 and '-', starting with a letter"));
  EXPECT_EQ(store_->CreateUser("nope", "bob", Role::kUser).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->CreateUser("team-a", "bob", Role::kAdmin).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CreateUser("team-a", "bob", Role::kWorker).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CreateUser("team-a", "alice", Role::kUser).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->IssueToken("nobody", std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->IssueToken("alice", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CredentialStoreTest, TokensSurviveARestart) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueToken("alice", std::nullopt);
  ASSERT_TRUE(token.ok());
  store_.reset();
  absl::StatusOr<std::unique_ptr<CredentialStore>> again =
      CredentialStore::Open(path_, [this] { return now_; });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Authenticate(token->token)->user, "alice");
}

TEST(BearerTokenTest, ParsesTheHeader) {
  EXPECT_EQ(*BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(*BearerToken("bearer abc"), "abc");
  EXPECT_EQ(BearerToken("Basic abc").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(BearerToken("Bearer ").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(BearerToken("secret-value").status().message(), Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace dapple::coordinator::auth
