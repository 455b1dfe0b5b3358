// THE place where an RPC's caller is authenticated (issue 16, contract 1): every handler of the
// Coordinator, WorkerControl and Admin services calls Authenticate first, with its
// grpc::ServerContext, and hands the Identity to the CoordinatorService handler; no handler
// sees the token, and no identity comes from a request field.
//
// The token is the value of the one `authorization: Bearer <token>` metadata entry;
// CredentialStore::Authenticate verifies it. Answers kUnauthenticated saying why, never the
// token: "no authorization metadata: send 'authorization: Bearer <token>'", "more than one
// authorization metadata entry", "authorization metadata must be 'Bearer <token>'", and the
// store's "malformed token ...", "unknown token", "token dpl_<id> was revoked", "token dpl_<id>
// expired". An oversized or binary value costs a length and shape check (gRPC itself refuses
// metadata past its 8 KiB default before a handler runs).
//
// Each failure calls `on_failure` with its reason: "missing", "malformed", "unknown",
// "revoked", "expired" (the label of dapple_auth_failures_total).
//
// Thread safety: thread-safe (the store is).
#ifndef DAPPLE_COORDINATOR_AUTH_AUTHENTICATOR_H_
#define DAPPLE_COORDINATOR_AUTH_AUTHENTICATOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth/access.h"
#include "coordinator/auth/credential_store.h"
#include "coordinator/auth/identity.h"

namespace dapple::coordinator::auth {

class Authenticator {
 public:
  using FailureSink = std::function<void(absl::string_view reason)>;
  // `store` must outlive this object; `on_failure` may be null.
  Authenticator(const CredentialStore* store, FailureSink on_failure)
      : store_(store), on_failure_(std::move(on_failure)) {}

  absl::StatusOr<Identity> Authenticate(const grpc::ServerContext& context) const;
  // Authenticate, then CheckService(identity, service) (access.h): what every RPC of `service`
  // starts with.
  absl::StatusOr<Identity> AuthenticateFor(const grpc::ServerContext& context,
                                           Service service) const;
  // The same from the metadata value itself (nullptr: no entry); for tests.
  absl::StatusOr<Identity> AuthenticateValue(const absl::string_view* authorization,
                                             int entries) const;

  // The reason label of a kUnauthenticated status of Authenticate.
  static std::string FailureReason(const absl::Status& status);

 private:
  absl::Status Fail(absl::Status status) const;

  const CredentialStore* store_;
  FailureSink on_failure_;
};

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_AUTHENTICATOR_H_
