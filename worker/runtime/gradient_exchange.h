// The collectives of one rank before each update, over its backend's accumulated gradients
// (docs/schedules.md, "Collectives before the update"), in the order the lowering pass puts
// their actions (common/schedule/lowering.h):
//
//   TIED_ALLREDUCE  AllReduceTied: the tied group (every replica of every stage that holds one
//                   side of a tied weight split across stages; common/schedule/job_lowering.h)
//                   sums its members' LOCAL partial gradients of the tied tensors, so every copy
//                   holds the gradient of both uses over the whole global batch (Megatron-LM's
//                   and DeepSpeed's tied embeddings).
//   ALLREDUCE       AllReduceReplicas: the stage's replicas sum their gradients (DAPPLE,
//                   Fan et al., PPoPP 2021, section 4), the tied tensors left out (already
//                   global), the last stage's loss sum riding along as one more float. Right
//                   before, on the same collective, they sum the step statistics of their
//                   layers (step_statistics.h: batch norm's per-channel sums, one AllGather of
//                   doubles) and every replica applies the sum to its buffers (running
//                   statistics), so the buffers stay identical on every replica.
//   GLOBAL_NORM     GlobalNorm: every rank of the job contributes a NormRecord (its stage's
//                   squared gradient norm, tied copies excluded, from replica 0 only: the
//                   replicas hold the same summed gradient; and what it found non-finite) and
//                   gets every rank's; each sums the norms in rank order in double, so all ranks
//                   hold bitwise the same total (torch.nn.utils.clip_grad_norm_'s total norm,
//                   each parameter counted once), and the clip coefficient (common/grad_clip.h)
//                   follows from it; each takes the same skip decision from the same records.
//                   Lowered into every synchronous program (schedule::LowerOptionsFor).
//   GLOBAL_NORM_ASYNC PostGlobalNorm: the same record and the same decision without the
//                   barrier, for a job whose decision can only fail it (no clipping, no step to
//                   skip: schedule::LowerOptions::deferred_check): the AllGather runs on a
//                   background thread and the update applies at once; the decision is awaited
//                   at the next GLOBAL_NORM_ASYNC, or at once when this rank is about to apply
//                   a non-finite gradient (its own record non-finite, or the summed gradient's
//                   norm not finite), so no rank ever uses or saves weights made of a
//                   non-finite update, or at the job's last step. A finite rank learns of
//                   another's non-finite step a step later (the rank that found it fails at
//                   once, naming the same first place).
//   OPTIMIZER_STEP  PrepareUpdate: checks that the update's collectives ran, applies the step
//                   statistics of an unreplicated stage (no ALLREDUCE: its own are the sum) and
//                   multiplies every gradient by the clip coefficient when it is below 1; or,
//                   when GLOBAL_NORM decided to skip, says so (the runtime then drops the
//                   gradients instead of updating).
//
// Non-finite values (issue 17; docs/schedules.md, "Non-finite steps"). What a rank checks, each
// fused with a pass the step makes anyway:
//   - its loss, per micro-batch (the last stage: NoteLoss with each micro-batch's loss sum, a
//     scalar: free), so a non-finite loss names its micro-batch;
//   - its own gradient, once per step, before any sum mixes it with others': on a replicated
//     stage the AllReduce's host buffer is scanned right before the AllReduce (one read of what
//     ReadGradientsOf just wrote, cheaper than the AllReduce itself), a tied stage's tied
//     buffer the same way before the tied sum, and on an unreplicated stage the squared norm,
//     which the runtime measures every step anyway (StageStepStats.gradient_sq_norm), is
//     non-finite exactly when a gradient element is (squares of floats summed in double cannot
//     overflow): no extra pass. The accumulated gradient does not say which micro-batch made it
//     non-finite (that would take a pass per micro-batch, M times this check), so a gradient's
//     micro-batch is reported as not tracked (-1).
// The decision: the step is skipped on every rank when any record is non-finite. The first
// place (FirstNonFinite) is the one with the lowest micro-batch (a not tracked one after every
// tracked one), then the highest stage (the backward runs from the last stage down, so of the
// stages whose gradients of one micro-batch are non-finite the highest met it first; a loss is
// on the last stage), then the lowest replica. training.max_consecutive_skipped_steps K: the
// (K+1)-th non-finite step in a row fails GlobalNorm on every rank (kFailedPrecondition naming
// the first place, the kind and the value); K = 0 fails the first.
// So the statistics are applied once per update, from the forwards since the previous one: under
// gpipe and dapple exactly the step's micro-batches; under pipedream those the replica ran since
// its last update (a replicated last stage may have run forwards of the next step).
//
// Every member of a collective makes the same calls in the same order (collective.h); the
// programs guarantee it (one of each action per update on every member). A program that breaks
// the order (a second ALLREDUCE before the update, an ALLREDUCE after GLOBAL_NORM, an update
// without a collective the stage needs) gets kInternal naming the rule.
//
// Thread safety: one thread (the runtime's). Errors: the collectives' (collective.h) and the
// backend's, unchanged.
#ifndef DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_
#define DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/job_lowering.h"
#include "dapple/v1/plan.pb.h"
#include "worker/comm/collective.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// The collectives a rank may need (none owned; each must outlive the runtime).
struct StageCollectives {
  // This stage's D_s replicas (size D_s, rank = the replica); ALLREDUCE. May be null when
  // D_s == 1.
  Collective* replicas = nullptr;
  // The tied group (size and order of schedule::TiedGroupRanks); TIED_ALLREDUCE. Needed only on
  // the stages LowerOptions::tied_stages names.
  Collective* tied = nullptr;
  // Every rank of the job (size schedule::NumRanks, rank = schedule::RankIndex); GLOBAL_NORM.
  // Needed only with LowerOptions::global_norm (every synchronous schedule) and more than one
  // rank.
  Collective* job = nullptr;
};

