// The Coordinator service's gRPC adapter (dapplectl): authenticates every call
// (GrpcAuth.authenticator, users and admins only), then converts and delegates to
// CoordinatorService with the caller; records SubmitJob, CancelJob and CheckpointJob in the
// audit log; answers WhoAmI itself.
#ifndef DAPPLE_COORDINATOR_SERVICE_GRPC_COORDINATOR_H_
#define DAPPLE_COORDINATOR_SERVICE_GRPC_COORDINATOR_H_

#include <grpcpp/grpcpp.h>

#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_auth.h"
#include "dapple/v1/coordinator.grpc.pb.h"

namespace dapple::coordinator {

class GrpcCoordinator final : public v1::Coordinator::Service {
 public:
  GrpcCoordinator(CoordinatorService* service, GrpcAuth auth) : service_(service), auth_(auth) {}

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
  // The caller as authenticated, with its token's expiry. Workers' credentials and the join
  // token are refused here as on every Coordinator RPC.
  grpc::Status WhoAmI(grpc::ServerContext* context, const v1::WhoAmIRequest* request,
                      v1::WhoAmIResponse* response) override;

 private:
  // Writes an audit entry (a failed write is logged: the action stands).
  void Audit(const auth::Identity& caller, const char* action, const std::string& target,
             const absl::Status& result, const std::string& detail);

  CoordinatorService* service_;  // not owned
  GrpcAuth auth_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_GRPC_COORDINATOR_H_
