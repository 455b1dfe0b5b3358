#include "coordinator/planner/least_memory.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/stage_memory.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Layers of unequal weights and activations (and one small output after a big one), on one
// node of 8 devices; global batch 32 in micro-batches of 8.
PlanningProblem Problem() {
  PlanningProblem problem;
  profile::ChainProfile& p = problem.profile;
  p.source = "test";
  p.batch_size = 8;
  const std::vector<int64_t> weights = {1, 8, 2, 2, 6, 1, 3, 5};
  const std::vector<int64_t> acts = {4, 2, 6, 1, 3, 9, 1, 2};
  for (size_t i = 0; i < weights.size(); ++i) {
    p.names.push_back(absl::StrCat("layer", i));
    p.forward_ms.push_back(1);
    p.backward_ms.push_back(2);
    p.parameter_bytes.push_back(weights[i] * kMiB);
    p.activation_bytes.push_back(acts[i] * kMiB);
    p.saved_bytes.push_back(0);
    if (i + 1 < weights.size()) p.cut_bytes.push_back(acts[i] * kMiB);
  }
  v1::ClusterNode* node = problem.topology.add_nodes();
  node->set_name("node0");
  node->set_devices(8);
  node->set_device_memory_bytes(kMiB);  // nothing fits: the memory error's case
  problem.topology.set_source("test cluster");
  problem.topology.set_intra_node_bandwidth_bytes_per_s(1e9);
  problem.topology.set_inter_node_bandwidth_bytes_per_s(1e9);
  problem.global_batch = 32;
  problem.micro_batch_size = 8;
  return problem;
}

int64_t LargestPeak(const PlanningProblem& problem, const HybridPlan& plan) {
  const ActivationMemory activations(problem.profile);
  int64_t most = 0;
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
    most = std::max(
        most, PredictStageMemory(problem, plan, s, activations, problem.schedule).PeakBytes());
  }
  return most;
}

// Every cut of L layers into P stages, by brute force: the least largest peak.
int64_t BruteForce(const PlanningProblem& problem, int P) {
  const int L = problem.profile.num_layers();
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int> ends(P);
  std::function<void(int, int)> go = [&](int s, int first) {
    if (s == P - 1) {
      HybridPlan plan;
      plan.micro_batch_size = problem.micro_batch_size;
      plan.micro_batches = static_cast<int>(problem.global_batch / problem.micro_batch_size);
      int begin = 0;
      for (int t = 0; t < P; ++t) {
        const int end = t + 1 == P ? L - 1 : ends[t];
        plan.stages.push_back(StagePlan{begin, end, {t}});
        begin = end + 1;
      }
      best = std::min(best, LargestPeak(problem, plan));
      return;
    }
    for (int j = first; j <= L - (P - s); ++j) {
      ends[s] = j;
      go(s + 1, j + 1);
    }
  };
  go(0, 0);
  return best;
}

TEST(LeastMemoryPipelineTest, MatchesEveryCutTriedByBruteForce) {
  for (auto kind : {schedule::ScheduleKind::kDapple, schedule::ScheduleKind::kGPipe,
                    schedule::ScheduleKind::kPipeDream}) {
    PlanningProblem problem = Problem();
    problem.schedule = kind;
    for (int P = 1; P <= 5; ++P) {
      SCOPED_TRACE(::testing::Message() << "schedule " << static_cast<int>(kind) << " P " << P);
      const HybridPlan plan = LeastMemoryPipeline(problem, P, 8);
      ASSERT_EQ(static_cast<int>(plan.stages.size()), P);
      EXPECT_EQ(plan.stages.front().first_layer, 0);
      EXPECT_EQ(plan.stages.back().last_layer, problem.profile.num_layers() - 1);
      for (int s = 1; s < P; ++s) {
        EXPECT_EQ(plan.stages[s].first_layer, plan.stages[s - 1].last_layer + 1);
      }
      EXPECT_EQ(LargestPeak(problem, plan), BruteForce(problem, P));
    }
  }
}

}  // namespace
}  // namespace dapple::coordinator
