#include "coordinator/service/worker_topology.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/profile/cluster_topology.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::WorkerInfo Worker(const std::string& id, const std::string& host, const std::string& device,
                      int64_t memory = 0, bool shared = false,
                      v1::WorkerState state = v1::WORKER_STATE_IDLE) {
  v1::WorkerInfo w;
  w.set_id(id);
  w.set_hostname(host);
  w.add_devices(device);
  w.set_device_memory_bytes(memory);
  w.set_device_memory_shared(shared);
  w.set_state(state);
  return w;
}

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(WorkerTopologyTest, NodesAreHostsAndEachWorkerIsOneDevice) {
  PlanDefaults defaults;
  const std::vector<v1::WorkerInfo> workers = {
      Worker("w-1", "a", "cuda:0", 80 * kGiB),
      Worker("w-2", "b", "cuda:0", 40 * kGiB),
      Worker("w-3", "a", "cuda:1", 70 * kGiB, false, v1::WORKER_STATE_BUSY),
      Worker("w-4", "a", "cuda:2", 80 * kGiB, false, v1::WORKER_STATE_DEAD),  // not live
      Worker("w-5", "b", "cpu", 64 * kGiB, true),                             // not cuda
  };
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "cuda", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nodes_size(), 2);
  EXPECT_EQ(t->nodes(0).name(), "a");
  EXPECT_EQ(t->nodes(0).devices(), 2);
  EXPECT_EQ(t->nodes(0).device_memory_bytes(), 70 * kGiB);  // the smallest of its workers
  EXPECT_EQ(t->nodes(1).name(), "b");
  EXPECT_EQ(t->nodes(1).devices(), 1);
  EXPECT_EQ(t->nodes(1).device_memory_bytes(), 40 * kGiB);
  EXPECT_EQ(t->source(), "3 registered workers (cuda) on 2 hosts");
  EXPECT_DOUBLE_EQ(t->intra_node_bandwidth_bytes_per_s(),
                   defaults.intra_node_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(t->inter_node_bandwidth_bytes_per_s(),
                   defaults.inter_node_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(t->intra_node_latency_ms(), defaults.intra_node_latency_ms);
  EXPECT_DOUBLE_EQ(t->inter_node_latency_ms(), defaults.inter_node_latency_ms);
}

TEST(WorkerTopologyTest, CpuWorkersShareTheirHostsRamAndUnknownMemoryTakesTheDefault) {
  PlanDefaults defaults;
  defaults.device_memory_bytes = 3 * kGiB;
  const std::vector<v1::WorkerInfo> workers = {
      Worker("w-1", "h", "cpu", 32 * kGiB, true),
      Worker("w-2", "h", "cpu", 32 * kGiB, true),
      Worker("w-3", "h", "cpu", 32 * kGiB, true),
      Worker("w-4", "h", "cpu", 32 * kGiB, true),
      Worker("w-5", "g", "cpu", 0),         // reported nothing
      Worker("w-6", "k", "cpu", 5 * kGiB),  // --device-memory: not shared
  };
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "any", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nodes_size(), 3);
  EXPECT_EQ(t->nodes(0).devices(), 4);
  EXPECT_EQ(t->nodes(0).device_memory_bytes(), 8 * kGiB);  // 32 GiB over 4 workers
  EXPECT_EQ(t->nodes(1).device_memory_bytes(), 3 * kGiB);
  EXPECT_EQ(t->nodes(2).device_memory_bytes(), 5 * kGiB);
  EXPECT_EQ(t->source(), "6 registered workers on 3 hosts");
}

TEST(WorkerTopologyTest, WorkersOnOneGpuShareItsComputeAndMemory) {
  PlanDefaults defaults;
  const auto gpu_worker = [](const std::string& id, const std::string& host,
                             const std::string& gpu) {
    v1::WorkerInfo w = Worker(id, host, "cuda:0", 140 * kGiB, /*shared=*/true);
    w.set_physical_device(gpu);
    return w;
  };
  std::vector<v1::WorkerInfo> workers = {
      gpu_worker("w-1", "a", "GPU-1111"),      gpu_worker("w-2", "a", "GPU-2222"),
      gpu_worker("w-3", "a", "GPU-1111"),       // CUDA_VISIBLE_DEVICES says cuda:0 to every one
      gpu_worker("w-4", "b", "GPU-1111"),       // another host: another GPU whatever its name
      Worker("w-5", "a", "cuda:1", 80 * kGiB),  // reported none (an older worker): its own
  };
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "cuda", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nodes_size(), 2);
  EXPECT_THAT(t->nodes(0).device_group(), ::testing::ElementsAre(0, 1, 0, 2));
  EXPECT_EQ(t->nodes(0).device_memory_bytes(), 70 * kGiB);  // GPU-1111's 140 GiB over 2
  EXPECT_THAT(t->nodes(1).device_group(), ::testing::ElementsAre(0));
  EXPECT_EQ(t->nodes(1).device_memory_bytes(), 140 * kGiB);
  EXPECT_EQ(t->source(),
            "5 registered workers (cuda) on 2 hosts; 2 of them share GPUs (one process's kernels "
            "at a time, the memory split)");
  ASSERT_OK(profile::ValidateTopology(*t));

  // No GPU shared: no device groups; an emulated job's stages share nothing either.
  workers.erase(workers.begin() + 2);
  t = TopologyFromWorkers(workers, "cuda", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes(0).device_group_size(), 0);
  EXPECT_EQ(t->nodes(0).device_memory_bytes(), 80 * kGiB);
  EXPECT_EQ(t->source(), "4 registered workers (cuda) on 2 hosts");
  workers.push_back(gpu_worker("w-6", "a", "GPU-2222"));
  t = TopologyFromWorkers(workers, "emulated", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes(0).device_group_size(), 0);
}

