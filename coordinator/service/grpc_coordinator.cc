#include "coordinator/service/grpc_coordinator.h"

#include <string>

#include "common/logging.h"

namespace dapple::coordinator {

// Authenticates the call for the Coordinator service into `caller`, or returns its refusal.
#define DAPPLE_COORDINATOR_CALLER(caller, context)                                   \
  absl::StatusOr<auth::Identity> caller##_or =                                       \
      auth_.authenticator->AuthenticateFor(*(context), auth::Service::kCoordinator); \
  if (!caller##_or.ok()) return ToGrpcStatus(caller##_or.status());                  \
  const auth::Identity& caller = *caller##_or

void GrpcCoordinator::Audit(const auth::Identity& caller, const char* action,
                            const std::string& target, const absl::Status& result,
                            const std::string& detail) {
  if (auth_.audit == nullptr) return;
  if (absl::Status s = auth_.audit->Record(caller, action, target, result,
                                           result.ok() ? detail : std::string(result.message()));
      !s.ok()) {
    DAPPLE_LOG_WARN("audit log: {}", s.message());
  }
}

grpc::Status GrpcCoordinator::SubmitJob(grpc::ServerContext* context,
                                        const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  const absl::Status s = service_->SubmitJob(caller, *request, response);
  Audit(caller, "SubmitJob", s.ok() ? response->job().id() : std::string(), s,
        request->resume_from().empty()
            ? request->source_name()
            : request->source_name() + " resuming from " + request->resume_from());
  return ToGrpcStatus(s);
}

grpc::Status GrpcCoordinator::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                     v1::Job* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->GetJob(caller, *request, response));
}

grpc::Status GrpcCoordinator::ListJobs(grpc::ServerContext* context,
                                       const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->ListJobs(caller, *request, response));
}

grpc::Status GrpcCoordinator::CancelJob(grpc::ServerContext* context,
                                        const v1::CancelJobRequest* request, v1::Job* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  const absl::Status s = service_->CancelJob(caller, *request, response);
  Audit(caller, "CancelJob", request->job_id().substr(0, 64), s, "");
  return ToGrpcStatus(s);
}

grpc::Status GrpcCoordinator::WatchJob(grpc::ServerContext* context,
                                       const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  // A token revoked or expired while the stream is open ends it with UNAUTHENTICATED: checked
  // before every snapshot and at each of WatchJob's 100 ms polls while it waits.
  auth::StreamRecheck recheck = auth::StreamRecheck::ForCall(auth_.authenticator, *context, caller);
  absl::Status refused;
  auto still_valid = [&] {
    if (refused.ok()) refused = recheck.Check();
    return refused.ok();
  };
  const absl::Status s = service_->WatchJob(
      caller, *request,
      [&](const v1::JobEvent& event) { return still_valid() && writer->Write(event); },
      [&] { return context->IsCancelled() || !still_valid(); });
  return ToGrpcStatus(refused.ok() ? s : refused);
}

grpc::Status GrpcCoordinator::ListWorkers(grpc::ServerContext* context,
                                          const v1::ListWorkersRequest* request,
                                          v1::ListWorkersResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->ListWorkers(caller, *request, response));
}

grpc::Status GrpcCoordinator::PlanJob(grpc::ServerContext* context,
                                      const v1::PlanJobRequest* request,
                                      v1::PlanJobResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->PlanJob(caller, *request, response));
}

grpc::Status GrpcCoordinator::CheckpointJob(grpc::ServerContext* context,
                                            const v1::CheckpointJobRequest* request,
                                            v1::CheckpointJobResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  const absl::Status s = service_->CheckpointJob(caller, *request, response);
  Audit(caller, "CheckpointJob", request->job_id().substr(0, 64), s,
        s.ok() ? "after step " + std::to_string(response->step()) : "");
  return ToGrpcStatus(s);
}

grpc::Status GrpcCoordinator::GetJobTrace(grpc::ServerContext* context,
                                          const v1::GetJobTraceRequest* request,
                                          v1::JobTrace* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->GetJobTrace(caller, *request, response));
}

grpc::Status GrpcCoordinator::GetJobLogs(grpc::ServerContext* context,
                                         const v1::GetJobLogsRequest* request,
                                         v1::GetJobLogsResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  return ToGrpcStatus(service_->GetJobLogs(caller, *request, response));
}

grpc::Status GrpcCoordinator::WhoAmI(grpc::ServerContext* context, const v1::WhoAmIRequest*,
                                     v1::WhoAmIResponse* response) {
  DAPPLE_COORDINATOR_CALLER(caller, context);
  response->set_user(caller.user);
  response->set_tenant(caller.tenant);
  response->set_role(auth::RoleName(caller.role));
  response->set_token_id(caller.token_id);
  absl::StatusOr<v1::TokenInfo> token = auth_.credentials->GetToken(caller.token_id);
  if (!token.ok()) return ToGrpcStatus(token.status());
  response->set_expires_unix_ms(token->expires_unix_ms());
  return grpc::Status::OK;
}

#undef DAPPLE_COORDINATOR_CALLER

}  // namespace dapple::coordinator
