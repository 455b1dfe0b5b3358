#include "worker/runtime/reference_trainer.h"

#include <algorithm>

#include "common/grad_clip.h"
#include "common/lr_schedule.h"
#include "common/model_info.h"
#include "common/status.h"
#include "common/steps.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"
#include "worker/data/sample_order.h"

namespace dapple::worker {

using kernels::Tensor;

absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ReferenceTrainer::Create(const v1::JobSpec& spec,
                                                                           const Dataset* train) {
  auto t = std::unique_ptr<ReferenceTrainer>(new ReferenceTrainer());
  t->spec_ = spec;
  t->train_ = train;
  const int num_layers = spec.model().layers_size();
  DAPPLE_ASSIGN_OR_RETURN(
      t->layers_, kernels::BuildLayers(spec.model(), 0, num_layers - 1, spec.training().seed()));
  t->params_ = kernels::CollectParams(t->layers_);
  DAPPLE_ASSIGN_OR_RETURN(t->optimizer_, kernels::MakeOptimizer(spec.training().optimizer()));
  t->input_shape_.assign(spec.model().input_shape().begin(), spec.model().input_shape().end());
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  t->targets_per_sample_ = TargetsPerSample(infos);
  t->total_steps_ = TotalSteps(spec);
  return t;
}

std::vector<kernels::Param*> ReferenceTrainer::Params() { return params_; }

double ReferenceTrainer::Step(int64_t step, StepTrace* trace) {
  const int64_t b = spec_.training().global_batch();
  const int64_t spe = StepsPerEpoch(spec_);
  const int64_t epoch = step / spe;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(train_->size(), spec_.training().seed(), epoch);
    order_epoch_ = epoch;
  }
  const int64_t* idx = order_.data() + (step % spe) * b;
  std::vector<Tensor> acts(layers_.size() + 1);
  std::vector<int64_t> shape{b};
  shape.insert(shape.end(), input_shape_.begin(), input_shape_.end());
  acts[0].Resize(shape);
  std::vector<int32_t> labels(b * targets_per_sample_);
  train_->Gather(idx, b, acts[0].data.data(), labels.data());
  if (trace != nullptr) {
    trace->inputs = acts[0].data;
    trace->targets = labels;
  }
  kernels::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = spec_.training().seed();
  ctx.step = step;
  ctx.first_sample = 0;
  std::vector<kernels::LayerCache> caches(layers_.size());
  for (size_t k = 0; k < layers_.size(); ++k) {
    layers_[k]->Forward(acts[k], &acts[k + 1], &caches[k], ctx);
  }
  Tensor dy, dx;
  const int64_t targets = b * targets_per_sample_;
  const double loss_sum = kernels::SoftmaxCrossEntropy(
      acts.back(), labels.data(), 1.0f / static_cast<float>(targets), &dy, nullptr);
  for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) {
    layers_[k]->Backward(acts[k], acts[k + 1], dy, k > 0 ? &dx : nullptr, &caches[k]);
    std::swap(dy, dx);
  }
  if (trace != nullptr) {
    trace->gradients.clear();
    for (const kernels::Param* p : params_) trace->gradients.push_back(p->grad.data);
  }
  last_sq_norm_ = 0;
  for (const kernels::Param* p : params_) {
    for (float g : p->grad.data) last_sq_norm_ += static_cast<double>(g) * g;
  }
  const double clip = ClipCoefficient(spec_.training().max_grad_norm(), last_sq_norm_);
  if (clip < 1) {
    const float factor = static_cast<float>(clip);
    for (kernels::Param* p : params_) {
      for (float& g : p->grad.data) g *= factor;
    }
  }
  optimizer_->Step(params_, LearningRate(spec_.training(), optimizer_->steps(), total_steps_));
  kernels::ZeroGrads(params_);
  return loss_sum / static_cast<double>(targets);
}

void ReferenceTrainer::Evaluate(const Dataset& eval, double* loss, double* accuracy) {
  const int64_t chunk = 1000;
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<Tensor> acts(layers_.size() + 1);
  std::vector<int64_t> idx;
  std::vector<int32_t> targets;
  for (int64_t begin = 0; begin < eval.size(); begin += chunk) {
    const int64_t n = std::min(chunk, eval.size() - begin);
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), input_shape_.begin(), input_shape_.end());
    acts[0].Resize(shape);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    targets.resize(n * targets_per_sample_);
    eval.Gather(idx.data(), n, acts[0].data.data(), targets.data());
    std::vector<kernels::LayerCache> caches(layers_.size());
    for (size_t k = 0; k < layers_.size(); ++k) {
      layers_[k]->Forward(acts[k], &acts[k + 1], &caches[k], kernels::ForwardContext{});
    }
    int64_t ok = 0;
    loss_sum += kernels::SoftmaxCrossEntropyEval(acts.back(), targets.data(), &ok);
    correct += ok;
  }
  const auto targets_total = static_cast<double>(eval.size() * targets_per_sample_);
  *loss = loss_sum / targets_total;
  *accuracy = static_cast<double>(correct) / targets_total;
}

}  // namespace dapple::worker
