#include "coordinator/service/plan_request_check.h"

#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "common/status.h"

namespace dapple::coordinator {
namespace {

absl::Status Invalid(const std::string& field, double value, const char* rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " ", rule));
}

absl::Status CheckPositive(const std::string& field, double value) {
  if (!std::isfinite(value) || value <= 0)
    return Invalid(field, value, "must be a finite number > 0");
  return absl::OkStatus();
}

absl::Status CheckNonNegative(const std::string& field, double value) {
  if (!std::isfinite(value) || value < 0)
    return Invalid(field, value, "must be a finite number >= 0");
  return absl::OkStatus();
}

// A layer's time: >= 0 and at most profile::kMaxLayerMs.
absl::Status CheckLayerMs(const std::string& field, double value) {
  DAPPLE_RETURN_IF_ERROR(CheckNonNegative(field, value));
  if (value > profile::kMaxLayerMs) {
    return Invalid(field, value, absl::StrCat("must be at most ", profile::kMaxLayerMs).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTopology(const v1::ClusterTopology& topology) {
  if (topology.nodes().empty()) {
    return absl::InvalidArgumentError("cluster has no nodes: give at least one");
  }
  std::set<std::string> names;
  int64_t devices = 0;
  for (int i = 0; i < topology.nodes_size(); ++i) {
    const v1::ClusterNode& node = topology.nodes(i);
    const std::string field = absl::StrCat("cluster.nodes[", i, "]");
    if (node.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name is empty"));
    }
    if (!names.insert(node.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name '", node.name(), "' is repeated: node names must differ"));
    }
    if (node.devices() < 1) return Invalid(field + ".devices", node.devices(), "must be >= 1");
    if (node.device_memory_bytes() <= 0) {
      return Invalid(field + ".device_memory_bytes",
                     static_cast<double>(node.device_memory_bytes()), "must be > 0");
    }
    devices += node.devices();
  }
  if (devices > kMaxPlanDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster has ", devices, " devices, more than the ", kMaxPlanDevices, " a plan may use"));
  }
  if (absl::Status s = CheckPositive("cluster.intra_node_bandwidth_bytes_per_s",
                                     topology.intra_node_bandwidth_bytes_per_s());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPositive("cluster.inter_node_bandwidth_bytes_per_s",
                                     topology.inter_node_bandwidth_bytes_per_s());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckNonNegative("cluster.intra_node_latency_ms", topology.intra_node_latency_ms());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckNonNegative("cluster.inter_node_latency_ms", topology.inter_node_latency_ms());
      !s.ok()) {
    return s;
  }
  // Then the ranges a cluster file is held to (the client may be another program than dapplectl).
  if (absl::Status s = profile::ValidateTopology(topology); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckProfile(const v1::ModelProfile& profile) {
  if (profile.layers().empty()) return absl::InvalidArgumentError("profile has no layers");
  if (profile.layers_size() > kMaxPlanLayers) {
    return absl::InvalidArgumentError(absl::StrCat("profile has ", profile.layers_size(),
                                                   " layers, more than the ", kMaxPlanLayers,
                                                   " a plan may use"));
  }
  if (profile.batch_size() <= 0) {
    return Invalid("profile.batch_size", static_cast<double>(profile.batch_size()), "must be > 0");
  }
  for (int i = 0; i < profile.layers_size(); ++i) {
    const v1::LayerProfile& l = profile.layers(i);
    const std::string field = absl::StrCat("profile.layers[", i, "]");
    DAPPLE_RETURN_IF_ERROR(CheckLayerMs(field + ".forward_ms", l.forward_ms()));
    DAPPLE_RETURN_IF_ERROR(CheckLayerMs(field + ".backward_ms", l.backward_ms()));
    if (l.activation_bytes() < 0) {
      return Invalid(field + ".activation_bytes", static_cast<double>(l.activation_bytes()),
                     "must be >= 0");
    }
    if (l.parameter_bytes() < 0) {
      return Invalid(field + ".parameter_bytes", static_cast<double>(l.parameter_bytes()),
                     "must be >= 0");
    }
    if (l.saved_bytes() < 0) {
      return Invalid(field + ".saved_bytes", static_cast<double>(l.saved_bytes()), "must be >= 0");
    }
  }
  for (int i = 0; i < profile.edges_size(); ++i) {
    const v1::ProfileEdge& e = profile.edges(i);
    if (e.src() < 0 || e.dst() < 0 || e.src() >= profile.layers_size() ||
        e.dst() >= profile.layers_size()) {
      return absl::InvalidArgumentError(absl::StrCat("profile.edges[", i, "] ", e.src(), " -> ",
                                                     e.dst(), " names a layer outside 0..",
                                                     profile.layers_size() - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
