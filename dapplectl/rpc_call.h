// What every dapplectl client (CoordinatorClient, client.h; AdminClient, admin_client.h) shares:
// the channel with its keepalive and reconnect settings, the preparation of each call
// (PrepareContext: the bearer token), the deadline, and the conversion of a failed call's
// gRPC status into dapplectl's error (the rules of client.h's file comment). One place, so that
// a new service's calls behave exactly like the Coordinator's.
//
// Thread safety: MakeChannel and ConvertCallStatus are thread-safe; CallUnary is as safe as the
// stub it is given.
#ifndef DAPPLE_DAPPLECTL_RPC_CALL_H_
#define DAPPLE_DAPPLECTL_RPC_CALL_H_

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dapplectl/client.h"
#include "grpcpp/grpcpp.h"

namespace dapple::ctl {

// A channel to options.address with options.credentials (null: plain text), keepalive pings
// (options.keepalive_time / keepalive_timeout, also while a stream is silent), reconnect backoff
// from 100 ms growing to 1 s, and received messages up to 512 MiB (jobs carry per-step losses).
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options);

// Turns a failed call's status into dapplectl's error (client.h's file comment): `service` is
// the full service name ("dapple.v1.Coordinator", "dapple.v1.Admin") for the UNIMPLEMENTED
// message, `method` the RPC's name for the messages that name the call, `channel` the call's
// channel (whether it was connected tells an unreachable coordinator from one that answered
// UNAVAILABLE itself).
absl::Status ConvertCallStatus(const ClientOptions& options, grpc::Channel& channel,
                               absl::string_view service, const char* method,
                               const grpc::Status& status);

// One unary call `(stub.*call)(context, request, response)`, prepared by PrepareContext, with
// the deadline options.timeout (connecting included) and fail-fast unless `wait_for_ready`;
// its failure converted by ConvertCallStatus.
template <typename Stub, typename Request, typename Response, typename Call>
absl::Status CallUnary(const ClientOptions& options, grpc::Channel& channel,
                       absl::string_view service, const char* method, Stub& stub,
                       const Request& request, Response* response, Call call,
                       bool wait_for_ready = false) {
  grpc::ClientContext context;
  PrepareContext(options, &context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  // Fail-fast (the default) reports a refused connection at once, with gRPC's reason; the
  // deadline bounds connecting to a silent address. wait_for_ready is for reconnecting.
  context.set_wait_for_ready(wait_for_ready);
  const grpc::Status status = (stub.*call)(&context, request, response);
  if (status.ok()) return absl::OkStatus();
  return ConvertCallStatus(options, channel, service, method, status);
}

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_RPC_CALL_H_
