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
// Limits (ValidateTopology's, below): 1 to 4096 nodes and 4096 devices in all; device memory in
// [1 MiB, 1 PiB]; bandwidth in [1 KB/s, 10 TB/s]; latency in [0, 10 s]. `name` is checked but
// not kept (ClusterTopology has no field for it); `source` is the `source` argument.
#ifndef DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_
#define DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::profile {

// The limits of a topology. They keep the planner's work and memory bounded (a 65536-node
// cluster made it run for minutes in 16 GB) and refuse values that are surely typos.
inline constexpr int kMaxClusterNodes = 4096;
inline constexpr int kMaxClusterDevices = 4096;                     // over all nodes
inline constexpr int64_t kMinDeviceMemoryBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr int64_t kMaxDeviceMemoryBytes = int64_t{1} << 50;  // 1 PiB
inline constexpr double kMinBandwidthBytesPerS = 1e3;               // 1 KB/s
inline constexpr double kMaxBandwidthBytesPerS = 1e13;              // 10 TB/s
inline constexpr double kMaxLatencyMs = 1e4;                        // 10 s
// Cluster files are a few hundred bytes; anything near this is not one.
inline constexpr int64_t kMaxClusterFileBytes = int64_t{1} << 20;  // 1 MiB

// kInvalidArgument "<source>:<line>:<column>: <field>: <what is wrong>" for YAML syntax errors,
// unknown or missing keys, a value of the wrong type or unit, counts < 1, and values outside the
// limits above, naming the value and the rule ("inter_node.latency: '1e300 s' is more than
// 10 s"). The result passes ValidateTopology.
absl::StatusOr<v1::ClusterTopology> ParseClusterYaml(absl::string_view text,
                                                     absl::string_view source);
// Reads and parses `path`: ReadTextFile's errors (kNotFound, kPermissionDenied, "not a regular
// file", kResourceExhausted above kMaxClusterFileBytes), each naming it, then ParseClusterYaml's.
absl::StatusOr<v1::ClusterTopology> ReadClusterFile(const std::string& path);

// Checks a topology from anywhere (a file, an RPC, the coordinator's workers) against the limits
// above: 1 to kMaxClusterNodes nodes, each with a non-empty name without '/' that no other node
// has and 1 or more devices, at most kMaxClusterDevices devices in all, a device_group that is
// empty or has one entry in [0, devices) per device, finite bandwidths and latencies in range.
// kInvalidArgument naming the proto field path, the value and the rule, e.g.
// "nodes[2].device_memory_bytes 0 is less than 1 MiB" or "inter_node_latency_ms 1e+300 is more
// than 10 s".
absl::Status ValidateTopology(const v1::ClusterTopology& topology);

// The number of devices (sum over nodes).
int NumDevices(const v1::ClusterTopology& topology);
// The node index of global device `device` (0 <= device < NumDevices); -1 outside that range.
// O(nodes).
int NodeOfDevice(const v1::ClusterTopology& topology, int device);
// "<node name>/<local index>", e.g. "node1/3"; "" outside the range.
std::string DeviceName(const v1::ClusterTopology& topology, int device);
// Bytes of memory of global device `device` (its node's device_memory_per_device entry, else the
// node's device_memory_bytes); 0 outside the range.
int64_t DeviceMemoryBytes(const v1::ClusterTopology& topology, int device);

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_CLUSTER_TOPOLOGY_H_
