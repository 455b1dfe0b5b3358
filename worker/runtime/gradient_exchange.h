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
//                   replicas hold the same summed gradient) and gets every rank's; each sums
//                   them in rank order in double, so all ranks hold bitwise the same total
//                   (torch.nn.utils.clip_grad_norm_'s total norm, each parameter counted once),
//                   and the clip coefficient (common/grad_clip.h) follows from it.
//   OPTIMIZER_STEP  PrepareUpdate: checks that the update's collectives ran, applies the step
//                   statistics of an unreplicated stage (no ALLREDUCE: its own are the sum) and
//                   multiplies every gradient by the clip coefficient when it is below 1.
// So the statistics are applied once per update, from the forwards since the previous one: under
// gpipe and dapple exactly the step's micro-batches; under pipedream those the replica ran since
// its last update (a replicated last stage may have run forwards of the next step).
//
// Every member of a collective makes the same calls in the same order (collective.h); the
// programs guarantee it (one of each action per update on every member). A program that breaks
// the order (a second ALLREDUCE before the update, an ALLREDUCE after GLOBAL_NORM, an update
// without a collective the stage needs) gets kInternal naming the rule.
//
// The record is the place for more per-step job-wide facts: a non-finite gradient anywhere
// (issue 17) adds a flag to NormRecord and a "skip this step" to GlobalNormResult, decided
// from the same gathered records on every rank.
//
// Thread safety: one thread (the runtime's). Errors: the collectives' (collective.h) and the
// backend's, unchanged.
#ifndef DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_
#define DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <string>
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
  // Needed only with LowerOptions::global_norm and more than one rank.
  Collective* job = nullptr;
};

// One rank's part of GLOBAL_NORM (16 bytes on the wire, fixed layout).
struct NormRecord {
  double sq_norm = 0;   // this rank's squared gradient norm, 0 where another replica counts it
  double reserved = 0;  // zero; issue 17's non-finite flag goes here
};

struct GlobalNormResult {
  double total_sq_norm = 0;  // over every parameter of the model, each counted once
};

class GradientExchange {
 public:
  // The exchange of rank (assignment.stage, assignment.replica) under `lower` (its job's
  // schedule::LowerOptionsFor) with the split tied weights `split_tied`
  // (schedule::SplitTiedWeights), on `backend` (not owned). Reads backend->HostParams() once for
  // the tensors' names and sizes. kInvalidArgument naming the stage for: D_s > 1 without
  // collectives.replicas, or one of another size or rank; a tied stage without
  // collectives.tied, or one whose size or rank is not its place in TiedGroupRanks; clipping over
  // more than one rank without collectives.job, or one whose size or rank differ from
  // NumRanks / RankIndex; a tied stage whose parameters hold a split tied weight twice.
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
  // GLOBAL_NORM: measures the backend's GradientSquaredNorm (negative: not measured, counted as
  // 0), exchanges it (without a job collective, one rank: the total is the local value) and
  // keeps the clip coefficient of training.max_grad_norm.
  absl::StatusOr<GlobalNormResult> GlobalNorm();
  // OPTIMIZER_STEP, before the backend's update: checks that the update's ALLREDUCE (D > 1),
  // TIED_ALLREDUCE (a tied stage) and GLOBAL_NORM (clipping) ran, applies the step statistics
  // when no ALLREDUCE did, scales the gradients by the clip coefficient when below 1, and
  // starts the next update's round. Returns this stage's
  // squared gradient norm before clipping (GlobalNorm's measure, or measured now).
  absl::StatusOr<double> PrepareUpdate();

  // Whether this rank's squared norm counts toward the total (replica 0 of its stage).
  bool counts_norm() const { return counts_norm_; }
  // Floats of the tied tensors this rank sums in AllReduceTied (0: not a tied stage).
  int64_t tied_floats() const { return tied_floats_; }

 private:
  GradientExchange() = default;
  // The ALLREDUCE's order check.
  absl::Status StartReplicas();
  // Reads the backend's step statistics, sums them over the replicas (when replicated) and
  // applies the sum.
  absl::Status ApplyStepStatistics();

  StageBackend* backend_ = nullptr;
  StageCollectives collectives_;
  int num_replicas_ = 1;
  bool counts_norm_ = false;
  bool clipping_ = false;     // LowerOptions::global_norm
  double max_grad_norm_ = 0;  // training.max_grad_norm
  // This update's round: which collectives ran, the norm measured and the clip coefficient.
  bool tied_done_ = false;
  bool replicas_done_ = false;
  bool norm_done_ = false;
  bool statistics_done_ = false;
  double local_sq_norm_ = -1;
  double clip_ = 1;
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
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_GRADIENT_EXCHANGE_H_
