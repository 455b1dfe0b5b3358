// Tests of the planners (planners.h): layer assignment, errors, limits, each planner's shape,
// PipeDream's dynamic program on hand-checkable cases and against plain enumeration, and the
// building blocks (placement policies, micro-batch sizes, balanced ranges, latency model).
#include "coordinator/planner/planners.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/baseline_planners.h"
#include "coordinator/planner/cost_model.h"
#include "coordinator/planner/dapple_planner.h"
#include "coordinator/planner/partition.h"
#include "coordinator/planner/pipedream_planner.h"
#include "coordinator/planner/plan_simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// A chain profile at batch 8: forward f[i], backward 2 f[i], the given weights and activations.
profile::ChainProfile Chain(const std::vector<double>& forward_ms,
                            const std::vector<int64_t>& parameter_bytes,
                            const std::vector<int64_t>& activation_bytes) {
  profile::ChainProfile p;
  p.source = "test";
  p.batch_size = 8;
  for (size_t i = 0; i < forward_ms.size(); ++i) {
    p.names.push_back(absl::StrCat("layer", i));
    p.forward_ms.push_back(forward_ms[i]);
    p.backward_ms.push_back(2 * forward_ms[i]);
    p.parameter_bytes.push_back(parameter_bytes[i]);
    p.activation_bytes.push_back(activation_bytes[i]);
    p.saved_bytes.push_back(0);
  }
  for (size_t i = 0; i + 1 < forward_ms.size(); ++i) p.cut_bytes.push_back(activation_bytes[i]);
  return p;
}

profile::ChainProfile EqualChain(int layers) {
  return Chain(std::vector<double>(layers, 1.0), std::vector<int64_t>(layers, kMiB),
               std::vector<int64_t>(layers, kMiB));
}

v1::ClusterTopology Cluster(int nodes, int per_node, int64_t memory = 16 * kGiB,
                            double intra = 100e9, double inter = 10e9) {
  v1::ClusterTopology t;
  t.set_source("test cluster");
  for (int n = 0; n < nodes; ++n) {
    v1::ClusterNode* node = t.add_nodes();
    node->set_name(absl::StrCat("node", n));
    node->set_devices(per_node);
    node->set_device_memory_bytes(memory);
  }
  t.set_intra_node_bandwidth_bytes_per_s(intra);
  t.set_intra_node_latency_ms(0.005);
  t.set_inter_node_bandwidth_bytes_per_s(inter);
  t.set_inter_node_latency_ms(0.02);
  return t;
}

PlanningProblem Problem(profile::ChainProfile profile, v1::ClusterTopology topology,
                        int64_t global_batch = 64) {
  PlanningProblem problem;
  problem.profile = std::move(profile);
  problem.topology = std::move(topology);
  problem.global_batch = global_batch;
  problem.optimizer_state_factor = 1.0;
  return problem;
}

// Every layer in exactly one stage, in order; devices distinct, usable; M consistent.
void ExpectWellFormed(const PlanningProblem& problem, const PlannedJob& job,
                      const std::string& what) {
  const HybridPlan& plan = job.plan;
  ASSERT_FALSE(plan.stages.empty()) << what;
  int next = 0;
  std::set<int> devices;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& st = plan.stages[s];
    EXPECT_EQ(st.first_layer, next) << what << " stage " << s;
    EXPECT_LE(st.first_layer, st.last_layer) << what << " stage " << s;
    EXPECT_FALSE(st.devices.empty()) << what << " stage " << s;
    for (int d : st.devices) {
      EXPECT_TRUE(devices.insert(d).second) << what << " device " << d << " used twice";
      EXPECT_GE(d, 0) << what;
      EXPECT_LT(d, UsableDeviceCount(problem)) << what;
    }
    EXPECT_EQ(plan.micro_batch_size % static_cast<int64_t>(st.devices.size()), 0)
        << what << " stage " << s << ": micro-batch " << plan.micro_batch_size
        << " does not split over " << st.devices.size() << " replicas";
    next = st.last_layer + 1;
  }
  EXPECT_EQ(next, problem.profile.num_layers()) << what;
  EXPECT_EQ(plan.micro_batch_size * plan.micro_batches, problem.global_batch) << what;
  EXPECT_TRUE(job.prediction.fits_memory) << what;
  EXPECT_GT(job.prediction.step_ms, 0) << what;
  EXPECT_EQ(job.prediction.stages.size(), plan.stages.size()) << what;
}

