#include "coordinator/planner/planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/compute_throughput.h"
#include "common/memory_model.h"
#include "common/profile/cluster_topology.h"
#include "common/profile/format_bytes.h"
#include "common/profile/model_profile.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/planner/device_use.h"
#include "coordinator/planner/interleaved_choice.h"
#include "coordinator/planner/interleaved_partition.h"
#include "coordinator/planner/partition.h"
#include "coordinator/planner/plan_simulator.h"
#include "coordinator/planner/plan_summary.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/schedule_choice.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {
namespace {

constexpr char kBalanced[] = "balanced";
constexpr char kUniform[] = "uniform";
constexpr char kManual[] = "manual";
constexpr char kDapple[] = "dapple";
constexpr char kAutoSchedule[] = "auto";
constexpr const char* kJobPlanners[] = {
    kBalanced, kUniform, kManual, kDapple, "pipedream", kPipeDreamCodePlanner, "dp"};

std::string PlannerName(const v1::JobSpec& spec) {
  return spec.parallel().planner().empty() ? kBalanced : spec.parallel().planner();
}

bool ChoosesDepth(const std::string& planner) {
  return planner != kBalanced && planner != kUniform && planner != kManual;
}

// A job's profile indexes the model's layers; a file profile may start with Input nodes (data
// loading, no compute) that the model has no layer for. Dropping them (and their edges) keeps
// a topological order, so the result is still a valid profile.
v1::ModelProfile WithoutInputNodes(const v1::ModelProfile& profile) {
  v1::ModelProfile out = profile;
  out.clear_layers();
  out.clear_edges();
  std::vector<int> index(profile.layers_size(), -1);
  for (int i = 0; i < profile.layers_size(); ++i) {
    if (profile.layers(i).input()) continue;
    index[i] = out.layers_size();
    *out.add_layers() = profile.layers(i);
  }
  for (const v1::ProfileEdge& e : profile.edges()) {
    if (e.src() < 0 || e.dst() < 0 || e.src() >= profile.layers_size() ||
        e.dst() >= profile.layers_size() || index[e.src()] < 0 || index[e.dst()] < 0) {
      continue;
    }
    v1::ProfileEdge* edge = out.add_edges();
    edge->set_src(index[e.src()]);
    edge->set_dst(index[e.dst()]);
  }
  return out;
}

// The model's tied weights (an lm_head tied to the embedding): the copy's parameter bytes.
std::vector<profile::ChainProfile::Tie> TiesOf(const std::vector<LayerInfo>& layers) {
  std::vector<profile::ChainProfile::Tie> ties;
  for (const LayerInfo& info : layers) {
    if (info.tied_layer < 0) continue;
    int64_t floats = 0;
    for (const ParamInfo& p : info.params) {
      if (!p.tied_to.empty()) floats += NumElements(p.shape);
    }
    ties.push_back({info.tied_layer, info.index, floats * static_cast<int64_t>(sizeof(float))});
  }
  return ties;
}

// Replicas of every stage of a planner that does not choose them (balanced, uniform, manual):
// parallel.devices / P (the spec's validation makes devices a multiple of P).
int UniformReplicas(const v1::JobSpec& spec, int num_stages) {
  return num_stages > 0 ? std::max(1, spec.parallel().devices() / num_stages) : 1;
}

// Stage s on devices s * D .. s * D + D - 1 (D = `replicas`).
void PlaceUniformReplicas(int replicas, HybridPlan* plan) {
  int device = 0;
  for (StagePlan& stage : plan->stages) {
    stage.devices.clear();
    for (int r = 0; r < replicas; ++r) stage.devices.push_back(device++);
  }
}

// The manual plan the spec spells out: its ranges, each on devices / P devices in order.
HybridPlan ManualPlan(const v1::JobSpec& spec, int64_t micro_batch, int micro_batches) {
  HybridPlan plan;
  plan.planner = kManual;
  plan.micro_batch_size = micro_batch;
  plan.micro_batches = micro_batches;
  for (const v1::StageRange& r : spec.parallel().stage_ranges()) {
    StagePlan stage;
    stage.first_layer = r.first_layer();
    stage.last_layer = r.last_layer();
    plan.stages.push_back(std::move(stage));
  }
  PlaceUniformReplicas(UniformReplicas(spec, spec.parallel().stage_ranges_size()), &plan);
  return plan;
}

// kResourceExhausted for a plan of fixed stages and replicas (manual; balanced and uniform with
// replicas) that does not fit, naming its hungriest stage.
absl::Status CheckFixedPlanFits(const PlanningProblem& problem, const Prediction& prediction,
                                const HybridPlan& plan, const std::string& planner) {
  if (prediction.fits_memory) return absl::OkStatus();
  // The stage that overflows its smallest device the most (devices may differ in memory).
  int worst = 0;
  int64_t worst_excess = std::numeric_limits<int64_t>::min();
  int64_t worst_device_bytes = 0;
  for (int s = 0;
       s < static_cast<int>(prediction.stages.size()) && s < static_cast<int>(plan.stages.size());
       ++s) {
    int64_t device_bytes = std::numeric_limits<int64_t>::max();
    for (int d : plan.stages[s].devices) {
      device_bytes = std::min(device_bytes, profile::DeviceMemoryBytes(problem.topology, d));
    }
    if (plan.stages[s].devices.empty())
      device_bytes = profile::DeviceMemoryBytes(problem.topology, 0);
    const int64_t excess = prediction.stages[s].peak_memory_bytes - device_bytes;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = s;
      worst_device_bytes = device_bytes;
    }
  }
  const StagePrediction& p = prediction.stages[worst];
  const auto [needs, has] = profile::FormatBytesApart(p.peak_memory_bytes, worst_device_bytes);
  return absl::ResourceExhaustedError(
      absl::StrCat("parallel.planner ", planner, ": its plan needs ", needs, " on a device (stage ",
                   worst, ": ", StageMemoryParts(p), ") but devices have ", has));
}

