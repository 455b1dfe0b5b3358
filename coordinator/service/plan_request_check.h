// Checks of the profile and topology a PlanJob request carries. dapplectl builds them from files
// it has parsed (profile::ReadProfileFile / ReadClusterFile), but any gRPC client may send any
// message, and the planners assume sane numbers (no zero bandwidth, no negative time). Pure;
// thread-safe.
#ifndef DAPPLE_COORDINATOR_SERVICE_PLAN_REQUEST_CHECK_H_
#define DAPPLE_COORDINATOR_SERVICE_PLAN_REQUEST_CHECK_H_

#include "absl/status/status.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// The most layers / devices a request may plan: far beyond any published model or cluster,
// small enough that the planners' tables stay in memory.
inline constexpr int kMaxPlanLayers = 100'000;
inline constexpr int kMaxPlanDevices = 65'536;

// kInvalidArgument naming the field and value, e.g. "cluster.nodes[1].devices 0 must be >= 1",
// for: no nodes, an empty or repeated node name, devices < 1, a total above kMaxPlanDevices,
// device memory <= 0, bandwidths that are not finite and > 0, latencies that are not finite
// and >= 0.
absl::Status CheckTopology(const v1::ClusterTopology& topology);

// kInvalidArgument naming the field and value, e.g. "profile.layers[3].forward_ms -1 must be a
// finite number >= 0", for: no layers or more than kMaxPlanLayers, batch_size <= 0, times that
// are not finite and >= 0, negative byte counts, edges naming a layer outside the profile.
absl::Status CheckProfile(const v1::ModelProfile& profile);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_PLAN_REQUEST_CHECK_H_
