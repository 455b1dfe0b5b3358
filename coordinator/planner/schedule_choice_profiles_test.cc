// parallel.schedule auto on every published profile (examples/profiles) and every cluster of
// examples/clusters, under a device memory cap that binds: the chosen plan's simulated step is
// never slower than the dapple-schedule-only plan's (DAPPLE's planner, schedule dapple,
// no recomputation), and a row whose dapple-only plan fits nothing is planned by the choice
// when any option fits. Each test prints its rows of the table in docs/planner.md ("Choosing
// the schedule"):
//   build/coordinator/coordinator_schedule_choice_profiles_test 2>/dev/null | grep '^| '
// The test runs DAPPLE's search with small simulation budgets (kQuick) to stay fast; the
// table in docs/planner.md is the planner's own budgets (DapplePlannerOptions' defaults):
//   DAPPLE_FULL_SEARCH=1 build/coordinator/coordinator_schedule_choice_profiles_test ...
//
// The cap of a row: 60% of the largest per-device peak memory of the uncapped dapple-only plan
// (so that plan no longer fits: the cap binds), rounded down to a MiB; 90% when dapple-only fits
// no plan under 60%. Global batch and optimizer as profiles_test.cc (published_profiles_
// testing.h; SGD with momentum), replicas not limited.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "coordinator/planner/dapple_planner.h"
#include "coordinator/planner/published_profiles_testing.h"
#include "coordinator/planner/schedule_choice.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

constexpr const char* kClusters[] = {"two_nodes_8_gpus", "sixteen_nodes_25gbit",
                                     "sixteen_nodes_10gbit", "local_cpu"};
constexpr double kCapFractions[] = {0.6, 0.9};

DapplePlannerOptions SearchOptions() {
  const char* full = std::getenv("DAPPLE_FULL_SEARCH");
  if (full != nullptr && std::string(full) == "1") return DapplePlannerOptions();
  DapplePlannerOptions quick;
  quick.simulated_layouts = 3;
  quick.simulated_sizes = 1;
  quick.simulation_budget = int64_t{1} << 12;
  quick.polish_rounds = 1;
  quick.polish_budget = int64_t{1} << 11;
  quick.refined_candidates = 1;
  quick.refine_iterations = 8;
  return quick;
}

void CapMemory(int64_t bytes, v1::ClusterTopology* topology) {
  for (v1::ClusterNode& node : *topology->mutable_nodes()) node.set_device_memory_bytes(bytes);
}

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.0f MiB", static_cast<double>(bytes) / (1 << 20));
}

// "4x2 6x1r, M=8, 12.3 ms" or "none fits".
std::string Cell(const Alternative& a) {
  if (!a.status.ok()) return "none fits";
  return absl::StrFormat("%s, M=%d, %.1f ms", LayoutText(a.planned.plan),
                         a.planned.plan.micro_batches, a.planned.prediction.step_ms);
}

class ScheduleChoiceProfilesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScheduleChoiceProfilesTest, ChosenIsNeverSlowerThanDappleOnly) {
  const std::string path = GetParam();
  const std::string stem = published::Stem(path);
  absl::StatusOr<v1::ModelProfile> model =
      profile::ReadProfileFile(path, published::KnownBatch(stem));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<profile::ChainProfile> chain = profile::ToChain(*model);
  ASSERT_TRUE(chain.ok()) << chain.status();
  const DapplePlannerOptions options = SearchOptions();
  const auto plan = [&](const PlanningProblem& p) { return PlanDapple(p, options); };
  ChoiceLimits limits;
  limits.choose_schedule = true;
  const std::vector<ScheduleOption> schedule_options = ScheduleOptions(limits);
  ASSERT_EQ(schedule_options.front().schedule, schedule::ScheduleKind::kDapple);
  ASSERT_EQ(schedule_options.front().recompute, RecomputeMode::kNone);

