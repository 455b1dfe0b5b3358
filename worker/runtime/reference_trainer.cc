#include "worker/runtime/reference_trainer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grad_clip.h"
#include "common/lr_schedule.h"
#include "common/model_info.h"
#include "common/squared_norm.h"
#include "common/status.h"
#include "common/steps.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"
#include "worker/data/sample_order.h"

namespace dapple::worker {
namespace {

using kernels::Tensor;

// out = rows r of t (t [N, ...]).
void SliceRows(const Tensor& t, schedule::RowRange r, Tensor* out) {
  const int64_t cols = t.cols();
  std::vector<int64_t> shape = t.shape;
  shape[0] = r.size();
  out->Resize(shape);
  std::copy(t.data.begin() + r.begin * cols, t.data.begin() + r.end * cols, out->data.begin());
}

// Rows [begin, begin + part.rows()) of *whole = part; *whole is resized to `rows` rows of
// part's per-row shape first when `first`.
void PlaceRows(const Tensor& part, int64_t begin, int64_t rows, bool first, Tensor* whole) {
  if (first) {
    std::vector<int64_t> shape = part.shape;
    shape[0] = rows;
    whole->Resize(shape);
  }
  std::copy(part.data.begin(), part.data.end(), whole->data.begin() + begin * part.cols());
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceTrainer>> ReferenceTrainer::Create(
    const v1::JobSpec& spec, const Dataset* train, const ReferenceRowSplit& split) {
  auto t = std::unique_ptr<ReferenceTrainer>(new ReferenceTrainer());
  t->spec_ = spec;
  t->train_ = train;
  const int num_layers = spec.model().layers_size();
  DAPPLE_ASSIGN_OR_RETURN(
      t->layers_, kernels::BuildLayers(spec.model(), 0, num_layers - 1, spec.training().seed()));
  t->params_ = kernels::CollectParams(t->layers_);
  for (const std::unique_ptr<kernels::Layer>& layer : t->layers_) {
    for (kernels::Param* b : layer->Buffers()) t->buffers_.push_back(b);
  }
  if (!split.layer_replicas.empty() &&
      (static_cast<int>(split.layer_replicas.size()) != num_layers ||
       *std::min_element(split.layer_replicas.begin(), split.layer_replicas.end()) < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference's row split names ", split.layer_replicas.size(),
                     " layers' replica counts (each >= 1), the model has ", num_layers));
  }
  const int64_t global_batch = spec.training().global_batch();
  const int64_t micro_batch =
      spec.training().micro_batch() > 0 ? spec.training().micro_batch() : global_batch;
  t->groups_.resize(num_layers);
  for (int k = 0; k < num_layers; ++k) {
    if (t->layers_[k]->StepStatisticsSize() == 0) continue;
    const int replicas = split.layer_replicas.empty() ? 1 : split.layer_replicas[k];
    t->groups_[k] =
        schedule::StepRowGroups(global_batch, micro_batch, replicas, split.whole_micro_batches);
  }
  // No backward below the first layer with parameters (the input gradient of the first
  // Linear after Flatten alone is 14% of the demo MLP's FLOPs).
  t->backward_end_ = kernels::FirstLayerWithParams(t->layers_);
  t->passes_.resize(num_layers);
  t->acts_.resize(num_layers + 1);
  t->caches_.resize(num_layers);
  DAPPLE_ASSIGN_OR_RETURN(t->optimizer_, kernels::MakeOptimizer(spec.training().optimizer()));
  t->input_shape_.assign(spec.model().input_shape().begin(), spec.model().input_shape().end());
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  t->targets_per_sample_ = TargetsPerSample(infos);
  t->total_steps_ = TotalSteps(spec);
  return t;
}

std::vector<kernels::Param*> ReferenceTrainer::Params() { return params_; }
std::vector<kernels::Param*> ReferenceTrainer::Buffers() { return buffers_; }

void ReferenceTrainer::ForwardLayer(size_t k, const kernels::ForwardContext& ctx) {
  kernels::Layer& layer = *layers_[k];
  if (groups_[k].empty()) {
    layer.Forward(acts_[k], &acts_[k + 1], &caches_[k], ctx);
    return;
  }
  const int64_t rows = acts_[k].rows();
  std::vector<GroupPass>& passes = passes_[k];
  passes.resize(groups_[k].size());
  for (size_t g = 0; g < passes.size(); ++g) {
    const schedule::RowRange r = groups_[k][g];
    GroupPass& p = passes[g];
    SliceRows(acts_[k], r, &p.x);
    kernels::ForwardContext group_ctx = ctx;
    group_ctx.first_sample = ctx.first_sample + r.begin;
    layer.Forward(p.x, &p.y, &p.cache, group_ctx);
    PlaceRows(p.y, r.begin, rows, g == 0, &acts_[k + 1]);
  }
}

void ReferenceTrainer::BackwardLayer(size_t k, const Tensor& dy, Tensor* dx) {
  kernels::Layer& layer = *layers_[k];
  if (groups_[k].empty()) {
    layer.Backward(acts_[k], acts_[k + 1], dy, dx, &caches_[k]);
    return;
  }
  Tensor dy_part, dx_part;
  for (size_t g = 0; g < passes_[k].size(); ++g) {
    const schedule::RowRange r = groups_[k][g];
    GroupPass& p = passes_[k][g];
    SliceRows(dy, r, &dy_part);
    layer.Backward(p.x, p.y, dy_part, dx != nullptr ? &dx_part : nullptr, &p.cache);
    if (dx != nullptr) PlaceRows(dx_part, r.begin, dy.rows(), g == 0, dx);
  }
}

void ReferenceTrainer::ApplyStepStatistics() {
  std::vector<double> stats;
  for (const std::unique_ptr<kernels::Layer>& layer : layers_) {
    stats.resize(static_cast<size_t>(layer->StepStatisticsSize()));
    if (stats.empty()) continue;
    layer->ReadStepStatistics(stats.data());
    layer->ApplyStepStatistics(stats.data());
  }
}

double ReferenceTrainer::Step(int64_t step, StepTrace* trace) {
  const int64_t b = spec_.training().global_batch();
  const int64_t spe = StepsPerEpoch(spec_);
  const int64_t epoch = step / spe;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(train_->size(), spec_.training().seed(), epoch);
    order_epoch_ = epoch;
  }
  const int64_t* idx = order_.data() + (step % spe) * b;
  std::vector<int64_t> shape{b};
  shape.insert(shape.end(), input_shape_.begin(), input_shape_.end());
  acts_[0].Resize(shape);
  labels_.resize(b * targets_per_sample_);
  train_->Gather(idx, b, acts_[0].data.data(), labels_.data());
  if (trace != nullptr) {
    trace->inputs = acts_[0].data;
    trace->targets = labels_;
  }
  kernels::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = spec_.training().seed();
  ctx.step = step;
  ctx.first_sample = 0;
  for (size_t k = 0; k < layers_.size(); ++k) ForwardLayer(k, ctx);
  const int64_t targets = b * targets_per_sample_;
  const double loss_sum = kernels::SoftmaxCrossEntropy(
      acts_.back(), labels_.data(), 1.0f / static_cast<float>(targets), &dy_, nullptr);
  for (int k = static_cast<int>(layers_.size()) - 1; k >= backward_end_; --k) {
    BackwardLayer(k, dy_, k > backward_end_ ? &dx_ : nullptr);
    std::swap(dy_, dx_);
  }
  ApplyStepStatistics();
  if (trace != nullptr) {
    trace->gradients.clear();
    for (const kernels::Param* p : params_) trace->gradients.push_back(p->grad.data);
  }
  if (skipped_.count(step) > 0) {
    kernels::ZeroGrads(params_);
    return loss_sum / static_cast<double>(targets);
  }
  // The norm is one more pass over every gradient (4% of the demo MLP's step): only for
  // clipping, its one use.
  last_sq_norm_ = 0;
  const double max_norm = spec_.training().max_grad_norm();
  if (max_norm > 0) {
    for (const kernels::Param* p : params_) {
      last_sq_norm_ += SquaredNorm(p->grad.data.data(), static_cast<int64_t>(p->grad.data.size()));
    }
    const double clip = ClipCoefficient(max_norm, last_sq_norm_);
    if (clip < 1) {
      const float factor = static_cast<float>(clip);
      for (kernels::Param* p : params_) {
        for (float& g : p->grad.data) g *= factor;
      }
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