// 1F1B-RR sends whole micro-batches round-robin to a stage's replicas, and the runtime needs
// each replica to get at least one per step: a plan with D_s > M is refused here, at submit,
// rather than when the workers start. balanced, uniform and manual place devices / P replicas
// (the spec's validation refuses more than M first); the planners that choose replicas are
// capped at M through max_replicas, so for them this is a guard.
absl::Status CheckPipeDreamReplicas(schedule::ScheduleKind kind, const std::string& planner,
                                    const HybridPlan& plan, int64_t global_batch) {
  if (kind != schedule::ScheduleKind::kPipeDream) return absl::OkStatus();
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const size_t replicas = plan.stages[s].devices.size();
    if (static_cast<int64_t>(replicas) <= plan.micro_batches) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.planner ", planner, " gives stage ", s, " ", replicas,
        " replicas, but parallel.schedule pipedream sends whole micro-batches round-robin to a "
        "stage's replicas and training.global_batch ",
        global_batch, " / training.micro_batch ", plan.micro_batch_size, " = ", plan.micro_batches,
        plan.micro_batches == 1 ? " micro-batch" : " micro-batches",
        " per step: each replica needs at least one (at most ", plan.micro_batches,
        plan.micro_batches == 1 ? " replica" : " replicas",
        " per stage): use fewer parallel.devices or a smaller micro_batch"));
  }
  return absl::OkStatus();
}

// A planner's refusal as a job's: the planners name themselves "planner dapple: ..." (also
// for `dapplectl plan --profile`), a job's field is parallel.planner. A plan that fits no
// device's memory (RunPlanner or CheckFixedPlanFits: the memory its least hungry plan needs) is
// the user's to fix: the spec's fields that change it follow, first training.recompute: auto
// when `fits_with_recompute` (a plan of the same planner fits with it).
absl::Status AsJobPlanError(const absl::Status& status, const v1::JobSpec& spec,
                            const std::string& planner, int num_stages, bool fits_with_recompute) {
  std::string message(status.message());
  if (absl::StartsWith(message, "planner ")) message = absl::StrCat("parallel.", message);
  if (status.code() != absl::StatusCode::kResourceExhausted) {
    return absl::Status(status.code(), message);
  }
  const v1::ParallelSpec& par = spec.parallel();
  std::string more;
  if (planner == kManual) {
    more = absl::StrCat("split the model into more parallel.stages ranges (now ", num_stages,
                        ", on parallel.devices ", par.devices(), ")");
  } else if (planner == "dp") {
    more =
        "switch to parallel.planner dapple, which splits the model into stages (planner dp "
        "holds the whole model on every device)";
  } else if (!ChoosesDepth(planner)) {
    more = par.stages() > 0 ? absl::StrCat("spread the model over more parallel.stages (now ",
                                           num_stages, ", on parallel.devices ", par.devices(), ")")
                            : absl::StrCat("spread the model over more parallel.devices (now ",
                                           par.devices(), ", one stage each)");
  } else {
    more = absl::StrCat("give the job more parallel.devices (now ", par.devices(),
                        ") for more stages");
  }
  if (fits_with_recompute) {
    // The cheapest fix that keeps the partition and the batch: recompute where needed.
    more = absl::StrCat("set training.recompute: auto (a plan fits with it), or ", more);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(message, ": to fit, ", more, ", or use a smaller training.micro_batch (now ",
                   spec.training().micro_batch(), ") or devices with more memory"));
}

