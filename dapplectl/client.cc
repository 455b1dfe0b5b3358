#include "dapplectl/client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grpc_tls.h"
#include "common/status.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/format.h"
#include "dapplectl/rpc_call.h"
#include "dapplectl/spec_file.h"
#include "dapplectl/utf8_text.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"

namespace dapple::ctl {
namespace {

std::string Seconds(absl::Duration d) { return absl::StrFormat("%g s", absl::ToDoubleSeconds(d)); }

absl::StatusCode ToAbsl(grpc::StatusCode code) { return static_cast<absl::StatusCode>(code); }

// Pause between reconnect attempts that failed fast (a closing coordinator cancels calls
// instead of waiting for them).
constexpr absl::Duration kReconnectPause = absl::Milliseconds(100);

void DropGrpcLog(gpr_log_func_args*) {}

}  // namespace

std::string UnreachableReason(absl::StatusCode code, const std::string& grpc_message,
                              absl::Duration timeout) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  if (absl::StrContains(m, "connection refused")) return "connection refused";
  if (absl::StrContains(m, "dns resolution failed") || absl::StrContains(m, "name or service") ||
      absl::StrContains(m, "resolve") || absl::StrContains(m, "name resolution")) {
    return "cannot resolve the address";
  }
  if (absl::StrContains(m, "no route to host")) return "no route to host";
  if (absl::StrContains(m, "network is unreachable")) return "network is unreachable";
  if (absl::StrContains(m, "keepalive")) return "keepalive timeout";
  if (absl::StrContains(m, "timed out")) return "connection timed out";
  if (absl::StrContains(m, "socket closed") || absl::StrContains(m, "connection reset") ||
      absl::StrContains(m, "broken pipe") || absl::StrContains(m, "end of file") ||
      absl::StrContains(m, "goaway")) {
    return "connection lost";
  }
  if (code == absl::StatusCode::kDeadlineExceeded) {
    return absl::StrCat("no answer within ", Seconds(timeout));
  }
  if (grpc_message.empty()) return "unavailable";
  return grpc_message;
}

bool IsLostConnection(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:                // the stream ended without a terminal state
    case absl::StatusCode::kUnavailable:       // coordinator shutting down, connection lost
    case absl::StatusCode::kCancelled:         // a closing coordinator cancels the call
    case absl::StatusCode::kDeadlineExceeded:  // keepalive, or no answer in time
    case absl::StatusCode::kInternal:          // RST_STREAM: a coordinator killed mid-frame
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

bool RetryReconnect(absl::StatusCode code) {
  // DEADLINE_EXCEEDED is the reconnect's own deadline (--timeout) running out.
  return code != absl::StatusCode::kOk && code != absl::StatusCode::kDeadlineExceeded &&
         IsLostConnection(code);
}

absl::Duration WatchReconnectDelay(int empty_streams) {
  if (empty_streams <= 0) return absl::ZeroDuration();
  const absl::Duration delay = absl::Milliseconds(100) * (1 << std::min(empty_streams - 1, 10));
  return std::min(delay, kMaxWatchReconnectDelay);
}

bool IsTransportMessage(const std::string& grpc_message) {
  const std::string m = absl::AsciiStrToLower(grpc_message);
  for (const char* needle :
       {"failed to connect", "connection refused", "dns resolution failed", "name resolution",
        "no route to host", "network is unreachable", "socket closed", "connection reset",
        "broken pipe", "keepalive", "goaway", "end of file", "connection timed out"}) {
    if (absl::StrContains(m, needle)) return true;
  }
  return false;
}

std::string UnreachableReasonWithTls(absl::StatusCode code, const std::string& grpc_message,
                                     absl::Duration timeout, bool tls, bool client_certificate) {
  if (std::string tls_reason = TlsFailureReason(grpc_message); !tls_reason.empty()) {
    return tls_reason;
  }
  const std::string reason = UnreachableReason(code, grpc_message, timeout);
  if (reason != "connection lost") return reason;
  return absl::StrCat("connection lost; ",
                      ClosedByCoordinatorHint(tls, client_certificate, "--ca FILE or DAPPLE_CA"));
}

std::string UnreachableMessage(const std::string& address, const std::string& reason) {
  // A TLS failure means something answered: the coordinator may well be running.
  if (absl::StartsWith(reason, "TLS")) {
    return absl::StrCat("cannot reach the coordinator at ", address, " (", reason, ")");
  }
  return absl::StrCat("cannot reach the coordinator at ", address, " (", reason,
                      "); start dapple-coordinator or set --coordinator / DAPPLE_COORDINATOR");
}

void QuietProtobufLogging() { google::protobuf::SetLogHandler(nullptr); }

void QuietGrpcLogging() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr || std::getenv("GRPC_TRACE") != nullptr) return;
  gpr_set_log_function(DropGrpcLog);
}