// A host's devices are planned each with its own worker's memory (before, all with the smallest:
// a fresh user's --device-memory 13MiB worker beside a 23.5 GiB one read "devices have 13.0 MiB"
// for both); the note says they differ, for a refusal that follows.
TEST(WorkerTopologyTest, AHostWhoseWorkersDifferInMemoryIsNoted) {
  PlanDefaults defaults;
  const std::vector<v1::WorkerInfo> workers = {
      Worker("w-1", "h", "cpu", 24 * kGiB, /*shared=*/true),
      Worker("w-2", "h", "cpu", 13 << 20),  // --device-memory 13MiB
      Worker("w-3", "g", "cpu", 2 * kGiB),
      Worker("w-4", "g", "cpu", 2 * kGiB),
  };
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "cpu", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes(0).device_memory_bytes(), 13 << 20);
  EXPECT_THAT(t->nodes(0).device_memory_per_device(), ::testing::ElementsAre(24 * kGiB, 13 << 20));
  EXPECT_EQ(profile::DeviceMemoryBytes(*t, 0), 24 * kGiB);
  EXPECT_EQ(profile::DeviceMemoryBytes(*t, 1), 13 << 20);
  EXPECT_EQ(profile::DeviceMemoryBytes(*t, 2), 2 * kGiB);
  EXPECT_EQ(t->nodes(1).device_memory_per_device_size(), 0);  // alike: device_memory_bytes
  EXPECT_EQ(t->memory_note(),
            "host h: its workers report from 13.0 MiB (w-2) to 24.0 GiB; each device is planned "
            "with its own");
  t = TopologyFromWorkers({workers[2], workers[3]}, "cpu", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->memory_note(), "");
}

TEST(WorkerTopologyTest, AReportedPhysicalDeviceIsKeptOnlyWhenItLooksLikeOne) {
  EXPECT_EQ(ValidPhysicalDevice("GPU-8c1a3f2e-0012-abcd-ef01-234567890aff"),
            "GPU-8c1a3f2e-0012-abcd-ef01-234567890aff");
  EXPECT_EQ(ValidPhysicalDevice(std::string(64, 'a')), std::string(64, 'a'));
  for (const std::string& bad :
       {std::string(), std::string(65, 'a'), std::string("GPU 1"), std::string("gpu/0"),
        std::string("GPU-1\n"), std::string("\xc3\xa9")}) {
    EXPECT_EQ(ValidPhysicalDevice(bad), "") << bad;
  }
}

TEST(WorkerTopologyTest, ANodesComputeCapacityIsTheSmallestItsWorkersMeasured) {
  PlanDefaults defaults;
  std::vector<v1::WorkerInfo> workers = {
      Worker("w-1", "h", "cpu"), Worker("w-2", "h", "cpu"),  // one host, two measurements
      Worker("w-3", "g", "cpu"),                             // reported none
      Worker("w-4", "k", "cpu"), Worker("w-5", "k", "cpu"),  // one of two reported none
  };
  workers[0].set_host_compute_capacity(1.4);
  workers[1].set_host_compute_capacity(1.2);
  workers[3].set_host_compute_capacity(2.0);
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "any", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nodes_size(), 3);
  EXPECT_DOUBLE_EQ(t->nodes(0).compute_capacity(), 1.2);
  EXPECT_EQ(t->nodes(1).compute_capacity(), 0);  // unknown: each device computes on its own
  EXPECT_EQ(t->nodes(2).compute_capacity(), 0);
}

// Emulated stages wait instead of computing: they never slow each other down on a shared host.
TEST(WorkerTopologyTest, AnEmulatedJobsHostsHaveNoComputeCapacity) {
  std::vector<v1::WorkerInfo> workers = {Worker("w-1", "h", "cpu"), Worker("w-2", "h", "cpu")};
  workers[0].set_host_compute_capacity(1.4);
  workers[1].set_host_compute_capacity(1.2);
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "emulated", PlanDefaults());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nodes_size(), 1);
  EXPECT_EQ(t->nodes(0).compute_capacity(), 0);
  t = TopologyFromWorkers(workers, "cpu", PlanDefaults());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->nodes(0).compute_capacity(), 1.2);
}

void SetLink(v1::WorkerInfo* w, double latency_ms, double bandwidth) {
  w->mutable_loopback_link()->set_latency_ms(latency_ms);
  w->mutable_loopback_link()->set_bandwidth_bytes_per_s(bandwidth);
}

