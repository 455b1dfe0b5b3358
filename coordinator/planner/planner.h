// The job-level planner: JobSpec (+ a profile and a topology) -> ParallelPlan (the summary with
// the simulator's prediction, and one RankProgram per stage). It wraps the planners of
// planners.h (dapple, pipedream, dp, uniform, balanced) and the spec's own stage ranges
// (manual), all scored by the same simulator (plan_simulator.h). Pure (no I/O); thread-safe.
//
// Steps of MakePlan:
//   1. Profile: PlanInputs.profile (checked against the model with CheckProfileMatchesModel,
//      its Input nodes dropped so that layer k is model.layers[k]) or, without one,
//      profile::EstimateProfile at training.micro_batch samples and the nominal FLOP rate of the
//      job's device kind (PlanDefaults::cpu_flops_per_second / cuda_flops_per_second).
//   2. Topology: PlanInputs.topology, or SingleNodeTopology(parallel.devices) with the
//      defaults. parallel.devices must not exceed its devices.
//   3. Problem: global batch and micro-batch size from training (the planner does not change
//      M: the workers run training.micro_batch), the schedule, the optimizer's state factor
//      (sgd 0, sgd with momentum 1, adamw 2), max_devices = parallel.devices, max_replicas =
//      PlanInputs.max_replicas (the coordinator passes parallel.devices; 1 forbids replicas),
//      under schedule pipedream at most M (1F1B-RR sends whole micro-batches round-robin to a
//      stage's replicas; each needs one per step) and P: the stage_ranges for manual;
//      parallel.stages when set; for balanced and uniform with stages auto parallel.devices
//      (one stage per device); for dapple, pipedream and dp with stages auto the planner's
//      choice. balanced, uniform and manual run every stage on D = parallel.devices / P
//      replicas (stage s on devices s * D .. s * D + D - 1; the plan scored again by the
//      simulator); dapple, pipedream and dp choose replicas themselves (dp: P = 1 on every
//      device).
//   4. Plan: RunPlanner(parallel.planner, problem) (empty planner: balanced); manual: the
//      spec's ranges on devices 0..P-1, scored by SimulatePlan. Once per (schedule, recompute)
//      option the spec leaves open (schedule_choice.h ScheduleOptions: parallel.schedule auto
//      tries dapple, zb-h1, zb-h2 and gpipe; training.recompute auto, or unset with schedule
//      auto, tries none and auto; no zero-bubble schedule and no recomputation on CUDA), the
//      fastest that fits chosen (ChooseSchedule); the summary lists the alternatives and the
//      reason, and its schedule and stages' recompute are the chosen option's.
//   5. Summary: ToSummary (plan_summary.h) plus compute_flops per stage (forward + backward
//      FLOPs per sample, common/model_info.h) and notes (on fewer devices than
//      parallel.devices: DeviceUseNote, device_use.h, says how many and why); programs =
//      schedule::BuildPrograms(schedule, P, M) with an ALLREDUCE for the stages with replicas.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_info.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// What the coordinator assumes where nothing better is known (docs/coordinator.md, "Flags":
// each has a flag). Units: bytes, bytes/s, ms, FLOP/s.
struct PlanDefaults {
  // Memory of a device whose worker reported none, and of the devices of SingleNodeTopology.
  int64_t device_memory_bytes = int64_t{16} << 30;
  // Links between devices of one node / of different nodes. The intra-node default is about
  // what UCX moves between two processes of one host (shared memory, docs/benchmarks.md); the
  // inter-node one is 25 Gbit/s Ethernet.
  double intra_node_bandwidth_bytes_per_s = 10e9;
  double intra_node_latency_ms = 0.01;
  double inter_node_bandwidth_bytes_per_s = 3.125e9;
  double inter_node_latency_ms = 0.02;
  // Nominal FLOP rates of estimated profiles: about half a core's sgemm peak here (small
  // layers reach less), and a round number below an H100/H200's dense fp32 peak.
  double cpu_flops_per_second = 50e9;
  double cuda_flops_per_second = 50e12;
};

// One node "local" with `devices` devices of defaults.device_memory_bytes and the default
// links; source "one node of N devices (coordinator defaults)".
v1::ClusterTopology SingleNodeTopology(int devices, const PlanDefaults& defaults);

// The nominal FLOP rate for estimated profiles on `device_kind`: cuda_flops_per_second for
// "cuda" (or "cuda:..."), cpu_flops_per_second otherwise.
double NominalFlopsPerSecond(absl::string_view device_kind, const PlanDefaults& defaults);

