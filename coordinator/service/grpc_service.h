// GrpcServer: the Coordinator, WorkerControl and Admin services (grpc_coordinator.h,
// grpc_worker_control.h, grpc_admin.h: adapters that authenticate every call, then convert and
// delegate to CoordinatorService) on one port.
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
#include "coordinator/service/grpc_admin.h"
#include "coordinator/service/grpc_auth.h"
#include "coordinator/service/grpc_coordinator.h"
#include "coordinator/service/grpc_worker_control.h"

namespace dapple::coordinator {

// One gRPC server with the three services. Thread safety: Shutdown and the accessors may be called
// from any thread; Shutdown is idempotent.
class GrpcServer {
 public:
  // Largest message sent (the plans and programs of big models in heartbeat answers).
  static constexpr int kMaxMessageBytes = 64 << 20;
  // Largest message accepted from any client: the biggest a request needs is a PlanJob profile
  // of kMaxPlanLayers layers (about 100 bytes each) or a worker's measured profile; a job spec
  // is at most 1 MiB (common/job_spec.h). gRPC refuses more with RESOURCE_EXHAUSTED before a
  // handler runs, so a hostile client costs at most this much per call in flight.
  static constexpr int kMaxReceiveMessageBytes = 16 << 20;

  // Listens on `address` ("host:port"; port 0 picks a free port) and serves `service`, which
  // must outlive the server. Port reuse (SO_REUSEPORT) is off, so a port another process
  // listens on is refused. kUnavailable "cannot listen on 127.0.0.1:7600: address already in
  // use" when binding fails (the reason as the OS gives it, when a probe bind can tell).
  // `auth`: how callers are authenticated (every member set; they must outlive the server).
  // `credentials`: TLS or plain text (common/grpc_tls.h MakeServerCredentials); null: plain
  // text.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, CoordinatorService* service, GrpcAuth auth,
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

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
  GrpcServer(CoordinatorService* service, GrpcAuth auth)
      : service_(service),
        coordinator_(service, auth),
        worker_control_(service, auth),
        admin_(service, auth) {}

  CoordinatorService* service_;  // not owned

  GrpcCoordinator coordinator_;
  GrpcWorkerControl worker_control_;
  GrpcAdmin admin_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_SERVICE_H_
