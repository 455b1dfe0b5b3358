#include "coordinator/cluster/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

void Rendezvous::Open(const std::string& job_id, int num_stages, int replicas) {
  Table& table = tables_[job_id];
  table = Table{};
  table.num_stages = num_stages;
  table.replicas = replicas;
}

absl::Status Rendezvous::Publish(const v1::PublishEndpointRequest& request) {
  auto it = tables_.find(request.job_id());
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no rendezvous for job ", request.job_id()));
  }
  Table& table = it->second;
  if (request.stage() < 0 || request.stage() >= table.num_stages || request.replica() < 0 ||
      request.replica() >= table.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", request.job_id(), " has stages 0..", table.num_stages - 1, " and replicas 0..",
        table.replicas - 1, ", got stage ", request.stage(), " replica ", request.replica()));
  }
  v1::PeerEndpoint& peer = table.endpoints[{request.stage(), request.replica()}];
  peer.set_stage(request.stage());
  peer.set_replica(request.replica());
  peer.set_worker_id(request.worker_id());
  peer.set_ucx_address(request.ucx_address());
  peer.set_nccl_id_forward(request.nccl_id_forward());
  peer.set_nccl_id_backward(request.nccl_id_backward());
  return absl::OkStatus();
}

std::vector<v1::PeerEndpoint> Rendezvous::Peers(const std::string& job_id) const {
  std::vector<v1::PeerEndpoint> peers;
  auto it = tables_.find(job_id);
  if (it == tables_.end()) return peers;
  for (const auto& [rank, peer] : it->second.endpoints) peers.push_back(peer);
  return peers;
}

bool Rendezvous::Complete(const std::string& job_id) const {
  auto it = tables_.find(job_id);
  if (it == tables_.end()) return false;
  const Table& table = it->second;
  return static_cast<int64_t>(table.endpoints.size()) ==
         static_cast<int64_t>(table.num_stages) * table.replicas;
}

void Rendezvous::Close(const std::string& job_id) { tables_.erase(job_id); }

}  // namespace dapple::coordinator
