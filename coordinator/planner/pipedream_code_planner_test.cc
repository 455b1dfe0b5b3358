// The code-faithful PipeDream planner against PipeDream's own plans, and the DAPPLE-against-
// PipeDream table of docs/planner.md ("PipeDream's planner as its code plans"):
//   coordinator_pipedream_code_test 2>/dev/null | grep '^| '
//
// Expected plans: PipeDream's optimizer (msr-fiddle/pipedream 7db6a1c, optimizer/
// optimizer_graph_hierarchical.py; under Python 3 with only graphviz made optional), run from
// its optimizer/ directory on examples/profiles/pipedream/<model>.txt as
//   python3 optimizer_graph_hierarchical.py -f <model>.txt <levels>
//       [--activation_compression_ratio 1] -o out
// with <levels> each cluster of examples/clusters as the code states it (bytes/s):
//   sixteen_nodes_10gbit   -n 16 -b 1250000000
//   sixteen_nodes_25gbit   -n 16 -b 3125000000
//   two_nodes_8_gpus       -n 8 2 -b 130000000000 3125000000
// Stages are the code's stage_id of every node (out/gpus=16.txt) as ranges of the profile's
// layer order (ToChain), replicas the product of its levels' replication factors, time its
// "Time per stage in pipeline" (s). docs/planner.md lists the commands and outputs.
#include "coordinator/planner/pipedream_code_planner.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/model_profile.h"
#include "coordinator/planner/pipedream_planner.h"
#include "coordinator/planner/planners.h"
#include "gtest/gtest.h"

#ifndef DAPPLE_SOURCE_ROOT
#error "DAPPLE_SOURCE_ROOT must name the source tree (coordinator/CMakeLists.txt sets it)"
#endif