std::vector<int> LayerCounts(const HybridPlan& plan) {
  std::vector<int> counts;
  for (const StagePlan& st : plan.stages) counts.push_back(st.last_layer - st.first_layer + 1);
  return counts;
}

TEST(PlannerNamesTest, ListsEveryPlanner) {
  EXPECT_EQ(PlannerNames(),
            (std::vector<std::string>{"dapple", "pipedream", "dp", "uniform", "balanced"}));
}

TEST(RunPlannerTest, UnknownNameListsTheKnownOnes) {
  const PlanningProblem problem = Problem(EqualChain(4), Cluster(1, 2));
  absl::StatusOr<PlannedJob> job = RunPlanner("foo", problem);
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "planner 'foo' is unknown; known: dapple, pipedream, dp, uniform, balanced, "
            "pipedream-code");
}

// Equal layers: fixed P gives stages that differ by at most one layer (one device per stage, so
// DAPPLE's replicas cannot skew the split).
TEST(RunPlannerTest, EqualLayersGiveStagesWithinOneLayer) {
  for (const auto& [layers, stages] : std::vector<std::pair<int, int>>{{30, 4}, {38, 8}, {61, 8}}) {
    for (const char* name : {"uniform", "balanced", "dapple"}) {
      PlanningProblem problem = Problem(EqualChain(layers), Cluster(1, 8), 64);
      problem.num_stages = stages;
      problem.max_replicas = 1;
      absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
      const std::string what = absl::StrCat(name, " L=", layers, " P=", stages);
      ASSERT_TRUE(job.ok()) << what << ": " << job.status();
      ExpectWellFormed(problem, *job, what);
      const std::vector<int> counts = LayerCounts(job->plan);
      ASSERT_EQ(static_cast<int>(counts.size()), stages) << what;
      const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
      EXPECT_LE(*hi - *lo, 1) << what << ": " << ::testing::PrintToString(counts);
    }
  }
}

TEST(RunPlannerTest, UniformIsPartitionUniformOneDevicePerStage) {
  PlanningProblem problem = Problem(EqualChain(30), Cluster(2, 4), 64);
  problem.num_stages = 4;
  absl::StatusOr<PlannedJob> job = RunPlanner("uniform", problem);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::vector<v1::StageRange>> expected = PartitionUniform(30, 4);
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(job->plan.stages.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(job->plan.stages[s].first_layer, (*expected)[s].first_layer()) << s;
    EXPECT_EQ(job->plan.stages[s].last_layer, (*expected)[s].last_layer()) << s;
    EXPECT_EQ(job->plan.stages[s].devices, std::vector<int>{s}) << s;
  }
  EXPECT_EQ(job->plan.planner, "uniform");
}

TEST(RunPlannerTest, DataParallelUsesEveryUsableDeviceForOneStage) {
  const PlanningProblem problem = Problem(EqualChain(10), Cluster(2, 4), 64);
  absl::StatusOr<PlannedJob> job = RunPlanner("dp", problem);
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectWellFormed(problem, *job, "dp");
  ASSERT_EQ(job->plan.stages.size(), 1u);
  EXPECT_EQ(job->plan.stages[0].devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_GT(job->prediction.stages[0].allreduce_ms, 0);
}

// Balanced: the bottleneck equals the optimum of partition.h's exact DP, one device per stage.
TEST(RunPlannerTest, BalancedMinimisesTheSlowestStage) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> forward(20);
    for (double& f : forward) f = cost(rng);
    PlanningProblem problem =
        Problem(Chain(forward, std::vector<int64_t>(20, kMiB), std::vector<int64_t>(20, kMiB)),
                Cluster(1, 8), 64);
    problem.num_stages = 5;
    absl::StatusOr<PlannedJob> job = RunPlanner("balanced", problem);
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<double> costs;
    for (double f : forward) costs.push_back(3 * f);
    absl::StatusOr<std::vector<v1::StageRange>> exact = PartitionBalanced(costs, 5);
    ASSERT_TRUE(exact.ok());
    auto bottleneck = [&](const std::vector<std::pair<int, int>>& ranges) {
      double worst = 0;
      for (const auto& [first, last] : ranges) {
        double c = 0;
        for (int i = first; i <= last; ++i) c += costs[i];
        worst = std::max(worst, c);
      }
      return worst;
    };
    std::vector<std::pair<int, int>> got, want;
    for (const StagePlan& st : job->plan.stages) {
      got.emplace_back(st.first_layer, st.last_layer);
      EXPECT_EQ(st.devices.size(), 1u);
    }
    for (const v1::StageRange& r : *exact) want.emplace_back(r.first_layer(), r.last_layer());
    EXPECT_NEAR(bottleneck(got), bottleneck(want), 1e-9 * bottleneck(want)) << "trial " << trial;
  }
}