absl::Status AuthenticationError(const ClientOptions& options, const std::string& message) {
  if (options.token.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(kNoTokenMessage, options.token_search.empty() ? "" : "; ",
                     options.token_search, " (the coordinator said: ", message, ")"));
  }
  return absl::UnauthenticatedError(absl::StrCat("the coordinator refused the token: ", message));
}

void PrepareContext(const ClientOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) context->AddMetadata("authorization", "Bearer " + options.token);
}

CoordinatorClient::CoordinatorClient(ClientOptions options)
    : options_(std::move(options)),
      channel_(MakeChannel(options_)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

absl::Status CoordinatorClient::Convert(const char* method, const grpc::Status& status) {
  return ConvertCallStatus(options_, *channel_, "dapple.v1.Coordinator", method, status);
}

template <typename Request, typename Response, typename Call>
absl::Status CoordinatorClient::Unary(const char* method, const Request& request,
                                      Response* response, Call call, bool wait_for_ready) {
  return CallUnary(options_, *channel_, "dapple.v1.Coordinator", method, *stub_, request, response,
                   call, wait_for_ready);
}

absl::StatusOr<v1::Job> CoordinatorClient::Submit(const std::string& spec_yaml,
                                                  const std::string& source_name,
                                                  const std::string& resume_from) {
  // Checked here too, not only by `dapplectl submit`: protobuf cannot carry invalid UTF-8.
  DAPPLE_RETURN_IF_ERROR(CheckSpecText(source_name, spec_yaml));
  v1::SubmitJobRequest request;
  request.set_spec_yaml(spec_yaml);
  request.set_source_name(EscapeInvalidUtf8(source_name));
  request.set_resume_from(EscapeInvalidUtf8(resume_from));
  v1::SubmitJobResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("SubmitJob", request, &response, &v1::Coordinator::Stub::SubmitJob));
  return std::move(*response.mutable_job());
}

absl::StatusOr<v1::Job> CoordinatorClient::Get(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(EscapeInvalidUtf8(job_id));
  v1::Job job;
  DAPPLE_RETURN_IF_ERROR(Unary("GetJob", request, &job, &v1::Coordinator::Stub::GetJob));
  return job;
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::List() {
  v1::ListJobsResponse response;
  DAPPLE_RETURN_IF_ERROR(
      Unary("ListJobs", v1::ListJobsRequest(), &response, &v1::Coordinator::Stub::ListJobs));
  return response;
}

absl::StatusOr<v1::Job> CoordinatorClient::Cancel(const std::string& job_id) {
  v1::CancelJobRequest request;
  request.set_job_id(EscapeInvalidUtf8(job_id));
  v1::Job job;
  DAPPLE_RETURN_IF_ERROR(Unary("CancelJob", request, &job, &v1::Coordinator::Stub::CancelJob));
  return job;
}

absl::StatusOr<v1::CheckpointJobResponse> CoordinatorClient::Checkpoint(const std::string& job_id) {
  v1::CheckpointJobRequest request;
  request.set_job_id(EscapeInvalidUtf8(job_id));
  v1::CheckpointJobResponse response;
  DAPPLE_RETURN_IF_ERROR(
      Unary("CheckpointJob", request, &response, &v1::Coordinator::Stub::CheckpointJob));
  return response;
}

absl::StatusOr<v1::JobTrace> CoordinatorClient::Trace(const std::string& job_id) {
  v1::GetJobTraceRequest request;
  request.set_job_id(EscapeInvalidUtf8(job_id));
  v1::JobTrace trace;
  DAPPLE_RETURN_IF_ERROR(
      Unary("GetJobTrace", request, &trace, &v1::Coordinator::Stub::GetJobTrace));
  return trace;
}

absl::StatusOr<v1::GetJobLogsResponse> CoordinatorClient::Logs(v1::GetJobLogsRequest request) {
  request.set_job_id(EscapeInvalidUtf8(request.job_id()));
  v1::GetJobLogsResponse response;
  DAPPLE_RETURN_IF_ERROR(
      Unary("GetJobLogs", request, &response, &v1::Coordinator::Stub::GetJobLogs));
  return response;
}

absl::StatusOr<v1::ListWorkersResponse> CoordinatorClient::ListWorkers() {
  v1::ListWorkersResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("ListWorkers", v1::ListWorkersRequest(), &response,
                               &v1::Coordinator::Stub::ListWorkers));
  return response;
}

