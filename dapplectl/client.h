// CoordinatorClient: dapplectl's gRPC calls to dapple.v1.Coordinator, with gRPC errors turned
// into absl::Status whose code picks the exit code (exit_codes.h) and whose message is the one
// line dapplectl prints after "dapplectl: ".
//
// Connecting: unary calls are fail-fast with a deadline of `timeout` (connecting included), so
// a refused connection is reported at once with its reason and a silent address within
// `timeout`. The channel retries connections after 100 ms, growing to at most 1 s (gRPC's
// default grows to 120 s), so a restarted coordinator is found promptly. Errors, by code:
//   kUnavailable / kDeadlineExceeded  the coordinator could not be reached ("cannot reach the
//       coordinator at ADDR (connection refused); start dapple-coordinator or set
//       --coordinator / DAPPLE_COORDINATOR"), or did not answer in time
//   kInternal / kUnknown / kResourceExhausted  from gRPC or the server's machinery rather
//       than the coordinator's answer: the code, with the call named ("GetJob failed with
//       INTERNAL: <message>", or "GetJob failed with INTERNAL" without a message)
//   kUnimplemented                    "the server at ADDR does not implement ..."
//   anything else                     the coordinator's own status and message, unchanged
//       (kInvalidArgument for bad specs, kNotFound for unknown jobs, kFailedPrecondition ...)
//
// Protobuf string fields must be UTF-8: Submit refuses a spec that is not UTF-8 text before
// sending it (CheckSpecText, spec_file.h), and names and job ids are sent with their invalid
// bytes escaped (EscapeInvalidUtf8, utf8_text.h), so a job id "job-\xE9" is simply unknown.
//
// Thread safety: one thread at a time.
#ifndef DAPPLE_DAPPLECTL_CLIENT_H_
#define DAPPLE_DAPPLECTL_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dapple/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dapple::ctl {

// Default address of the coordinator when neither --coordinator nor DAPPLE_COORDINATOR is set.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7600";

struct ClientOptions {
  std::string address = kDefaultCoordinator;   // gRPC target, e.g. "127.0.0.1:7600"
  absl::Duration timeout = absl::Seconds(10);  // deadline of each unary call, connecting included
  // Keepalive pings while watching, so a coordinator host that vanished without closing the
  // connection is detected; an answer must come within keepalive_timeout.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // TLS or plain text (common/grpc_tls.h MakeChannelCredentials); null: plain text.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  bool tls = false;                 // credentials are TLS (--ca), for the hints of errors
  bool client_certificate = false;  // and carry a client certificate (--tls-cert)
  // The bearer token every call carries as `authorization: Bearer <token>` metadata; "": none
  // (the coordinator answers UNAUTHENTICATED). Never logged or printed.
  std::string token;
  // Without a token: where dapplectl looked for one (token_source.h DescribeTokenSearch), for
  // the "no token" message; "": not said.
  std::string token_search;
};

// What dapplectl says when it has no token to send (exit code 6).
inline constexpr char kNoTokenMessage[] =
    "no token: set DAPPLE_TOKEN, --token-file or a context's token-file";

// The kUnauthenticated error of a call the coordinator answered UNAUTHENTICATED with `message`:
// kNoTokenMessage (then "; " and options.token_search when set) when `options` has no token,
// else "the coordinator refused the token:
// <message>" (e.g. "token dpl_<id> expired"). Every client converts through here.
absl::Status AuthenticationError(const ClientOptions& options, const std::string& message);

// Sets up `context` for one call with `options`: the bearer token's metadata. Every call of
// every client (Coordinator, Admin) goes through here.
void PrepareContext(const ClientOptions& options, grpc::ClientContext* context);

class CoordinatorClient {
 public:
  explicit CoordinatorClient(ClientOptions options);

  // SubmitJob{spec_yaml, source_name}: the new job (state PENDING, usually). kInvalidArgument,
  // without sending, when CheckSpecText(source_name, spec_yaml) refuses the spec.
  // `resume_from` (optional): a published checkpoint directory to resume from, as the
  // coordinator must see it (dapplectl sends an absolute path).
  absl::StatusOr<v1::Job> Submit(const std::string& spec_yaml, const std::string& source_name,
                                 const std::string& resume_from = "");
  absl::StatusOr<v1::Job> Get(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> List();
  // The job after cancelling; kFailedPrecondition from the coordinator if it already ended.
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id);
  // CheckpointJob: asks for an on-demand checkpoint; the response says after which step.
  // kFailedPrecondition from the coordinator for a job that is not RUNNING.
  absl::StatusOr<v1::CheckpointJobResponse> Checkpoint(const std::string& job_id);
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers();
  // GetJobTrace: the job's kept traced steps (empty steps when none was traced yet).
  absl::StatusOr<v1::JobTrace> Trace(const std::string& job_id);
  // GetJobLogs: the job's kept log lines as `request` filters them (its job_id escaped here).
  absl::StatusOr<v1::GetJobLogsResponse> Logs(v1::GetJobLogsRequest request);
  // PlanJob: a dry run of the planner. kInvalidArgument, without sending, when the request has
  // a spec that CheckSpecText(source_name, spec_yaml) refuses.
  absl::StatusOr<v1::PlanJobResponse> Plan(v1::PlanJobRequest request);
  // WhoAmI: the identity the coordinator sees for options().token (`dapplectl auth whoami`):
  // user, tenant, role, the token's id and expiry, never its secret. kUnauthenticated from the
  // coordinator without a valid token.
  absl::StatusOr<v1::WhoAmIResponse> WhoAmI();

