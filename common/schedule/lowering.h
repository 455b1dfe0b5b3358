// The lowering pass: adds point-to-point communication (and, on request, the collectives before
// each update: the tied weights' AllReduce, the AllReduce among a stage's replicas and the
// global gradient norm) to compute-only programs. Pure functions; thread-safe.
// job_lowering.h decides the options of a job (LowerOptionsFor).
#ifndef DAPPLE_COMMON_SCHEDULE_LOWERING_H_
#define DAPPLE_COMMON_SCHEDULE_LOWERING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/generators.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

struct LowerOptions {
  // Empty, or one entry per stage: true for the stages that have replicas, whose programs get
  // one ALLREDUCE (of the stage's gradients among its replicas) right before each
  // OPTIMIZER_STEP. Empty (the default): no ALLREDUCE is added.
  std::vector<bool> allreduce_stages;
  // Empty, or one entry per stage: true for the stages that hold one side of a tied weight whose
  // other side is on another stage (job_lowering.h TiedStages), whose programs get one
  // TIED_ALLREDUCE right before each OPTIMIZER_STEP (before the ALLREDUCE).
  std::vector<bool> tied_stages = {};
  // The step's job-wide decision (the non-finite check, and the norm of gradient clipping):
  // every program gets one GLOBAL_NORM right before each OPTIMIZER_STEP (after the ALLREDUCE).
  bool global_norm = false;
  // training.max_grad_norm > 0 with global_norm: a program without GLOBAL_NORM would not clip
  // (CheckProgramCollectives refuses it); without clipping a synchronous program may lack it
  // (hand-built test programs: no job-wide non-finite decision then). Lowering ignores it.
  bool clipping = false;
  // With global_norm: GLOBAL_NORM_ASYNC in its place (the same check without the barrier:
  // plan.proto). Only for a decision that cannot change the update (no clipping, no skipped
  // steps); job_lowering.h says for which schedules.
  bool deferred_check = false;
  // v, the model chunks each rank holds (interleaved 1F1B, GenerateInterleavedOps): the
  // programs' compute actions name their virtual stage c * P + r of P * v, and communication
  // goes to the neighbouring virtual stage. 1 (the default) for every other schedule. The
  // per-stage vectors above stay per rank (P entries).
  int chunks = 1;
};

// For stage s of P (with options.chunks = v > 1: s is the virtual stage an action names, of
// P * v, and the inserted actions name it too): RECV_ACT m before each FORWARD m when s > 0;
// SEND_ACT m after it when s < P - 1; RECV_GRAD m before each BACKWARD m or BACKWARD_INPUT m
// when s < P - 1; SEND_GRAD m right after it when s > 0 (BACKWARD_WEIGHT gets no communication, so
// a zero-bubble program's gradient leaves before its weight-gradient part runs); before each
// OPTIMIZER_STEP, in this order: TIED_ALLREDUCE when options.tied_stages[s], ALLREDUCE when
// options.allreduce_stages[s] (an entry beyond either vector counts as false), GLOBAL_NORM when
// options.global_norm (GLOBAL_NORM_ASYNC with options.deferred_check). Other actions are kept in
// place. Sends are non-blocking, receives block, TIED_ALLREDUCE and GLOBAL_NORM are barriers
// (simulator.h).
v1::RankProgram Lower(const std::vector<v1::Action>& compute, int num_stages, int stage,
                      const LowerOptions& options = {});
// The same pass on Ops (op.h).
OpProgram LowerOps(const OpProgram& compute, int num_stages, int stage,
                   const LowerOptions& options = {});

// Generate + Lower for every stage (replica 0), then Simulate with unit costs; returns
// kFailedPrecondition with the simulator's message if the program set is not deadlock-free.
// kInvalidArgument when num_stages < 1, num_micro_batches < 1, options.allreduce_stages or
// options.tied_stages is neither empty nor of num_stages entries, kind is kPipeSgd with
// num_stages != 1, options.chunks < 1, or options.chunks > 1 with a kind other than
// kInterleaved. kInterleaved generates with v = options.chunks.
absl::StatusOr<std::vector<v1::RankProgram>> BuildPrograms(ScheduleKind kind, int num_stages,
                                                           int num_micro_batches,
                                                           const LowerOptions& options = {});

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_LOWERING_H_
