// Planner wall time: every planner of coordinator/planner/planners.h on every published profile
// (examples/profiles) on the three clusters of examples/clusters, and on a synthetic 1000-layer
// model on 1024 devices (128 nodes x 8). Prints markdown tables (docs/planner.md,
// docs/benchmarks.md).
//
//   build/bench/planner_bench [--quick] [--steps] [--root DIR] [--planners a,b,...]
//     --quick      only the synthetic case
//     --steps      also print each plan's simulated step time (ms)
//     --root DIR   the source tree (default: the one this binary was built from)
//     --show TEXT  only the profiles whose name contains TEXT, printing their plans to stderr
//     --schedule S     gpipe | dapple | pipedream (default dapple)
//     --max-replicas R  limit replicas per stage (default 0: unlimited)
//
// Global batch per model: the DAPPLE paper's where it has one (VGG-19 2048, GNMT-16 1024,
// BERT-48 64, XLNet-36 128, AmoebaNet-36 128), otherwise 16 x the profile batch; optimizer:
// SGD with momentum (one state per weight); schedule: dapple; replicas unlimited.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "common/schedule/generators.h"
#include "coordinator/planner/planners.h"

#ifndef DAPPLE_SOURCE_ROOT
#define DAPPLE_SOURCE_ROOT "."
#endif

namespace dapple {
namespace {

using coordinator::PlanningProblem;

constexpr const char* kClusters[] = {"two_nodes_8_gpus", "sixteen_nodes_25gbit",
                                     "sixteen_nodes_10gbit"};

// Profiles whose batch size neither the file name nor an image Input node gives: PipeDream's
// GNMT profiles (64 sentences; the embedding output is 64 x 24 tokens x 1024 x 4 bytes).
int64_t KnownBatch(const std::string& name) {
  if (name == "gnmt" || name == "gnmt_large") return 64;
  return 0;
}

int64_t GlobalBatch(const std::string& name, int64_t profile_batch) {
  static const std::map<std::string, int64_t> kPaper = {{"vgg-19-pbs-32", 2048},
                                                        {"gnmt-16-pbs-64", 1024},
                                                        {"bert-48-pbs-2", 64},
                                                        {"xlnet-36-pbs-1", 128},
                                                        {"amoeba-36-pbs-1", 128}};
  const auto it = kPaper.find(name);
  return it != kPaper.end() ? it->second : 16 * profile_batch;
}

// A deterministic 1000-layer model: forward 0.5-1.5 ms at batch 32, backward twice that,
// 2-6 MiB of weights and 1-4 MiB of activations per layer.
profile::ChainProfile SyntheticProfile(int layers) {
  profile::ChainProfile p;
  p.source = "synthetic";
  p.batch_size = 32;
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53);
  };
  constexpr double kMiB = 1 << 20;
  for (int i = 0; i < layers; ++i) {
    const double f = 0.5 + next();
    p.names.push_back(absl::StrFormat("layer%d", i));
    p.forward_ms.push_back(f);
    p.backward_ms.push_back(2 * f);
    p.parameter_bytes.push_back(static_cast<int64_t>((2 + 4 * next()) * kMiB));
    p.activation_bytes.push_back(static_cast<int64_t>((1 + 3 * next()) * kMiB));
    p.saved_bytes.push_back(0);
  }
  for (int i = 0; i + 1 < layers; ++i) p.cut_bytes.push_back(p.activation_bytes[i]);
  return p;
}

v1::ClusterTopology SyntheticCluster(int nodes, int per_node) {
  v1::ClusterTopology t;
  t.set_source("synthetic");
  for (int n = 0; n < nodes; ++n) {
    v1::ClusterNode* node = t.add_nodes();
    node->set_name(absl::StrFormat("node%d", n));
    node->set_devices(per_node);
    node->set_device_memory_bytes(int64_t{16} << 30);
  }
  t.set_intra_node_bandwidth_bytes_per_s(130e9);
  t.set_intra_node_latency_ms(0.005);
  t.set_inter_node_bandwidth_bytes_per_s(25e9 / 8);
  t.set_inter_node_latency_ms(0.03);
  return t;
}

struct Result {
  double wall_ms = 0;
  std::string step;  // simulated step ms, "oom", or the error code
};

std::string Describe(const coordinator::HybridPlan& plan) {
  std::string out = absl::StrFormat("M=%d b=%d %s:", plan.micro_batches, plan.micro_batch_size,
                                    plan.placement_policy);
  for (const coordinator::StagePlan& s : plan.stages) {
    out += absl::StrFormat(" [%d-%d]x%d@%d", s.first_layer, s.last_layer, s.devices.size(),
                           s.devices.front());
  }
  return out;
}

bool g_show = false;