TEST(RunPlannerTest, EveryPlannerCoversEveryLayerOnRandomProfiles) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> layers_dist(1, 40);
  std::uniform_real_distribution<double> ms(0.01, 4.0);
  std::uniform_int_distribution<int64_t> bytes(0, 64 * kMiB);
  const std::vector<v1::ClusterTopology> clusters = {Cluster(1, 1), Cluster(1, 4), Cluster(2, 4),
                                                     Cluster(4, 1, 16 * kGiB, 12e9, 3e9)};
  for (int trial = 0; trial < 12; ++trial) {
    const int L = layers_dist(rng);
    std::vector<double> forward(L);
    std::vector<int64_t> params(L), acts(L);
    for (int i = 0; i < L; ++i) {
      forward[i] = ms(rng);
      params[i] = bytes(rng);
      acts[i] = bytes(rng);
    }
    const PlanningProblem problem =
        Problem(Chain(forward, params, acts), clusters[trial % clusters.size()], 32);
    for (const std::string& name : PlannerNames()) {
      const std::string what = absl::StrCat(name, " trial ", trial, " L=", L);
      absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
      ASSERT_TRUE(job.ok()) << what << ": " << job.status();
      ExpectWellFormed(problem, *job, what);
      EXPECT_EQ(job->plan.planner, name) << what;
      // The returned prediction is the simulator's for that plan.
      absl::StatusOr<Prediction> again = SimulatePlan(problem, job->plan, problem.schedule);
      ASSERT_TRUE(again.ok()) << what;
      EXPECT_DOUBLE_EQ(again->step_ms, job->prediction.step_ms) << what;
    }
  }
}

TEST(RunPlannerTest, DappleIsNeverSlowerThanDataParallelOrUniform) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> ms(0.05, 3.0);
  std::uniform_int_distribution<int64_t> bytes(kMiB, 256 * kMiB);
  for (int trial = 0; trial < 6; ++trial) {
    const int L = 12 + trial * 3;
    std::vector<double> forward(L);
    std::vector<int64_t> params(L), acts(L);
    for (int i = 0; i < L; ++i) {
      forward[i] = ms(rng);
      params[i] = bytes(rng);
      acts[i] = bytes(rng) / 8;
    }
    const PlanningProblem problem =
        Problem(Chain(forward, params, acts),
                trial % 2 ? Cluster(2, 4) : Cluster(8, 1, 16 * kGiB, 12e9, 3e9), 128);
    absl::StatusOr<PlannedJob> dapple = RunPlanner("dapple", problem);
    ASSERT_TRUE(dapple.ok()) << dapple.status();
    for (const char* other : {"dp", "uniform"}) {
      absl::StatusOr<PlannedJob> job = RunPlanner(other, problem);
      ASSERT_TRUE(job.ok()) << other << ": " << job.status();
      EXPECT_LE(dapple->prediction.step_ms, job->prediction.step_ms)
          << "trial " << trial << " vs " << other;
    }
  }
}

TEST(RunPlannerTest, FewerLayersThanStagesIsRejectedWithTheRule) {
  PlanningProblem problem = Problem(EqualChain(3), Cluster(1, 8));
  problem.num_stages = 4;
  for (const std::string& name : PlannerNames()) {
    absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
    ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(job.status().message(),
              "the model has 3 layers but the plan has 4 stages: every stage needs at least one "
              "layer")
        << name;
  }
}

