// Cluster topologies (profile.proto ClusterTopology) from YAML files (examples/clusters/) and
// device arithmetic on them. Pure functions (except ReadClusterFile); thread-safe.
//
// File format (every key required unless marked optional):
//   name: two-node-v100             # optional
//   nodes: 2                        # a count of identical nodes, or a list:
//                                   #   nodes: [{name: a, devices: 8, device_memory: 16 GiB}, ...]
//   devices_per_node: 8             # with a count
//   device_memory: 16 GiB           # with a count; B, KB, MB, GB, KiB, MiB, GiB (or a number)
//   intra_node: {bandwidth: 130 GB/s, latency: 5 us}     # B/s .. GB/s, bit/s .. Gbit/s
//   inter_node: {bandwidth: 25 Gbit/s, latency: 10 us}   # latency: s, ms, us, ns
//
// Units: decimal prefixes are powers of 10 (GB = 1e9 B), binary ones powers of 2 (GiB = 2^30 B);
// bit rates are divided by 8 (25 Gbit/s = 3.125e9 B/s). Memory: B, KB, MB, GB, TB, KiB, MiB, GiB,
// TiB; bandwidth: B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s, bit/s, Kbit/s, Mbit/s, Gbit/s;
// latency: s, ms, us, ns. A plain number is bytes, bytes/s or ms. Units are case-sensitive.
// With a count, nodes are named "node0", "node1", ...; in a list, `name` is optional (default
// "node<i>"), must be unique and must not contain '/'; `devices` and `device_memory` are
// required in each entry and the top-level devices_per_node / device_memory are then rejected.
// Limits: at most 65536 nodes and 4096 devices per node. `name` is checked but not kept
// (ClusterTopology has no field for it); `source` is the `source` argument.
#ifndef DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_
#define DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::profile {

// kInvalidArgument "<source>:<line>:<column>: <field>: <what is wrong>" for YAML syntax errors,
// unknown or missing keys, a value of the wrong type or unit, counts < 1, memory or bandwidth
// <= 0, latency < 0.
absl::StatusOr<v1::ClusterTopology> ParseClusterYaml(absl::string_view text,
                                                     absl::string_view source);
// Reads and parses `path` (kNotFound / kPermissionDenied naming it).
absl::StatusOr<v1::ClusterTopology> ReadClusterFile(const std::string& path);

// The number of devices (sum over nodes).
int NumDevices(const v1::ClusterTopology& topology);
// The node index of global device `device` (0 <= device < NumDevices); -1 outside that range.
// O(nodes).
int NodeOfDevice(const v1::ClusterTopology& topology, int device);
// "<node name>/<local index>", e.g. "node1/3"; "" outside the range.
std::string DeviceName(const v1::ClusterTopology& topology, int device);
// Bytes of memory of global device `device`; 0 outside the range.
int64_t DeviceMemoryBytes(const v1::ClusterTopology& topology, int device);

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_
