// gRPC adapters: Coordinator::Service and WorkerControl::Service that only convert and delegate
// to CoordinatorService, and GrpcServer, which serves both on one port.
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_SERVICE_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/service/coordinator_service.h"
#include "dapple/v1/coordinator.grpc.pb.h"
#include "dapple/v1/worker.grpc.pb.h"

namespace dapple::coordinator {

// THE absl::Status -> grpc::Status conversion: same code (the enums agree numerically), same
// message.
grpc::Status ToGrpcStatus(const absl::Status& status);

class GrpcCoordinator final : public v1::Coordinator::Service {
 public:
  explicit GrpcCoordinator(CoordinatorService* service) : service_(service) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status PlanJob(grpc::ServerContext* context, const v1::PlanJobRequest* request,
                       v1::PlanJobResponse* response) override;
  grpc::Status CheckpointJob(grpc::ServerContext* context, const v1::CheckpointJobRequest* request,
                             v1::CheckpointJobResponse* response) override;
  grpc::Status GetJobTrace(grpc::ServerContext* context, const v1::GetJobTraceRequest* request,
                           v1::JobTrace* response) override;
  grpc::Status GetJobLogs(grpc::ServerContext* context, const v1::GetJobLogsRequest* request,
                          v1::GetJobLogsResponse* response) override;

 private:
  CoordinatorService* service_;  // not owned
};

class GrpcWorkerControl final : public v1::WorkerControl::Service {
 public:
  explicit GrpcWorkerControl(CoordinatorService* service) : service_(service) {}

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status PublishEndpoint(grpc::ServerContext* context,
                               const v1::PublishEndpointRequest* request,
                               v1::PublishEndpointResponse* response) override;
  grpc::Status GetPeers(grpc::ServerContext* context, const v1::GetPeersRequest* request,
                        v1::GetPeersResponse* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context, const v1::ProgressReport* request,
                              v1::ProgressAck* response) override;
  grpc::Status DeregisterWorker(grpc::ServerContext* context,
                                const v1::DeregisterWorkerRequest* request,
                                v1::DeregisterWorkerResponse* response) override;
  grpc::Status ReportProfile(grpc::ServerContext* context, const v1::ReportProfileRequest* request,
                             v1::ReportProfileResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override;

 private:
  CoordinatorService* service_;  // not owned
};

// One gRPC server with both services. Thread safety: Shutdown and the accessors may be called
// from any thread; Shutdown is idempotent.
class GrpcServer {
 public:
  // Largest message accepted or sent (plans of big models, checkpoints later).
  static constexpr int kMaxMessageBytes = 64 << 20;

  // Listens on `address` ("host:port"; port 0 picks a free port) and serves `service`, which
  // must outlive the server. Port reuse (SO_REUSEPORT) is off, so a port another process
  // listens on is refused. kUnavailable "cannot listen on 127.0.0.1:7600: address already in
  // use" when binding fails (the reason as the OS gives it, when a probe bind can tell).
  // `credentials`: TLS or plain text (common/grpc_tls.h MakeServerCredentials); null: plain
  // text.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, CoordinatorService* service,
      std::shared_ptr<grpc::ServerCredentials> credentials);
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const std::string& address,
                                                           CoordinatorService* service);

  ~GrpcServer();

  int port() const { return port_; }

  // Stops accepting calls (clients get GOAWAY, so their next call goes to a new connection),
  // then ends every open WatchJob stream with UNAVAILABLE "coordinator is shutting down"
  // (CoordinatorService::EndWatches: a client takes that as "reconnect", never as an answer),
  // lets the other running calls finish for up to `grace`, cancels what is left, and returns
  // when all handlers have returned. Without ending the watches first, gRPC would cancel them
  // at the end of the grace and their clients would see CANCELLED. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  explicit GrpcServer(CoordinatorService* service)
      : service_(service), coordinator_(service), worker_control_(service) {}

  CoordinatorService* service_;  // not owned

  GrpcCoordinator coordinator_;
  GrpcWorkerControl worker_control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_SERVICE_H_