TEST(RunPlannerTest, MoreStagesThanDevicesIsRejected) {
  PlanningProblem problem = Problem(EqualChain(10), Cluster(1, 2));
  problem.num_stages = 3;
  absl::StatusOr<PlannedJob> job = RunPlanner("uniform", problem);
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("3 stages but only 2 devices are usable"));
}

TEST(RunPlannerTest, BadBatchSizesAreRejected) {
  PlanningProblem problem = Problem(EqualChain(4), Cluster(1, 2), 0);
  EXPECT_THAT(std::string(RunPlanner("dapple", problem).status().message()),
              HasSubstr("global_batch is 0: it must be > 0"));
  problem.global_batch = 64;
  problem.micro_batch_size = 5;
  absl::StatusOr<PlannedJob> job = RunPlanner("dp", problem);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("micro_batch_size 5 does not divide global_batch 64"));
  problem.profile = profile::ChainProfile{};
  problem.profile.batch_size = 8;
  EXPECT_THAT(std::string(RunPlanner("uniform", problem).status().message()),
              HasSubstr("has no layers"));
}

// Two layers of 6 GiB of weights: with gradients and momentum a stage of one layer needs
// 18 GiB (dp's single stage 36 GiB) on 16 GiB devices.
TEST(RunPlannerTest, AModelThatFitsNoPlanIsRejectedWithTheMemoryItNeeds) {
  const PlanningProblem problem =
      Problem(Chain({1.0, 1.0}, {6 * kGiB, 6 * kGiB}, {kMiB, kMiB}), Cluster(2, 2), 16);
  for (const std::string& name : PlannerNames()) {
    absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
    ASSERT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted)
        << name << ": " << job.status();
    const std::string message(job.status().message());
    const std::string needs = name == "dp" ? "36.0 GiB" : "18.0 GiB";
    // Two stages: stage 0's send and receive buffers; one stage (dp): the last stage's
    // dL/dlogits with its activations, the backward's buffer between its two layers
    // (common/memory_model.h).
    const std::string parts = name == "dp" ? "activations 384 KiB, buffers 128 KiB"
                                           : "activations 256 KiB, buffers 4.00 MiB";
    EXPECT_THAT(message, HasSubstr(absl::StrCat("planner ", name, ": "))) << message;
    EXPECT_THAT(message, HasSubstr(absl::StrCat("needs ", needs, " on a device (stage ")))
        << message;
    EXPECT_THAT(message, HasSubstr(absl::StrCat(": weights ", needs, ", ", parts,
                                                ") but devices have 16.0 GiB")))
        << message;
  }
}

// Sizes that differ never print the same (they used to read "needs 1.0 GiB ... but devices have
// 1.0 GiB"); the stage named is the one that overflows its devices the most.
TEST(MemoryErrorTest, TwoDifferentSizesNeverPrintTheSame) {
  PlanningProblem problem = Problem(EqualChain(2), Cluster(1, 2, kGiB), 16);
  problem.topology.mutable_nodes(0)->set_devices(1);
  *problem.topology.add_nodes() = problem.topology.nodes(0);
  problem.topology.mutable_nodes(1)->set_name("node1");
  problem.topology.mutable_nodes(1)->set_device_memory_bytes(2 * kGiB);
  HybridPlan plan;
  plan.planner = "uniform";
  plan.stages = {StagePlan{0, 0, {0}}, StagePlan{1, 1, {1}}};
  Prediction prediction;
  prediction.stages.resize(2);
  const auto message = [&](int64_t weights, int64_t activations) {
    prediction.stages[0].weight_bytes = weights;
    prediction.stages[0].activation_bytes = activations;
    prediction.stages[0].peak_memory_bytes = weights + activations;
    // Stage 1 needs more but its device has 2 GiB: stage 0 overflows more.
    prediction.stages[1].peak_memory_bytes = 2 * kGiB - 1;
    return std::string(MemoryError(problem, plan, prediction).message());
  };
  EXPECT_EQ(message(kGiB, 30 * kMiB),
            "planner uniform: no plan fits device memory: the best needs 1.03 GiB on a device "
            "(stage 0: weights 1.00 GiB, activations 30.0 MiB) but devices have 1.00 GiB");
  EXPECT_EQ(message(kGiB, kGiB / 10000),
            "planner uniform: no plan fits device memory: the best needs 1.0001 GiB on a device "
            "(stage 0: weights 1.00 GiB, activations 105 KiB) but devices have 1.0000 GiB");
  EXPECT_EQ(message(kGiB, 1),
            "planner uniform: no plan fits device memory: the best needs 1.00 GiB (1073741825 B) "
            "on a device (stage 0: weights 1.00 GiB, activations 1 B) but devices have 1.00 GiB "
            "(1073741824 B)");
}

