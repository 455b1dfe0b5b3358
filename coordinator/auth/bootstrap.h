// The first start of a coordinator (issue 16, contract 3): when its database has no admin, it
// creates user `admin` (role admin) with a token that never expires and a cluster join token,
// and writes them to the admin token file and the join token file (mode 0600, the token and a
// newline). Later starts find the admin and write nothing (the operator may delete the files
// once the tokens are stored elsewhere, e.g. in a Kubernetes Secret). The paths are logged by
// the caller, never the tokens.
#ifndef DAPPLE_COORDINATOR_AUTH_BOOTSTRAP_H_
#define DAPPLE_COORDINATOR_AUTH_BOOTSTRAP_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/auth/credential_store.h"

namespace dapple::coordinator::auth {

// "<folder of db_path>/<name>" ("dapple.db" -> "<name>").
std::string DefaultTokenFile(const std::string& db_path, const std::string& name);

// true when it bootstrapped (created the admin and wrote both files), false when the database
// already has an admin. Both files are opened (created or truncated, 0600) before anything is
// stored, so a file that cannot be written leaves the database as it was:
// kFailedPrecondition "cannot write the admin token file '/x/admin.token': Permission denied".
// A file that already holds something is never overwritten (another database's token: two
// databases in one folder share the default names): kFailedPrecondition "this database has no
// admin yet, but the admin token file '/x/admin.token' already holds a token ...", the database
// left as it was.
absl::StatusOr<bool> Bootstrap(CredentialStore& store, const std::string& admin_token_file,
                               const std::string& join_token_file);

// Recovery of a cluster whose admins all lost their tokens (every admin token revoked or
// expired; RevokeToken refuses the last valid one, but expiry cannot be refused): at a start
// that finds no valid admin token, a new never-expiring token for
// CredentialStore::RecoverableAdmin is written to `admin_token_file` (0600, replacing its
// content). Whoever can restart the coordinator and read its files holds it anyway, so this
// grants nothing new. Returns the admin's name when it recovered, std::nullopt when some admin
// token is valid (or there is no admin: Bootstrap's case). Errors as Bootstrap's.
absl::StatusOr<std::optional<std::string>> RecoverAdminToken(CredentialStore& store,
                                                             const std::string& admin_token_file);

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_BOOTSTRAP_H_
