// A discrete-event simulator of a set of rank programs (one per stage).
//
// Semantics, the same as the worker runtime's: an action starts when its rank is free; a SEND
// is non-blocking (its rank moves on after `send` cost); its data then crosses the directed link
// toward the peer stage for that boundary's transfer time (act_/grad_transfer_per_boundary; 0
// by default), one transfer at a time per direction, first come first served in send order (a
// directed link has one sender, so that is the sender's program order): the transfer starts at
// max(send end, the link's previous transfer end). The transfer's latency part
// (link_latency_per_boundary) does not hold the link: the next message may start as soon as this
// one's bytes are out, and they arrive that latency later (messages in flight overlap, as in
// LogP's L, Culler et al. 1993; on loopback TCP a burst of eight tiny activations arrives about
// one latency after the last is sent, not eight). A RECV blocks until the matching SEND
// (same micro-batch, same kind, from the neighbouring stage) has been issued, and ends `recv`
// cost after max(its start, the transfer's end); across a link through host memory each send and
// receive also costs its rank host_copy_per_boundary. FORWARD / BACKWARD / BACKWARD_INPUT /
// BACKWARD_WEIGHT / OPTIMIZER_STEP take their cost (busy time), STALE_OPTIMIZER_STEP too;
// ALLREDUCE and ALLREDUCE_ASYNC take `allreduce` (0 by default) on their rank: the AllReduce among
// that stage's replicas, which are not simulated themselves (they run the same program in
// lockstep; no overlap across steps is modelled). The weight-stash actions (USE_WEIGHTS,
// RESTORE_WEIGHTS, STASH_WEIGHTS, DROP_WEIGHTS) take no time, and so does GLOBAL_NORM_ASYNC (its
// AllGather runs beside the rank and is awaited a step later: not a barrier). TIED_ALLREDUCE and
// GLOBAL_NORM are barriers: the k-th GLOBAL_NORM of every stage, and the k-th TIED_ALLREDUCE of
// every stage whose program holds one, complete together, at `global_norm` / `tied_allreduce` (0 by
// default) after the last of them started (the collective among those stages' ranks; replicas again
// run in lockstep). Pairing: SEND_ACT m on stage s goes to RECV_ACT m on stage s + 1; SEND_GRAD m
// on stage s goes to RECV_GRAD m on stage s
// - 1. Because sends never block, whether a program set deadlocks does not depend on the costs.
//
// Virtual stages (interleaved 1F1B, generators.h GenerateInterleavedOps): a program is a rank,
// and its actions may name virtual stages (Action::stage / Op::stage): rank s of P runs s,
// s + P, ..., s + (v - 1)P, v = 1 + the largest chunk any action names. Everything said above of
// a stage then holds per virtual stage (micro-batch sets, pairing: SEND_ACT m on virtual stage
// k goes to RECV_ACT m on k + 1, which runs on rank (k + 1) mod P; one directed link per virtual
// boundary; the per-stage and per-boundary cost vectors have P * v and P * v - 1 entries, the
// rank's actions without a micro-batch (OPTIMIZER_STEP, the collectives) taking entry s), while
// busy, idle and comm times, peak_in_flight (chunk forwards whose backward is not done) and the
// grid are per rank; a grid cell names the chunk after a dot ("F3.1": micro-batch 3, chunk 1).
//
// Cost: O(actions + P * M) time and O(P * M) memory (each rank runs until it blocks and is
// resumed only by the send it waits for).
//
// Grid format (SimulationResult::grid and deadlock messages): a line "one column = <q> time
// unit(s)", a header "t | 0 1 2 ..." of column numbers, then one line "stage <s> | cells" per
// stage. Column c covers time [c*q, (c+1)*q), q = the smallest positive compute cost (so unit-ish
// costs give one column per unit; a BACKWARD of cost 2 fills two columns), widened so there are
// at most 240 columns (with BACKWARD_WEIGHT actions in the programs, the smallest positive
// BACKWARD_INPUT / BACKWARD_WEIGHT cost counts too). A cell shows what the rank was doing at the
// middle of its slot: F<m>, B<m> (BACKWARD or BACKWARD_INPUT), W<m> (BACKWARD_WEIGHT), ST
// (OPTIMIZER_STEP), AR / TA / GN (ALLREDUCE / TIED_ALLREDUCE / GLOBAL_NORM, when it
// costs time), sa<m>/ra<m>/sg<m>/rg<m>
// (send/recv of an activation/gradient, only when they cost time) or "." (idle, including
// waiting on a receive; link transfers are not drawn). Cells are left-aligned and
// padded to one width; trailing blanks are trimmed. In a deadlock message each stage line ends
// with "  <- waits on <action>" (a receive, or a barrier some stage did not reach) or
// "  <- finished". Example (P=2, M=1, default costs):
//   one column = 1 time unit
//         t | 0  1  2  3  4  5
//   stage 0 | F0 .  .  .  B0 B0
//   stage 1 | .  F0 B0 B0 .  .
//
// Thread safety: pure functions of their arguments.
#ifndef DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_
#define DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