TEST(RunPlannerTest, MaxReplicasAndMaxDevicesAreHonoured) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> ms(0.1, 2.0);
  std::vector<double> forward(24);
  for (double& f : forward) f = ms(rng);
  const profile::ChainProfile chain =
      Chain(forward, std::vector<int64_t>(24, 8 * kMiB), std::vector<int64_t>(24, 4 * kMiB));
  for (const auto& [max_replicas, max_devices] :
       std::vector<std::pair<int, int>>{{1, 0}, {2, 0}, {0, 5}, {1, 3}, {2, 6}}) {
    PlanningProblem problem = Problem(chain, Cluster(2, 4), 64);
    problem.max_replicas = max_replicas;
    problem.max_devices = max_devices;
    for (const std::string& name : PlannerNames()) {
      const std::string what =
          absl::StrCat(name, " max_replicas=", max_replicas, " max_devices=", max_devices);
      absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
      const int usable = max_devices > 0 ? max_devices : 8;
      if (name == "dp" && max_replicas > 0 && max_replicas < usable) {
        ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << what;
        EXPECT_THAT(std::string(job.status().message()), HasSubstr("max_replicas is")) << what;
        continue;
      }
      ASSERT_TRUE(job.ok()) << what << ": " << job.status();
      ExpectWellFormed(problem, *job, what);
      for (const StagePlan& st : job->plan.stages) {
        if (max_replicas > 0) {
          EXPECT_LE(static_cast<int>(st.devices.size()), max_replicas) << what;
        }
        for (int d : st.devices) EXPECT_LT(d, usable) << what;
      }
    }
  }
}

TEST(RunPlannerTest, FixedMicroBatchSizeIsKept) {
  PlanningProblem problem = Problem(EqualChain(12), Cluster(1, 4), 64);
  problem.micro_batch_size = 8;
  for (const std::string& name : PlannerNames()) {
    absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    EXPECT_EQ(job->plan.micro_batch_size, 8) << name;
    EXPECT_EQ(job->plan.micro_batches, 8) << name;
  }
}

// ---- PipeDream ------------------------------------------------------------------------------

// Three layers of 4, 4 and 8 ms (forward + backward), 400 MB of weights on the last, on one node
// of two devices at 10 GB/s (1e7 bytes per ms): one stage on one device takes 16; replicated
// twice, max(16, 4 * 1 * 4e8 / (2 * 1e7)) / 2 = 40; a cut after layer 0 gives max(4, 0.2, 12) =
// 12; a cut after layer 1 gives max(8, 2 * 1e6 / 1e7 = 0.2, 8) = 8, the optimum.
TEST(PipeDreamTest, HandCheckedThreeLayers) {
  PlanningProblem problem = Problem(
      Chain({4.0 / 3, 4.0 / 3, 8.0 / 3}, {0, 0, 400'000'000}, {1'000'000, 1'000'000, 1'000'000}),
      Cluster(1, 2, 16 * kGiB, 1e10, 1e9), 16);
  absl::StatusOr<PipeDreamSolution> solution = SolvePipeDream(problem);
  ASSERT_TRUE(solution.ok()) << solution.status();
  EXPECT_NEAR(solution->slowest_stage_ms, 8.0, 1e-9);
  ASSERT_EQ(solution->stages.size(), 2u);
  EXPECT_EQ(solution->stages[0].first_layer, 0);
  EXPECT_EQ(solution->stages[0].last_layer, 1);
  EXPECT_EQ(solution->stages[0].replicas, 1);
  EXPECT_EQ(solution->stages[1].first_layer, 2);
  EXPECT_EQ(solution->stages[1].replicas, 1);
  // Without weights replication is free: two replicas of everything take 16 / 2 = 8 as well,
  // and a faster single stage wins once the layers are lopsided.
  problem.profile.parameter_bytes = {0, 0, 0};
  problem.profile.forward_ms = {1.0 / 3, 1.0 / 3, 10.0 / 3};
  problem.profile.backward_ms = {2.0 / 3, 2.0 / 3, 20.0 / 3};
  solution = SolvePipeDream(problem);
  ASSERT_TRUE(solution.ok());
  EXPECT_NEAR(solution->slowest_stage_ms, 6.0, 1e-9);  // (1 + 1 + 10) / 2
  ASSERT_EQ(solution->stages.size(), 1u);
  EXPECT_EQ(solution->stages[0].replicas, 2);
}