// Step 4 of MakePlan: the plan of `planner` for `problem` and its prediction.
absl::StatusOr<PlannedJob> PlanFor(const v1::JobSpec& spec, const std::string& planner,
                                   const PlanningProblem& problem, int micro_batches) {
  const schedule::ScheduleKind kind = problem.schedule;
  const int64_t global_batch = problem.global_batch;
  PlannedJob planned;
  if (kind == schedule::ScheduleKind::kInterleaved) {
    // Megatron's interleaved 1F1B: whatever the planner, P * v virtual stages balanced by
    // compute, each rank on parallel.devices / P replicas (interleaved_partition.h).
    auto at_depth = [&](int p) -> absl::StatusOr<PlannedJob> {
      PlanningProblem fixed = problem;
      fixed.num_stages = p;
      PlannedJob out;
      DAPPLE_ASSIGN_OR_RETURN(out.plan, InterleavedPlan(fixed, UniformReplicas(spec, p), planner));
      DAPPLE_ASSIGN_OR_RETURN(out.prediction, SimulatePlan(fixed, out.plan, kind));
      DAPPLE_RETURN_IF_ERROR(CheckFixedPlanFits(fixed, out.prediction, out.plan, planner));
      return out;
    };
    if (problem.num_stages > 0) return at_depth(problem.num_stages);
    // parallel.schedule auto with a planner that chooses the depth: every depth the job allows
    // (interleaved_choice.h), the fastest that fits, ties to the smaller peak memory.
    InterleavedJob job;
    job.num_layers = static_cast<int>(problem.profile.forward_ms.size());
    job.devices = spec.parallel().devices();
    job.max_replicas = problem.max_replicas;
    job.micro_batches = micro_batches;
    absl::Status refused = absl::InvalidArgumentError(
        absl::StrCat("interleaved 1F1B with v = ", problem.interleave, ": no depth P >= 2 divides ",
                     "parallel.devices ", job.devices, " with P * v <= ", job.num_layers,
                     " layers and P <= M = ", micro_batches));
    std::optional<PlannedJob> best;
    for (int p : InterleavedDepths(job, problem.interleave)) {
      absl::StatusOr<PlannedJob> at = at_depth(p);
      if (!at.ok()) {
        // The shallowest depth's refusal speaks for all (the most memory per device).
        if (!best.has_value() && refused.code() == absl::StatusCode::kInvalidArgument) {
          refused = at.status();
        }
        continue;
      }
      const double step = at->prediction.step_ms;
      if (!best.has_value() || step < best->prediction.step_ms * (1 - 1e-9) ||
          (step <= best->prediction.step_ms * (1 + 1e-9) &&
           MaxPeakMemory(at->prediction) < MaxPeakMemory(best->prediction))) {
        best = *std::move(at);
      }
    }
    if (!best.has_value()) return refused;
    return *std::move(best);
  }
  if (planner == kManual) {
    planned.plan = ManualPlan(spec, problem.micro_batch_size, micro_batches);
    DAPPLE_RETURN_IF_ERROR(CheckPipeDreamReplicas(kind, planner, planned.plan, global_batch));
    DAPPLE_ASSIGN_OR_RETURN(planned.prediction, SimulatePlan(problem, planned.plan, kind));
    DAPPLE_RETURN_IF_ERROR(CheckFixedPlanFits(problem, planned.prediction, planned.plan, planner));
    return planned;
  }
  DAPPLE_ASSIGN_OR_RETURN(planned, RunPlanner(planner, problem));
  const int replicas = UniformReplicas(spec, static_cast<int>(planned.plan.stages.size()));
  if (!ChoosesDepth(planner) && replicas > 1) {
    // balanced and uniform place one device per stage; with devices a multiple of P every
    // stage runs on devices / P replicas, scored again by the simulator.
    PlaceUniformReplicas(replicas, &planned.plan);
    DAPPLE_RETURN_IF_ERROR(CheckPipeDreamReplicas(kind, planner, planned.plan, global_batch));
    DAPPLE_ASSIGN_OR_RETURN(planned.prediction, SimulatePlan(problem, planned.plan, kind));
    DAPPLE_RETURN_IF_ERROR(CheckFixedPlanFits(problem, planned.prediction, planned.plan, planner));
  }
  return planned;
}

