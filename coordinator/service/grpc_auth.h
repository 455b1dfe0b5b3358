// What the gRPC adapters need to authenticate callers and keep the audit log (issue 16): one
// Authenticator for every RPC (coordinator/auth/authenticator.h), the credential store (Admin,
// RegisterWorker's worker credentials, WhoAmI) and the audit log. Not owned; they outlive the
// server.
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "coordinator/auth/audit_log.h"
#include "coordinator/auth/authenticator.h"
#include "coordinator/auth/credential_store.h"

namespace dapple::coordinator {

struct GrpcAuth {
  const auth::Authenticator* authenticator = nullptr;
  auth::CredentialStore* credentials = nullptr;
  auth::AuditLog* audit = nullptr;
};

// THE absl::Status -> grpc::Status conversion: same code (the enums agree numerically), same
// message, cut to kMaxStatusMessageBytes: the message travels in the response's metadata, which a
// client refuses beyond 8 KiB (RESOURCE_EXHAUSTED "received initial metadata size exceeds
// limit"), and an error that echoes a huge input (a 100000-character job id) would reach its
// caller as that instead of itself. The cut ends at a whole UTF-8 character, followed by
// " ... (N more bytes)".
inline constexpr size_t kMaxStatusMessageBytes = 2048;
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_AUTH_H_