TEST(PipeDreamTest, PlanPlacesStagesOnContiguousDevices) {
  PlanningProblem problem = Problem(
      Chain({4.0 / 3, 4.0 / 3, 8.0 / 3}, {0, 0, 400'000'000}, {1'000'000, 1'000'000, 1'000'000}),
      Cluster(1, 2, 16 * kGiB, 1e10, 1e9), 16);
  absl::StatusOr<PlannedJob> job = RunPlanner("pipedream", problem);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->plan.stages.size(), 2u);
  EXPECT_EQ(job->plan.stages[0].devices, std::vector<int>{0});
  EXPECT_EQ(job->plan.stages[1].devices, std::vector<int>{1});
}

// The skipping of split points never changes the optimum (one level, two levels, nodes of one
// device, fixed P, replica limits).
TEST(PipeDreamTest, SkippingSplitsMatchesFullEnumeration) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> ms(0.01, 3.0);
  std::uniform_int_distribution<int64_t> bytes(0, 512 * kMiB);
  const std::vector<v1::ClusterTopology> clusters = {
      Cluster(1, 8), Cluster(2, 4, 16 * kGiB, 100e9, 3e9), Cluster(6, 1, 16 * kGiB, 12e9, 1e9),
      Cluster(3, 2, 16 * kGiB, 50e9, 2e9)};
  for (int trial = 0; trial < 16; ++trial) {
    const int L = 2 + trial * 2;
    std::vector<double> forward(L);
    std::vector<int64_t> params(L), acts(L);
    for (int i = 0; i < L; ++i) {
      forward[i] = ms(rng);
      params[i] = bytes(rng);
      acts[i] = bytes(rng) / 16;
    }
    PlanningProblem problem =
        Problem(Chain(forward, params, acts), clusters[trial % clusters.size()], 48);
    if (trial % 5 == 3) problem.max_replicas = 2;
    if (trial % 7 == 4) problem.num_stages = std::min(L, 3);
    absl::StatusOr<PipeDreamSolution> fast = SolvePipeDream(problem);
    absl::StatusOr<PipeDreamSolution> full = SolvePipeDreamReference(problem);
    ASSERT_TRUE(fast.ok() && full.ok()) << trial;
    EXPECT_DOUBLE_EQ(fast->slowest_stage_ms, full->slowest_stage_ms) << "trial " << trial;
    int next = 0;
    for (const PipeDreamStage& s : fast->stages) {
      EXPECT_EQ(s.first_layer, next) << trial;
      EXPECT_GE(s.replicas, 1);
      if (problem.max_replicas > 0) {
        EXPECT_LE(s.replicas, problem.max_replicas) << trial;
      }
      next = s.last_layer + 1;
    }
    EXPECT_EQ(next, L) << trial;
    if (problem.num_stages > 0) {
      EXPECT_EQ(static_cast<int>(fast->stages.size()), problem.num_stages) << trial;
    }
  }
}

TEST(PipeDreamTest, StraightPipelineWithOneReplica) {
  PlanningProblem problem = Problem(EqualChain(16), Cluster(2, 4), 64);
  problem.max_replicas = 1;
  absl::StatusOr<PipeDreamSolution> solution = SolvePipeDream(problem);
  ASSERT_TRUE(solution.ok());
  for (const PipeDreamStage& s : solution->stages) EXPECT_EQ(s.replicas, 1);
}

