// Every published profile (examples/profiles) on the three clusters of examples/clusters: the
// DAPPLE plan's simulated step (dapple schedule) is never slower than PipeDream's, pure data
// parallelism's or the uniform split's (a planner whose plans fit no device counts as infinitely
// slow). Each test prints its rows of the speedup table in docs/planner.md:
//   coordinator_planner_profiles_test 2>/dev/null | grep '^| '
//
// Global batch: the DAPPLE paper's where it has one (VGG-19 2048, GNMT-16 1024, BERT-48 64,
// XLNet-36 128, AmoebaNet-36 128), otherwise 16 x the profile batch. Optimizer: SGD with
// momentum (one state per weight, as the paper's V100 runs). Replicas are not limited: the
// comparison is of the planners' full search spaces.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/published_profiles_testing.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kClusters[] = {"two_nodes_8_gpus", "sixteen_nodes_25gbit",
                                     "sixteen_nodes_10gbit"};

using published::GlobalBatch;
using published::KnownBatch;
using published::ProfileFiles;
using published::Stem;

std::string Shape(const HybridPlan& plan) {
  std::string out;
  for (const StagePlan& st : plan.stages) {
    absl::StrAppend(&out, out.empty() ? "" : " ", st.last_layer - st.first_layer + 1, "x",
                    st.devices.size());
  }
  return absl::StrCat(out, ", M=", plan.micro_batches);
}

std::string Speedup(double other, double dapple) {
  if (other == kInf) return "oom";
  return absl::StrFormat("%.2fx", other / dapple);
}

class ProfilesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ProfilesTest, DappleIsNeverSlower) {
  const std::string path = GetParam();
  const std::string stem = Stem(path);
  const std::string dir = std::filesystem::path(path).parent_path().filename().string();
  absl::StatusOr<v1::ModelProfile> model = profile::ReadProfileFile(path, KnownBatch(stem));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<profile::ChainProfile> chain = profile::ToChain(*model);
  ASSERT_TRUE(chain.ok()) << chain.status();
  for (const char* cluster : kClusters) {
    absl::StatusOr<v1::ClusterTopology> topology = profile::ReadClusterFile(
        absl::StrCat(DAPPLE_SOURCE_ROOT, "/examples/clusters/", cluster, ".yaml"));
    ASSERT_TRUE(topology.ok()) << topology.status();
    PlanningProblem problem;
    problem.profile = *chain;
    problem.topology = *topology;
    problem.global_batch = GlobalBatch(stem, chain->batch_size);
    problem.optimizer_state_factor = 1.0;
    problem.schedule = schedule::ScheduleKind::kDapple;

    std::map<std::string, double> step;
    std::string dapple_shape;
    for (const std::string& name : PlannerNames()) {
      absl::StatusOr<PlannedJob> job = RunPlanner(name, problem);
      if (job.ok()) {
        step[name] = job->prediction.step_ms;
        if (name == "dapple") dapple_shape = Shape(job->plan);
      } else {
        // Only "fits no device" may fail, and it counts as infinitely slow.
        ASSERT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted)
            << name << " on " << stem << " / " << cluster << ": " << job.status();
        step[name] = kInf;
      }
    }
    ASSERT_LT(step["dapple"], kInf) << stem << " / " << cluster << ": dapple found no plan";
    for (const char* other : {"pipedream", "dp", "uniform"}) {
      EXPECT_LE(step["dapple"], step[other])
          << stem << " / " << cluster << ": dapple " << step["dapple"] << " ms, " << other << " "
          << step[other] << " ms";
    }
    std::printf("| %s/%s | %s | %lld | %s | %.1f | %s | %s | %s | %s |\n", dir.c_str(),
                stem.c_str(), cluster, static_cast<long long>(problem.global_batch),
                dapple_shape.c_str(), step["dapple"],
                Speedup(step["pipedream"], step["dapple"]).c_str(),
                Speedup(step["dp"], step["dapple"]).c_str(),
                Speedup(step["uniform"], step["dapple"]).c_str(),
                Speedup(step["balanced"], step["dapple"]).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Published, ProfilesTest, ::testing::ValuesIn(ProfileFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = absl::StrCat(
                               std::filesystem::path(info.param).parent_path().filename().string(),
                               "_", Stem(info.param));
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// The profiles are part of the repository: finding none means the path is wrong, not that
// there is nothing to test.
TEST(ProfilesPresentTest, FindsThePublishedProfiles) { EXPECT_GE(ProfileFiles().size(), 27u); }

}  // namespace
}  // namespace dapple::coordinator