// What a rank found non-finite in a step.
enum class NonFiniteKind : uint8_t { kNone = 0, kLoss = 1, kGradient = 2 };

// One rank's part of GLOBAL_NORM (16 bytes on the wire, fixed layout).
struct NormRecord {
  double sq_norm = 0;        // this rank's squared gradient norm, 0 where another replica counts it
  int32_t micro_batch = -1;  // of a non-finite loss (0-based in the step); -1: none or a gradient
  uint8_t kind = 0;          // NonFiniteKind; a loss wins over a gradient on one rank
  uint8_t nan = 0;           // 1: a NaN was seen, 0: only infinities (kind != kNone)
  uint8_t padding[2] = {0, 0};
};

// A non-finite value and where it was.
struct NonFinite {
  NonFiniteKind kind = NonFiniteKind::kNone;
  bool nan = false;  // NaN, else Inf
  int stage = -1;
  int replica = -1;
  int micro_batch = -1;  // -1: not tracked (a gradient)
};

// "loss (NaN) at stage 1 replica 0 micro-batch 3", "gradient (Inf) at stage 2 replica 1
// (micro-batch not tracked: the step's accumulated gradient)".
std::string DescribeNonFinite(const NonFinite& where);

// The first non-finite place among `records` (record i from the rank at places[i] = {stage,
// replica}), by the rule in the file comment; kind kNone when every record is finite.
NonFinite FirstNonFinite(const std::vector<NormRecord>& records,
                         const std::vector<std::pair<int, int>>& places);

struct GlobalNormResult {
  double total_sq_norm = 0;  // over every parameter of the model, each counted once
  bool skip = false;         // some rank found a non-finite value: every rank skips the update
  NonFinite first;           // FirstNonFinite, when skip
};

// OPTIMIZER_STEP's part of the exchange (PrepareUpdate).
struct UpdateDecision {
  double sq_norm = -1;  // this stage's squared gradient norm before clipping (negative: none)
  bool skip = false;    // drop the gradients, do not update (GlobalNorm decided)
};

