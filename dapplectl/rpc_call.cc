#include "dapplectl/rpc_call.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::ctl {
namespace {

// Jobs carry per-step losses, and ListJobs returns every job: allow more than gRPC's 4 MiB.
constexpr int kMaxReceiveBytes = 512 << 20;

// Reconnect backoff of the channel (gRPC's defaults: 1 s, then up to 120 s): a restarted
// coordinator is found within about a second rather than minutes into a watch's --timeout.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;
// gRPC 1.51 takes GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the shortest time a connection attempt
// may take before it is abandoned (default 20 s); 1 s keeps attempts to a silent host short.
constexpr int kMinConnectTimeoutMs = 1000;

std::string Seconds(absl::Duration d) { return absl::StrFormat("%g s", absl::ToDoubleSeconds(d)); }

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  // A server-streaming watch sends no data after its request; without this gRPC stops
  // pinging after two pings and keepalive would no longer notice a dead coordinator host.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  return grpc::CreateCustomChannel(
      options.address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
}

absl::Status ConvertCallStatus(const ClientOptions& options, grpc::Channel& channel,
                               absl::string_view service, const char* method,
                               const grpc::Status& status) {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  const std::string& message = status.error_message();
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) {
    if (code == absl::StatusCode::kUnimplemented) {
      return absl::UnimplementedError(
          absl::StrCat("the server at ", options.address, " does not implement ", service, "/",
                       method, " (is it a dapple-coordinator of the same version?)"));
    }
    // No token, or one the coordinator refused: exit code 6 with what to do (client.h).
    if (code == absl::StatusCode::kUnauthenticated) return AuthenticationError(options, message);
    const std::string failed =
        absl::StrCat(method, " failed with ", absl::StatusCodeToString(code));
    if (message.empty()) return absl::Status(code, failed);
    // These codes come from gRPC or the server's machinery (a message that did not parse, a
    // limit, an exception) rather than from the coordinator's answer: name the call. The
    // coordinator answers RESOURCE_EXHAUSTED itself for a policy's limit (a tenant's
    // max_queued_jobs, the planning slots), which reads as any other refusal; gRPC's own
    // (message sizes, its memory quota) say "larger than max" or "quota".
    const bool grpc_limit = code == absl::StatusCode::kResourceExhausted &&
                            (absl::StrContains(message, "larger than max") ||
                             absl::StrContains(absl::AsciiStrToLower(message), "memory quota"));
    if (code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown || grpc_limit) {
      return absl::Status(code, absl::StrCat(failed, ": ", message));
    }
    return absl::Status(code, message);
  }
  // The coordinator itself may answer UNAVAILABLE ("retry later"); only gRPC's transport
  // messages, or a channel that never became ready, mean it could not be reached.
  const bool connected = channel.GetState(false) == GRPC_CHANNEL_READY;
  if (connected && !IsTransportMessage(message)) {
    if (code == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat("the coordinator at ", options.address,
                                                      " did not answer ", method, " within ",
                                                      Seconds(options.timeout)));
    }
    return absl::UnavailableError(message.empty() ? "the coordinator is unavailable" : message);
  }
  return absl::Status(
      code, UnreachableMessage(options.address,
                               UnreachableReasonWithTls(code, message, options.timeout, options.tls,
                                                        options.client_certificate)));
}

}  // namespace dapple::ctl
