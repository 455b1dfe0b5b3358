// Pure schedule generators: (P, M, stage) -> the compute actions of one training step.
// Compute actions are FORWARD, BACKWARD (or, for the zero-bubble schedules, BACKWARD_INPUT and
// BACKWARD_WEIGHT) and a final OPTIMIZER_STEP (Pipe-SGD: ALLREDUCE_ASYNC and
// STALE_OPTIMIZER_STEP); communication is added by lowering.h, never here. Every function here is
// pure and thread-safe.
//
// Preconditions of the Generate* functions (unchecked; BuildPrograms in lowering.h validates):
// num_stages P >= 1, 0 <= stage < P, num_micro_batches M >= 1. Every result holds each
// micro-batch's FORWARD and BACKWARD exactly once (backward after forward; the zero-bubble
// schedules hold BACKWARD_INPUT then BACKWARD_WEIGHT instead of BACKWARD), then one
// OPTIMIZER_STEP with micro_batch -1, all with `stage` as their stage. (GeneratePipeDream with
// a run of several updates is the one exception: it holds one OPTIMIZER_STEP per update.)
//
// Each generator has an Op form (op.h) for callers that build many programs; the v1::Action
// forms convert it.
#ifndef DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
#define DAPPLE_COMMON_SCHEDULE_GENERATORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

enum class ScheduleKind { kGPipe, kDapple, kPipeDream, kPipeSgd, kZbH1, kZbH2, kInterleaved };

// "gpipe" | "dapple" | "pipedream" | "pipesgd" | "zb-h1" | "zb-h2" | "interleaved";
// kInvalidArgument naming the value and the known names otherwise.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
absl::string_view ScheduleKindName(ScheduleKind kind);

// GPipe (Huang et al., NeurIPS 2019): all M forwards, then all M backwards in reverse
// order (B M-1 ... B 0), then OPTIMIZER_STEP (flush). Peak in-flight activations: M.
std::vector<v1::Action> GenerateGPipe(int num_stages, int num_micro_batches, int stage);

// DAPPLE early-backward 1F1B (Fan et al., PPoPP 2021, section 4): stage i (0-based) runs
// K_i = min(P - i, M) warm-up forwards, then alternates one backward / one forward while
// forwards remain (steady), then the remaining backwards (cool-down), in micro-batch order,
// then OPTIMIZER_STEP. Peak in-flight activations on stage i: K_i.
std::vector<v1::Action> GenerateDapple(int num_stages, int num_micro_batches, int stage);

// PipeDream's 1F1B (Narayanan et al., SOSP 2019, section 3.2) over one continuous run of
// num_micro_batches micro-batches, with no flush anywhere: stage i runs min(P - i, M) warm-up
// forwards, then strictly one backward / one forward, then the remaining backwards (the order
// of GenerateDapple over the whole run). Weight updates: an OPTIMIZER_STEP right after every
// micro_batches_per_update-th backward (micro-batches k*n - 1) and after the last backward.
// PipeDream's runtime updates after every micro-batch (n = 1); dapple's pipedream mode keeps
// the job's global batch of M micro-batches per update (n = M: gradients of M micro-batches
// accumulate, one AllReduce and one update per M), which keeps the same number of updates per
// epoch as gpipe and dapple. Either way, forwards of the next update's micro-batches run before
// the previous update is applied, with the weights that were current then; PipeDream's weight
// stashing keeps, per in-flight micro-batch, the weights its forward used, so its backward uses
// them too (up to min(P - i, M) - 1 versions besides the current one). Precondition:
// micro_batches_per_update >= 1. Peak in-flight activations on stage i: min(P - i, M).
std::vector<v1::Action> GeneratePipeDream(int num_stages, int num_micro_batches, int stage,
                                          int micro_batches_per_update);

// Pipe-SGD (Li et al., NeurIPS 2018): data parallelism, one stage (P = 1) replicated. Its rank
// program is M x (FORWARD m, BACKWARD m) in micro-batch order, then ALLREDUCE_ASYNC (the
// step's gradient AllReduce, overlapping step t + 1) and STALE_OPTIMIZER_STEP (the update with
// the previous step's reduced gradient: worker/runtime/pipesgd_updater.h), in place of
// OPTIMIZER_STEP (so the lowering adds no synchronous ALLREDUCE). Precondition:
// num_stages == 1 (BuildPrograms refuses more).
std::vector<v1::Action> GeneratePipeSgd(int num_stages, int num_micro_batches, int stage);