absl::StatusOr<v1::PlanJobResponse> CoordinatorClient::Plan(v1::PlanJobRequest request) {
  if (!request.spec_yaml().empty()) {
    DAPPLE_RETURN_IF_ERROR(CheckSpecText(request.source_name(), request.spec_yaml()));
  }
  request.set_source_name(EscapeInvalidUtf8(request.source_name()));
  v1::PlanJobResponse response;
  DAPPLE_RETURN_IF_ERROR(Unary("PlanJob", request, &response, &v1::Coordinator::Stub::PlanJob));
  return response;
}

absl::StatusOr<v1::WhoAmIResponse> CoordinatorClient::WhoAmI() {
  v1::WhoAmIResponse response;
  DAPPLE_RETURN_IF_ERROR(
      Unary("WhoAmI", v1::WhoAmIRequest(), &response, &v1::Coordinator::Stub::WhoAmI));
  return response;
}

absl::StatusOr<v1::Job> CoordinatorClient::AwaitCoordinator(const std::string& job_id) {
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  return Reconnect(get);
}

absl::StatusOr<v1::Job> CoordinatorClient::Reconnect(const v1::GetJobRequest& get) {
  // Wait (up to the timeout) for the coordinator to come back, then re-read the job;
  // snapshots are complete, so nothing is lost between streams.
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    grpc::ClientContext context;
    PrepareContext(options_, &context);
    context.set_deadline(absl::ToChronoTime(deadline));
    context.set_wait_for_ready(true);
    v1::Job job;
    const grpc::Status status = stub_->GetJob(&context, get, &job);
    if (status.ok()) return job;
    const absl::StatusCode code = ToAbsl(status.error_code());
    if (RetryReconnect(code) && absl::Now() + kReconnectPause < deadline) {
      absl::SleepFor(kReconnectPause);
      continue;
    }
    absl::Status error = Convert("GetJob", status);
    // A call the coordinator cancelled while closing, at the very end, still means that it
    // did not come back.
    if (IsLostConnection(code) && ExitCodeForStatusCode(error.code()) != kExitUnreachable) {
      error = absl::UnavailableError(UnreachableMessage(options_.address, "connection lost"));
    }
    return absl::Status(error.code(),
                        absl::StrCat("lost the watch on ", get.job_id(), ": ", error.message()));
  }
}

absl::StatusOr<v1::Job> CoordinatorClient::Watch(
    const std::string& job_id, const std::function<void(const v1::Job&)>& on_snapshot) {
  v1::GetJobRequest get;
  get.set_job_id(EscapeInvalidUtf8(job_id));
  v1::Job job;
  DAPPLE_RETURN_IF_ERROR(Unary("GetJob", get, &job, &v1::Coordinator::Stub::GetJob));
  // A watch follows the job, not its event log (docs/dapplectl.md: `list` and `watch` leave
  // the events out); GetJob answers with them.
  job.clear_events();
  on_snapshot(job);

  int empty_streams = 0;  // in a row
  while (!IsTerminal(job.state())) {
    grpc::ClientContext context;  // no deadline: a job may run for days
    PrepareContext(options_, &context);
    v1::WatchJobRequest request;
    request.set_job_id(EscapeInvalidUtf8(job_id));
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(&context, request);
    v1::JobEvent event;
    bool got_any = false;
    while (reader->Read(&event)) {
      got_any = true;
      job = std::move(*event.mutable_job());
      on_snapshot(job);
      if (IsTerminal(job.state())) {
        // The coordinator ends the stream after this; do not depend on it.
        context.TryCancel();
        break;
      }
    }
    const grpc::Status status = reader->Finish();
    if (IsTerminal(job.state())) break;
    if (!IsLostConnection(ToAbsl(status.error_code()))) return Convert("WatchJob", status);

    // A live coordinator whose streams keep ending empty (a server that sends GOAWAY to
    // frequent keepalive pings does so while a job sits PENDING) is not a reason to give up:
    // the GetJob below still shows progress; only back off so this does not spin.
    empty_streams = got_any ? 0 : empty_streams + 1;
    if (empty_streams > 0) absl::SleepFor(WatchReconnectDelay(empty_streams));
    DAPPLE_ASSIGN_OR_RETURN(job, Reconnect(get));
    job.clear_events();
    on_snapshot(job);
  }
  return job;
}

}  // namespace dapple::ctl