struct PlanInputs {
  std::optional<v1::ModelProfile> profile;      // none: estimated (step 1)
  std::optional<v1::ClusterTopology> topology;  // none: SingleNodeTopology(parallel.devices)
  std::string device_kind = "cpu";              // "cpu" | "cuda": the estimate's FLOP rate
  int max_replicas = 1;                         // 0: unlimited; 1: no replicas
  PlanDefaults defaults;
  // What the plan's notes call parallel.devices: a restart onto fewer workers plans with
  // parallel.devices set to them and says so ("live workers (parallel.devices 4)").
  std::string devices_noun = "parallel.devices";
};

// Per-layer fixed cost (FLOP-equivalents per sample) added to every layer's estimate: a stand-in
// for kernel launch and memory traffic that keeps cost-free layers (flatten) from being free.
// Used by LayerCosts only (tests and benchmarks of the FLOP view); MakePlan plans on profiles.
inline constexpr double kLayerOverheadFlops = 1000;

// forward_flops + backward_flops + kLayerOverheadFlops for each layer.
std::vector<double> LayerCosts(const std::vector<LayerInfo>& layers);

// The number of stages P the spec fixes: stage_ranges.size() for planner manual, else
// parallel.stages, else (auto) parallel.devices for balanced and uniform and 0 (the planner
// chooses) for dapple, pipedream and dp. kInvalidArgument naming the field when P > devices,
// or when devices < 1.
absl::StatusOr<int> ResolveNumStages(const v1::JobSpec& spec);

// Plans `spec` (steps above). The summary has everything ToSummary gives (planner, schedule,
// M, micro-batch size, stages with replicas, placement and the prediction, profile and
// cluster sources, notes) plus compute_flops per stage; worker_ids / devices / hostnames stay
// empty (the scheduler fills them). programs[s] is stage s's RankProgram (replica 0).
// Errors, one line each:
//   kInvalidArgument: InferLayers' errors; an unknown planner ("parallel.planner 'foo' is
//     unknown; known: balanced, uniform, manual, dapple, pipedream, pipedream-code, dp") or
//     schedule;
//     micro_batch <= 0 or not dividing global_batch; a profile that does not match the model
//     (CheckProfileMatchesModel's message); parallel.devices beyond the topology's devices;
//     bad stage_ranges; RunPlanner's and SimulatePlan's argument errors; under schedule
//     pipedream a stage with more than M replicas ("parallel.planner uniform gives stage 0 4
//     replicas, but parallel.schedule pipedream sends whole micro-batches round-robin ...").
//   kResourceExhausted: no plan fits device memory: RunPlanner's message with "parallel." before
//     it, or for fixed stages and replicas "parallel.planner manual: its plan needs 3.2 GiB on
//     a device (stage 0: weights 1.1 GiB, activations 2.1 GiB) but devices have 1.0 GiB", then
//     the fields that change it (": to fit, split the model into more parallel.stages ranges
//     (now 2, on parallel.devices 2), or use a smaller training.micro_batch (now 32) or devices
//     with more memory"); when the spec does not recompute and a plan would fit with
//     training.recompute auto, that fix comes first (": to fit, set training.recompute: auto (a
//     plan fits with it), or ...").
//   kFailedPrecondition: a schedule that deadlocks (BuildPrograms).
absl::StatusOr<v1::ParallelPlan> MakePlan(const v1::JobSpec& spec, const PlanInputs& inputs = {});

// Plans a profile without a job (`dapplectl plan --profile` without JOB.yaml): planner
// `planner` (default "dapple" when empty) on the whole `topology`, replicas unlimited, the
// planner choosing P and M, `global_batch` samples per step (0: 16 x profile.batch_size),
// schedule `schedule` ("" : dapple; gpipe, zb-h1, zb-h2; "auto": the planner chooses the
// schedule and recomputation as for parallel.schedule auto with training.recompute unset,
// schedule_choice.h; planner pipedream-code plans for pipedream, PipeDream's 1F1B-RR, and takes
// no `schedule`), sgd with momentum (state factor 1). The summary is ToSummary's, with the
// alternatives for "auto". Errors: ToChain's and RunPlanner's (kInvalidArgument,
// kResourceExhausted: the first alternative's when none fits); kInvalidArgument for an unknown
// or asynchronous schedule.
absl::StatusOr<v1::ParallelPlanSummary> PlanProfile(const v1::ModelProfile& profile,
                                                    const v1::ClusterTopology& topology,
                                                    absl::string_view planner, int64_t global_batch,
                                                    absl::string_view schedule = "");

// How many samples PlanProfile uses per step when given 0: this many profile batches.
inline constexpr int64_t kDefaultProfileBatches = 16;

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLANNER_H_
