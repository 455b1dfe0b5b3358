// Rendezvous: the endpoints (UCX worker addresses) the ranks of running jobs publish so that
// neighbours can connect. One table per job, opened when the job starts RUNNING and closed
// when it ends. A rank is (stage, replica): stage s of a plan has replicas[s] replicas (DAPPLE's
// stage replication; 1 for a plain pipeline).
//
// Thread safety: thread-compatible (guarded by the coordinator service's mutex).
#ifndef DAPPLE_COORDINATOR_CLUSTER_RENDEZVOUS_H_
#define DAPPLE_COORDINATOR_CLUSTER_RENDEZVOUS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

class Rendezvous {
 public:
  // Starts an empty table for `job_id` with ranks (stage, replica), stage in
  // [0, replicas.size()), replica in [0, replicas[stage]) (an entry < 1 counts as 1). Replaces an
  // existing table of that job.
  void Open(const std::string& job_id, const std::vector<int>& replicas);

  // Records (or replaces) the endpoint of rank (request.stage, request.replica).
  // kNotFound "no rendezvous for job job-3" when the job's table is not open;
  // kInvalidArgument "job job-3 has stages 0..1, got stage 2 replica 0" for a stage outside
  // the plan, "job job-3 has replicas 0..1 of stage 1, got replica 2" for a replica outside it.
  absl::Status Publish(const v1::PublishEndpointRequest& request);

  // The published endpoints of `job_id`, by stage then replica (empty for a job not open).
  std::vector<v1::PeerEndpoint> Peers(const std::string& job_id) const;

  // True when every rank of the open job `job_id` has published.
  bool Complete(const std::string& job_id) const;

  // The ranks of the open job `job_id` that have not published, by stage then replica, as
  // "stage 1 replica 0" (empty for a job not open).
  std::vector<std::string> Missing(const std::string& job_id) const;

  // Forgets the job's table (nothing if none).
  void Close(const std::string& job_id);

 private:
  struct Table {
    std::vector<int> replicas;  // by stage, each >= 1
    int num_ranks = 0;
    std::map<std::pair<int, int>, v1::PeerEndpoint> endpoints;
  };
  absl::flat_hash_map<std::string, Table> tables_;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_RENDEZVOUS_H_
