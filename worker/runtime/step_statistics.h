// Step statistics and buffers of a stage's layers (kernels/cpu/layer.h: batch norm's per-channel
// sums over a step's micro-batches and its running statistics), for the backends built on
// kernels/cpu layers, and the sum of the statistics over a stage's replicas.
//
// Once per optimizer update the runtime reads every replica's statistics, sums them over the
// replicas and applies the sum on every replica (docs/layers.md, "Batch normalisation";
// docs/schedules.md, "Collectives before the update"): the sum is of doubles, so it travels as
// an AllGather of the replicas' doubles summed in replica order, not through the gradients'
// fp32 AllReduce (the variance is a difference of such sums, which fp32 would round away), and
// every replica gets bitwise the same sum.
//
// Thread safety: the layer functions use the layers (one thread per layer object); SumOverReplicas
// uses the collective (one thread at a time, collective.h).
#ifndef DAPPLE_WORKER_RUNTIME_STEP_STATISTICS_H_
#define DAPPLE_WORKER_RUNTIME_STEP_STATISTICS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/layer.h"
#include "worker/comm/collective.h"
#include "worker/runtime/stage_state.h"

namespace dapple::worker {

using LayerList = std::vector<std::unique_ptr<kernels::Layer>>;

// Every Layer::Buffers() of `layers`, in layer order.
std::vector<kernels::Param*> CollectBuffers(const LayerList& layers);
// The buffers as named host tensors (a checkpoint's StageState::buffers).
std::vector<NamedTensor> BufferTensors(const std::vector<kernels::Param*>& buffers);

// The layers' statistics concatenated in layer order: the sum of their StepStatisticsSize().
int64_t StepStatisticsSize(const LayerList& layers);
// Each layer's ReadStepStatistics into its part of `out` (StepStatisticsSize(layers) doubles).
void ReadStepStatistics(const LayerList& layers, double* out);
// Each layer's ApplyStepStatistics with its part of `summed`.
void ApplyStepStatistics(const LayerList& layers, const double* summed);

// In place: `stats` becomes the element-wise sum over the members of `replicas` of their
// `stats` (the same size on every member), added in member order in double, so every member
// ends with bitwise the same values. One AllGather of size() x stats->size() doubles; nothing
// for an empty `stats`. Errors: the collective's (collective.h), unchanged. `gathered` is
// scratch (resized).
absl::Status SumOverReplicas(Collective& replicas, std::vector<double>* stats,
                             std::vector<double>* gathered);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_STEP_STATISTICS_H_