class GradientExchange {
 public:
  // The exchange of rank (assignment.stage, assignment.replica) under `lower` (its job's
  // schedule::LowerOptionsFor) with the split tied weights `split_tied`
  // (schedule::SplitTiedWeights), on `backend` (not owned). Reads backend->HostParams() once for
  // the tensors' names and sizes. kInvalidArgument naming the stage for: D_s > 1 without
  // collectives.replicas, or one of another size or rank; a tied stage without
  // collectives.tied, or one whose size or rank is not its place in TiedGroupRanks; GLOBAL_NORM
  // over more than one rank without collectives.job, or one whose size or rank differ from NumRanks
  // / RankIndex; a tied stage whose parameters hold a split tied weight twice.
  static absl::StatusOr<std::unique_ptr<GradientExchange>> Create(
      const v1::StageAssignment& assignment, const schedule::LowerOptions& lower,
      const std::vector<schedule::TiedWeight>& split_tied, StageBackend* backend,
      const StageCollectives& collectives);

  // TIED_ALLREDUCE. A no-op on a stage that holds no split tied weight.
  absl::Status AllReduceTied();
  // ALLREDUCE: first the step statistics (summed over the replicas, then applied: the
  // backend's ApplyStepStatistics), then every gradient but the split tied tensors among the
  // replicas; `loss_sum` (may be null: not the last stage) is summed too, through fp32. With one
  // replica only the statistics are applied.
  absl::Status AllReduceReplicas(double* loss_sum);
  // ALLREDUCE handed to someone else (Pipe-SGD's updater reduces and applies the gradients and
  // the step statistics asynchronously): only the order is checked.
  absl::Status ReplicasReducedElsewhere();
  // The last stage's loss sum of micro-batch `micro_batch` of the step being run (0-based):
  // the first non-finite one is kept for GLOBAL_NORM's record.
  void NoteLoss(int micro_batch, double loss_sum);
  // GLOBAL_NORM: measures the backend's GradientSquaredNorm (negative: not measured, counted as
  // 0), exchanges it with what this rank found non-finite (without a job collective, one rank:
  // the total is the local value), keeps the clip coefficient of training.max_grad_norm and
  // the skip decision. kFailedPrecondition, on every rank alike, when this is the
  // (K+1)-th non-finite step in a row (K = training.max_consecutive_skipped_steps):
  // "non-finite loss (NaN) at stage 1 replica 0 micro-batch 3; 3 non-finite steps in a row,
  // training.max_consecutive_skipped_steps allows 2".
  absl::StatusOr<GlobalNormResult> GlobalNorm();
  // Nanoseconds the last GlobalNorm or PostGlobalNorm spent measuring this rank's squared norm
  // (compute, before the exchange; the profile's optimizer_ms holds the same work,
  // worker/runtime/layer_profiler.h), then 0 until the next one.
  int64_t TakeNormNanos();
  // GLOBAL_NORM_ASYNC of step `step` (0-based): awaits the pending decision of the step before
  // (AwaitGlobalNorm), measures this rank's record as GlobalNorm does and hands it to a
  // background AllGather over collectives.job (one rank: kept), then awaits it at once when
  // `await_now` or when this rank's record or summed gradient is non-finite. PrepareUpdate then
  // neither clips nor skips. Errors: AwaitGlobalNorm's; kInternal for the order rules of
  // GlobalNorm, and when the decision could change the update (training.max_grad_norm > 0 or
  // training.max_consecutive_skipped_steps > 0: GLOBAL_NORM is needed).
  absl::Status PostGlobalNorm(int64_t step, bool await_now);
  // The pending GLOBAL_NORM_ASYNC decision, if any (OK at once when none): waits for its
  // AllGather. kFailedPrecondition, on every rank alike, when a record of that step is
  // non-finite: "training diverged at step 3: non-finite gradient (NaN) at stage 1 replica 0
  // (...); training.max_consecutive_skipped_steps is 0: ..."; the collective's errors.
  absl::Status AwaitGlobalNorm();
  // OPTIMIZER_STEP, before the backend's update: checks that the update's ALLREDUCE (D > 1),
  // TIED_ALLREDUCE (a tied stage) and GLOBAL_NORM (when lowered) ran, applies the step
  // statistics when no ALLREDUCE did, scales the gradients by the clip coefficient when below
  // 1 (not when skipping), and starts the next update's round. Returns this stage's squared
  // gradient norm before clipping (GlobalNorm's measure, or measured now) and whether
  // GlobalNorm decided to skip this update.
  absl::StatusOr<UpdateDecision> PrepareUpdate();