Result Time(const std::string& planner, const PlanningProblem& problem) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<coordinator::PlannedJob> job = coordinator::RunPlanner(planner, problem);
  const auto end = std::chrono::steady_clock::now();
  Result r;
  r.wall_ms = std::chrono::duration<double, std::milli>(end - start).count();
  if (job.ok()) {
    r.step = absl::StrFormat("%.1f", job->prediction.step_ms);
    if (g_show) {
      std::fprintf(stderr, "  %-9s %8.1f ms  %s\n", planner.c_str(), job->prediction.step_ms,
                   Describe(job->plan).c_str());
    }
  } else if (job.status().code() == absl::StatusCode::kResourceExhausted) {
    r.step = "oom";
  } else {
    r.step = "error";
    std::fprintf(stderr, "%s on %s: %s\n", planner.c_str(), problem.profile.source.c_str(),
                 std::string(job.status().message()).c_str());
  }
  return r;
}

int Main(int argc, char** argv) {
  std::string root = DAPPLE_SOURCE_ROOT;
  bool quick = false, steps = false;
  std::string show;
  schedule::ScheduleKind kind = schedule::ScheduleKind::kDapple;
  int max_replicas = 0;
  std::vector<std::string> planners = coordinator::PlannerNames();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--steps") {
      steps = true;
    } else if (arg == "--root" && i + 1 < argc) {
      root = argv[++i];
    } else if (arg == "--schedule" && i + 1 < argc) {
      absl::StatusOr<schedule::ScheduleKind> k = schedule::ParseScheduleKind(argv[++i]);
      if (!k.ok()) {
        std::fprintf(stderr, "%s\n", std::string(k.status().message()).c_str());
        return 2;
      }
      kind = *k;
    } else if (arg == "--max-replicas" && i + 1 < argc) {
      max_replicas = std::atoi(argv[++i]);
    } else if (arg == "--show" && i + 1 < argc) {
      show = argv[++i];
    } else if (arg == "--planners" && i + 1 < argc) {
      planners = absl::StrSplit(argv[++i], ',');
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--steps] [--root DIR] [--planners a,b] [--show TEXT] "
                   "[--schedule S] [--max-replicas R]\n",
                   argv[0]);
      return 2;
    }
  }

  std::string header = "| profile | cluster | layers |";
  std::string rule = "|---|---|---:|";
  for (const std::string& p : planners) {
    header += " " + p + " ms |";
    rule += "---:|";
    if (steps) {
      header += " " + p + " step |";
      rule += "---:|";
    }
  }
  std::printf("%s\n%s\n", header.c_str(), rule.c_str());
  auto row = [&](const std::string& name, const std::string& cluster, int layers,
                 const PlanningProblem& problem) {
    std::string line = absl::StrFormat("| %s | %s | %d |", name, cluster, layers);
    if (!show.empty() && !absl::StrContains(name, show)) return;
    g_show = !show.empty();
    if (g_show) std::fprintf(stderr, "%s on %s:\n", name.c_str(), cluster.c_str());
    for (const std::string& planner : planners) {
      const Result r = Time(planner, problem);
      line += absl::StrFormat(" %.0f |", r.wall_ms);
      if (steps) line += " " + r.step + " |";
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };

  if (!quick) {
    std::vector<std::string> files;
    for (const char* dir : {"dapple", "pipedream"}) {
      for (const auto& entry :
           std::filesystem::directory_iterator(root + "/examples/profiles/" + dir)) {
        if (absl::EndsWith(entry.path().string(), ".txt")) files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    std::vector<std::pair<std::string, v1::ClusterTopology>> clusters;
    for (const char* c : kClusters) {
      absl::StatusOr<v1::ClusterTopology> t =
          profile::ReadClusterFile(root + "/examples/clusters/" + c + ".yaml");
      if (!t.ok()) {
        std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
        return 1;
      }
      clusters.emplace_back(c, *t);
    }
    for (const std::string& file : files) {
      const std::string name = std::filesystem::path(file).stem().string();
      absl::StatusOr<v1::ModelProfile> mp = profile::ReadProfileFile(file, KnownBatch(name));
      if (!mp.ok()) {
        std::fprintf(stderr, "%s\n", std::string(mp.status().message()).c_str());
        return 1;
      }
      absl::StatusOr<profile::ChainProfile> chain = profile::ToChain(*mp);
      if (!chain.ok()) {
        std::fprintf(stderr, "%s\n", std::string(chain.status().message()).c_str());
        return 1;
      }
      const std::string dir = std::filesystem::path(file).parent_path().filename().string();
      for (const auto& [cluster, topology] : clusters) {
        PlanningProblem problem;
        problem.profile = *chain;
        problem.topology = topology;
        problem.global_batch = GlobalBatch(name, chain->batch_size);
        problem.optimizer_state_factor = 1.0;
        problem.schedule = kind;
        problem.max_replicas = max_replicas;
        row(dir + "/" + name, cluster, chain->num_layers(), problem);
      }
    }
  }

  PlanningProblem synthetic;
  synthetic.profile = SyntheticProfile(1000);
  synthetic.topology = SyntheticCluster(128, 8);
  synthetic.global_batch = 8192;
  synthetic.optimizer_state_factor = 1.0;
  synthetic.schedule = kind;
  synthetic.max_replicas = max_replicas;
  row("synthetic-1000", "128 nodes x 8", 1000, synthetic);
  return 0;
}

}  // namespace
}  // namespace dapple

int main(int argc, char** argv) { return dapple::Main(argc, argv); }