// The split of a backward time into its weight-gradient part (T_W = f * T_back) when a profile
// has only the whole backward: half/half, the one rule every consumer (this simulator's default,
// the emulated device's waits) uses; ActionCosts::backward_weight_fraction says why.
inline constexpr double kBackwardWeightFraction = 0.5;

// Costs in abstract time units (or ms); per-stage vectors override the scalars when non-empty.
// The defaults give every existing caller its old results: free communication and AllReduce.
struct ActionCosts {
  double forward = 1.0;
  double backward = 2.0;
  double send = 0.0;
  double recv = 0.0;
  double optimizer_step = 0.0;
  double allreduce = 0.0;
  double tied_allreduce = 0.0;  // the tied weights' AllReduce (one per TIED_ALLREDUCE)
  double global_norm = 0.0;     // the job-wide norm collective (one per GLOBAL_NORM)
  // The zero-bubble split (BACKWARD_INPUT / BACKWARD_WEIGHT, Qi et al., ICLR 2024) of a stage's
  // backward cost T_back (backward / backward_per_stage, the whole backward as profiled):
  // BACKWARD_WEIGHT costs f * T_back and BACKWARD_INPUT (1 - f) * T_back, f in [0, 1] this
  // fraction (per stage when backward_weight_fraction_per_stage is non-empty). The rule when a
  // profile has one backward time: half/half (the default), which is exact by FLOPs for the
  // matrix-multiply layers that dominate a stage (dense / linear: dX = dY W^T and dW = X^T dY
  // are both 2 * rows * in * out FLOPs), so T_B = T_W = T_back / 2. A plain BACKWARD still costs
  // T_back.
  double backward_weight_fraction = kBackwardWeightFraction;
  std::vector<double> backward_weight_fraction_per_stage;
  std::vector<double> forward_per_stage;
  std::vector<double> backward_per_stage;
  std::vector<double> optimizer_step_per_stage;
  std::vector<double> allreduce_per_stage;
  // Empty (none) or P entries: activation recomputation's forward, which a recomputing stage
  // runs again before each micro-batch's BACKWARD (worker/runtime/layer_recompute.h); it
  // lengthens that BACKWARD (0 for a stage that keeps its activations).
  std::vector<double> recompute_per_stage;
  // Empty (no transfer time) or P - 1 entries. Entry s: the time one micro-batch's activation
  // (SEND_ACT on stage s) / gradient (SEND_GRAD on stage s + 1) occupies the directed link
  // between stages s and s + 1.
  std::vector<double> act_transfer_per_boundary;
  std::vector<double> grad_transfer_per_boundary;
  // Empty (none) or P - 1 entries, each at most both transfers of its boundary. Entry s: the
  // part of each transfer across the boundary between stages s and s + 1 that is the link's
  // latency: the message arrives that long after the rest of its transfer ends, and the link
  // does not wait for it before carrying the next message.
  std::vector<double> link_latency_per_boundary;
  // Empty (none) or P - 1 entries. Entry s: the rank time that each SEND and each RECV of one
  // micro-batch's activation or gradient across the boundary between stages s and s + 1 costs
  // on its own rank, beyond `send` / `recv`: the copies of a link through host memory (two
  // processes of one host over loopback TCP copy every message into and out of the kernel on
  // their own cores), which then occupy the ranks rather than the link.
  std::vector<double> host_copy_per_boundary;
};