// ---- Building blocks ----------------------------------------------------------------------

TEST(PlaceStagesTest, PoliciesOnTwoNodesOfFour) {
  const v1::ClusterTopology t = Cluster(2, 4);
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(PlaceStages(t, 8, {2, 2, 2}, PlacementPolicy::kFreshFirst),
            (V{{0, 1}, {4, 5}, {2, 3}}));
  EXPECT_EQ(PlaceStages(t, 8, {2, 2, 2}, PlacementPolicy::kAppendFirst),
            (V{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(PlaceStages(t, 8, {2, 2, 2}, PlacementPolicy::kScatterFirst),
            (V{{0, 4}, {1, 5}, {2, 6}}));
  // Only the first 6 devices are usable: node 1 has two.
  EXPECT_EQ(PlaceStages(t, 6, {3, 3}, PlacementPolicy::kFreshFirst), (V{{0, 1, 2}, {4, 5, 3}}));
  EXPECT_EQ(PlaceStages(t, 6, {4, 2}, PlacementPolicy::kAppendFirst), (V{{0, 1, 2, 3}, {4, 5}}));
}

TEST(MicroBatchSizesTest, DivisorsThatSplitOverTheReplicas) {
  PlanningProblem problem = Problem(EqualChain(4), Cluster(1, 4), 48);
  EXPECT_EQ(MicroBatchSizes(problem, {1}),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}));
  EXPECT_EQ(MicroBatchSizes(problem, {2, 4}), (std::vector<int64_t>{4, 8, 12, 16, 24, 48}));
  EXPECT_EQ(MicroBatchSizes(problem, {3, 2}), (std::vector<int64_t>{6, 12, 24, 48}));
  problem.micro_batch_size = 12;
  EXPECT_EQ(MicroBatchSizes(problem, {4}), (std::vector<int64_t>{12}));
  EXPECT_TRUE(MicroBatchSizes(problem, {8}).empty());
}

// A batch norm over one value per channel per sample: a replicated stage's replicas need 2 rows
// each, a stage of one replica still any.
TEST(MicroBatchSizesTest, ReplicasKeepTheRowsABatchNormNeeds) {
  PlanningProblem problem = Problem(EqualChain(4), Cluster(1, 4), 48);
  problem.min_replica_rows = 2;
  EXPECT_EQ(MicroBatchSizes(problem, {1}),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}));
  EXPECT_EQ(MicroBatchSizes(problem, {1, 4}), (std::vector<int64_t>{8, 12, 16, 24, 48}));
  problem.micro_batch_size = 4;
  EXPECT_EQ(MicroBatchSizes(problem, {2}), (std::vector<int64_t>{4}));
  EXPECT_TRUE(MicroBatchSizes(problem, {4}).empty());
  // 1F1B-RR never splits a micro-batch.
  problem.schedule = schedule::ScheduleKind::kPipeDream;
  EXPECT_EQ(MicroBatchSizes(problem, {4}), (std::vector<int64_t>{4}));
  // The simulator refuses a plan that splits one row to a replica.
  problem.schedule = schedule::ScheduleKind::kDapple;
  HybridPlan plan;
  plan.micro_batch_size = 4;
  plan.micro_batches = 12;
  plan.stages = {StagePlan{0, 3, {0, 1, 2, 3}}};
  absl::StatusOr<Prediction> prediction = SimulatePlan(problem, plan, problem.schedule);
  ASSERT_FALSE(prediction.ok());
  EXPECT_EQ(prediction.status().message(),
            "micro_batch_size 4 gives each of stage 0's 4 replicas 1 row of a micro-batch, but "
            "the model's batch norm needs at least 2 on each: over one value per channel its "
            "output is its bias whatever the input");
}

