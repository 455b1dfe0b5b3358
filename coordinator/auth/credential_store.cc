#include "coordinator/auth/credential_store.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/jobs/sqlite_db.h"

namespace dapple::coordinator::auth {
namespace {

constexpr char kCredentialSchema[] =
    "CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, created_unix_ms INTEGER);"
    "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
    "  role TEXT NOT NULL, created_unix_ms INTEGER);"
    "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, user TEXT NOT NULL,"
    "  secret_sha256 TEXT NOT NULL, created_unix_ms INTEGER, expires_unix_ms INTEGER NOT NULL,"
    "  revoked_unix_ms INTEGER NOT NULL)";

constexpr absl::string_view kPrefix = "dpl_";
// The join token's user: not a valid user name (CheckName), so no admin can create it.
constexpr char kJoinUser[] = "_join";
constexpr size_t kIdHex = 16;
constexpr size_t kSecretHex = 64;
constexpr size_t kTokenSize = 4 + kIdHex + 1 + kSecretHex;

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return absl::InternalError("the system's random number generator failed (RAND_bytes)");
  }
  return absl::BytesToHexString(raw);
}

std::string Sha256Hex(absl::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(size)));
}

absl::Status CheckName(absl::string_view what, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63 && absl::ascii_islower(name[0]);
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) ok = false;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " name '", absl::CEscape(name.substr(0, 80)),
                   "' must be 1-63 characters of a-z, 0-9 and '-', starting with a letter"));
}

v1::TokenInfo TokenRow(sqlite3_stmt* stmt) {
  v1::TokenInfo info;
  info.set_id(ColumnText(stmt, 0));
  info.set_user(ColumnText(stmt, 1));
  info.set_created_unix_ms(sqlite3_column_int64(stmt, 2));
  info.set_expires_unix_ms(sqlite3_column_int64(stmt, 3));
  info.set_revoked_unix_ms(sqlite3_column_int64(stmt, 4));
  return info;
}

}  // namespace

absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  return authorization.substr(kScheme.size());
}

absl::StatusOr<std::unique_ptr<CredentialStore>> CredentialStore::Open(
    const std::string& db_path, std::function<int64_t()> now_unix_ms) {
  DAPPLE_ASSIGN_OR_RETURN(sqlite3 * db,
                          OpenSqliteTables(db_path, kCredentialSchema, "credential tables"));
  std::unique_ptr<CredentialStore> store(new CredentialStore(db, db_path, std::move(now_unix_ms)));
  return store;
}

CredentialStore::~CredentialStore() { sqlite3_close(db_); }

