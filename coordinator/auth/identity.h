// Who is calling an RPC: the identity a verified bearer token proves (credential_store.h
// Authenticate), handed to the coordinator's handlers instead of the token (issue 16,
// "Identity"). Never built from a field or header a peer sets freely.
#ifndef DAPPLE_COORDINATOR_AUTH_IDENTITY_H_
#define DAPPLE_COORDINATOR_AUTH_IDENTITY_H_

#include <string>

namespace dapple::coordinator::auth {

enum class Role {
  kUser,    // acts on its tenant's jobs
  kAdmin,   // manages tenants, users, tokens and quotas; sees every job
  kWorker,  // a worker daemon: reports only for the ranks assigned to it
  kJoin,    // the cluster's join token: may only register a worker (RegisterWorker)
};

// "user" | "admin" | "worker" | "join".
inline const char* RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kJoin:
      return "join";
    case Role::kUser:
      break;
  }
  return "user";
}

// RoleName with its article, for messages: "an admin", "a user", "a worker", "a join".
inline std::string RoleWithArticle(Role role) {
  return std::string(role == Role::kAdmin ? "an " : "a ") + RoleName(role);
}

// Who is calling: from a verified token only, never from a field a peer sets.
struct Identity {
  std::string user;    // "alice", the worker id "w-3" for a worker credential, "_join"
  std::string tenant;  // "" for admins, workers and the join token
  Role role = Role::kUser;
  std::string token_id;  // the 16 hex digits of the token used (for the audit log)
};

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_IDENTITY_H_