// Step 4 when every (schedule, recompute) option was refused: the first option's refusal (the
// spec's schedule, or dapple, as written), with the recomputation fix first when recomputing
// where needed would fit and no option tried it.
absl::Status NoOptionFits(const ScheduleChoice& choice, const v1::JobSpec& spec,
                          const std::string& planner, const PlanningProblem& problem,
                          int num_stages, int micro_batches, bool cuda) {
  // The least memory the first schedule was tried with: with recomputation where it was
  // tried (recompute: auto quoted the figure without it, 75 MiB where 44 MiB was the need).
  const Alternative* reported = &choice.alternatives.front();
  for (const Alternative& a : choice.alternatives) {
    if (a.option.schedule == reported->option.schedule &&
        a.option.interleave == reported->option.interleave &&
        a.option.recompute == RecomputeMode::kAuto &&
        a.status.code() == absl::StatusCode::kResourceExhausted) {
      reported = &a;
      break;
    }
  }
  const absl::Status& status = reported->status;
  bool fits_with_recompute = false;
  if (status.code() == absl::StatusCode::kResourceExhausted &&
      problem.recompute == RecomputeMode::kNone && !cuda) {
    const bool tried = std::any_of(
        choice.alternatives.begin(), choice.alternatives.end(),
        [](const Alternative& a) { return a.option.recompute == RecomputeMode::kAuto; });
    if (!tried) {
      PlanningProblem with = problem;
      with.schedule = choice.alternatives.front().option.schedule;
      with.recompute = RecomputeMode::kAuto;
      fits_with_recompute = PlanFor(spec, planner, with, micro_batches).ok();
    }
  }
  const absl::Status refused =
      AsJobPlanError(status, spec, planner, num_stages, fits_with_recompute);
  // "devices have 13.0 MiB" reads wrong beside a worker of 23.5 GiB unless it says why.
  const std::string& memory_note = problem.topology.memory_note();
  return absl::Status(
      refused.code(),
      absl::StrCat(refused.message(), NoneFitsNote(choice, *reported),
                   refused.code() == absl::StatusCode::kResourceExhausted && !memory_note.empty()
                       ? absl::StrCat(" (", memory_note, ")")
                       : ""));
}

// Notes on what a token model's plan means: its throughput in tokens, and where a tied weight's
// copies sit (both stages hold the table; the gradient sum between them is in the prediction).
void AddModelNotes(const std::vector<LayerInfo>& layers,
                   const std::vector<profile::ChainProfile::Tie>& ties, const HybridPlan& plan,
                   const Prediction& prediction, v1::ParallelPlanSummary* summary) {
  if (layers.front().token_input && prediction.samples_per_second > 0) {
    const int64_t tokens = NumElements(layers.front().input_shape);
    summary->add_notes(absl::StrFormat(
        "a sample is a sequence of %d token%s: %.0f tokens/s", tokens, tokens == 1 ? "" : "s",
        prediction.samples_per_second * static_cast<double>(tokens)));
  }
  for (const profile::ChainProfile::Tie& tie : ties) {
    const int owner = StageOfLayer(plan, tie.owner_layer);
    const int copy = StageOfLayer(plan, tie.copy_layer);
    if (owner == copy) continue;
    summary->add_notes(absl::StrCat(
        "tied weights: model.layers[", tie.copy_layer, "] (", layers[tie.copy_layer].type,
        ") on stage ", copy, " holds a ", profile::FormatBytes(tie.bytes),
        " copy of weights of model.layers[", tie.owner_layer, "] (", layers[tie.owner_layer].type,
        ") on stage ", owner,
        ": both stages count it, and the sum of the two copies' gradients every step is in the "
        "predicted step time"));
  }
}

