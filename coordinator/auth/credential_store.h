// Tenants, users and their bearer tokens, in the coordinator's SQLite database (issue 16,
// "Identity"). A token is random, shown once when issued and stored only as a SHA-256 hash; it
// can be revoked and may expire. Authenticate() turns a presented token into the caller's
// Identity, which RPC handlers receive instead of the token.
//
// Token format: "dpl_" + 16 hex digits (the token's id, stored in the clear, used to find its
// row and to revoke it) + "_" + 64 hex digits (32 random bytes from OpenSSL's RAND_bytes; only
// their SHA-256 is stored). Anything else is malformed and refused before the database is read,
// whatever its size (a 1 MB header costs a length check).
//
// Schema (tables created when missing):
//   tenants(name TEXT PRIMARY KEY, created_unix_ms INTEGER)
//   users(name TEXT PRIMARY KEY, tenant TEXT, role TEXT, created_unix_ms INTEGER)
//   tokens(id TEXT PRIMARY KEY, user TEXT, secret_sha256 TEXT, created_unix_ms INTEGER,
//          expires_unix_ms INTEGER (0: never), revoked_unix_ms INTEGER (0: not revoked))
//
// Roles: "user" and "admin" (CreateUser), "worker" (a row per worker id, created by
// IssueWorkerCredential) and "join": the cluster's join token is a token of the reserved user
// "_join" (a name CreateUser never accepts), of role "join", which proves Role::kJoin: it may only
// register workers. RotateJoinToken revokes the previous join token and issues a new one.
// Authenticate refuses a row whose role is none of these.
//
// The coordinator calls Authenticate for every RPC (coordinator/auth/authenticator.h).
//
// Thread safety: thread-safe (one internal mutex around the connection).
#ifndef DAPPLE_COORDINATOR_AUTH_CREDENTIAL_STORE_H_
#define DAPPLE_COORDINATOR_AUTH_CREDENTIAL_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth/identity.h"
#include "dapple/v1/admin.pb.h"

struct sqlite3;

namespace dapple::coordinator::auth {

// The token in an "authorization" metadata value: "Bearer <token>" (the scheme case-insensitive,
// one space). kUnauthenticated "authorization metadata must be 'Bearer <token>'" otherwise,
// without echoing the value (it may be a secret).
absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization);

class CredentialStore {
 public:
  // Opens (creating the tables if needed) the database at `db_path`. `now_unix_ms` is the clock
  // (tests pass a simulated one). kFailedPrecondition naming the file when it cannot.
  static absl::StatusOr<std::unique_ptr<CredentialStore>> Open(
      const std::string& db_path, std::function<int64_t()> now_unix_ms);
  ~CredentialStore();
  CredentialStore(const CredentialStore&) = delete;
  CredentialStore& operator=(const CredentialStore&) = delete;

  // Names: 1-63 characters of [a-z0-9-], starting with a letter (kInvalidArgument naming the
  // rule). kAlreadyExists for a name taken.
  absl::Status CreateTenant(const std::string& name);
  // A user of `tenant` (kNotFound when it does not exist) or, with role kAdmin and tenant "",
  // an admin. kInvalidArgument for a worker role (workers get credentials with
  // IssueWorkerCredential) or an admin with a tenant.
  absl::Status CreateUser(const std::string& tenant, const std::string& user, Role role);

  struct IssuedToken {
    std::string token;            // shown once: it is not stored
    std::string id;               // the 16 hex digits, to list or revoke it
    int64_t expires_unix_ms = 0;  // 0: never
  };
  // A new token for `user` (kNotFound when unknown; kInvalidArgument for a worker or the join
  // token's user), expiring after `ttl_ms` (> 0) or never.
  absl::StatusOr<IssuedToken> IssueToken(const std::string& user, std::optional<int64_t> ttl_ms);
  // A credential for worker `worker_id` ("w-3"), issued at registration; role kWorker.
  absl::StatusOr<IssuedToken> IssueWorkerCredential(const std::string& worker_id);
  // Revokes token `id`: kNotFound "no token <id>" when unknown; kFailedPrecondition "token
  // dpl_<id> is already revoked" when it was (the caller learns its revoke changed nothing), and
  // "token <id> is the last valid admin token: ..." for the only admin token that authenticates
  // now (not revoked, not expired): the cluster would have no administrator.
  absl::Status RevokeToken(const std::string& id);
  // A new cluster join token (never expiring); every earlier join token is revoked.
  absl::StatusOr<IssuedToken> RotateJoinToken();

  // True when some user of role admin exists (the coordinator bootstraps one otherwise).
  absl::StatusOr<bool> HasAdmin() const;
  // The admin to give a new token at start (bootstrap.h RecoverAdminToken) when admins exist
  // but none holds a token that authenticates now (all revoked or expired): user "admin" if it
  // is one, else the first admin by name. std::nullopt when some admin token is valid, or when
  // there is no admin at all (Bootstrap's case).
  absl::StatusOr<std::optional<std::string>> RecoverableAdmin() const;
  // Tenants by name (created_unix_ms filled; quota and usage are the scheduler's).
  absl::StatusOr<std::vector<v1::Tenant>> ListTenants() const;
  // OK when tenant `name` exists; kNotFound "no tenant NAME: create it first with dapplectl admin
  // tenant create NAME" otherwise (a filter or a quota naming a misspelt tenant is refused, not
  // answered with nothing).
  absl::Status CheckTenant(const std::string& name) const;
  // Users and admins (not workers, not the join token) by name; `tenant` "" lists all.
  absl::StatusOr<std::vector<v1::User>> ListUsers(const std::string& tenant) const;
  // Tokens of users and admins (not of workers or the join token) by creation time; `user` ""
  // lists all. Never a secret.
  absl::StatusOr<std::vector<v1::TokenInfo>> ListTokens(const std::string& user) const;
  // Token `id`'s public facts; kNotFound "no token <id>".
  absl::StatusOr<v1::TokenInfo> GetToken(const std::string& id) const;

  // The identity a token proves, or kUnauthenticated with the reason ("malformed token",
  // "unknown token", "token dpl_<id> was revoked", "token dpl_<id> expired"), never the
  // secret. The secret's hash is compared in constant time. Each failure is counted
  // (failed_authentications()).
  absl::StatusOr<Identity> Authenticate(absl::string_view token) const;

  int64_t failed_authentications() const { return failed_.load(); }

  // Bumped by every change that can end an identity proved earlier: a token revoked (also by
  // RotateJoinToken), and any future deletion of a user or tenant. An open stream re-reads its
  // token only when this moved (authenticator.h StreamRecheck), so checking it is one atomic
  // load.
  uint64_t revocation_generation() const { return revocation_generation_.load(); }
  // The store's clock (the one token expiry is measured against).
  int64_t now_unix_ms() const { return now_(); }

 private:
  CredentialStore(sqlite3* db, std::string path, std::function<int64_t()> now)
      : db_(db), path_(std::move(path)), now_(std::move(now)) {}
  absl::StatusOr<IssuedToken> Issue(const std::string& user, int64_t expires_unix_ms);
  absl::Status Unauthenticated(std::string reason) const;

  mutable absl::Mutex mu_;
  sqlite3* const db_;
  const std::string path_;
  const std::function<int64_t()> now_;
  mutable std::atomic<int64_t> failed_{0};
  std::atomic<uint64_t> revocation_generation_{0};
};

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_CREDENTIAL_STORE_H_