absl::Status CredentialStore::CreateTenant(const std::string& name) {
  if (absl::Status s = CheckName("tenant", name); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  SqliteStatement insert;
  if (sqlite3_prepare_v2(db_, "INSERT INTO tenants (name, created_unix_ms) VALUES (?1, ?2)", -1,
                         &insert.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(insert.stmt, 1, name);
  sqlite3_bind_int64(insert.stmt, 2, now_());
  const int rc = sqlite3_step(insert.stmt);
  if (rc == SQLITE_CONSTRAINT) {
    return absl::AlreadyExistsError(absl::StrCat("tenant ", name, " exists already"));
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::Status CredentialStore::CreateUser(const std::string& tenant, const std::string& user,
                                         Role role) {
  if (absl::Status s = CheckName("user", user); !s.ok()) return s;
  if (role == Role::kWorker) {
    return absl::InvalidArgumentError(
        "workers are not users: they get credentials when they register");
  }
  if (role == Role::kAdmin && !tenant.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("an admin belongs to no tenant, got tenant ", tenant));
  }
  if (role == Role::kUser && tenant.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("user ", user, " needs a tenant"));
  }
  absl::MutexLock lock(&mu_);
  if (role == Role::kUser) {
    SqliteStatement find;
    if (sqlite3_prepare_v2(db_, "SELECT 1 FROM tenants WHERE name = ?1", -1, &find.stmt, nullptr) !=
        SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(find.stmt, 1, tenant);
    if (sqlite3_step(find.stmt) != SQLITE_ROW) {
      return absl::NotFoundError(absl::StrCat("no tenant ", tenant));
    }
  }
  SqliteStatement insert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO users (name, tenant, role, created_unix_ms) "
                         "VALUES (?1, ?2, ?3, ?4)",
                         -1, &insert.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(insert.stmt, 1, user);
  BindText(insert.stmt, 2, tenant);
  BindText(insert.stmt, 3, RoleName(role));
  sqlite3_bind_int64(insert.stmt, 4, now_());
  const int rc = sqlite3_step(insert.stmt);
  if (rc == SQLITE_CONSTRAINT) {
    return absl::AlreadyExistsError(absl::StrCat("user ", user, " exists already"));
  }
  if (rc != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return absl::OkStatus();
}

absl::StatusOr<CredentialStore::IssuedToken> CredentialStore::IssueToken(
    const std::string& user, std::optional<int64_t> ttl_ms) {
  if (ttl_ms.has_value() && *ttl_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a token's lifetime must be > 0 ms, got ", *ttl_ms));
  }
  {
    absl::MutexLock lock(&mu_);
    SqliteStatement find;
    if (sqlite3_prepare_v2(db_, "SELECT role FROM users WHERE name = ?1", -1, &find.stmt,
                           nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(find.stmt, 1, user);
    if (sqlite3_step(find.stmt) != SQLITE_ROW) {
      return absl::NotFoundError(absl::StrCat("no user ", absl::CEscape(user.substr(0, 80))));
    }
    const std::string role = ColumnText(find.stmt, 0);
    if (role != "user" && role != "admin") {
      return absl::InvalidArgumentError(absl::StrCat(
          user, " is a ", role, ": only users and admins get tokens (workers get credentials ",
          "when they register, the join token is rotated)"));
    }
  }
  return Issue(user, ttl_ms.has_value() ? now_() + *ttl_ms : 0);
}

absl::StatusOr<CredentialStore::IssuedToken> CredentialStore::IssueWorkerCredential(
    const std::string& worker_id) {
  if (worker_id.empty() || worker_id.size() > 63) {
    return absl::InvalidArgumentError("a worker id must be 1-63 characters");
  }
  {
    absl::MutexLock lock(&mu_);
    // A worker is a user of role worker, created at its first registration.
    SqliteStatement upsert;
    if (sqlite3_prepare_v2(db_,
                           "INSERT INTO users (name, tenant, role, created_unix_ms) "
                           "VALUES (?1, '', 'worker', ?2) ON CONFLICT (name) DO NOTHING",
                           -1, &upsert.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(upsert.stmt, 1, worker_id);
    sqlite3_bind_int64(upsert.stmt, 2, now_());
    if (sqlite3_step(upsert.stmt) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
    // A user or admin of the same name must not get a worker's token (nor a worker theirs).
    SqliteStatement role;
    if (sqlite3_prepare_v2(db_, "SELECT role FROM users WHERE name = ?1", -1, &role.stmt,
                           nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(role.stmt, 1, worker_id);
    if (sqlite3_step(role.stmt) != SQLITE_ROW || ColumnText(role.stmt, 0) != "worker") {
      return absl::AlreadyExistsError(
          absl::StrCat("worker id ", worker_id, " is the name of a user, not of a worker"));
    }
  }
  return Issue(worker_id, 0);
}

absl::StatusOr<CredentialStore::IssuedToken> CredentialStore::Issue(const std::string& user,
                                                                    int64_t expires_unix_ms) {
  absl::StatusOr<std::string> id = RandomHex(kIdHex / 2);
  if (!id.ok()) return id.status();
  absl::StatusOr<std::string> secret = RandomHex(kSecretHex / 2);
  if (!secret.ok()) return secret.status();
  absl::MutexLock lock(&mu_);
  SqliteStatement insert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO tokens (id, user, secret_sha256, created_unix_ms, "
                         "expires_unix_ms, revoked_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5, 0)",
                         -1, &insert.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(insert.stmt, 1, *id);
  BindText(insert.stmt, 2, user);
  BindText(insert.stmt, 3, Sha256Hex(*secret));
  sqlite3_bind_int64(insert.stmt, 4, now_());
  sqlite3_bind_int64(insert.stmt, 5, expires_unix_ms);
  if (sqlite3_step(insert.stmt) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  return IssuedToken{absl::StrCat(kPrefix, *id, "_", *secret), *id, expires_unix_ms};
}

// Tokens of admins that authenticate now (not revoked, not expired at ?1).
constexpr char kValidAdminTokens[] =
    "FROM tokens t JOIN users u ON u.name = t.user WHERE u.role = 'admin' AND "
    "t.revoked_unix_ms = 0 AND (t.expires_unix_ms = 0 OR t.expires_unix_ms > ?1)";

absl::Status CredentialStore::RevokeToken(const std::string& id) {
  absl::MutexLock lock(&mu_);
  // The last valid admin token stays: without it nobody could administer the cluster until a
  // restart recovers one (RecoverableAdmin). Checked under the lock, so two revocations at
  // once cannot both pass.
  {
    SqliteStatement guard;
    if (sqlite3_prepare_v2(
            db_,
            absl::StrCat("SELECT (SELECT COUNT(*) ", kValidAdminTokens,
                         " AND t.id = ?2), (SELECT COUNT(*) ", kValidAdminTokens, ")")
                .c_str(),
            -1, &guard.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    sqlite3_bind_int64(guard.stmt, 1, now_());
    BindText(guard.stmt, 2, id);
    if (sqlite3_step(guard.stmt) != SQLITE_ROW) return absl::InternalError(sqlite3_errmsg(db_));
    if (sqlite3_column_int64(guard.stmt, 0) > 0 && sqlite3_column_int64(guard.stmt, 1) <= 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "token ", id,
          " is the last valid admin token: revoking it would leave nobody able to administer "
          "the cluster; issue another admin token first (dapplectl admin token issue <admin>), "
          "then revoke this one"));
    }
  }
  SqliteStatement update;
  if (sqlite3_prepare_v2(db_,
                         "UPDATE tokens SET revoked_unix_ms = ?2 "
                         "WHERE id = ?1 AND revoked_unix_ms = 0",
                         -1, &update.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(update.stmt, 1, id);
  sqlite3_bind_int64(update.stmt, 2, now_());
  if (sqlite3_step(update.stmt) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
  if (sqlite3_changes(db_) > 0) {
    revocation_generation_.fetch_add(1);
    return absl::OkStatus();
  }
  SqliteStatement find;
  if (sqlite3_prepare_v2(db_, "SELECT 1 FROM tokens WHERE id = ?1", -1, &find.stmt, nullptr) !=
      SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(find.stmt, 1, id);
  if (sqlite3_step(find.stmt) != SQLITE_ROW) {
    return absl::NotFoundError(absl::StrCat("no token ", absl::CEscape(id.substr(0, 40))));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("token dpl_", absl::CEscape(id.substr(0, 40)), " is already revoked"));
}

absl::Status CredentialStore::Unauthenticated(std::string reason) const {
  failed_.fetch_add(1);
  return absl::UnauthenticatedError(std::move(reason));
}

absl::StatusOr<Identity> CredentialStore::Authenticate(absl::string_view token) const {
  // The shape first: nothing of an oversized or binary value reaches the database or a log.
  if (token.size() != kTokenSize || !absl::StartsWith(token, kPrefix) ||
      token[kPrefix.size() + kIdHex] != '_' || !IsLowerHex(token.substr(kPrefix.size(), kIdHex)) ||
      !IsLowerHex(token.substr(kPrefix.size() + kIdHex + 1))) {
    return Unauthenticated("malformed token (expected dpl_<16 hex>_<64 hex>)");
  }
  const std::string id(token.substr(kPrefix.size(), kIdHex));
  const std::string presented = Sha256Hex(token.substr(kPrefix.size() + kIdHex + 1));
  absl::MutexLock lock(&mu_);
  SqliteStatement find;
  if (sqlite3_prepare_v2(db_,
                         "SELECT t.secret_sha256, t.expires_unix_ms, t.revoked_unix_ms, u.name, "
                         "u.tenant, u.role FROM tokens t JOIN users u ON u.name = t.user "
                         "WHERE t.id = ?1",
                         -1, &find.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(find.stmt, 1, id);
  if (sqlite3_step(find.stmt) != SQLITE_ROW) return Unauthenticated("unknown token");
  auto text = [&](int column) { return ColumnText(find.stmt, column); };
  const std::string stored = text(0);
  if (stored.size() != presented.size() ||
      CRYPTO_memcmp(stored.data(), presented.data(), stored.size()) != 0) {
    return Unauthenticated("unknown token");
  }
  if (sqlite3_column_int64(find.stmt, 2) != 0) {
    return Unauthenticated(absl::StrCat("token dpl_", id, " was revoked"));
  }
  const int64_t expires = sqlite3_column_int64(find.stmt, 1);
  if (expires != 0 && now_() >= expires) {
    return Unauthenticated(absl::StrCat("token dpl_", id, " expired"));
  }
  Identity identity;
  identity.user = text(3);
  identity.tenant = text(4);
  const std::string role = text(5);
  if (role == "admin") {
    identity.role = Role::kAdmin;
  } else if (role == "worker") {
    identity.role = Role::kWorker;
  } else if (role == "join") {
    identity.role = Role::kJoin;
  } else if (role == "user") {
    identity.role = Role::kUser;
  } else {
    return Unauthenticated(absl::StrCat("token dpl_", id, " belongs to a user of no known role"));
  }
  identity.token_id = id;
  identity.token_expires_unix_ms = expires;
  return identity;
}

absl::StatusOr<CredentialStore::IssuedToken> CredentialStore::RotateJoinToken() {
  {
    absl::MutexLock lock(&mu_);
    SqliteStatement upsert;
    if (sqlite3_prepare_v2(db_,
                           "INSERT INTO users (name, tenant, role, created_unix_ms) "
                           "VALUES (?1, '', 'join', ?2) ON CONFLICT (name) DO NOTHING",
                           -1, &upsert.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(upsert.stmt, 1, kJoinUser);
    sqlite3_bind_int64(upsert.stmt, 2, now_());
    if (sqlite3_step(upsert.stmt) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
    SqliteStatement revoke;
    if (sqlite3_prepare_v2(db_,
                           "UPDATE tokens SET revoked_unix_ms = ?2 "
                           "WHERE user = ?1 AND revoked_unix_ms = 0",
                           -1, &revoke.stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db_));
    }
    BindText(revoke.stmt, 1, kJoinUser);
    sqlite3_bind_int64(revoke.stmt, 2, now_());
    if (sqlite3_step(revoke.stmt) != SQLITE_DONE) return absl::InternalError(sqlite3_errmsg(db_));
    if (sqlite3_changes(db_) > 0) revocation_generation_.fetch_add(1);
  }
  return Issue(kJoinUser, 0);
}

absl::StatusOr<std::optional<std::string>> CredentialStore::RecoverableAdmin() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement valid;
  if (sqlite3_prepare_v2(db_, absl::StrCat("SELECT 1 ", kValidAdminTokens, " LIMIT 1").c_str(), -1,
                         &valid.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  sqlite3_bind_int64(valid.stmt, 1, now_());
  if (sqlite3_step(valid.stmt) == SQLITE_ROW) return std::optional<std::string>();
  // The bootstrap admin first, else the first admin by name.
  SqliteStatement admin;
  if (sqlite3_prepare_v2(db_,
                         "SELECT name FROM users WHERE role = 'admin' "
                         "ORDER BY name <> 'admin', name LIMIT 1",
                         -1, &admin.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  if (sqlite3_step(admin.stmt) != SQLITE_ROW) return std::optional<std::string>();
  return std::optional<std::string>(ColumnText(admin.stmt, 0));
}

absl::StatusOr<bool> CredentialStore::HasAdmin() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement find;
  if (sqlite3_prepare_v2(db_, "SELECT 1 FROM users WHERE role = 'admin' LIMIT 1", -1, &find.stmt,
                         nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  return sqlite3_step(find.stmt) == SQLITE_ROW;
}

absl::Status CredentialStore::CheckTenant(const std::string& name) const {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::Tenant> all, ListTenants());
  for (const v1::Tenant& t : all) {
    if (t.name() == name) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "no tenant ", name, ": create it first with dapplectl admin tenant create ", name));
}

absl::StatusOr<std::vector<v1::Tenant>> CredentialStore::ListTenants() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement list;
  if (sqlite3_prepare_v2(db_, "SELECT name, created_unix_ms FROM tenants ORDER BY name", -1,
                         &list.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  std::vector<v1::Tenant> tenants;
  while (sqlite3_step(list.stmt) == SQLITE_ROW) {
    v1::Tenant& t = tenants.emplace_back();
    t.set_name(ColumnText(list.stmt, 0));
    t.set_created_unix_ms(sqlite3_column_int64(list.stmt, 1));
  }
  return tenants;
}

absl::StatusOr<std::vector<v1::User>> CredentialStore::ListUsers(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  SqliteStatement list;
  if (sqlite3_prepare_v2(db_,
                         "SELECT name, tenant, role, created_unix_ms FROM users "
                         "WHERE role IN ('user', 'admin') AND (?1 = '' OR tenant = ?1) "
                         "ORDER BY name",
                         -1, &list.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(list.stmt, 1, tenant);
  std::vector<v1::User> users;
  while (sqlite3_step(list.stmt) == SQLITE_ROW) {
    v1::User& u = users.emplace_back();
    u.set_name(ColumnText(list.stmt, 0));
    u.set_tenant(ColumnText(list.stmt, 1));
    u.set_role(ColumnText(list.stmt, 2));
    u.set_created_unix_ms(sqlite3_column_int64(list.stmt, 3));
  }
  return users;
}

absl::StatusOr<std::vector<v1::TokenInfo>> CredentialStore::ListTokens(
    const std::string& user) const {
  absl::MutexLock lock(&mu_);
  SqliteStatement list;
  if (sqlite3_prepare_v2(db_,
                         "SELECT t.id, t.user, t.created_unix_ms, t.expires_unix_ms, "
                         "t.revoked_unix_ms FROM tokens t JOIN users u ON u.name = t.user "
                         "WHERE u.role IN ('user', 'admin') AND (?1 = '' OR t.user = ?1) "
                         "ORDER BY t.created_unix_ms, t.id",
                         -1, &list.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(list.stmt, 1, user);
  std::vector<v1::TokenInfo> tokens;
  while (sqlite3_step(list.stmt) == SQLITE_ROW) tokens.push_back(TokenRow(list.stmt));
  return tokens;
}

absl::StatusOr<v1::TokenInfo> CredentialStore::GetToken(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  SqliteStatement find;
  if (sqlite3_prepare_v2(db_,
                         "SELECT id, user, created_unix_ms, expires_unix_ms, revoked_unix_ms "
                         "FROM tokens WHERE id = ?1",
                         -1, &find.stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db_));
  }
  BindText(find.stmt, 1, id);
  if (sqlite3_step(find.stmt) != SQLITE_ROW) {
    return absl::NotFoundError(absl::StrCat("no token ", absl::CEscape(id.substr(0, 40))));
  }
  return TokenRow(find.stmt);
}

}  // namespace dapple::coordinator::auth