namespace dapple::coordinator {
namespace {

v1::ModelProfile Profile(const std::string& model) {
  absl::StatusOr<v1::ModelProfile> profile = profile::ReadProfileFile(
      absl::StrCat(DAPPLE_SOURCE_ROOT, "/examples/profiles/pipedream/", model, ".txt"));
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : v1::ModelProfile();
}

profile::ChainProfile Chain(const std::string& model) {
  absl::StatusOr<profile::ChainProfile> chain = profile::ToChain(Profile(model));
  EXPECT_TRUE(chain.ok()) << chain.status();
  return chain.ok() ? *chain : profile::ChainProfile();
}

v1::ClusterTopology Cluster(const std::string& name) {
  absl::StatusOr<v1::ClusterTopology> topology = profile::ReadClusterFile(
      absl::StrCat(DAPPLE_SOURCE_ROOT, "/examples/clusters/", name, ".yaml"));
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : v1::ClusterTopology();
}

struct ExpectedStage {
  int first_layer;
  int last_layer;
  int replicas;
  bool operator==(const ExpectedStage&) const = default;
};
using Stages = std::vector<ExpectedStage>;

// PipeDream's plan is not unique where plans tie on its objective (the slowest stage): it
// iterates over Python sets of objects, ordered by address, so runs differ. `plans` lists every
// plan 20 runs of each command printed (most frequent first).
struct CodeRun {
  const char* model;
  const char* cluster;
  bool activation_transfers;  // --activation_compression_ratio 1
  double time_per_stage_s;
  std::vector<Stages> plans;
};

const std::vector<CodeRun>& CodeRuns() {
  static const std::vector<CodeRun>* const kRuns = new std::vector<CodeRun>{
      {"vgg16",
       "sixteen_nodes_10gbit",
       true,
       0.0547948908,
       {{{0, 24, 13}, {25, 33, 2}, {34, 40, 1}},
        {{0, 24, 13}, {25, 31, 2}, {32, 40, 1}},
        {{0, 24, 13}, {25, 32, 2}, {33, 40, 1}}}},
      {"vgg16", "sixteen_nodes_25gbit", true, 0.0455248078, {{{0, 25, 15}, {26, 40, 1}}}},
      {"vgg16",
       "sixteen_nodes_10gbit",
       false,
       0.0465874887,
       {{{0, 12, 9}, {13, 13, 1}, {14, 18, 2}, {19, 21, 1}, {22, 23, 1}, {24, 28, 1}, {29, 40, 1}},
        {{0, 12, 9}, {13, 13, 1}, {14, 18, 2}, {19, 20, 1}, {21, 22, 1}, {23, 31, 1}, {32, 40, 1}},
        {{0, 12, 9}, {13, 13, 1}, {14, 18, 2}, {19, 20, 1}, {21, 23, 1}, {24, 33, 1}, {34, 40, 1}},
        {{0, 12, 9}, {13, 13, 1}, {14, 18, 2}, {19, 20, 1}, {21, 24, 1}, {25, 31, 1}, {32, 40, 1}},
        {{0, 12, 9},
         {13, 13, 1},
         {14, 18, 2},
         {19, 20, 1},
         {21, 22, 1},
         {23, 29, 1},
         {30, 40, 1}}}},
      {"vgg16", "two_nodes_8_gpus", true, 0.0647817069, {{{0, 16, 12}, {17, 40, 4}}}},
      {"vgg16",
       "sixteen_nodes_25gbit",
       false,
       0.045477187,
       {{{0, 4, 5}, {5, 25, 10}, {26, 40, 1}}}},
      {"vgg16", "two_nodes_8_gpus", false, 0.0463698772, {{{0, 8, 8}, {9, 25, 7}, {26, 40, 1}}}},
      {"resnet50",
       "sixteen_nodes_10gbit",
       true,
       0.04384779,
       {{{0, 99, 8}, {100, 152, 5}, {153, 176, 3}}}},
      {"resnet50",
       "sixteen_nodes_25gbit",
       true,
       0.0328833434,
       {{{0, 68, 7}, {69, 120, 4}, {121, 151, 3}, {152, 161, 1}, {162, 176, 1}},
        {{0, 68, 7}, {69, 120, 4}, {121, 152, 3}, {153, 162, 1}, {163, 176, 1}}}},
  };
  return *kRuns;
}

// The code's options for `cluster`, with its own count of the bytes across each cut of `model`.
PipeDreamCodeOptions OptionsFor(const std::string& cluster, bool activation_transfers,
                                const std::string& model = "vgg16") {
  PlanningProblem problem;
  problem.profile = Chain(model);
  problem.topology = Cluster(cluster);
  problem.global_batch = 2048;
  absl::StatusOr<PipeDreamCodeOptions> options = PipeDreamCodeOptionsFor(problem);
  EXPECT_TRUE(options.ok()) << options.status();
  PipeDreamCodeOptions out = options.ok() ? *options : PipeDreamCodeOptions();
  out.activation_transfers = activation_transfers;
  absl::StatusOr<std::vector<int64_t>> cuts = PipeDreamCutBytes(Profile(model));
  EXPECT_TRUE(cuts.ok()) << cuts.status();
  if (cuts.ok()) out.cut_bytes = *cuts;
  return out;
}

std::string Describe(const std::vector<PipeDreamCodeStage>& stages) {
  std::string out;
  for (const PipeDreamCodeStage& s : stages) {
    absl::StrAppend(&out, out.empty() ? "" : " ", s.first_layer, "-", s.last_layer, "x",
                    s.machines.size());
  }
  return out;
}

TEST(PipeDreamCodeTest, OptionsAreTheCodesCommandLines) {
  const PipeDreamCodeOptions ten = OptionsFor("sixteen_nodes_10gbit", true);
  ASSERT_EQ(ten.levels.size(), 1u);
  EXPECT_EQ(ten.levels[0].machines, 16);
  EXPECT_DOUBLE_EQ(ten.levels[0].bandwidth_bytes_per_s, 1.25e9);
  const PipeDreamCodeOptions two = OptionsFor("two_nodes_8_gpus", true);
  ASSERT_EQ(two.levels.size(), 2u);
  EXPECT_EQ(two.levels[0].machines, 8);
  EXPECT_DOUBLE_EQ(two.levels[0].bandwidth_bytes_per_s, 130e9);
  EXPECT_EQ(two.levels[1].machines, 2);
  EXPECT_DOUBLE_EQ(two.levels[1].bandwidth_bytes_per_s, 3.125e9);
  EXPECT_TRUE(two.activation_transfers);
  EXPECT_FALSE(two.straight_pipeline);
  EXPECT_FALSE(two.use_fewer_machines);
}

// The code's objective for a plan of one level (compute_partitioning's terms, by hand): every
// stage (compute + 4 (m - 1) |w| / (B m)) / m; with activation transfers every stage after the
// first also its input and (but the last) output transfer 2 a / (B m).
double FlatObjectiveMs(const profile::ChainProfile& p, const PipeDreamCodeOptions& options,
                       const Stages& stages) {
  const double B = options.levels.at(0).bandwidth_bytes_per_s / 1000.0;
  double worst = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    double compute = 0, weights = 0;
    for (int l = stages[s].first_layer; l <= stages[s].last_layer; ++l) {
      compute += p.forward_ms[l] + p.backward_ms[l];
      weights += static_cast<double>(p.parameter_bytes[l]);
    }
    const double m = stages[s].replicas;
    worst = std::max(worst, (compute + 4 * (m - 1) * weights / (B * m)) / m);
    if (s == 0 || !options.activation_transfers) continue;
    worst = std::max(worst, 2.0 * options.cut_bytes[stages[s].first_layer - 1] / (B * m));
    if (s + 1 < stages.size()) {
      worst = std::max(worst, 2.0 * options.cut_bytes[stages[s].last_layer] / (B * m));
    }
  }
  return worst;
}

// Our plan is one PipeDream printed or, where PipeDream's runs break a tie one way and we
// another (one level), a plan with the same objective as each of PipeDream's.
void ExpectCodePlan(const CodeRun& run) {
  const profile::ChainProfile chain = Chain(run.model);
  const PipeDreamCodeOptions options = OptionsFor(run.cluster, run.activation_transfers, run.model);
  absl::StatusOr<PipeDreamCodeSolution> solution = SolvePipeDreamCode(chain, options);
  ASSERT_TRUE(solution.ok()) << solution.status();
  Stages got;
  for (const PipeDreamCodeStage& s : solution->stages) {
    got.push_back({s.first_layer, s.last_layer, static_cast<int>(s.machines.size())});
  }
  // The code prints 9-10 significant digits.
  const double code_ms = run.time_per_stage_s * 1000.0;
  EXPECT_NEAR(solution->time_per_stage_ms, code_ms, 1e-6 * code_ms);
  if (std::find(run.plans.begin(), run.plans.end(), got) != run.plans.end()) return;
  ASSERT_EQ(options.levels.size(), 1u)
      << "not among PipeDream's plans: " << Describe(solution->stages);
  EXPECT_NEAR(FlatObjectiveMs(chain, options, got), code_ms, 1e-6 * code_ms);
  for (const Stages& plan : run.plans) {
    EXPECT_NEAR(FlatObjectiveMs(chain, options, plan), code_ms, 1e-6 * code_ms);
  }
}

TEST(PipeDreamCodeTest, ReproducesPipeDreamsOwnPlans) {
  for (const CodeRun& run : CodeRuns()) {
    SCOPED_TRACE(absl::StrCat(run.model, " / ", run.cluster,
                              run.activation_transfers ? " --activation_compression_ratio 1" : ""));
    ExpectCodePlan(run);
  }
}

// ResNet-50 on 2 x 8 devices: the code cuts where no prefix of the profile's layer order does
// (inside residual blocks, before the downsample's batch norm: its stages are layers 0-79 and
// 81-86 x 10, 80 and 87-117 x 2, 118-176 x 4 of that order), so the best contiguous plan is
// slower by the code's objective (31.93 ms against its 31.90 ms per stage).
TEST(PipeDreamCodeTest, ResNet50OnTwoNodesCutsWhereNoPrefixDoes) {
  absl::StatusOr<PipeDreamCodeSolution> solution =
      SolvePipeDreamCode(Chain("resnet50"), OptionsFor("two_nodes_8_gpus", true, "resnet50"));
  ASSERT_TRUE(solution.ok()) << solution.status();
  const double code_ms = 0.0319004225 * 1000.0;
  EXPECT_GT(solution->time_per_stage_ms, code_ms) << Describe(solution->stages);
  std::printf("resnet50 two_nodes_8_gpus: %s, %.4f ms per stage (the code: %.4f ms)\n",
              Describe(solution->stages).c_str(), solution->time_per_stage_ms, code_ms);
}

// A residual block: 1 feeds the main branch 2 -> 3 and the downsample 4, which 5 adds. Layer l's
// output is 10^l bytes; 0 is the Input node, which the code removes.
TEST(PipeDreamCutBytesTest, CountsTheAugmentedAntichain) {
  v1::ModelProfile profile;
  profile.set_batch_size(1);
  for (int l = 0; l < 6; ++l) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_id(absl::StrCat("node", l));
    layer->set_input(l == 0);
    layer->set_forward_ms(l == 0 ? 0 : 1);
    int64_t bytes = 1;
    for (int i = 0; i < l; ++i) bytes *= 10;
    layer->set_activation_bytes(bytes);
  }
  for (const auto& [src, dst] :
       std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {1, 4}, {2, 3}, {3, 5}, {4, 5}}) {
    v1::ProfileEdge* edge = profile.add_edges();
    edge->set_src(src);
    edge->set_dst(dst);
  }
  absl::StatusOr<std::vector<int64_t>> cuts = PipeDreamCutBytes(profile);
  ASSERT_TRUE(cuts.ok()) << cuts.status();
  // After 4 both branches are done, yet the code still counts 1 (its consumers 2 and 4 are
  // each outside the other's ancestors).
  EXPECT_EQ(*cuts, (std::vector<int64_t>{0, 10, 110, 1010, 11010}));
  absl::StatusOr<profile::ChainProfile> chain = profile::ToChain(profile);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->cut_bytes[4], 11000);
}

