// The activation side of the planner's memory model (docs/planner.md, "Memory model"): the bytes
// one micro-batch in flight holds on a replica of a stage until its backward. Every place that
// predicts a stage's memory asks this one class (the simulator, plan_simulator.h; the analytical
// estimator, plan_estimator.h; DAPPLE's search budget, stage_budget.h; the planners' memory
// errors), so they all count the same terms; the worker runtime accounts the same terms from
// the model (common/model_info.h StageActivationBytesPerSample), and for a profile whose sizes
// come from the model (profile::SetLayerSizes) the two agree exactly.
//
// Thread safety: immutable after construction.
#ifndef DAPPLE_COORDINATOR_PLANNER_ACTIVATION_MEMORY_H_
#define DAPPLE_COORDINATOR_PLANNER_ACTIVATION_MEMORY_H_

#include <vector>

#include "common/profile/chain_profile.h"

namespace dapple::coordinator {

class ActivationMemory {
 public:
  // O(L). `profile` must be well formed (L entries in activation_bytes and saved_bytes, L - 1 in
  // cut_bytes, batch_size > 0); it is not kept.
  explicit ActivationMemory(const profile::ChainProfile& profile);

  // Bytes one micro-batch of `samples` samples holds on a replica of a stage of layers
  // [first, last] (0 <= first <= last < L), scaled linearly from the profile's batch_size:
  //   the stage input      profile.input_bytes for first == 0 (the model input), else
  //                        cut_bytes[first - 1] (what the previous stage sends)
  //   + every layer's      activation_bytes (its output)
  //   + every layer's      saved_bytes (what its backward keeps beyond input and output)
  // O(1).
  double PerMicroBatch(int first, int last, double samples) const;

  // The same at the profile's batch_size samples.
  double AtProfileBatch(int first, int last) const;

  // Layer i's own bytes at the profile's batch size (activation_bytes + saved_bytes, no input):
  // what a layer adds to any stage it joins, for balancing stages by memory.
  double LayerBytes(int i) const;

  // The input of a stage that starts at layer `first` at the profile's batch size: the model
  // input for 0, else cut_bytes[first - 1].
  double InputBytes(int first) const { return input_[first]; }

 private:
  double batch_size_ = 1;
  std::vector<double> prefix_;  // prefix_[i]: layers < i's activation_bytes + saved_bytes
  std::vector<double> input_;   // input_[i]: the input of a stage that starts at layer i
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_ACTIVATION_MEMORY_H_
