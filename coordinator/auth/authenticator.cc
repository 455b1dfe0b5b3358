#include "coordinator/auth/authenticator.h"

#include "absl/strings/match.h"

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