// The zero-bubble handcrafted schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
// 2024, section 3). The backward is split into BACKWARD_INPUT ("B": dL/dx, which the previous
// stage waits for) and BACKWARD_WEIGHT ("W": dL/dparam, which nothing downstream waits for, so
// it can be deferred into what would be bubbles). Stage i (0-based) of P runs w_i = min(warm-up,
// M) forwards, then per micro-batch k in order: BACKWARD_INPUT k, then BACKWARD_WEIGHT k - lag_i
// when k >= lag_i, then the next FORWARD while forwards remain; then the deferred
// BACKWARD_WEIGHTs in micro-batch order; then OPTIMIZER_STEP (after every W, so the ALLREDUCE
// and GLOBAL_NORM that lowering puts before it see complete gradients).
//
// Figures below for equal stages with per-micro-batch costs T_F (forward), T_B (input
// gradient), T_W (weight gradient), M >= the warm-up, one flushed step (the simulator's
// step_time); "in flight" = forwarded micro-batches whose BACKWARD_WEIGHT has not run (their
// activations are stashed). For comparison, 1F1B (GenerateDapple, one BACKWARD of T_B + T_W):
// step M(T_F+T_B+T_W) + (P-1)(T_F+T_B+T_W), bubble per stage (P-1)(T_F+T_B+T_W), peak in
// flight P - i.
//
// ZB-H1 (paper's Figure 3 top, "memory efficient"): warm-up P - i, lag i: every stage holds
// at most P micro-batches in flight, 1F1B's peak (stage 0's), so the peak activation memory of
// the pipeline does not grow. Bubble per stage (P-1)(T_F+T_B-T_W), step M(T_F+T_B+T_W) +
// (P-1)(T_F+T_B-T_W) (exact for T_F >= T_B and T_W <= T_F, the paper's T_F = T_B = T_W in
// particular: then (P-1)T, a third of 1F1B's 3(P-1)T).
//
// ZB-H2 (Figure 3 bottom, "zero bubble"): warm-up 2P - 1 - 2i, lag 2i: up to 2P - 1 micro-batches
// in flight on every stage (about twice 1F1B's activation memory). With T_F = T_B = T_W every
// stage is busy without a gap from its first forward to its last W (a parallelogram), so the
// bubble inside a stage's span is (P-1)(T_F+T_B-2T_W) = 0 and, when steps follow each other
// without a barrier, the step period is M(T_F+T_B+T_W). One flushed step from a cold start
// still waits (P-1)T_F for the first forward to reach the last stage: step M(T_F+T_B+T_W) +
// (P-1)T_F, bubble per stage (P-1)T_F.
//
// Whole-step checks (training.max_grad_norm, non-finite checks): OPTIMIZER_STEP comes after the
// stage's last BACKWARD_WEIGHT, and lowering puts GLOBAL_NORM right before it, so the global norm
// is taken over complete gradients and clipping is exact under both schedules without the
// paper's optimizer post-validation (worker/runtime/clipping_runtime_test.cc). Its barrier is
// what stops consecutive ZB-H2 steps from overlapping: with clipping, a step is the flushed one.
OpProgram GenerateZbH1Ops(int num_stages, int num_micro_batches, int stage);
OpProgram GenerateZbH2Ops(int num_stages, int num_micro_batches, int stage);
// The order above for any warm_up >= 1 (capped at M) and weight_lag >= 0. Non-increasing warm-ups
// over the stages keep a program set deadlock-free (BACKWARD_WEIGHT has no cross-stage
// dependency, so the lag never affects it).
OpProgram GenerateZeroBubbleOps(int num_micro_batches, int warm_up, int weight_lag);
std::vector<v1::Action> GenerateZbH1(int num_stages, int num_micro_batches, int stage);
std::vector<v1::Action> GenerateZbH2(int num_stages, int num_micro_batches, int stage);

