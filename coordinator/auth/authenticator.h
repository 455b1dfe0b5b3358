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

  const CredentialStore& store() const { return *store_; }

 private:
  absl::Status Fail(absl::Status status) const;

  const CredentialStore* store_;
  FailureSink on_failure_;
};

// Keeps checking, while a stream is open, that the identity it was opened with still holds
// (issue 16: a revoked token ends the streams already open with it). Check() answers OK until
// the stream's token is revoked, expires, or stops proving the same user, tenant and role (its
// user deleted, say); then kUnauthenticated with Authenticate's reason ("token dpl_<id> was
// revoked", "token dpl_<id> expired", "unknown token"), and the same status on every later call.
//
// Cost: one atomic load and one clock read per Check(); the token is read from the store again
// only when the store's revocation generation moved (credential_store.h) or its expiry passed.
// A stream that calls Check() every T ends at most T (plus one store read) after the change:
// WatchJob checks at every snapshot and every 100 ms while it waits (docs/security.md).
//
// Thread safety: one object per stream, used by its handler's thread only.
class StreamRecheck {
 public:
  // `authorization`: the metadata value the stream was authenticated with; `identity`: what
  // it proved. `authenticator` must outlive this object.
  StreamRecheck(const Authenticator* authenticator, std::string authorization, Identity identity);
  // The same for a call authenticated from `context`'s metadata.
  static StreamRecheck ForCall(const Authenticator* authenticator,
                               const grpc::ServerContext& context, Identity identity);

  absl::Status Check();

 private:
  const Authenticator* authenticator_;
  const std::string authorization_;
  const Identity identity_;
  uint64_t generation_;
  absl::Status refused_;
};

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_AUTHENTICATOR_H_