// The momentum above which a Pipe-SGD plan warns (the example's 0.5 trains well).
constexpr double kPipeSgdMomentumNote = 0.5;

void AddStalenessNote(schedule::ScheduleKind kind, const v1::OptimizerSpec& optimizer,
                      v1::ParallelPlanSummary* summary) {
  // A gradient one step stale acts like extra momentum (Mitliagkas et al., "Asynchrony begets
  // momentum", 2016): SGD's usual 0.9 on top oscillates (a fresh user's MLP: 56% test accuracy
  // against 81% under dapple).
  if (kind != schedule::ScheduleKind::kPipeSgd || optimizer.type() != "sgd" ||
      optimizer.momentum() <= kPipeSgdMomentumNote) {
    return;
  }
  summary->add_notes(absl::StrCat(
      "Pipe-SGD applies each update one step late, which adds momentum of its own: with "
      "training.optimizer.momentum ",
      optimizer.momentum(), " training may oscillate; ", kPipeSgdMomentumNote,
      " or less suits it (examples/fashion_mnist_pipesgd.yaml)"));
}

}  // namespace

v1::ClusterTopology SingleNodeTopology(int devices, const PlanDefaults& defaults) {
  v1::ClusterTopology topology;
  topology.set_source(absl::StrCat("one node of ", devices, devices == 1 ? " device" : " devices",
                                   " (coordinator defaults)"));
  v1::ClusterNode* node = topology.add_nodes();
  node->set_name("local");
  node->set_devices(devices);
  node->set_device_memory_bytes(defaults.device_memory_bytes);
  topology.set_intra_node_bandwidth_bytes_per_s(defaults.intra_node_bandwidth_bytes_per_s);
  topology.set_intra_node_latency_ms(defaults.intra_node_latency_ms);
  topology.set_inter_node_bandwidth_bytes_per_s(defaults.inter_node_bandwidth_bytes_per_s);
  topology.set_inter_node_latency_ms(defaults.inter_node_latency_ms);
  return topology;
}

double NominalFlopsPerSecond(absl::string_view device_kind, const PlanDefaults& defaults) {
  return absl::StartsWith(device_kind, "cuda") ? defaults.cuda_flops_per_second
                                               : defaults.cpu_flops_per_second;
}

std::vector<double> LayerCosts(const std::vector<LayerInfo>& layers) {
  std::vector<double> costs;
  costs.reserve(layers.size());
  for (const LayerInfo& l : layers) {
    costs.push_back(l.forward_flops + l.backward_flops + kLayerOverheadFlops);
  }
  return costs;
}

absl::StatusOr<int> ResolveNumStages(const v1::JobSpec& spec) {
  const v1::ParallelSpec& par = spec.parallel();
  if (par.devices() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.devices ", par.devices(), " must be >= 1"));
  }
  const std::string planner = PlannerName(spec);
  int stages = 0;
  std::string field;
  if (planner == kManual) {
    stages = par.stage_ranges_size();
    field = absl::StrCat("parallel.stages has ", stages, stages == 1 ? " range" : " ranges");
  } else if (par.stages() != 0) {
    stages = par.stages();
    field = absl::StrCat("parallel.stages ", stages);
  } else {
    return ChoosesDepth(planner) ? 0 : par.devices();
  }
  if (stages < 1) return absl::InvalidArgumentError(absl::StrCat(field, ": need at least 1"));
  if (stages > par.devices()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " but parallel.devices is ",
                                                   par.devices(),
                                                   ": each stage needs its own device: set "
                                                   "devices to at least ",
                                                   stages));
  }
  return stages;
}

