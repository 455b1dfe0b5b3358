#include "worker/runtime/step_statistics.h"

#include <algorithm>

#include "common/status.h"

namespace dapple::worker {

std::vector<kernels::Param*> CollectBuffers(const LayerList& layers) {
  std::vector<kernels::Param*> out;
  for (const std::unique_ptr<kernels::Layer>& layer : layers) {
    const std::vector<kernels::Param*> b = layer->Buffers();
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

std::vector<NamedTensor> BufferTensors(const std::vector<kernels::Param*>& buffers) {
  std::vector<NamedTensor> out;
  out.reserve(buffers.size());
  for (const kernels::Param* b : buffers) out.push_back({b->name, b->value.shape, b->value.data});
  return out;
}

int64_t StepStatisticsSize(const LayerList& layers) {
  int64_t n = 0;
  for (const std::unique_ptr<kernels::Layer>& layer : layers) n += layer->StepStatisticsSize();
  return n;
}

void ReadStepStatistics(const LayerList& layers, double* out) {
  for (const std::unique_ptr<kernels::Layer>& layer : layers) {
    layer->ReadStepStatistics(out);
    out += layer->StepStatisticsSize();
  }
}

void ApplyStepStatistics(const LayerList& layers, const double* summed) {
  for (const std::unique_ptr<kernels::Layer>& layer : layers) {
    layer->ApplyStepStatistics(summed);
    summed += layer->StepStatisticsSize();
  }
}

absl::Status SumOverReplicas(Collective& replicas, std::vector<double>* stats,
                             std::vector<double>* gathered) {
  if (stats->empty()) return absl::OkStatus();
  const size_t n = stats->size();
  gathered->resize(n * static_cast<size_t>(replicas.size()));
  DAPPLE_RETURN_IF_ERROR(replicas.AllGather(stats->data(), n * sizeof(double), gathered->data()));
  // Member order, in double: every member adds the same numbers in the same order.
  std::fill(stats->begin(), stats->end(), 0.0);
  for (int r = 0; r < replicas.size(); ++r) {
    const double* part = gathered->data() + static_cast<size_t>(r) * n;
    for (size_t i = 0; i < n; ++i) (*stats)[i] += part[i];
  }
  return absl::OkStatus();
}

}  // namespace dapple::worker
