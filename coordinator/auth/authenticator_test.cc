#include "coordinator/auth/authenticator.h"

#include <map>
#include <string>

#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator::auth {
namespace {

using ::dapple::coordinator::FreshDbPath;

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *CredentialStore::Open(FreshDbPath(), [this] { return now_; });
    ASSERT_TRUE(store_->CreateTenant("team-a").ok());
    ASSERT_TRUE(store_->CreateUser("team-a", "alice", Role::kUser).ok());
    auth_ = std::make_unique<Authenticator>(
        store_.get(), [this](absl::string_view r) { ++failures_[std::string(r)]; });
  }
  absl::StatusOr<Identity> With(const std::string& value) const {
    absl::string_view v = value;
    return auth_->AuthenticateValue(&v, 1);
  }

  int64_t now_ = 1000;
  std::unique_ptr<CredentialStore> store_;
  std::unique_ptr<Authenticator> auth_;
  std::map<std::string, int> failures_;
};

TEST_F(AuthenticatorTest, EachRefusalSaysWhyAndIsCounted) {
  absl::StatusOr<CredentialStore::IssuedToken> token = store_->IssueToken("alice", 1000);
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(With("Bearer " + token->token)->user, "alice");
  EXPECT_EQ(With("bearer " + token->token)->user, "alice");

  absl::StatusOr<Identity> none = auth_->AuthenticateValue(nullptr, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(none.status().message(),
            "no authorization metadata: send 'authorization: Bearer <token>'");
  absl::string_view v = "Bearer x";
  EXPECT_EQ(auth_->AuthenticateValue(&v, 2).status().message(),
            "more than one authorization metadata entry");
  EXPECT_EQ(With("Basic abc").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(With("Bearer " + std::string(1 << 20, 'x')).status().code(),
            absl::StatusCode::kUnauthenticated);
  std::string wrong = token->token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_EQ(With("Bearer " + wrong).status().message(), "unknown token");
  now_ = 3000;
  EXPECT_EQ(With("Bearer " + token->token).status().message(),
            "token dpl_" + token->id + " expired");
  absl::StatusOr<CredentialStore::IssuedToken> other = store_->IssueToken("alice", std::nullopt);
  ASSERT_TRUE(store_->RevokeToken(other->id).ok());
  EXPECT_EQ(With("Bearer " + other->token).status().message(),
            "token dpl_" + other->id + " was revoked");
  EXPECT_EQ(failures_["missing"], 1);
  EXPECT_EQ(failures_["malformed"], 3);  // two entries, Basic, 1 MB
  EXPECT_EQ(failures_["unknown"], 1);
  EXPECT_EQ(failures_["expired"], 1);
  EXPECT_EQ(failures_["revoked"], 1);
}

TEST_F(AuthenticatorTest, TheJoinTokenProvesTheJoinRoleAndRotates) {
  absl::StatusOr<CredentialStore::IssuedToken> first = store_->RotateJoinToken();
  ASSERT_TRUE(first.ok());
  absl::StatusOr<Identity> who = With("Bearer " + first->token);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->role, Role::kJoin);
  EXPECT_EQ(who->tenant, "");
  absl::StatusOr<CredentialStore::IssuedToken> second = store_->RotateJoinToken();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(With("Bearer " + first->token).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(With("Bearer " + second->token)->role, Role::kJoin);
  // Nobody can be issued the join token's or a worker's tokens by name.
  EXPECT_EQ(store_->IssueToken("_join", std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->IssueWorkerCredential("w-1").ok());
  EXPECT_EQ(store_->IssueToken("w-1", std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A user's name cannot be taken by a worker id.
  EXPECT_EQ(store_->IssueWorkerCredential("alice").status().code(),
            absl::StatusCode::kAlreadyExists);
  // Listings show users and admins only, never a secret.
  ASSERT_TRUE(store_->IssueToken("alice", std::nullopt).ok());
  const absl::StatusOr<std::vector<v1::TokenInfo>> tokens = store_->ListTokens("");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 1u);
  for (const v1::TokenInfo& t : *tokens) EXPECT_EQ(t.user(), "alice");
  EXPECT_EQ(store_->ListUsers("")->size(), 1u);
  EXPECT_EQ(store_->ListTenants()->size(), 1u);
  EXPECT_FALSE(*store_->HasAdmin());
}

TEST_F(AuthenticatorTest, AnOpenStreamEndsOnceItsTokenIsRevokedOrExpires) {
  absl::StatusOr<CredentialStore::IssuedToken> kept = store_->IssueToken("alice", std::nullopt);
  absl::StatusOr<CredentialStore::IssuedToken> revoked = store_->IssueToken("alice", std::nullopt);
  absl::StatusOr<CredentialStore::IssuedToken> expiring = store_->IssueToken("alice", 500);
  auto open = [&](const CredentialStore::IssuedToken& t) {
    const std::string value = "Bearer " + t.token;
    absl::StatusOr<Identity> identity = With(value);
    EXPECT_TRUE(identity.ok()) << identity.status();
    EXPECT_EQ(identity->token_expires_unix_ms, t.expires_unix_ms);
    return StreamRecheck(auth_.get(), value, *identity);
  };
  StreamRecheck kept_stream = open(*kept);
  StreamRecheck revoked_stream = open(*revoked);
  StreamRecheck expiring_stream = open(*expiring);
  EXPECT_TRUE(kept_stream.Check().ok());
  EXPECT_TRUE(revoked_stream.Check().ok());
  ASSERT_TRUE(store_->RevokeToken(revoked->id).ok());
  EXPECT_TRUE(kept_stream.Check().ok());  // read again (the generation moved), still valid
  const absl::Status ended = revoked_stream.Check();
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ended.message(), "token dpl_" + revoked->id + " was revoked");
  EXPECT_EQ(revoked_stream.Check(), ended);  // sticky
  EXPECT_TRUE(expiring_stream.Check().ok());
  now_ += 500;
  EXPECT_EQ(expiring_stream.Check().message(), "token dpl_" + expiring->id + " expired");
  EXPECT_TRUE(kept_stream.Check().ok());
}

}  // namespace
}  // namespace dapple::coordinator::auth
