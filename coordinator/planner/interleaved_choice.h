// What parallel.schedule auto may try of Megatron's interleaved 1F1B (Narayanan et al., SC'21,
// section 2.2.2; docs/planner.md, "Choosing the schedule") for one job: the v's and, per v, the
// pipeline depths P whose P * v virtual stages each get a layer, with M >= P micro-batches (the
// rules common/job_spec_validate_interleaved.cc checks for schedule interleaved), so that a
// chosen interleaved plan always runs. Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_CHOICE_H_
#define DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_CHOICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/planner/schedule_choice.h"

namespace dapple::coordinator {

// The v's parallel.schedule auto tries, ascending.
inline constexpr int kAutoInterleave[] = {2, 3, 4};

// The facts of a job that decide whether interleaved 1F1B can run it.
struct InterleavedJob {
  int num_layers = 0;
  int num_stages = 0;         // the problem's P (ResolveNumStages): 0 when the planner chooses it
  int devices = 0;            // parallel.devices
  int max_replicas = 0;       // PlanningProblem::max_replicas (0: unlimited); a chosen P only
  int64_t micro_batches = 0;  // M
  std::string planner;        // the job's planner (PlannerName)
  std::string recompute;      // training.recompute as written
  bool cuda = false;          // CUDA stages
  int tied_layer = -1;        // a layer that copies another's parameter (tied weights); -1: none
  int tied_owner = -1;        // the layer it copies
};

// The depths P an interleaved plan with `v` chunks per stage may use for `job`: its num_stages
// when fixed, else every P >= 2 that divides devices with devices / P replicas per stage within
// max_replicas; in both cases only with P * v <= num_layers and P <= M. Ascending; empty when
// none.
std::vector<int> InterleavedDepths(const InterleavedJob& job, int v);

// Sets limits->interleave to the v's of kAutoInterleave that have a depth, or, when none does or
// the job cannot run interleaved at all (CUDA, training.recompute all, tied weights, a planner
// other than balanced and dapple), leaves it empty and says why in
// limits->interleave_left_out. Only under limits->choose_schedule; otherwise nothing.
void SetInterleaveLimits(const InterleavedJob& job, ChoiceLimits* limits);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_CHOICE_H_
