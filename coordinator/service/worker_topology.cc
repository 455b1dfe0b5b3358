#include "coordinator/service/worker_topology.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/format_bytes.h"

namespace dapple::coordinator {
namespace {

bool IsLive(const v1::WorkerInfo& w) {
  return w.state() == v1::WORKER_STATE_IDLE || w.state() == v1::WORKER_STATE_BUSY;
}

std::string ComputeDevice(const v1::WorkerInfo& worker) {
  return worker.devices().empty() ? "cpu" : worker.devices(0);
}

}  // namespace

int WorkersNeeded(const v1::Job& job) {
  if (job.plan().stages().empty()) return std::max(1, job.spec().parallel().devices());
  int needed = 0;
  for (const v1::PlanStageSummary& s : job.plan().stages()) needed += std::max(1, s.replicas());
  return needed;
}

std::string DeviceTypeClause(const v1::Job& job) {
  const std::string& type = job.spec().parallel().device_type();
  return type.empty() || type == "any" ? "" : absl::StrCat(" with ", type, " devices");
}

bool WorkerFitsDeviceType(absl::string_view device_type, const v1::WorkerInfo& worker) {
  // An emulated stage computes nothing (it waits), so any worker can run it.
  if (device_type.empty() || device_type == "any" || device_type == "emulated") return true;
  const std::string device = ComputeDevice(worker);
  return device_type == "cuda" ? absl::StartsWith(device, "cuda:") : device == device_type;
}

std::string JobDeviceKind(absl::string_view device_type,
                          const std::vector<v1::WorkerInfo>& workers) {
  if (device_type == "cpu" || device_type == "cuda") return std::string(device_type);
  int live = 0;
  int cuda = 0;
  for (const v1::WorkerInfo& w : workers) {
    if (!IsLive(w)) continue;
    ++live;
    if (absl::StartsWith(ComputeDevice(w), "cuda:")) ++cuda;
  }
  return live > 0 && cuda == live ? "cuda" : "cpu";
}

std::string ValidPhysicalDevice(absl::string_view physical_device) {
  constexpr size_t kMaxLength = 64;
  const bool valid = !physical_device.empty() && physical_device.size() <= kMaxLength &&
                     std::all_of(physical_device.begin(), physical_device.end(), [](char c) {
                       return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
                     });
  return valid ? std::string(physical_device) : std::string();
}

bool ValidLink(const v1::LinkMeasurement& link) {
  return link.latency_ms() >= 0 && link.latency_ms() <= profile::kMaxLatencyMs &&
         link.bandwidth_bytes_per_s() >= profile::kMinBandwidthBytesPerS &&
         link.bandwidth_bytes_per_s() <= profile::kMaxBandwidthBytesPerS;
}

std::vector<v1::WorkerInfo> LiveFittingWorkers(const std::vector<v1::WorkerInfo>& workers,
                                               absl::string_view device_type) {
  std::vector<v1::WorkerInfo> out;
  for (const v1::WorkerInfo& w : workers) {
    if (IsLive(w) && WorkerFitsDeviceType(device_type, w)) out.push_back(w);
  }
  return out;
}

absl::StatusOr<v1::ClusterTopology> TopologyFromWorkers(const std::vector<v1::WorkerInfo>& workers,
                                                        absl::string_view device_type,
                                                        const PlanDefaults& defaults) {
  const std::vector<v1::WorkerInfo> fitting = LiveFittingWorkers(workers, device_type);
  const std::string kind = device_type.empty() || device_type == "any"
                               ? ""
                               : absl::StrCat(" with ", device_type, " devices");
  if (fitting.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no registered workers", kind,
                     " to plan on: start workers, or give a cluster file (dapplectl plan "
                     "--cluster CLUSTER.yaml)"));
  }
  // Workers of one host that report shared memory share it: cpu workers the host's RAM
  // (physical_device ""), cuda workers their GPU's.
  std::map<std::pair<std::string, std::string>, int> sharing;  // (host, physical device)
  for (const v1::WorkerInfo& w : workers) {
    if (IsLive(w) && w.device_memory_shared()) ++sharing[{w.hostname(), w.physical_device()}];
  }
  // Per node: the worker with the smallest memory and the largest memory seen, for memory_note.
  std::vector<std::pair<int64_t, std::string>> smallest_of_node;
  std::vector<int64_t> largest_of_node;
  // Per node: the device group of each of its devices, numbered by first appearance of the GPU.
  std::vector<std::vector<std::string>> gpus_of_node;
  bool any_shared_gpu = false;
  v1::ClusterTopology topology;
  std::map<std::string, int> node_of;
  for (const v1::WorkerInfo& w : fitting) {
    int64_t memory = w.device_memory_bytes();
    if (memory <= 0) {
      memory = defaults.device_memory_bytes;
    } else if (w.device_memory_shared()) {
      memory /= std::max(1, sharing[{w.hostname(), w.physical_device()}]);
    }
    auto [it, added] = node_of.emplace(w.hostname(), topology.nodes_size());
    if (added) {
      v1::ClusterNode* node = topology.add_nodes();
      node->set_name(w.hostname().empty() ? absl::StrCat("host", it->second) : w.hostname());
      node->set_device_memory_bytes(memory);
      gpus_of_node.emplace_back();
      smallest_of_node.emplace_back(memory, w.id());
      largest_of_node.push_back(memory);
    }
    if (memory < smallest_of_node[it->second].first)
      smallest_of_node[it->second] = {memory, w.id()};
    largest_of_node[it->second] = std::max(largest_of_node[it->second], memory);
    v1::ClusterNode* node = topology.mutable_nodes(it->second);
    node->set_devices(node->devices() + 1);
    // A worker that reports no GPU (cpu, an older worker) is a group of its own, and so is
    // every stage of an emulated job (it waits instead of computing).
    std::vector<std::string>& gpus = gpus_of_node[it->second];
    const std::string gpu = device_type == "emulated" ? "" : w.physical_device();
    auto found = gpu.empty() ? gpus.end() : std::find(gpus.begin(), gpus.end(), gpu);
    any_shared_gpu |= found != gpus.end();
    node->add_device_group(static_cast<int>(found - gpus.begin()));
    if (found == gpus.end()) gpus.push_back(gpu);
    node->set_device_memory_bytes(std::min(node->device_memory_bytes(), memory));
    node->add_device_memory_per_device(memory);
    // The host's compute capacity as its workers measured it (the smallest: measured under the
    // most load), for stages that share its cores; a host with a worker that reports none (a
    // cuda worker, an older worker) has none, and so does every host of an emulated job: its
    // stages wait instead of computing, so they never compete for the cores.
    const double capacity = device_type == "emulated" ? 0 : w.host_compute_capacity();
    if (added) {
      node->set_compute_capacity(capacity);
    } else if (node->compute_capacity() > 0) {
      node->set_compute_capacity(capacity > 0 ? std::min(node->compute_capacity(), capacity) : 0);
    }
  }
  std::vector<std::string> notes;
  for (int n = 0; n < topology.nodes_size(); ++n) {
    v1::ClusterNode* node = topology.mutable_nodes(n);
    if (largest_of_node[n] <= smallest_of_node[n].first) {
      node->clear_device_memory_per_device();  // all alike: device_memory_bytes says it
      continue;
    }
    // Each device is planned with its own memory, in the order the workers are assigned.
    notes.push_back(absl::StrCat(
        "host ", node->name(), ": its workers report from ",
        profile::FormatBytes(smallest_of_node[n].first), " (", smallest_of_node[n].second, ") to ",
        profile::FormatBytes(largest_of_node[n]), "; each device is planned with its own"));
  }
  topology.set_memory_note(absl::StrJoin(notes, "; "));
  int sharing_gpu = 0;  // workers on a GPU with another worker of the topology
  for (int n = 0; n < topology.nodes_size(); ++n) {
    v1::ClusterNode* node = topology.mutable_nodes(n);
    if (!any_shared_gpu) {
      node->clear_device_group();  // every device its own: the field stays empty
      continue;
    }
    for (int g : node->device_group()) {
      sharing_gpu += std::count(node->device_group().begin(), node->device_group().end(), g) > 1;
    }
  }
  const std::string type =
      device_type.empty() || device_type == "any" ? "" : absl::StrCat(" (", device_type, ")");
  topology.set_source(
      absl::StrCat(fitting.size(), " registered worker", fitting.size() == 1 ? "" : "s", type,
                   " on ", topology.nodes_size(), topology.nodes_size() == 1 ? " host" : " hosts"));
  if (sharing_gpu > 0) {
    absl::StrAppend(topology.mutable_source(), "; ", sharing_gpu,
                    " of them share GPUs (one process's kernels at a time, the memory split)");
  }
  topology.set_intra_node_bandwidth_bytes_per_s(defaults.intra_node_bandwidth_bytes_per_s);
  topology.set_intra_node_latency_ms(defaults.intra_node_latency_ms);
  // Processes of one host without GPUs between them talk over loopback TCP (Gloo's AllReduce,
  // UCX's tcp transport), far slower than the defaults' GPU links: the host's own measurement
  // replaces them when every worker planned on has one.
  const bool measured = device_type != "emulated" &&
                        std::all_of(fitting.begin(), fitting.end(), [](const v1::WorkerInfo& w) {
                          return w.has_loopback_link() && ValidLink(w.loopback_link());
                        });
  if (measured) {
    double bandwidth = profile::kMaxBandwidthBytesPerS;
    double latency = 0;
    for (const v1::WorkerInfo& w : fitting) {
      bandwidth = std::min(bandwidth, w.loopback_link().bandwidth_bytes_per_s());
      latency = std::max(latency, w.loopback_link().latency_ms());
    }
    topology.set_intra_node_bandwidth_bytes_per_s(bandwidth);
    topology.set_intra_node_latency_ms(latency);
    absl::StrAppend(topology.mutable_source(),
                    absl::StrFormat("; intra-node link measured: %.0f MB/s, %.3g ms",
                                    bandwidth / 1e6, latency));
  }
  topology.set_inter_node_bandwidth_bytes_per_s(defaults.inter_node_bandwidth_bytes_per_s);
  topology.set_inter_node_latency_ms(defaults.inter_node_latency_ms);
  return topology;
}

}  // namespace dapple::coordinator
