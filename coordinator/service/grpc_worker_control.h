// The WorkerControl service's gRPC adapter (workers): authenticates every call (worker
// credentials, and the join token, which only RegisterWorker accepts), then converts and
// delegates to CoordinatorService with the caller. RegisterWorker answers a new worker
// credential (CredentialStore::IssueWorkerCredential) unless the worker registered with its own
// credential and kept its id (a reattach), so every later call carries it.
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_WORKER_CONTROL_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_WORKER_CONTROL_H_

#include <grpcpp/grpcpp.h>

#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_auth.h"
#include "dapple/v1/worker.grpc.pb.h"

namespace dapple::coordinator {

class GrpcWorkerControl final : public v1::WorkerControl::Service {
 public:
  GrpcWorkerControl(CoordinatorService* service, GrpcAuth auth) : service_(service), auth_(auth) {}

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
  GrpcAuth auth_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_WORKER_CONTROL_H_
