#include "dapplectl/plan_inputs.h"

#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "common/status.h"
#include "dapplectl/utf8_text.h"

namespace dapple::ctl {
namespace {

void Escape(std::string* s) { *s = EscapeInvalidUtf8(*s); }

}  // namespace

absl::StatusOr<v1::ModelProfile> ReadPlanProfile(const std::string& path, int64_t batch_size) {
  DAPPLE_ASSIGN_OR_RETURN(v1::ModelProfile profile, profile::ReadProfileFile(path, batch_size));
  Escape(profile.mutable_source());
  Escape(profile.mutable_device_kind());
  Escape(profile.mutable_model_fingerprint());
  for (v1::LayerProfile& layer : *profile.mutable_layers()) {
    Escape(layer.mutable_id());
    Escape(layer.mutable_name());
  }
  return profile;
}

absl::StatusOr<v1::ClusterTopology> ReadPlanCluster(const std::string& path) {
  DAPPLE_ASSIGN_OR_RETURN(v1::ClusterTopology cluster, profile::ReadClusterFile(path));
  Escape(cluster.mutable_source());
  for (v1::ClusterNode& node : *cluster.mutable_nodes()) Escape(node.mutable_name());
  return cluster;
}

}  // namespace dapple::ctl