// cpu workers' AllReduces and transfers go over loopback TCP, not the defaults' GPU links: the
// link the hosts measured is planned with, the slowest of them.
TEST(WorkerTopologyTest, TheIntraNodeLinkIsTheSlowestMeasuredWhenEveryWorkerMeasuredOne) {
  PlanDefaults defaults;
  std::vector<v1::WorkerInfo> workers = {Worker("w-1", "h", "cpu"), Worker("w-2", "h", "cpu"),
                                         Worker("w-3", "g", "cpu")};
  SetLink(&workers[0], 0.05, 9e8);
  SetLink(&workers[1], 0.08, 4e8);
  SetLink(&workers[2], 0.02, 2e9);
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "cpu", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->intra_node_bandwidth_bytes_per_s(), 4e8);
  EXPECT_DOUBLE_EQ(t->intra_node_latency_ms(), 0.08);
  EXPECT_EQ(t->source(),
            "3 registered workers (cpu) on 2 hosts; intra-node link measured: 400 MB/s, 0.08 ms");
  // Between hosts nothing was measured: the defaults.
  EXPECT_DOUBLE_EQ(t->inter_node_bandwidth_bytes_per_s(),
                   defaults.inter_node_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(t->inter_node_latency_ms(), defaults.inter_node_latency_ms);

  // A worker without a measurement (a cuda worker, an older worker) or with one no link has:
  // the defaults, as before.
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<v1::WorkerInfo> mixed = workers;
    if (variant == 0) mixed.push_back(Worker("w-4", "g", "cpu"));
    if (variant == 1) SetLink(&mixed[2], 0.02, 0);
    t = TopologyFromWorkers(mixed, "any", defaults);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_DOUBLE_EQ(t->intra_node_bandwidth_bytes_per_s(),
                     defaults.intra_node_bandwidth_bytes_per_s)
        << variant;
    EXPECT_DOUBLE_EQ(t->intra_node_latency_ms(), defaults.intra_node_latency_ms) << variant;
    EXPECT_EQ(t->source().find("measured"), std::string::npos) << t->source();
  }
  // Emulated jobs measure schedules on the defaults' links.
  t = TopologyFromWorkers(workers, "emulated", defaults);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->intra_node_bandwidth_bytes_per_s(),
                   defaults.intra_node_bandwidth_bytes_per_s);
}

TEST(WorkerTopologyTest, AReportedLinkIsValidOnlyWithinAClusterFilesBounds) {
  v1::LinkMeasurement link;
  EXPECT_FALSE(ValidLink(link));  // no bandwidth
  link.set_bandwidth_bytes_per_s(1e9);
  EXPECT_TRUE(ValidLink(link));  // latency 0 is a link's
  for (const auto& [latency, bandwidth] :
       {std::pair{-0.1, 1e9}, std::pair{1e4 + 1, 1e9}, std::pair{std::nan(""), 1e9},
        std::pair{0.1, 999.0}, std::pair{0.1, 1e13 * 2}, std::pair{0.1, std::nan("")}}) {
    link.set_latency_ms(latency);
    link.set_bandwidth_bytes_per_s(bandwidth);
    EXPECT_FALSE(ValidLink(link)) << latency << " " << bandwidth;
  }
}

TEST(WorkerTopologyTest, NoFittingWorkerTellsToPassACluster) {
  const std::vector<v1::WorkerInfo> workers = {Worker("w-1", "a", "cpu")};
  absl::StatusOr<v1::ClusterTopology> t = TopologyFromWorkers(workers, "cuda", PlanDefaults());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(),
            "no registered workers with cuda devices to plan on: start workers, or give a "
            "cluster file (dapplectl plan --cluster CLUSTER.yaml)");
  t = TopologyFromWorkers({}, "any", PlanDefaults());
  EXPECT_EQ(t.status().message(),
            "no registered workers to plan on: start workers, or give a cluster file "
            "(dapplectl plan --cluster CLUSTER.yaml)");
}

TEST(WorkerTopologyTest, DeviceTypeAndKind) {
  const v1::WorkerInfo cpu = Worker("w-1", "a", "cpu");
  const v1::WorkerInfo gpu = Worker("w-2", "a", "cuda:3");
  EXPECT_TRUE(WorkerFitsDeviceType("any", cpu));
  EXPECT_TRUE(WorkerFitsDeviceType("", gpu));
  EXPECT_TRUE(WorkerFitsDeviceType("cpu", cpu));
  EXPECT_FALSE(WorkerFitsDeviceType("cpu", gpu));
  EXPECT_TRUE(WorkerFitsDeviceType("cuda", gpu));
  EXPECT_FALSE(WorkerFitsDeviceType("cuda", cpu));
  EXPECT_EQ(JobDeviceKind("cuda", {}), "cuda");
  EXPECT_EQ(JobDeviceKind("cpu", {gpu}), "cpu");
  EXPECT_EQ(JobDeviceKind("any", {}), "cpu");
  EXPECT_EQ(JobDeviceKind("any", {gpu}), "cuda");
  EXPECT_EQ(JobDeviceKind("any", {gpu, cpu}), "cpu");
}

}  // namespace
}  // namespace dapple::coordinator