  for (const char* cluster : kClusters) {
    SCOPED_TRACE(cluster);
    absl::StatusOr<v1::ClusterTopology> topology =
        profile::ReadClusterFile(published::ClusterFile(cluster));
    ASSERT_TRUE(topology.ok()) << topology.status();
    PlanningProblem problem;
    problem.profile = *chain;
    problem.topology = *topology;
    problem.global_batch = published::GlobalBatch(stem, chain->batch_size);
    problem.optimizer_state_factor = 1.0;
    problem.schedule = schedule::ScheduleKind::kDapple;

    absl::StatusOr<PlannedJob> uncapped = plan(problem);
    if (!uncapped.ok()) {
      // The model fits none of this cluster's devices at all: no cap to bind.
      ASSERT_EQ(uncapped.status().code(), absl::StatusCode::kResourceExhausted)
          << uncapped.status();
      std::printf("| %s | %s | %lld | - | none fits uncapped | - | - | - |\n",
                  published::ProfileName(path).c_str(), cluster,
                  static_cast<long long>(problem.global_batch));
      continue;
    }
    const int64_t peak = MaxPeakMemory(uncapped->prediction);
    // The tightest cap of kCapFractions under which dapple-only still finds a plan (the last
    // when none does: then the choice may find one with recomputation).
    int64_t cap = 0;
    PlanningProblem capped = problem;
    absl::StatusOr<PlannedJob> dapple_only;
    for (double fraction : kCapFractions) {
      cap = static_cast<int64_t>(fraction * static_cast<double>(peak)) / (1 << 20) * (1 << 20);
      capped = problem;
      CapMemory(cap, &capped.topology);
      dapple_only = plan(capped);
      if (dapple_only.ok()) break;
    }
    // The choice's first option is the dapple-only plan just made: not planned twice.
    const auto plan_once = [&](const PlanningProblem& p) {
      if (p.schedule == schedule::ScheduleKind::kDapple && p.recompute == RecomputeMode::kNone) {
        return dapple_only;
      }
      return plan(p);
    };
    absl::StatusOr<ScheduleChoice> choice_or = ChooseSchedule(capped, schedule_options, plan_once);
    ASSERT_TRUE(choice_or.ok()) << choice_or.status();
    const ScheduleChoice& choice = *choice_or;
    const Alternative& dapple = choice.alternatives.front();
    // Only "fits no device" may refuse a plan.
    for (const Alternative& a : choice.alternatives) {
      if (!a.status.ok()) {
        EXPECT_EQ(a.status.code(), absl::StatusCode::kResourceExhausted) << a.status;
      }
    }
    if (dapple.status.ok()) {
      // The cap binds: the uncapped plan does not fit it.
      EXPECT_GT(peak, cap);
      ASSERT_GE(choice.chosen, 0);
      const Alternative& chosen = choice.alternatives[static_cast<size_t>(choice.chosen)];
      EXPECT_LE(chosen.planned.prediction.step_ms, dapple.planned.prediction.step_ms)
          << OptionName(chosen.option);
      EXPECT_LE(MaxPeakMemory(chosen.planned.prediction), cap);
    }
    std::string chosen_name = "-";
    std::string chosen_cell = "none fits";
    std::string speedup = "-";
    if (choice.chosen >= 0) {
      const Alternative& chosen = choice.alternatives[static_cast<size_t>(choice.chosen)];
      chosen_name = OptionName(chosen.option);
      chosen_cell = Cell(chosen);
      speedup = dapple.status.ok() ? absl::StrFormat("%.2fx", dapple.planned.prediction.step_ms /
                                                                  chosen.planned.prediction.step_ms)
                                   : "fits only so";
    }
    std::printf("| %s | %s | %lld | %s | %s | %s | %s | %s |\n",
                published::ProfileName(path).c_str(), cluster,
                static_cast<long long>(problem.global_batch), Mib(cap).c_str(),
                Cell(dapple).c_str(), chosen_name.c_str(), chosen_cell.c_str(), speedup.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Published, ScheduleChoiceProfilesTest,
                         ::testing::ValuesIn(published::ProfileFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = published::ProfileName(info.param);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ScheduleChoiceProfilesPresentTest, FindsThePublishedProfiles) {
  EXPECT_GE(published::ProfileFiles().size(), 27u);
}

}  // namespace
}  // namespace dapple::coordinator