absl::StatusOr<v1::ParallelPlan> MakePlan(const v1::JobSpec& spec, const PlanInputs& inputs) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> layers, InferLayers(spec.model()));
  const std::string planner = PlannerName(spec);
  if (std::find(std::begin(kJobPlanners), std::end(kJobPlanners), planner) ==
      std::end(kJobPlanners)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.planner '", planner, "' is unknown; known: ",
                     absl::StrJoin(std::begin(kJobPlanners), std::end(kJobPlanners), ", ")));
  }
  DAPPLE_ASSIGN_OR_RETURN(const int num_stages, ResolveNumStages(spec));
  const int num_layers = static_cast<int>(layers.size());
  if (planner == kManual) {
    std::vector<v1::StageRange> ranges(spec.parallel().stage_ranges().begin(),
                                       spec.parallel().stage_ranges().end());
    DAPPLE_RETURN_IF_ERROR(CheckPartition(ranges, num_layers));
  }

  const int64_t global_batch = spec.training().global_batch();
  const int64_t micro_batch = spec.training().micro_batch();
  if (micro_batch <= 0 || global_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.global_batch ", global_batch,
                                                   " and training.micro_batch ", micro_batch,
                                                   " must be > 0"));
  }
  if (global_batch % micro_batch != 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.global_batch ", global_batch,
                                                   " is not divisible by training.micro_batch ",
                                                   micro_batch));
  }
  const int64_t micro_batches = global_batch / micro_batch;
  if (micro_batches > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.global_batch ", global_batch, " / training.micro_batch ", micro_batch, " = ",
        micro_batches, " micro-batches per step is more than the maximum ",
        std::numeric_limits<int32_t>::max(), ": use a larger micro_batch"));
  }
  // parallel.schedule auto: the planner chooses (schedule_choice.h); the problem starts at dapple.
  const bool choose_schedule = spec.parallel().schedule() == kAutoSchedule;
  DAPPLE_ASSIGN_OR_RETURN(
      const schedule::ScheduleKind spec_kind,
      choose_schedule ? absl::StatusOr<schedule::ScheduleKind>(schedule::ScheduleKind::kDapple)
                      : schedule::ParseScheduleKind(spec.parallel().schedule()));

  // Step 1: the profile, indexed like model.layers.
  v1::ModelProfile model_profile;
  if (inputs.profile.has_value()) {
    DAPPLE_RETURN_IF_ERROR(profile::CheckProfileMatchesModel(*inputs.profile, spec.model()));
    model_profile = WithoutInputNodes(*inputs.profile);
  } else {
    DAPPLE_ASSIGN_OR_RETURN(
        model_profile,
        profile::EstimateProfile(spec.model(), micro_batch,
                                 NominalFlopsPerSecond(inputs.device_kind, inputs.defaults)));
  }
  if (model_profile.layers_size() != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", model_profile.source(), " has ", model_profile.layers_size(),
                     model_profile.layers_size() == 1 ? " layer" : " layers", " but the model has ",
                     num_layers, " (model.layers): a profile needs one entry per layer"));
  }

  // Step 2: the topology.
  const int devices = spec.parallel().devices();
  const v1::ClusterTopology topology =
      inputs.topology.has_value() ? *inputs.topology : SingleNodeTopology(devices, inputs.defaults);
  const int available = profile::NumDevices(topology);
  if (devices > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.devices ", devices, " but the cluster (", topology.source(), ") has ", available,
        available == 1 ? " device" : " devices", ": set devices to at most ", available,
        ", or plan on a cluster with at least ", devices));
  }

  // Step 3: the problem.
  PlanningProblem problem;
  DAPPLE_ASSIGN_OR_RETURN(problem.profile, profile::ToChain(model_profile));
  // What a profile does not say, from the model: the input stage 0 holds per micro-batch (token
  // ids as floats, like pixels), and the weights tied across layers.
  problem.profile.input_bytes = InputBytes(layers.front()) * problem.profile.batch_size;
  problem.profile.ties = TiesOf(layers);
  problem.topology = topology;
  problem.global_batch = global_batch;
  problem.micro_batch_size = micro_batch;
  problem.schedule = spec_kind;
  problem.recompute = Recompute(spec.training());
  problem.optimizer_state_factor = memory::OptimizerStateCopies(spec.training().optimizer());
  problem.vertical_sync = spec.parallel().pipedream().vertical_sync();
  problem.max_devices = devices;
  problem.max_replicas = inputs.max_replicas;
  problem.min_replica_rows = MinRowsPerReplica(layers);
  problem.evaluates_between_steps = EvaluatesBetweenSteps(spec);
  problem.eval_piece_rows = memory::EvalPieceRows(micro_batch, WidestFloatsPerSample(layers));
  if (spec_kind == schedule::ScheduleKind::kPipeDream && planner != kPipeDreamCodePlanner) {
    // 1F1B-RR: whole micro-batches round-robin, at most M replicas per stage (below).
    // PipeDream's code limits replicas not at all and finds M >= every replica count itself.
    const int cap = static_cast<int>(micro_batches);
    problem.max_replicas = problem.max_replicas > 0 ? std::min(problem.max_replicas, cap) : cap;
  }
  problem.num_stages = num_stages;
  problem.interleave = std::max(1, spec.parallel().interleave());
  problem.max_grad_norm = spec.training().max_grad_norm();
  problem.max_consecutive_skipped_steps = spec.training().max_consecutive_skipped_steps();
  DAPPLE_ASSIGN_OR_RETURN(problem.pipesgd_compression,
                          ParsePipeSgdCompression(spec.parallel().pipesgd().compression()));

  // Step 4: the plan and its prediction, for each (schedule, recompute) the spec leaves open.
  const bool cuda =
      spec.parallel().device_type() == "cuda" || absl::StartsWith(inputs.device_kind, "cuda");
  ChoiceLimits limits;
  limits.choose_schedule = choose_schedule;
  limits.schedule = spec_kind;
  limits.recompute = spec.training().recompute();
  InterleavedJob interleaved_job;
  interleaved_job.num_layers = num_layers;
  interleaved_job.num_stages = num_stages;
  interleaved_job.devices = devices;
  interleaved_job.max_replicas = problem.max_replicas;
  interleaved_job.micro_batches = micro_batches;
  interleaved_job.planner = planner;
  interleaved_job.recompute = spec.training().recompute();
  interleaved_job.cuda = cuda;
  for (int i = 0; i < num_layers && interleaved_job.tied_layer < 0; ++i) {
    if (layers[i].tied_layer >= 0) {
      interleaved_job.tied_layer = i;
      interleaved_job.tied_owner = layers[i].tied_layer;
    }
  }
  SetInterleaveLimits(interleaved_job, &limits);
  DAPPLE_ASSIGN_OR_RETURN(
      const ScheduleChoice choice,
      ChooseSchedule(problem, ScheduleOptions(limits), [&](const PlanningProblem& with) {
        return PlanFor(spec, planner, with, static_cast<int>(micro_batches));
      }));
  if (choice.chosen < 0) {
    return NoOptionFits(choice, spec, planner, problem, num_stages, static_cast<int>(micro_batches),
                        cuda);
  }
  const Alternative& chosen = choice.alternatives[static_cast<size_t>(choice.chosen)];
  const schedule::ScheduleKind kind = chosen.option.schedule;
  problem.schedule = kind;
  problem.recompute = chosen.option.recompute;
  if (chosen.option.interleave > 0) problem.interleave = chosen.option.interleave;
  const PlannedJob& planned = chosen.planned;
  const HybridPlan& plan = planned.plan;
  const int p = static_cast<int>(plan.stages.size());
  if (p < 1 || plan.micro_batches != micro_batches) {
    return absl::InternalError(absl::StrCat("planner ", planner, " returned ", p,
                                            " stages and M = ", plan.micro_batches,
                                            ", expected M = ", micro_batches));
  }
  DAPPLE_RETURN_IF_ERROR(CheckPipeDreamReplicas(kind, planner, plan, global_batch));

  // Step 5: the summary and the programs.
  v1::ParallelPlan result;
  v1::ParallelPlanSummary* summary = result.mutable_summary();
  *summary = ToSummary(problem, plan, planned.prediction, kind);
  summary->set_planner(planner);
  AddAlternatives(choice, summary);
  for (std::string& note : LeftOutNotes(limits)) summary->add_notes(std::move(note));
  for (int s = 0; s < p && s < summary->stages_size(); ++s) {
    double flops = 0;
    for (const v1::StageRange& range : schedule::StageChunks(*summary, s)) {
      flops += StageTrainFlopsPerSample(layers, range.first_layer(), range.last_layer());
    }
    summary->mutable_stages(s)->set_compute_flops(flops);
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::string device_use,
                          DeviceUseNote(problem, planned, planner, devices, inputs.devices_noun));
  if (!device_use.empty()) summary->add_notes(device_use);
  AddModelNotes(layers, problem.profile.ties, plan, planned.prediction, summary);
  AddStalenessNote(kind, spec.training().optimizer(), summary);
  // The collectives before each optimizer step: replicas' AllReduce, tied weights, clipping.
  DAPPLE_ASSIGN_OR_RETURN(const schedule::LowerOptions lower,
                          schedule::LowerOptionsFor(spec, *summary));
  DAPPLE_ASSIGN_OR_RETURN(std::vector<v1::RankProgram> programs,
                          schedule::BuildPrograms(kind, p, static_cast<int>(micro_batches), lower));
  for (v1::RankProgram& program : programs) *result.add_programs() = std::move(program);
  return result;
}