  // Whether this rank's squared norm counts toward the total (replica 0 of its stage).
  bool counts_norm() const { return counts_norm_; }
  // Floats of the tied tensors this rank sums in AllReduceTied (0: not a tied stage).
  int64_t tied_floats() const { return tied_floats_; }
  // Updates skipped in a row so far (0 after an applied one), and in all.
  int64_t consecutive_skips() const { return consecutive_skips_; }
  int64_t skipped_updates() const { return skipped_updates_; }

 private:
  GradientExchange() = default;
  // The ALLREDUCE's order check.
  absl::Status StartReplicas();
  // Reads the backend's step statistics, sums them over the replicas (when replicated) and
  // applies the sum.
  absl::Status ApplyStepStatistics();
  // Notes a non-finite gradient among buffer_'s first `floats` (this rank's own, before a sum).
  void ScanGradients(int64_t floats);
  // GLOBAL_NORM's and GLOBAL_NORM_ASYNC's common part: the order checks, the local norm
  // (local_sq_norm_) and this rank's record.
  absl::StatusOr<NormRecord> MeasureRecord();
  // The places of records_ / deferred_records_ (one rank: this one).
  const std::vector<std::pair<int, int>>& Places() const;

  StageBackend* backend_ = nullptr;
  StageCollectives collectives_;
  int num_replicas_ = 1;
  bool counts_norm_ = false;
  bool clipping_ = false;     // LowerOptions::global_norm: GLOBAL_NORM precedes each update
  double max_grad_norm_ = 0;  // training.max_grad_norm
  int64_t max_consecutive_skips_ = 0;  // training.max_consecutive_skipped_steps
  int64_t consecutive_skips_ = 0;
  int64_t skipped_updates_ = 0;
  std::vector<std::pair<int, int>> places_;  // {stage, replica} of every rank (RankIndex order)
  int stage_ = 0;
  int replica_ = 0;
  // This update's round: which collectives ran, the norm measured and the clip coefficient.
  bool tied_done_ = false;
  bool replicas_done_ = false;
  bool norm_done_ = false;
  bool statistics_done_ = false;
  double local_sq_norm_ = -1;
  int64_t norm_ns_ = 0;  // TakeNormNanos
  double clip_ = 1;
  bool skip_ = false;
  NormRecord found_;  // this rank's non-finite finding (kind, value, micro-batch)
  // Per split tied weight (SplitTiedWeights order, the group's buffer layout): this stage's
  // parameter position holding it, or -1 (it contributes zeros), and its floats.
  std::vector<int> tied_positions_;
  std::vector<int64_t> tied_sizes_;
  int64_t tied_floats_ = 0;
  std::vector<int> replica_positions_;  // every parameter but the split tied ones
  int64_t replica_floats_ = 0;
  std::vector<float> buffer_;
  std::vector<NormRecord> records_;
  std::vector<double> statistics_;  // StepStatisticsSize() doubles
  std::vector<double> gathered_;    // every replica's, for SumOverReplicas
  // GLOBAL_NORM_ASYNC's decision in flight: its step, its AllGather (on its own thread; the
  // job collective is used by no one else meanwhile) and where it writes the records.
  bool deferred_pending_ = false;
  int64_t deferred_step_ = -1;
  std::future<absl::Status> deferred_gather_;
  std::vector<NormRecord> deferred_records_;
  std::vector<std::pair<int, int>> one_place_;  // {{stage_, replica_}}
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_
