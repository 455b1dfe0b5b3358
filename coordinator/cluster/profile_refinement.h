// ProfileRefinement: a measured model profile's layer times, corrected by what the jobs planned
// on it measured.
//
// Why. A model is measured once, in about a second (worker/runtime/layer_profiler.h), and every
// later plan of it reads those times. A shared host's speed drifts from minute to minute (this
// project's 2-vCPU VM: 10-30% between runs of one job), and a layer runs at another speed beside
// other stages than alone. Every rank of a running job reports its forward, backward and
// optimizer seconds each step (StageStepStats), so every finished job measures each of its
// stages' layer time again: on the cluster as it is now, at the job's own micro-batch size, in
// its own pipeline.
//
// The rule. For pipeline rank s of a job planned on factors f (f[l] = 1 for a layer never
// observed):
//
//   ratio_s = (measured_s - overhead_s - contention_s) / (predicted_s - overhead_s - contention_s)
//
// predicted_s is the plan's PlanStageSummary.compute_ms (the layers' forward, backward and
// optimizer time per step and replica, plus overhead and contention), overhead_s its overhead_ms
// (data loading, the loss, the interpreter's per-action cost: ModelProfile's own fields, not
// layer time), contention_s its contention_ms (what the stage loses to other stages computing on
// its host's cores, host_contention.h: a model of the host, not of the layers), measured_s the
// median over the stage's replicas of each rank's median forward + backward + optimizer
// milliseconds per step (StageMetricsTracker::MedianComputeMs). Every layer l of the rank (all
// its chunks) gets the observation f[l] * ratio_s: the factor that would have predicted the
// stage. A layer's factor is the median of its last kHistory observations, so one job on a slow
// moment moves no prediction far. A stage is not taken when its ratio lies outside [kMinRatio,
// kMaxRatio] (a straggling or oversubscribed host says nothing about the layers) or when its
// predicted contention exceeds kMaxContentionShare of its layer time (its measurement then says
// as much about the host's sharing as about the layers, and an error of the contention model
// would be learned as layer time, then applied to plans that share nothing).
// Thread safety: thread-compatible (ProfileCache holds it under its mutex).
#ifndef DAPPLE_COORDINATOR_CLUSTER_PROFILE_REFINEMENT_H_
#define DAPPLE_COORDINATOR_CLUSTER_PROFILE_REFINEMENT_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::coordinator {

// One pipeline rank of a finished job: what it was predicted and measured to compute per step.
struct StageMeasurement {
  std::vector<v1::StageRange> layers;  // the rank's layer ranges (schedule::StageChunks)
  double predicted_ms = 0;             // PlanStageSummary.compute_ms
  double overhead_ms = 0;              // PlanStageSummary.overhead_ms
  double contention_ms = 0;            // PlanStageSummary.contention_ms
  double measured_ms = 0;              // median forward + backward + optimizer ms per step
  int stage = 0;                       // the pipeline rank, for the reasons Observe gives
};

class ProfileRefinement {
 public:
  static constexpr int kHistory = 5;
  static constexpr double kMinRatio = 0.5;
  static constexpr double kMaxRatio = 2.0;
  static constexpr double kMaxContentionShare = 0.25;

  // The refinement of a profile of `num_layers` layers: every factor 1, no job observed.
  ProfileRefinement() = default;
  explicit ProfileRefinement(int num_layers);

  // f[l] for each layer: the median of its last kHistory observations, 1 when it has none.
  std::vector<double> Factors() const;
  // Jobs whose measurements were taken (at least one stage each).
  int jobs() const { return jobs_; }

  // Every layer's observations (oldest first) and jobs(): what the coordinator's database keeps
  // (profile_store.h).
  v1::ProfileRefinementState State() const;
  // The refinement of a profile of `num_layers` layers that State() returned. kInvalidArgument
  // naming the value when `state` has another number of layers, more than kHistory observations
  // of a layer, an observation that is not a positive finite number, or a negative job count.
  static absl::StatusOr<ProfileRefinement> FromState(int num_layers,
                                                     const v1::ProfileRefinementState& state);

  // One job planned on `planned` (Factors() when the job was planned) measured `stages`.
  // Returns the number of stages taken (those with a positive predicted layer time, a ratio
  // within [kMinRatio, kMaxRatio] and contention within kMaxContentionShare of the layer time);
  // `not_taken`, when not null, gets one line per stage not taken saying why ("stage 0 not taken:
  // its predicted contention 2.8 ms is 43% of its layer time 6.5 ms, over 25%"). kInvalidArgument,
  // changing nothing, when planned.size() is not the number of layers or a stage names a range
  // outside [0, layers) or with first > last.
  absl::StatusOr<int> Observe(const std::vector<double>& planned,
                              const std::vector<StageMeasurement>& stages,
                              std::vector<std::string>* not_taken = nullptr);

  // `raw` with each layer's forward, backward, optimizer and half-batch times multiplied by its
  // factor, its source followed by "; layer times refined by the measured steps of 3 jobs
  // (x0.96 to x1.12)". `raw` unchanged when no job was observed or its layer count differs.
  v1::ModelProfile Apply(const v1::ModelProfile& raw) const;

 private:
  std::vector<std::deque<double>> history_;  // per layer, oldest first
  int jobs_ = 0;
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_PROFILE_REFINEMENT_H_
