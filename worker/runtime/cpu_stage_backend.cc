// StageBackend on kernels/cpu: the layers compute on host tensors in place of each slot.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/lr_schedule.h"
#include "common/model_info.h"
#include "common/squared_norm.h"
#include "common/status.h"
#include "common/steps.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"
#include "kernels/cpu/optimizer.h"
#include "worker/runtime/host_message_buffer.h"
#include "worker/runtime/layer_recompute.h"
#include "worker/runtime/stage_backend.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {
namespace {

using kernels::Tensor;

std::vector<int64_t> WithBatch(int64_t n, const std::vector<int64_t>& per_sample) {
  std::vector<int64_t> s;
  s.reserve(per_sample.size() + 1);
  s.push_back(n);
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

class CpuStageBackend : public StageBackend {
 public:
  std::string device() const override { return "cpu"; }
  bool device_memory() const override { return false; }

  absl::StatusOr<void*> Input(int slot, int64_t rows) override {
    Tensor& x = SlotAt(slot).acts[0];
    x.Resize(WithBatch(rows, input_shape_));
    return static_cast<void*>(x.data.data());
  }

  absl::Status LoadInput(int slot, const float* host, int64_t rows) override {
    DAPPLE_ASSIGN_OR_RETURN(void* dst, Input(slot, rows));
    // The runtime gathers straight into Input() on a host backend; copy only when it did not.
    if (dst != host) {
      std::memcpy(dst, host, static_cast<size_t>(rows * NumElements(input_shape_)) * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status Forward(int slot, int64_t rows, const kernels::ForwardContext& ctx) override {
    Slot& s = SlotAt(slot);
    if (s.acts[0].rows() != rows) {
      return absl::InternalError(
          absl::StrFormat("forward of %d rows on an input of %d rows", rows, s.acts[0].rows()));
    }
    s.ctx = ctx;
    if (recompute_ != nullptr) {
      recompute_->Forward(s.acts[0], ctx, &s.acts.back());
      return absl::OkStatus();
    }
    for (size_t k = 0; k < layers_.size(); ++k) {
      layers_[k]->Forward(s.acts[k], &s.acts[k + 1], &s.caches[k], ctx);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Loss(int slot, const int32_t* labels, int64_t rows, float grad_scale,
                              bool training, int64_t* correct) override {
    Slot& s = SlotAt(slot);
    if (s.acts.back().rows() != rows) return absl::InternalError("loss before its forward");
    if (!training) return kernels::SoftmaxCrossEntropyEval(s.acts.back(), labels, correct);
    return kernels::SoftmaxCrossEntropy(s.acts.back(), labels, grad_scale, &s.dlogits, correct);
  }

  absl::StatusOr<const void*> OutputForSend(int slot, int send_id, int64_t rows) override {
    if (send_id < 0) return absl::InternalError("negative send id");
    if (send_id >= static_cast<int>(act_send_.size())) act_send_.resize(send_id + 1);
    act_send_[send_id] = SlotAt(slot).acts.back();
    return static_cast<const void*>(act_send_[send_id].data.data());
  }

  absl::StatusOr<void*> GradInput(int micro_batch, int64_t rows) override {
    Tensor& g = GradAt(&grad_recv_, micro_batch);
    g.Resize(WithBatch(rows, output_shape_));
    return static_cast<void*>(g.data.data());
  }

  absl::Status Backward(int slot, int micro_batch, int64_t rows, bool last_stage,
                        bool need_dx) override {
    Slot& s = SlotAt(slot);
    Tensor* dy = last_stage ? &s.dlogits : &GradAt(&grad_recv_, micro_batch);
    if (dy->rows() != rows) return absl::InternalError("BACKWARD without its gradient");
    // With recomputation the layers' inputs, outputs and caches are the scratch set's, filled
    // again here from the slot's input (layer_recompute.h).
    if (recompute_ != nullptr) recompute_->Replay(s.acts[0], s.ctx);
    auto x = [&](int k) -> const Tensor& {
      return recompute_ != nullptr ? recompute_->Input(k, s.acts[0]) : s.acts[k];
    };
    auto y = [&](int k) -> const Tensor& {
      return recompute_ != nullptr ? recompute_->Output(k) : s.acts[k + 1];
    };
    auto cache = [&](int k) { return recompute_ != nullptr ? recompute_->Cache(k) : &s.caches[k]; };
    // Without the stage's input gradient, the layers below the first with parameters need no
    // backward (the first stage's Flatten and the input gradient of the Linear above it). The
    // gradients between the stage's layers live only during this call: two buffers of the
    // backend, used in turn (dx never aliases dy), not of the slot, so that a slot holds no
    // gradient after its backward (common/memory_model.h, "backward workspace").
    const int end = need_dx ? 0 : first_param_layer_;
    int next = 0;
    for (int k = static_cast<int>(layers_.size()) - 1; k >= end; --k) {
      Tensor* dx = nullptr;
      if (k > end) {
        dx = &inner_grads_[next];
        next ^= 1;
      } else if (need_dx) {
        dx = &GradAt(&grad_send_, micro_batch);
      }
      layers_[k]->Backward(x(k), y(k), *dy, dx, cache(k));
      if (k > end) dy = dx;
    }
    return absl::OkStatus();
  }

  // The split keeps each layer's dL/d output in the slot (Slot::dys) instead of the two shared
  // buffers of Backward: BackwardWeight of layer k needs it after other micro-batches ran.
  absl::Status BackwardInput(int slot, int micro_batch, int64_t rows, bool last_stage,
                             bool need_dx) override {
    // A recomputing stage keeps no slot's activations for a weight part that runs after other
    // micro-batches' work; submission refuses the pair (job_spec_validate.cc CheckRecompute).
    if (recompute_ != nullptr) return SplitBackwardWithRecomputeError();
    Slot& s = SlotAt(slot);
    const Tensor* dy = last_stage ? &s.dlogits : &GradAt(&grad_recv_, micro_batch);
    if (dy->rows() != rows) return absl::InternalError("BACKWARD_INPUT without its gradient");
    const int end = need_dx ? 0 : first_param_layer_;
    for (int k = static_cast<int>(layers_.size()) - 1; k >= end; --k) {
      Tensor* dx = nullptr;
      if (k > end) {
        dx = &s.dys[k - 1];
      } else if (need_dx) {
        dx = &GradAt(&grad_send_, micro_batch);
      }
      layers_[k]->BackwardInput(s.acts[k], s.acts[k + 1], *dy, dx, &s.caches[k]);
      if (k > end) dy = dx;
    }
    s.split_rows = rows;
    return absl::OkStatus();
  }

  absl::Status BackwardWeight(int slot, int micro_batch, int64_t rows, bool last_stage) override {
    Slot& s = SlotAt(slot);
    if (s.split_rows != rows)
      return absl::InternalError("BACKWARD_WEIGHT without its BACKWARD_INPUT");
    const int top = static_cast<int>(layers_.size()) - 1;
    // Top-down, the order of Backward, so each parameter's sum is added in the same order.
    for (int k = top; k >= first_param_layer_; --k) {
      const Tensor& dy =
          k < top ? s.dys[k] : (last_stage ? s.dlogits : GradAt(&grad_recv_, micro_batch));
      layers_[k]->BackwardWeight(s.acts[k], s.acts[k + 1], dy, &s.caches[k]);
    }
    s.split_rows = -1;
    return absl::OkStatus();
  }

  const void* GradForSend(int micro_batch) const override {
    return grad_send_.at(micro_batch).data.data();
  }

  absl::Status OptimizerStep() override {
    optimizer_->Step(params_, LearningRate(training_, optimizer_->steps(), total_steps_));
    kernels::ZeroGrads(params_);
    return absl::OkStatus();
  }

  int64_t OptimizerUpdates() const override { return optimizer_->steps(); }

  absl::Status DropGradients() override {
    kernels::ZeroGrads(params_);
    return absl::OkStatus();
  }

  HeldBytes Held() const override {
    HeldBytes held;
    held.parameters = optimizer_->StateBytes();
    for (const kernels::Param* p : params_) {
      held.parameters += HeldBytesOf(p->value) + HeldBytesOf(p->grad);
    }
    held.activations = message_.held_bytes();
    for (const Slot& s : slots_) {
      for (const Tensor& t : s.acts) held.activations += HeldBytesOf(t);
      for (const kernels::LayerCache& c : s.caches) {
        for (const Tensor& t : c.saved) held.activations += HeldBytesOf(t);
        for (const Tensor& t : c.grads) held.activations += HeldBytesOf(t);
      }
      for (const Tensor& t : s.dys) held.activations += HeldBytesOf(t);
      held.activations += HeldBytesOf(s.dlogits);
    }
    for (const std::vector<Tensor>* buffers : {&act_send_, &grad_send_, &grad_recv_}) {
      for (const Tensor& t : *buffers) held.activations += HeldBytesOf(t);
    }
    held.activations += HeldBytesOf(inner_grads_[0]) + HeldBytesOf(inner_grads_[1]);
    if (recompute_ != nullptr) held.activations += recompute_->HeldBytes();
    return held;
  }

  absl::Status ScaleGradients(float factor) override {
    for (kernels::Param* p : params_) {
      for (float& g : p->grad.data) g *= factor;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> GradientSquaredNorm() override {
    double sum = 0;
    for (const kernels::Param* p : params_) {
      if (!p->tied_to.empty()) continue;  // its owner's stage counts it
      sum += SquaredNorm(p->grad.data.data(), static_cast<int64_t>(p->grad.data.size()));
    }
    return sum;
  }

  int64_t GradientFloats() const override {
    int64_t n = 0;
    for (const kernels::Param* p : params_) n += static_cast<int64_t>(p->grad.data.size());
    return n;
  }

  absl::Status ReadGradients(float* host) override {
    for (const kernels::Param* p : params_) {
      std::memcpy(host, p->grad.data.data(), p->grad.data.size() * sizeof(float));
      host += p->grad.data.size();
    }
    return absl::OkStatus();
  }

  absl::Status WriteGradients(const float* host) override {
    for (kernels::Param* p : params_) {
      std::memcpy(p->grad.data.data(), host, p->grad.data.size() * sizeof(float));
      host += p->grad.data.size();
    }
    return absl::OkStatus();
  }

  absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) override {
    DAPPLE_RETURN_IF_ERROR(CheckPositions(params));
    for (int i : params) {
      const std::vector<float>& g = params_[i]->grad.data;
      std::memcpy(host, g.data(), g.size() * sizeof(float));
      host += g.size();
    }
    return absl::OkStatus();
  }

  absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) override {
    DAPPLE_RETURN_IF_ERROR(CheckPositions(params));
    for (int i : params) {
      std::vector<float>& g = params_[i]->grad.data;
      std::memcpy(g.data(), host, g.size() * sizeof(float));
      host += g.size();
    }
    return absl::OkStatus();
  }

  int64_t WeightFloats() const override {
    int64_t n = 0;
    for (const kernels::Param* p : params_) n += static_cast<int64_t>(p->value.data.size());
    return n;
  }

  absl::Status ReadWeights(float* host) override {
    for (const kernels::Param* p : params_) {
      std::memcpy(host, p->value.data.data(), p->value.data.size() * sizeof(float));
      host += p->value.data.size();
    }
    return absl::OkStatus();
  }

  absl::Status WriteWeights(const float* host) override {
    for (kernels::Param* p : params_) {
      std::memcpy(p->value.data.data(), host, p->value.data.size() * sizeof(float));
      host += p->value.data.size();
    }
    return absl::OkStatus();
  }

  absl::Status ReadOutput(int slot, int64_t offset, int64_t count, float* host) override {
    const Tensor& y = SlotAt(slot).acts.back();
    DAPPLE_RETURN_IF_ERROR(CheckOutputRange(offset, count, y.data.size()));
    std::memcpy(host, y.data.data() + offset, static_cast<size_t>(count) * sizeof(float));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> MessageBuffer(int64_t bytes) override { return message_.Get(bytes); }

  absl::Status WriteMessage(const void* host, int64_t bytes) override {
    return message_.Write(host, bytes);
  }

  absl::Status ReadMessage(void* host, int64_t bytes) override {
    return message_.Read(host, bytes);
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::StatusOr<std::vector<kernels::Param*>> HostParams() override { return params_; }

  int64_t StepStatisticsSize() const override { return statistics_size_; }

  absl::Status ReadStepStatistics(double* host) override {
    worker::ReadStepStatistics(layers_, host);
    return absl::OkStatus();
  }

  absl::Status ApplyStepStatistics(const double* summed) override {
    worker::ApplyStepStatistics(layers_, summed);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<kernels::Param*>> HostBuffers() override { return buffers_; }

  absl::StatusOr<StageState> ExportState() override {
    StageState out;
    // A tied copy is its owner's tensor: the owner's stage writes it (once).
    for (const kernels::Param* p : params_) {
      if (p->tied_to.empty()) out.params.push_back({p->name, p->value.shape, p->value.data});
    }
    out.buffers = BufferTensors(buffers_);
    const std::vector<std::string> names = optimizer_->StateNames();
    // Moved from, not copied: the checkpoint snapshot's time is the copies it makes.
    std::vector<std::vector<std::vector<float>>> state = optimizer_->State();
    for (size_t k = 0; k < names.size(); ++k) {
      for (size_t i = 0; i < params_.size(); ++i) {
        const kernels::Param* p = params_[i];
        if (!p->tied_to.empty()) continue;
        NamedTensor t{absl::StrCat(p->name, ".", names[k]), p->value.shape, {}};
        // No state before the first update: zeros are what the optimizer starts from.
        t.data =
            state.empty() ? std::vector<float>(p->value.data.size(), 0.0f) : std::move(state[k][i]);
        out.optimizer_state.push_back(std::move(t));
      }
    }
    out.optimizer_steps = optimizer_->steps();
    return out;
  }

  absl::Status ImportState(const StageState& state) override {
    // Everything is checked before anything changes, so a refused import leaves the stage as
    // it was.
    DAPPLE_ASSIGN_OR_RETURN(const MatchedStageState matched,
                            MatchStageState(state, params_, buffers_, optimizer_->StateNames()));
    std::vector<std::vector<std::vector<float>>> arrays(matched.optimizer_state.size());
    for (size_t k = 0; k < arrays.size(); ++k) {
      for (const NamedTensor* t : matched.optimizer_state[k]) arrays[k].push_back(t->data);
    }
    for (size_t i = 0; i < params_.size(); ++i) params_[i]->value.data = matched.params[i]->data;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i]->value.data = matched.buffers[i]->data;
    kernels::ZeroGrads(params_);
    optimizer_->SetState(std::move(arrays), state.optimizer_steps);
    return absl::OkStatus();
  }

  std::vector<int64_t> input_shape_;
  std::vector<int64_t> output_shape_;
  std::vector<std::unique_ptr<kernels::Layer>> layers_;
  std::vector<kernels::Param*> params_;
  std::vector<kernels::Param*> buffers_;  // the layers' Buffers(), in layer order
  int64_t statistics_size_ = 0;           // the layers' step statistics, concatenated
  // The first layer with parameters (layers_.size() when none).
  int first_param_layer_ = 0;
  std::unique_ptr<kernels::Optimizer> optimizer_;
  v1::TrainingSpec training_;  // the learning-rate schedule's inputs
  int64_t total_steps_ = 0;
  // Activation recomputation (layer_recompute.h); null: every slot keeps its activations.
  std::unique_ptr<LayerRecompute> recompute_;

 private:
  absl::Status CheckPositions(const std::vector<int>& params) const {
    for (size_t k = 0; k < params.size(); ++k) {
      if (params[k] < 0 || params[k] >= static_cast<int>(params_.size()) ||
          (k > 0 && params[k] <= params[k - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient positions must be increasing in [0, ", params_.size(), "), got ",
                         params[k], " at ", k));
      }
    }
    return absl::OkStatus();
  }

  struct Slot {
    std::vector<Tensor> acts;                 // acts[0] = stage input, acts[k + 1] = layer k output
    std::vector<kernels::LayerCache> caches;  // per layer: what its backward needs
    Tensor dlogits;  // last stage: dL/dlogits from Loss, the backward's first dy
    // The split backward: dys[k] = dL/d output of layer k (k below the top layer), from
    // BackwardInput for BackwardWeight; split_rows the rows of that BackwardInput, -1 when none
    // awaits its BackwardWeight.
    std::vector<Tensor> dys;
    int64_t split_rows = -1;
    // The context of the slot's Forward; with recomputation, the Backward's replay uses it
    // (and acts holds only the input and the output, caches nothing).
    kernels::ForwardContext ctx;
  };

  Slot& SlotAt(int slot) {
    if (slot >= static_cast<int>(slots_.size())) {
      slots_.resize(slot + 1);
      for (Slot& s : slots_) {
        s.acts.resize(layers_.size() + 1);
        s.caches.resize(layers_.size());
        s.dys.resize(layers_.size());
      }
    }
    return slots_[slot];
  }

  static Tensor& GradAt(std::vector<Tensor>* v, int micro_batch) {
    if (micro_batch >= static_cast<int>(v->size())) v->resize(micro_batch + 1);
    return (*v)[micro_batch];
  }

  std::vector<Slot> slots_;
  Tensor inner_grads_[2];          // the backward's gradients between layers (Backward)
  std::vector<Tensor> act_send_;   // per send id
  std::vector<Tensor> grad_send_;  // per micro-batch
  std::vector<Tensor> grad_recv_;  // per micro-batch
  HostMessageBuffer message_;      // MessageBuffer
};

}  // namespace

absl::StatusOr<std::unique_ptr<StageBackend>> MakeCpuStageBackend(const v1::JobSpec& spec,
                                                                  int first_layer, int last_layer,
                                                                  bool recompute) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  if (first_layer < 0 || last_layer < first_layer || last_layer >= static_cast<int>(infos.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layers [%d, %d] outside a model of %d layers", first_layer, last_layer, infos.size()));
  }
  auto b = std::make_unique<CpuStageBackend>();
  b->input_shape_ = infos[first_layer].input_shape;
  b->output_shape_ = infos[last_layer].output_shape;
  DAPPLE_ASSIGN_OR_RETURN(b->layers_, kernels::BuildLayers(spec.model(), first_layer, last_layer,
                                                           spec.training().seed()));
  b->params_ = kernels::CollectParams(b->layers_);
  b->first_param_layer_ = kernels::FirstLayerWithParams(b->layers_);
  b->buffers_ = CollectBuffers(b->layers_);
  b->statistics_size_ = worker::StepStatisticsSize(b->layers_);
  DAPPLE_ASSIGN_OR_RETURN(b->optimizer_, kernels::MakeOptimizer(spec.training().optimizer()));
  b->training_ = spec.training();
  b->total_steps_ = TotalSteps(spec);
  if (recompute) b->recompute_ = std::make_unique<LayerRecompute>(&b->layers_);
  return std::unique_ptr<StageBackend>(std::move(b));
}

}  // namespace dapple::worker