absl::StatusOr<v1::ParallelPlanSummary> PlanProfile(const v1::ModelProfile& profile,
                                                    const v1::ClusterTopology& topology,
                                                    absl::string_view planner, int64_t global_batch,
                                                    absl::string_view schedule_name) {
  ChoiceLimits limits;
  limits.choose_schedule = schedule_name == kAutoSchedule;
  if (!schedule_name.empty() && !limits.choose_schedule) {
    DAPPLE_ASSIGN_OR_RETURN(limits.schedule, schedule::ParseScheduleKind(schedule_name));
    if (limits.schedule == schedule::ScheduleKind::kInterleaved) {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedule ", schedule_name,
                       ": an interleaved plan needs a job spec (its parallel.stages P and "
                       "parallel.interleave v): dapplectl plan JOB.yaml"));
    }
    if (limits.schedule == schedule::ScheduleKind::kPipeDream ||
        limits.schedule == schedule::ScheduleKind::kPipeSgd) {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedule ", schedule_name,
                       ": a plan without a job spec is for a synchronous schedule: dapple, "
                       "gpipe, zb-h1, zb-h2 or auto"));
    }
  }
  PlanningProblem problem;
  DAPPLE_ASSIGN_OR_RETURN(problem.profile, profile::ToChain(profile));
  problem.topology = topology;
  problem.global_batch =
      global_batch > 0 ? global_batch : kDefaultProfileBatches * problem.profile.batch_size;
  problem.micro_batch_size = 0;
  const std::string name = planner.empty() ? std::string(kDapple) : std::string(planner);
  // PipeDream's code plans for its own runtime, 1F1B-RR, which runs any replica count.
  problem.schedule = name == kPipeDreamCodePlanner ? schedule::ScheduleKind::kPipeDream
                                                   : schedule::ScheduleKind::kDapple;
  if (name == kPipeDreamCodePlanner) {
    if (!schedule_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedule ", schedule_name, " with planner ", kPipeDreamCodePlanner,
                       ": it plans for PipeDream's 1F1B-RR (schedule pipedream) only"));
    }
    limits.schedule = schedule::ScheduleKind::kPipeDream;
  }
  // Interleaved 1F1B's depth and chunks are bounded by the job's layers, M and runtime (CUDA,
  // tied weights): without a spec there is no job to check them against.
  limits.interleave_left_out =
      "a plan without a job spec does not try it: dapplectl plan JOB.yaml --schedule auto";
  problem.optimizer_state_factor = 1.0;
  problem.max_devices = 0;
  problem.max_replicas = 0;
  problem.num_stages = 0;
  DAPPLE_ASSIGN_OR_RETURN(
      const ScheduleChoice choice,
      ChooseSchedule(problem, ScheduleOptions(limits),
                     [&](const PlanningProblem& with) { return RunPlanner(name, with); }));
  if (choice.chosen < 0) {
    const Alternative& first = choice.alternatives.front();
    return absl::Status(first.status.code(),
                        absl::StrCat(first.status.message(), NoneFitsNote(choice, first)));
  }
  const Alternative& chosen = choice.alternatives[static_cast<size_t>(choice.chosen)];
  problem.schedule = chosen.option.schedule;
  problem.recompute = chosen.option.recompute;
  v1::ParallelPlanSummary summary =
      ToSummary(problem, chosen.planned.plan, chosen.planned.prediction, problem.schedule);
  AddAlternatives(choice, &summary);
  for (std::string& note : LeftOutNotes(limits)) summary.add_notes(std::move(note));
  return summary;
}

}  // namespace dapple::coordinator
