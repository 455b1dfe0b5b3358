// PipeDream's rank programs as data (Narayanan et al., "PipeDream: Generalized Pipeline
// Parallelism for DNN Training", SOSP 2019): the coordinator generates, for every rank, the
// whole run's program of its stage replica -- the continuous 1F1B order cut into steps
// (pipedream_steps.h), its communication (lowering.h) and its weight stashing (section 3.3) --
// and the worker only interprets it. Pure functions; thread-safe.
//
// The program (plan.proto RankProgram):
//   phases               step program per step of the run: step 0 holds the warm-up, the last
//                        steps the cool-down, the steady state in between is one phase whose
//                        cycle has D_s / gcd(M, D_s) steps (1F1B-RR hands global micro-batch g
//                        to replica g % D_s, so a replica's share of a step repeats with that
//                        period); a step's programs are identical apart from that.
//   micro-batch ids      relative to the step (j >= M: micro-batch j % M of step t + j / M, run
//                        early because 1F1B never flushes); micro_batch_ids = M + K_s.
//   whole_micro_batches  true: 1F1B-RR, whole micro-batches round-robin over the replicas.
//   weight stashing      USE_WEIGHTS (version relative to the step) right before a FORWARD or
//                        BACKWARD that must compute with an older version than the live one,
//                        RESTORE_WEIGHTS right after it; STASH_WEIGHTS right before an
//                        OPTIMIZER_STEP whose live version a micro-batch in flight (or, under
//                        vertical sync, a later forward) still needs; DROP_WEIGHTS after a
//                        backward once no micro-batch in flight or to come needs the versions
//                        older than the one it names. The decisions are made here by replaying
//                        the run: without vertical sync a forward uses the live version;
//                        with it every stage uses the version stage 0 used for the same
//                        micro-batch (its updates before that forward: an update follows every
//                        M-th backward, and stage 0's forward of g pairs with its backward of
//                        g - K_0).
// What a new schedule needs: a generator of its compute order and, when its programs differ
// between steps or keep extra state (weights, asynchronous collectives), a builder like this
// one that expresses that with phases and action kinds; the worker's interpreter stays as is.
#ifndef DAPPLE_COMMON_SCHEDULE_PIPEDREAM_PROGRAM_H_
#define DAPPLE_COMMON_SCHEDULE_PIPEDREAM_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/schedule/lowering.h"
#include "common/schedule/pipedream_steps.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule {

struct PipeDreamProgramOptions {
  // The run: replicas, M, its steps (first_micro_batch = first_step * M; warm_ups may override
  // the K_s, as pipedream_steps.h says).
  PipeDreamLayout layout;
  int64_t first_step = 0;  // the run's first global step (a resumed job's)
  bool vertical_sync = false;
  LowerOptions lower;  // the job's collectives before each update (job_lowering.h)
};

// The program of replica `replica` of `stage` for the run (above), with stage and replica set.
// Preconditions (unchecked): the layout as pipedream_steps.h documents it, 0 <= stage < P,
// 0 <= replica < D_stage.
v1::RankProgram BuildPipeDreamProgram(const PipeDreamProgramOptions& options, int stage,
                                      int replica);

// The steps of `program` laid end to end with global micro-batch ids relative to the run's
// first step (id j of step i becomes i * M + j), for the simulator: one RankProgram of actions.
// `num_micro_batches` is M; a program without phases is its actions once.
v1::RankProgram ExpandRun(const v1::RankProgram& program, int num_micro_batches);

// The simulator's proof that the run is deadlock-free: the stages' whole-run programs of the
// stage as a whole (every replica's micro-batches: warm-ups K_s, the order each replica's
// program filters), expanded, simulated with unit costs. kFailedPrecondition with the
// simulator's message otherwise.
absl::Status CheckPipeDreamRun(const PipeDreamProgramOptions& options);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_PIPEDREAM_PROGRAM_H_
