#include "coordinator/service/grpc_service.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dapple::coordinator {
namespace {

// How long Shutdown lets gRPC's GOAWAY travel before it ends the watch streams. A client whose
// stream ends goes on with GetJob at once; had it not yet seen the GOAWAY, that call would go
// to this closing server, which cancels it (CANCELLED) instead of sending it elsewhere.
constexpr absl::Duration kGoawayLead = absl::Milliseconds(50);

// Why binding `address` ("host:port", "[v6]:port") fails, found by binding a plain socket the
// way gRPC does (SO_REUSEADDR, no SO_REUSEPORT): gRPC reports only that it failed. "" when the
// probe binds (the failure was something else) or the address cannot be split.
std::string BindFailureReason(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
  }
  std::string why;
  for (addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = strerror(errno);
      if (!why.empty()) why[0] = absl::ascii_tolower(why[0]);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status GrpcCoordinator::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  // Until every RPC is authenticated (issue 16, the next change), a caller is the cluster's
  // administrator, as every caller was before owners existed.
  const auth::Identity caller{"admin", "", auth::Role::kAdmin, ""};
  return ToGrpcStatus(service_->SubmitJob(caller, *request, response));
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

grpc::Status GrpcCoordinator::PlanJob(grpc::ServerContext*, const v1::PlanJobRequest* request,
                                      v1::PlanJobResponse* response) {
  return ToGrpcStatus(service_->PlanJob(*request, response));
}

grpc::Status GrpcCoordinator::CheckpointJob(grpc::ServerContext*,
                                            const v1::CheckpointJobRequest* request,
                                            v1::CheckpointJobResponse* response) {
  return ToGrpcStatus(service_->CheckpointJob(*request, response));
}

grpc::Status GrpcCoordinator::GetJobTrace(grpc::ServerContext*,
                                          const v1::GetJobTraceRequest* request,
                                          v1::JobTrace* response) {
  return ToGrpcStatus(service_->GetJobTrace(*request, response));
}

grpc::Status GrpcCoordinator::GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest* request,
                                         v1::GetJobLogsResponse* response) {
  return ToGrpcStatus(service_->GetJobLogs(*request, response));
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

grpc::Status GrpcWorkerControl::StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* request,
                                         v1::StoreSetResponse* response) {
  return ToGrpcStatus(service_->StoreSet(*request, response));
}

grpc::Status GrpcWorkerControl::StoreGet(grpc::ServerContext*, const v1::StoreGetRequest* request,
                                         v1::StoreGetResponse* response) {
  return ToGrpcStatus(service_->StoreGet(*request, response));
}

grpc::Status GrpcWorkerControl::ReportProgress(grpc::ServerContext*,
                                               const v1::ProgressReport* request,
                                               v1::ProgressAck* response) {
  return ToGrpcStatus(service_->ReportProgress(*request, response));
}

grpc::Status GrpcWorkerControl::DeregisterWorker(grpc::ServerContext*,
                                                 const v1::DeregisterWorkerRequest* request,
                                                 v1::DeregisterWorkerResponse* response) {
  return ToGrpcStatus(service_->DeregisterWorker(*request, response));
}

grpc::Status GrpcWorkerControl::ReportProfile(grpc::ServerContext*,
                                              const v1::ReportProfileRequest* request,
                                              v1::ReportProfileResponse* response) {
  return ToGrpcStatus(service_->ReportProfile(*request, response));
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              CoordinatorService* service) {
  return Start(address, service, nullptr);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, CoordinatorService* service,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  std::unique_ptr<GrpcServer> server(new GrpcServer(service));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address,
                           credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(&server->coordinator_);
  builder.RegisterService(&server->worker_control_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // `dapplectl watch` keeps a quiet stream open for as long as a job runs and pings it every
  // 30 s; gRPC's defaults would answer those pings with GOAWAY ("too many pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC sets SO_REUSEPORT by default, which lets a second coordinator bind a port the first
  // listens on and split its clients between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    const std::string why = BindFailureReason(address);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, why.empty() ? "" : ": ", why));
  }
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  std::call_once(shutdown_once_, [&] {
    const absl::Time deadline = absl::Now() + grace;
    // grpc::Server::Shutdown blocks until the handlers return or the deadline passes (then
    // it cancels them): run it aside, and end the watches, which would otherwise run on.
    std::thread drain([&] { server_->Shutdown(absl::ToChronoTime(deadline)); });
    absl::SleepFor(std::min(kGoawayLead, grace));
    service_->EndWatches();
    drain.join();
    server_->Wait();
  });
}

}  // namespace dapple::coordinator
