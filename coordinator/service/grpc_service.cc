#include "coordinator/service/grpc_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dapple::coordinator {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status GrpcCoordinator::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  return ToGrpcStatus(service_->SubmitJob(*request, response));
}

grpc::Status GrpcCoordinator::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                                     v1::Job* response) {
  return ToGrpcStatus(service_->GetJob(*request, response));
}

grpc::Status GrpcCoordinator::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  return ToGrpcStatus(service_->ListJobs(*request, response));
}

grpc::Status GrpcCoordinator::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                                        v1::Job* response) {
  return ToGrpcStatus(service_->CancelJob(*request, response));
}

grpc::Status GrpcCoordinator::WatchJob(grpc::ServerContext* context,
                                       const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  return ToGrpcStatus(service_->WatchJob(
      *request, [writer](const v1::JobEvent& event) { return writer->Write(event); },
      [context] { return context->IsCancelled(); }));
}

grpc::Status GrpcCoordinator::ListWorkers(grpc::ServerContext*,
                                          const v1::ListWorkersRequest* request,
                                          v1::ListWorkersResponse* response) {
  return ToGrpcStatus(service_->ListWorkers(*request, response));
}

grpc::Status GrpcWorkerControl::RegisterWorker(grpc::ServerContext*,
                                               const v1::RegisterWorkerRequest* request,
                                               v1::RegisterWorkerResponse* response) {
  return ToGrpcStatus(service_->RegisterWorker(*request, response));
}

grpc::Status GrpcWorkerControl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  return ToGrpcStatus(service_->Heartbeat(*request, response));
}

grpc::Status GrpcWorkerControl::PublishEndpoint(grpc::ServerContext*,
                                                const v1::PublishEndpointRequest* request,
                                                v1::PublishEndpointResponse* response) {
  return ToGrpcStatus(service_->PublishEndpoint(*request, response));
}

grpc::Status GrpcWorkerControl::GetPeers(grpc::ServerContext*, const v1::GetPeersRequest* request,
                                         v1::GetPeersResponse* response) {
  return ToGrpcStatus(service_->GetPeers(*request, response));
}

grpc::Status GrpcWorkerControl::ReportProgress(grpc::ServerContext*,
                                               const v1::ProgressReport* request,
                                               v1::ProgressAck* response) {
  return ToGrpcStatus(service_->ReportProgress(*request, response));
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              CoordinatorService* service) {
  std::unique_ptr<GrpcServer> server(new GrpcServer(service));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(&server->coordinator_);
  builder.RegisterService(&server->worker_control_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // `dapplectl watch` keeps a quiet stream open for as long as a job runs and pings it every
  // 30 s; gRPC's defaults would answer those pings with GOAWAY ("too many pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  std::call_once(shutdown_once_, [&] {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  });
}

}  // namespace dapple::coordinator