// On a chain the code's count is the layer's output, as cut_bytes (but for the Input node).
TEST(PipeDreamCutBytesTest, ChainIsCutBytes) {
  const profile::ChainProfile chain = Chain("vgg16");
  absl::StatusOr<std::vector<int64_t>> cuts = PipeDreamCutBytes(Profile("vgg16"));
  ASSERT_TRUE(cuts.ok()) << cuts.status();
  ASSERT_EQ(cuts->size(), chain.cut_bytes.size());
  for (size_t k = 1; k < cuts->size(); ++k) EXPECT_EQ((*cuts)[k], chain.cut_bytes[k]) << k;
}

// The code's rank order: a level-1 stage of r1 devices in a level-2 stage of r2 nodes takes
// devices [o, o + r1) of each of those nodes.
TEST(PipeDreamCodeTest, HierarchicalStagesSpanTheirNodes) {
  absl::StatusOr<PipeDreamCodeSolution> solution =
      SolvePipeDreamCode(Chain("vgg16"), OptionsFor("two_nodes_8_gpus", true));
  ASSERT_TRUE(solution.ok()) << solution.status();
  ASSERT_EQ(solution->stages.size(), 2u);
  EXPECT_EQ(solution->stages[0].machines,
            (std::vector<int>{0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(solution->stages[1].machines, (std::vector<int>{6, 7, 14, 15}));
}

TEST(PipeDreamCodeTest, StraightPipelineHasNoReplicas) {
  PipeDreamCodeOptions options = OptionsFor("sixteen_nodes_25gbit", true);
  options.straight_pipeline = true;
  absl::StatusOr<PipeDreamCodeSolution> solution = SolvePipeDreamCode(Chain("vgg16"), options);
  ASSERT_TRUE(solution.ok()) << solution.status();
  EXPECT_EQ(solution->stages.size(), 16u);
  for (const PipeDreamCodeStage& s : solution->stages) EXPECT_EQ(s.machines.size(), 1u);
}

TEST(PipeDreamCodeTest, RejectsWhatTheCodeCannotExpress) {
  PlanningProblem problem;
  problem.profile = Chain("vgg16");
  problem.topology = Cluster("sixteen_nodes_25gbit");
  problem.global_batch = 2048;
  problem.num_stages = 4;
  EXPECT_EQ(PlanPipeDreamCode(problem).status().code(), absl::StatusCode::kInvalidArgument);
  problem.num_stages = 0;
  problem.max_replicas = 4;
  const absl::Status status = PlanPipeDreamCode(problem).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_replicas is 4"), std::string::npos) << status;
  PipeDreamCodeOptions none;
  EXPECT_EQ(SolvePipeDreamCode(problem.profile, none).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// 1F1B-RR gives replicas whole micro-batches: VGG-16's 15-1 plan needs no micro-batch that 15
// divides, only M >= 15.
TEST(PipeDreamCodeTest, PlansRunWithRoundRobinReplicas) {
  PlanningProblem problem;
  problem.profile = Chain("vgg16");
  problem.topology = Cluster("sixteen_nodes_25gbit");
  problem.global_batch = 16 * problem.profile.batch_size;
  problem.schedule = schedule::ScheduleKind::kPipeDream;
  absl::StatusOr<PlannedJob> job = PlanPipeDreamCode(problem);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.planner, "pipedream-code");
  ASSERT_EQ(job->plan.stages.size(), 2u);
  EXPECT_EQ(job->plan.stages[0].devices.size(), 15u);
  EXPECT_EQ(job->plan.stages[1].devices, std::vector<int>{15});
  EXPECT_GE(job->plan.micro_batches, 15);
}

std::string Shape(const HybridPlan& plan) {
  std::string out;
  for (const StagePlan& st : plan.stages) {
    absl::StrAppend(&out, out.empty() ? "" : " ", st.last_layer - st.first_layer + 1, "x",
                    st.devices.size());
  }
  return absl::StrCat(out, ", M=", plan.micro_batches);
}

// docs/planner.md's table: both planners' plans trained synchronously (dapple schedule, flush
// per step), scored by the same simulator, as the DAPPLE paper compared them (section 6).
// Global batch 16 x the profile batch and SGD with momentum, as profiles_test.cc.
TEST(PipeDreamCodeTest, DappleAgainstPipeDreamsCodePlans) {
  for (const char* model : {"vgg16", "resnet50"}) {
    for (const char* cluster :
         {"two_nodes_8_gpus", "sixteen_nodes_25gbit", "sixteen_nodes_10gbit"}) {
      PlanningProblem problem;
      problem.profile = Chain(model);
      problem.topology = Cluster(cluster);
      problem.global_batch = 16 * problem.profile.batch_size;
      problem.optimizer_state_factor = 1.0;
      problem.schedule = schedule::ScheduleKind::kDapple;
      // The code's plan as the code makes it (its own bytes across each cut).
      absl::StatusOr<PlannedJob> code =
          PlanPipeDreamCode(problem, OptionsFor(cluster, /*activation_transfers=*/true, model));
      absl::StatusOr<PlannedJob> paper = PlanPipeDream(problem);
      absl::StatusOr<PlannedJob> dapple = RunPlanner("dapple", problem);
      ASSERT_TRUE(dapple.ok()) << dapple.status();
      ASSERT_TRUE(paper.ok()) << paper.status();
      // Only "fits no device" may fail.
      const bool code_fits = code.ok();
      if (!code_fits) {
        ASSERT_EQ(code.status().code(), absl::StatusCode::kResourceExhausted) << code.status();
      }
      const double dapple_ms = dapple->prediction.step_ms;
      std::printf("| pipedream/%s | %s | %lld | %s | %s | %s | %.1f | %s | %.2fx |\n", model,
                  cluster, static_cast<long long>(problem.global_batch),
                  code_fits ? Shape(code->plan).c_str() : "oom",
                  code_fits ? absl::StrFormat("%.1f", code->prediction.step_ms).c_str() : "-",
                  Shape(dapple->plan).c_str(), dapple_ms,
                  code_fits ? absl::StrFormat("%.2fx", code->prediction.step_ms / dapple_ms).c_str()
                            : "oom",
                  paper->prediction.step_ms / dapple_ms);
    }
  }
}

}  // namespace
}  // namespace dapple::coordinator
