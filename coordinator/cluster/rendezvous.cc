#include "coordinator/cluster/rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

void Rendezvous::Open(const std::string& job_id, const std::vector<int>& replicas) {
  Table& table = tables_[job_id];
  table = Table{};
  for (int r : replicas) {
    table.replicas.push_back(std::max(1, r));
    table.num_ranks += table.replicas.back();
  }
}

absl::Status Rendezvous::Publish(const v1::PublishEndpointRequest& request) {
  auto it = tables_.find(request.job_id());
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no rendezvous for job ", request.job_id()));
  }
  Table& table = it->second;
  const int num_stages = static_cast<int>(table.replicas.size());
  if (request.stage() < 0 || request.stage() >= num_stages) {
    return absl::InvalidArgumentError(absl::StrCat("job ", request.job_id(), " has stages 0..",
                                                   num_stages - 1, ", got stage ", request.stage(),
                                                   " replica ", request.replica()));
  }
  const int replicas = table.replicas[request.stage()];
  if (request.replica() < 0 || request.replica() >= replicas) {
    return absl::InvalidArgumentError(absl::StrCat("job ", request.job_id(), " has replicas 0..",
                                                   replicas - 1, " of stage ", request.stage(),
                                                   ", got replica ", request.replica()));
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
  // Publish admits only ranks of the plan, so the count says every rank is there.
  return static_cast<int>(it->second.endpoints.size()) == it->second.num_ranks;
}

std::vector<std::string> Rendezvous::Missing(const std::string& job_id) const {
  std::vector<std::string> missing;
  auto it = tables_.find(job_id);
  if (it == tables_.end()) return missing;
  const Table& table = it->second;
  for (int s = 0; s < static_cast<int>(table.replicas.size()); ++s) {
    for (int r = 0; r < table.replicas[s]; ++r) {
      if (!table.endpoints.contains({s, r})) {
        missing.push_back(absl::StrCat("stage ", s, " replica ", r));
      }
    }
  }
  return missing;
}

void Rendezvous::Close(const std::string& job_id) { tables_.erase(job_id); }

}  // namespace dapple::coordinator