  // Follows the job until it reaches a terminal state and returns that last snapshot.
  // `on_snapshot` is called (on this thread) with every snapshot: first the job as GetJob
  // returns it (this call also checks, within `timeout`, that the coordinator is reachable and
  // the job exists), then each JobEvent of WatchJob. There is no overall deadline; keepalive
  // pings (keepalive_time, keepalive_timeout) break the stream if the coordinator's host
  // vanishes. When the stream ends before a terminal state with a code that IsLostConnection
  // (the coordinator shut down: UNAVAILABLE; a closing coordinator cancelled it: CANCELLED; the
  // connection broke), the watch reconnects: GetJob, waiting up to `timeout` for the
  // coordinator (wait_for_ready, retried every 100 ms while calls fail fast with
  // RetryReconnect codes), then a new WatchJob, after WatchReconnectDelay when streams keep
  // ending without a snapshot. Errors: no coordinator within `timeout` ends the watch with
  // kUnavailable or kDeadlineExceeded (exit 3), "lost the watch on job-3: cannot reach the
  // coordinator at ..."; the coordinator's own errors (kNotFound, ...) end it at once,
  // unchanged.
  absl::StatusOr<v1::Job> Watch(const std::string& job_id,
                                const std::function<void(const v1::Job&)>& on_snapshot);

  // Watch's reconnect for other followers (`logs --follow`): after a call failed with a code
  // that IsLostConnection, waits up to `timeout` for the coordinator to answer GetJob for
  // `job_id` again and returns that snapshot; its errors as Watch's ("lost the watch on job-3:
  // cannot reach the coordinator at ...").
  absl::StatusOr<v1::Job> AwaitCoordinator(const std::string& job_id);

  const ClientOptions& options() const { return options_; }

 private:
  template <typename Request, typename Response, typename Call>
  absl::Status Unary(const char* method, const Request& request, Response* response, Call call,
                     bool wait_for_ready = false);

  // The reconnect step of Watch: GetJob `get` until it succeeds or `timeout` has passed.
  absl::StatusOr<v1::Job> Reconnect(const v1::GetJobRequest& get);

  // Turns a failed call's status into dapplectl's error (see the file comment).
  absl::Status Convert(const char* method, const grpc::Status& status);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// Pure helpers, exposed for tests.

// The short reason in "cannot reach the coordinator at ADDR (REASON)", from a failed call's
// code and gRPC message: "connection refused", "cannot resolve the address", "no route to
// host", "network is unreachable", "connection lost", "connection timed out", "keepalive
// timeout", "no answer within 2 s" (kDeadlineExceeded), else the gRPC message itself.
std::string UnreachableReason(absl::StatusCode code, const std::string& grpc_message,
                              absl::Duration timeout);

// UnreachableReason, with what TLS may have to do with it: a certificate the --ca did not sign
// ("TLS: the coordinator's certificate is not signed by the --ca file (certificate verify
// failed)"), a failed handshake, and for a connection closed at once the likely cause: a
// plain-text client of a TLS port ("connection lost; if the coordinator serves TLS, give --ca
// FILE or DAPPLE_CA"), a TLS client without the certificate a mutual-TLS port requires, or with
// one that port's CA did not sign.
std::string UnreachableReasonWithTls(absl::StatusCode code, const std::string& grpc_message,
                                     absl::Duration timeout, bool tls, bool client_certificate);

// True when a WatchJob stream (or a call while reconnecting) that ended with `code` before
// the job's terminal state means the connection or the coordinator went away, not that the
// coordinator refused the request: OK (ended early), UNAVAILABLE (shutting down, connection
// lost), CANCELLED (a closing coordinator cancels calls it can no longer serve; dapplectl
// cancels a watch only after the terminal state), DEADLINE_EXCEEDED, INTERNAL and UNKNOWN
// (a connection reset mid-message). False for the coordinator's answers (NOT_FOUND,
// INVALID_ARGUMENT, FAILED_PRECONDITION, UNIMPLEMENTED, ...).
bool IsLostConnection(absl::StatusCode code);

// True when a reconnecting GetJob that failed with `code` should be tried again (before the
// timeout): the IsLostConnection codes except OK and DEADLINE_EXCEEDED (the timeout itself).
bool RetryReconnect(absl::StatusCode code);

// The longest pause between two WatchJob streams.
inline constexpr absl::Duration kMaxWatchReconnectDelay = absl::Seconds(5);

// Pause before the next WatchJob after `empty_streams` streams in a row ended without a
// snapshot: 0 for 0, then 100 ms, 200 ms, 400 ms, ... up to kMaxWatchReconnectDelay.
absl::Duration WatchReconnectDelay(int empty_streams);

// True when a message from gRPC describes a connection problem rather than an error the
// coordinator returned (e.g. "failed to connect to all addresses; ...", "Socket closed").
bool IsTransportMessage(const std::string& grpc_message);

// "cannot reach the coordinator at ADDR (REASON); start dapple-coordinator or set
// --coordinator / DAPPLE_COORDINATOR".
std::string UnreachableMessage(const std::string& address, const std::string& reason);

// Silences protobuf's log lines ("[libprotobuf ERROR ...] String field ... contains invalid
// UTF-8"): dapplectl reports every problem itself, in one line. Call once, at start-up.
void QuietProtobufLogging();

// Silences gRPC's own log lines (dapplectl prints one line per error) unless the user set
// GRPC_VERBOSITY or GRPC_TRACE. Call once, before the first channel.
void QuietGrpcLogging();

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_CLIENT_H_