struct SimulateOptions {
  // false: SimulationResult::grid stays empty and no per-action slots are kept (for callers that
  // simulate many plans). Deadlock messages show the grid either way.
  bool render_grid = true;
  // true: SimulationResult::compute_intervals holds every FORWARD / BACKWARD / OPTIMIZER_STEP's
  // [start, end) (for models of stages that share compute, coordinator/planner/host_contention.h).
  bool keep_compute_intervals = false;
};

// One stretch of time a rank computed (a FORWARD, BACKWARD or OPTIMIZER_STEP of positive cost).
struct ComputeInterval {
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  double step_time = 0;           // makespan of the step
  std::vector<double> busy_time;  // per stage: compute (F, B, STEP)
  // Per stage: its collectives (ALLREDUCE, TIED_ALLREDUCE and GLOBAL_NORM costs; the wait for
  // the other members of a barrier is idle).
  std::vector<double> allreduce_time;
  // Per stage: transfer time of the activations and gradients it sends and receives (each
  // transfer counts on both of its stages; send/recv rank costs are not included).
  std::vector<double> comm_time;
  // Per stage: the rank time of its sends and receives (send / recv and host_copy_per_boundary
  // costs; inside idle_time, as it is neither compute nor collective).
  std::vector<double> message_time;
  std::vector<double> idle_time;  // per stage: step_time - busy - allreduce (the bubble)
  double bubble_fraction = 0;     // sum(idle) / (P * step_time)
  // Per stage: max forwards whose backward is not done (for a split backward: whose
  // BACKWARD_WEIGHT is not done, since the stashed activations live until then).
  std::vector<int> peak_in_flight;
  // Per stage: end time of each of its OPTIMIZER_STEPs, in program order (for steady-state
  // measurements over runs of several updates).
  std::vector<std::vector<double>> optimizer_step_end;
  // Per stage, in program order, with SimulateOptions::keep_compute_intervals (else empty).
  std::vector<std::vector<ComputeInterval>> compute_intervals;
  std::string grid;  // time-slot by rank table (text), for messages and docs
};

// Runs `programs` (programs[s] is stage s) against each other. M is 1 + the largest micro-batch
// of any FORWARD/BACKWARD.
// kFailedPrecondition "deadlock: stage <s> waits on <action> (action <i>) for <peer send>; ...;
// what ran:" followed by the grid, when no rank can move (a barrier waits "for stages 0, 2 to
// reach GLOBAL_NORM").
// kInvalidArgument (naming the action, its stage and index) for: an unpaired send/recv, a
// BACKWARD before its FORWARD, a micro-batch not forwarded and backwarded exactly once per stage
// (by one BACKWARD or one BACKWARD_INPUT), a BACKWARD_WEIGHT not after its micro-batch's
// BACKWARD_INPUT or run twice, a BACKWARD_INPUT without its BACKWARD_WEIGHT,
// and also: programs[s].stage() != s or an action whose stage is not its program's (one of s,
// s + P, ... for virtual stages), an
// unspecified kind, a negative micro-batch, a micro-batch >= M, a send/recv toward a stage that
// does not exist, a FORWARD on stage > 0 before its RECV_ACT, a BACKWARD on stage < P-1 before its
// RECV_GRAD, a SEND_ACT/SEND_GRAD before the FORWARD/BACKWARD that computes it, members of a
// barrier that run it a different number of times ("stage 1 runs 2 GLOBAL_NORM but stage 0
// runs 1: ..."), an empty
// `programs`, or a cost that is negative / not finite / a per-stage vector whose size is not P /
// a per-boundary vector whose size is not P - 1, a backward_weight_fraction outside [0, 1].
absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs = {});
absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs, const SimulateOptions& options);

// The same on Ops (op.h): programs[s] is stage s's program. Same results and errors (less
// programs[s].stage(), which an OpProgram does not have; an Op whose stage is set and not one
// of s, s + P, ... is refused as an action of another stage).
absl::StatusOr<SimulationResult> SimulateOps(const std::vector<OpProgram>& programs,
                                             const ActionCosts& costs = {},
                                             const SimulateOptions& options = {});

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_SIMULATOR_H_