// PipeDream's dynamic programs grow with layers x layers (x devices for its code's): a profile of
// 15000 layers took a coordinator to 2 GB (a security review). Beyond kMaxPlannerTableBytes the
// planner refuses before it allocates, naming the sizes; smaller problems still plan.
TEST(PlannerTableLimitTest, PipeDreamPlannersRefuseTablesBeyondTheLimit) {
  const PlanningProblem big = Problem(EqualChain(15000), Cluster(2, 8), 256);
  absl::StatusOr<PlannedJob> job = RunPlanner("pipedream", big);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "planner pipedream: 15000 layers on 16 devices (2 nodes) need tables of 1.7 GiB, more "
            "than the planners' limit of 512 MiB: use planner dapple, or a profile of fewer "
            "layers");
  PlanningProblem code = Problem(EqualChain(2000), Cluster(1, 8), 256);
  code.schedule = schedule::ScheduleKind::kPipeDream;
  job = RunPlanner("pipedream-code", code);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(std::string(job.status().message()),
            "planner pipedream-code: 2000 layers on up to 8 machines need a table of 1.0 GiB "
            "(layers x layers x machines), more than the planners' limit of 512 MiB: use planner "
            "pipedream or dapple, or a profile of fewer layers");
  EXPECT_TRUE(RunPlanner("pipedream", Problem(EqualChain(2000), Cluster(2, 8), 256)).ok());
}

TEST(BalancedRangesTest, OptimalAndBalanced) {
  absl::StatusOr<std::vector<std::pair<int, int>>> r =
      BalancedRanges(std::vector<double>(30, 1), 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::pair<int, int>>{{0, 7}, {8, 14}, {15, 22}, {23, 29}}));
  r = BalancedRanges({5, 1, 1, 1, 1, 1}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::pair<int, int>>{{0, 0}, {1, 5}}));
  EXPECT_THAT(std::string(BalancedRanges({1, 1}, 3).status().message()),
              HasSubstr("the model has 2 layers but the plan has 3 stages"));
  EXPECT_THAT(std::string(BalancedRanges({1, -1}, 1).status().message()),
              HasSubstr("costs must be >= 0"));
}

TEST(CandidateDepthsTest, AllSmallDepthsThenGeometric) {
  EXPECT_EQ(CandidateDepths(5), (std::vector<int>{1, 2, 3, 4, 5}));
  const std::vector<int> big = CandidateDepths(1000);
  EXPECT_EQ(big.front(), 1);
  EXPECT_EQ(big.back(), 1000);
  EXPECT_EQ(big[63], 64);
  EXPECT_TRUE(std::is_sorted(big.begin(), big.end()));
  EXPECT_LT(big.size(), 100u);
}

// Equal stages without communication: the model gives (M + P - 1)(F + B), the simulator's
// closed form for dapple, and both agree.
TEST(PlanEstimatorTest, EqualStagesMatchTheClosedFormAndTheSimulator) {
  PlanningProblem problem = Problem(EqualChain(8), Cluster(1, 4), 64);
  problem.profile.cut_bytes.assign(7, 0);
  HybridPlan plan;
  for (int s = 0; s < 4; ++s) {
    StagePlan st;
    st.first_layer = 2 * s;
    st.last_layer = 2 * s + 1;
    st.devices = {s};
    plan.stages.push_back(st);
  }
  plan.micro_batch_size = 8;
  plan.micro_batches = 8;
  const PlanEstimator estimator(problem);
  const LatencyEstimate e = estimator.Latency(plan);
  const double cycle = 2 * (1.0 + 2.0);  // two layers of forward 1 + backward 2 at batch 8
  // Then the job-wide GLOBAL_NORM's AllGather among the 4 ranks.
  const double norm = GlobalNormMs(problem, plan, schedule::ScheduleKind::kDapple);
  EXPECT_GT(norm, 0.0);
  EXPECT_NEAR(e.step_ms, (8 + 4 - 1) * cycle + norm, 1e-9);
  EXPECT_EQ(e.pivot_stage, 3);
  absl::StatusOr<Prediction> sim = SimulatePlan(problem, plan, schedule::ScheduleKind::kDapple);
  ASSERT_TRUE(sim.ok());
  EXPECT_NEAR(sim->step_ms, e.step_ms, 1e-9);
  const MemoryEstimate m = estimator.Memory(plan);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(m.stages[s].in_flight, 4 - s);
    EXPECT_EQ(m.stages[s].peak_bytes, sim->stages[s].peak_memory_bytes) << s;
  }
}

}  // namespace
}  // namespace dapple::coordinator