// Megatron's interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", SC'21, section 2.2.2). The model is cut into P * v
// virtual stages ("model chunks"); rank r of P holds the v non-adjacent chunks c = 0..v-1, chunk
// c being virtual stage c * P + r (so activations go r -> r + 1 -> ... -> P - 1 -> 0 of the next
// chunk). Every Op of the result names its virtual stage (Op::stage) except the OPTIMIZER_STEP
// (stage -1: the rank's, one update of all its chunks).
//
// The order (Megatron-Core's schedule table): the micro-batches in consecutive groups
// (InterleavedGroups: P each when P divides M); the forwards run group after group, each group's
// micro-batches through chunk 0, then chunk 1, ..., chunk v - 1; the backwards the same with the
// chunks in reverse order (v - 1 first). Rank r runs InterleavedWarmUp forwards, then one
// forward / one backward while forwards remain (steady), then the remaining backwards
// (cool-down), then OPTIMIZER_STEP. Megatron needs P | M; spreading the remainder of M / P over
// the first groups (a short last group deadlocks for some P, v; the remainder on the last groups
// makes a later group larger than the warm-up covers: a backward before its forward) makes the
// order valid and deadlock-free for EVERY M >= 1 (proven by BuildPrograms' simulation;
// interleaved_test.cc covers P in 2..8, v in 2..8, M in 1..4P + 1). Job submission still asks
// for M >= P (common/job_spec_validate_interleaved.cc): the figures below hold from there on.
//
// Figures for equal virtual stages with per-micro-batch costs T_F, T_B for a whole rank's layers
// (T_F / v, T_B / v per chunk), any M >= P, one flushed step (interleaved_test.cc checks them for
// P in 2..8, v in 2..4, M in P..3P): step M(T_F + T_B) + (P - 1)(T_F + T_B) / v, bubble per rank
// (P - 1)(T_F + T_B) / v, bubble fraction (P - 1) / (vM + P - 1): 1F1B's (P - 1) / (M + P - 1)
// with the (P - 1) divided by v. The price: v times the point-to-point messages, and more
// activations: rank r holds InterleavedInFlight chunk activations at the peak, on rank 0 with
// P | M and M >= 2P (v + 1)P - 1 chunks = P + (P - 1) / v ranks' worth (1F1B: P).
//
// Preconditions (unchecked; BuildPrograms checks them): P >= 1, chunks v >= 1, M >= 1.
OpProgram GenerateInterleavedOps(int num_stages, int chunks, int num_micro_batches, int stage);
std::vector<v1::Action> GenerateInterleaved(int num_stages, int chunks, int num_micro_batches,
                                            int stage);
// The group sizes of the order above, in order: floor(M / P) groups of P, the remainder
// M mod P added one each to the first groups (cycling when the remainder exceeds the groups);
// one group of M when M < P. Example: P = 4, M = 9 -> {5, 4}; P = 4, M = 11 -> {6, 5}.
std::vector<int> InterleavedGroups(int num_stages, int num_micro_batches);
// Megatron's warm-up of rank `stage` (forwards, each of one chunk, before the first backward):
// min((P - 1 - r) * 2 + (v - 1) * g_0, v * M), g_0 the first group's size (P when P | M).
// The one place the formula lives (the memory model's in-flight count is derived from it).
int InterleavedWarmUp(int num_stages, int chunks, int num_micro_batches, int stage);
// Most chunk activations rank `stage` holds at once: min(InterleavedWarmUp + 1, v * M) (the
// steady phase's forward runs before its backward frees one). Each is one chunk's (1/v of the
// rank's layers' activations, for equal chunks).
int InterleavedInFlight(int num_stages, int chunks, int num_micro_batches, int stage);
// Per chunk c of rank `stage` (v entries): the most micro-batches of chunk c whose forward has
// run and whose backward has not, over the rank's program (GenerateInterleavedOps). A chunk
// keeps a slot per such micro-batch and reuses, never frees, them, so a rank's activations at
// its peak are the chunks' slot counts times their sizes; the counts add up to at least
// InterleavedInFlight (rank 0 with P = 2, v = 2, M = 4: {4, 2} against 5 at once).
std::vector<int> InterleavedChunkSlots(int num_stages, int chunks, int num_micro_batches,
                                       int stage);

// Dispatch. kPipeDream here is one update of M micro-batches
// (GeneratePipeDream(P, M, stage, M)): with a single update and no later one to overlap, its
// order equals GenerateDapple's; PipeDream differs only across updates, so simulate its steady
// state with GeneratePipeDream over several updates.
// `chunks` (v) is used by kInterleaved only (1 for every other kind).
std::vector<v1::Action> Generate(ScheduleKind kind, int num_stages, int num_micro_batches,
                                 int stage, int chunks = 1);

// The Op forms of the generators above (same preconditions and order).
OpProgram GenerateGPipeOps(int num_stages, int num_micro_batches, int stage);
OpProgram GenerateDappleOps(int num_stages, int num_micro_batches, int stage);
OpProgram GeneratePipeDreamOps(int num_stages, int num_micro_batches, int stage,
                               int micro_batches_per_update);
// The same order with `warm_up` (>= 1) forwards before the first backward instead of
// min(P - i, M), capped at M: a stage of D_s replicas under 1F1B-RR runs as a whole with warm-up
// D_s + ... + D_{P-1} (pipedream_steps.h). Non-increasing warm-ups over the stages keep a
// program set deadlock-free.
OpProgram GeneratePipeDreamOpsWithWarmUp(int num_micro_batches, int micro_batches_per_update,
                                         int warm_up);
OpProgram GeneratePipeSgdOps(int num_stages, int num_micro_batches, int stage);
OpProgram GenerateOps(ScheduleKind kind, int num_stages, int num_micro_batches, int stage,
                      int chunks = 1);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_GENERATORS_H_
