#include "coordinator/auth/authenticator.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dapple::coordinator::auth {

std::string Authenticator::FailureReason(const absl::Status& status) {
  const absl::string_view m = status.message();
  if (absl::StartsWith(m, "no authorization")) return "missing";
  if (absl::StartsWith(m, "unknown token")) return "unknown";
  if (absl::StrContains(m, "was revoked")) return "revoked";
  if (absl::StrContains(m, " expired")) return "expired";
  return "malformed";
}

absl::Status Authenticator::Fail(absl::Status status) const {
  if (on_failure_) on_failure_(FailureReason(status));
  return status;
}

absl::StatusOr<Identity> Authenticator::AuthenticateValue(const absl::string_view* authorization,
                                                          int entries) const {
  if (entries == 0 || authorization == nullptr) {
    return Fail(absl::UnauthenticatedError(
        "no authorization metadata: send 'authorization: Bearer <token>'"));
  }
  if (entries > 1) {
    return Fail(absl::UnauthenticatedError("more than one authorization metadata entry"));
  }
  absl::StatusOr<absl::string_view> token = BearerToken(*authorization);
  if (!token.ok()) return Fail(token.status());
  absl::StatusOr<Identity> identity = store_->Authenticate(*token);
  if (!identity.ok() && absl::IsUnauthenticated(identity.status())) {
    return Fail(identity.status());
  }
  return identity;
}

absl::StatusOr<Identity> Authenticator::Authenticate(const grpc::ServerContext& context) const {
  const auto range = context.client_metadata().equal_range("authorization");
  int entries = 0;
  absl::string_view value;
  for (auto it = range.first; it != range.second; ++it, ++entries) {
    value = absl::string_view(it->second.data(), it->second.size());
  }
  return AuthenticateValue(entries == 0 ? nullptr : &value, entries);
}

}  // namespace dapple::coordinator::auth

namespace dapple::coordinator::auth {

absl::StatusOr<Identity> Authenticator::AuthenticateFor(const grpc::ServerContext& context,
                                                        Service service) const {
  absl::StatusOr<Identity> identity = Authenticate(context);
  if (!identity.ok()) return identity;
  if (absl::Status s = CheckService(*identity, service); !s.ok()) return s;
  return identity;
}

}  // namespace dapple::coordinator::auth

namespace dapple::coordinator::auth {

StreamRecheck::StreamRecheck(const Authenticator* authenticator, std::string authorization,
                             Identity identity)
    : authenticator_(authenticator),
      authorization_(std::move(authorization)),
      identity_(std::move(identity)),
      generation_(authenticator->store().revocation_generation()) {}

StreamRecheck StreamRecheck::ForCall(const Authenticator* authenticator,
                                     const grpc::ServerContext& context, Identity identity) {
  // The call was authenticated from exactly one entry, so the first is the one.
  const auto it = context.client_metadata().find("authorization");
  std::string value;
  if (it != context.client_metadata().end()) value.assign(it->second.data(), it->second.size());
  return StreamRecheck(authenticator, std::move(value), std::move(identity));
}

absl::Status StreamRecheck::Check() {
  if (!refused_.ok()) return refused_;
  const CredentialStore& store = authenticator_->store();
  // Read before authenticating: a revoke landing in between is seen at the next Check().
  const uint64_t generation = store.revocation_generation();
  const bool expired = identity_.token_expires_unix_ms != 0 &&
                       store.now_unix_ms() >= identity_.token_expires_unix_ms;
  if (generation == generation_ && !expired) return absl::OkStatus();
  generation_ = generation;
  const absl::string_view value = authorization_;
  absl::StatusOr<Identity> now = authenticator_->AuthenticateValue(&value, 1);
  if (!now.ok()) {
    // A store that cannot be read says nothing about the token: the stream goes on.
    if (!absl::IsUnauthenticated(now.status())) return absl::OkStatus();
    refused_ = now.status();
  } else if (now->user != identity_.user || now->tenant != identity_.tenant ||
             now->role != identity_.role) {
    refused_ = absl::UnauthenticatedError(
        absl::StrCat("token dpl_", identity_.token_id,
                     " no longer proves the identity this stream opened with"));
  }
  return refused_;
}

}  // namespace dapple::coordinator::auth
