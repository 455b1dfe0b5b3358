// Identities for tests that call CoordinatorService's handlers directly (no gRPC, no token):
// what the authenticating adapter would hand them.
#ifndef DAPPLE_COORDINATOR_AUTH_TEST_IDENTITIES_H_
#define DAPPLE_COORDINATOR_AUTH_TEST_IDENTITIES_H_

#include <string>

#include "coordinator/auth/identity.h"

namespace dapple::coordinator::auth {

inline Identity TestAdmin() { return Identity{"admin", "", Role::kAdmin, "00000000000000a0"}; }

inline Identity TestUser(const std::string& tenant, const std::string& user) {
  return Identity{user, tenant, Role::kUser, "00000000000000b0"};
}

inline Identity TestWorker(const std::string& worker_id) {
  return Identity{worker_id, "", Role::kWorker, "00000000000000c0"};
}

// The cluster's join token (RegisterWorker).
inline Identity TestJoin() { return Identity{"_join", "", Role::kJoin, "00000000000000d0"}; }

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_TEST_IDENTITIES_H_
