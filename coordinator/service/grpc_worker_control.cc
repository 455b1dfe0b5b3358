#include "coordinator/service/grpc_worker_control.h"

#include "common/logging.h"

namespace dapple::coordinator {

// Authenticates the call for the WorkerControl service into `caller`, or returns its refusal.
#define DAPPLE_WORKER_CALLER(caller, context)                                          \
  absl::StatusOr<auth::Identity> caller##_or =                                         \
      auth_.authenticator->AuthenticateFor(*(context), auth::Service::kWorkerControl); \
  if (!caller##_or.ok()) return ToGrpcStatus(caller##_or.status());                    \
  const auth::Identity& caller = *caller##_or

grpc::Status GrpcWorkerControl::RegisterWorker(grpc::ServerContext* context,
                                               const v1::RegisterWorkerRequest* request,
                                               v1::RegisterWorkerResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  if (absl::Status s = service_->RegisterWorker(caller, *request, response); !s.ok()) {
    return ToGrpcStatus(s);
  }
  // A worker that registered with its own credential and kept its id keeps that credential.
  if (caller.role == auth::Role::kWorker && caller.user == response->worker_id()) {
    return grpc::Status::OK;
  }
  absl::StatusOr<auth::CredentialStore::IssuedToken> credential =
      auth_.credentials->IssueWorkerCredential(response->worker_id());
  if (!credential.ok()) {
    DAPPLE_LOG_ERROR("worker {}: issuing its credential: {}", response->worker_id(),
                     credential.status().message());
    service_->ForgetRefusedWorker(response->worker_id(),
                                  std::string(credential.status().message()));
    return ToGrpcStatus(credential.status());
  }
  response->set_worker_credential(credential->token);
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerControl::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->Heartbeat(caller, *request, response));
}

grpc::Status GrpcWorkerControl::PublishEndpoint(grpc::ServerContext* context,
                                                const v1::PublishEndpointRequest* request,
                                                v1::PublishEndpointResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->PublishEndpoint(caller, *request, response));
}

grpc::Status GrpcWorkerControl::GetPeers(grpc::ServerContext* context,
                                         const v1::GetPeersRequest* request,
                                         v1::GetPeersResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->GetPeers(caller, *request, response));
}

grpc::Status GrpcWorkerControl::StoreSet(grpc::ServerContext* context,
                                         const v1::StoreSetRequest* request,
                                         v1::StoreSetResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->StoreSet(caller, *request, response));
}

grpc::Status GrpcWorkerControl::StoreGet(grpc::ServerContext* context,
                                         const v1::StoreGetRequest* request,
                                         v1::StoreGetResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->StoreGet(caller, *request, response));
}

grpc::Status GrpcWorkerControl::ReportProgress(grpc::ServerContext* context,
                                               const v1::ProgressReport* request,
                                               v1::ProgressAck* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->ReportProgress(caller, *request, response));
}

grpc::Status GrpcWorkerControl::DeregisterWorker(grpc::ServerContext* context,
                                                 const v1::DeregisterWorkerRequest* request,
                                                 v1::DeregisterWorkerResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->DeregisterWorker(caller, *request, response));
}

grpc::Status GrpcWorkerControl::ReportProfile(grpc::ServerContext* context,
                                              const v1::ReportProfileRequest* request,
                                              v1::ReportProfileResponse* response) {
  DAPPLE_WORKER_CALLER(caller, context);
  return ToGrpcStatus(service_->ReportProfile(caller, *request, response));
}

#undef DAPPLE_WORKER_CALLER

}  // namespace dapple::coordinator
