// StageBackend of the emulated device: waits instead of computing, real buffer sizes.
#include "worker/runtime/emulated_stage_backend.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/memory_model.h"
#include "common/model_info.h"
#include "common/schedule/simulator.h"
#include "common/status.h"
#include "kernels/cpu/model.h"
#include "kernels/cpu/optimizer.h"
#include "worker/runtime/host_message_buffer.h"
#include "worker/runtime/layer_recompute.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {

namespace {

absl::Duration MonotonicNow() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return absl::DurationFromTimespec(now);
}

// Sleeps until the CLOCK_MONOTONIC time `until`. An absolute deadline survives EINTR without
// recomputing (and without accumulating) the remaining time.
void SleepUntil(absl::Duration until) {
  const timespec deadline = absl::ToTimespec(until);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

}  // namespace

PreciseSleeper::PreciseSleeper(const std::atomic<bool>* abort) : abort_(abort) {
  // The default slack (50 us) would be added to every wait; 1 us keeps the kernel's own
  // wake-up latency as the only overshoot. Best effort: a failure only costs precision.
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

absl::Status PreciseSleeper::Sleep(absl::Duration duration) {
  const absl::Duration start = MonotonicNow();
  // The previous wait overshot by carry_: paying it back here keeps a sequence of waits at its
  // sum instead of drifting later by one wake-up latency per wait.
  const absl::Duration target = std::max(absl::ZeroDuration(), duration - carry_);
  const absl::Duration end = start + target;
  // Without a flag: one sleep. With one: slices, so that a cancelled job does not hold this
  // worker for the rest of a wait that a scaled profile can make seconds long; every slice
  // ends at an absolute time and the last one at `end`, so precision is unchanged.
  while (true) {
    if (abort_ != nullptr && abort_->load()) {
      carry_ = absl::ZeroDuration();  // the next wait (if any) starts afresh
      const absl::Duration left = std::max(absl::ZeroDuration(), end - MonotonicNow());
      return absl::AbortedError(absl::StrCat(
          "aborted during an emulated wait: ",
          absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(1))), " of ",
          absl::FormatDuration(absl::Trunc(duration, absl::Milliseconds(1))), " left"));
    }
    const absl::Duration slice_end =
        abort_ == nullptr ? end : std::min(end, MonotonicNow() + kAbortPollInterval);
    SleepUntil(slice_end);
    if (slice_end >= end) break;
  }
  const absl::Duration over = MonotonicNow() - end;
  // A wait shorter than the debt pays only part of it; the rest is carried on.
  const absl::Duration unpaid = carry_ - (duration - target);
  carry_ = std::clamp(over + unpaid, absl::ZeroDuration(), kMaxCarry);
  return absl::OkStatus();
}

namespace {

using kernels::Tensor;

int64_t Elements(int64_t rows, const std::vector<int64_t>& per_sample) {
  int64_t n = rows;
  for (int64_t d : per_sample) n *= d;
  return n;
}

// A host buffer that only grows: resizing to the same or a smaller size touches nothing, so
// the emulated compute costs no real memory traffic after the first step.
float* Grow(std::vector<float>* buffer, int64_t elements) {
  if (static_cast<int64_t>(buffer->size()) < elements) buffer->resize(elements);
  return buffer->data();
}

template <typename T>
T& At(std::vector<T>* v, int index) {
  if (index >= static_cast<int>(v->size())) v->resize(index + 1);
  return (*v)[index];
}

class EmulatedStageBackend : public StageBackend {
 public:
  std::string device() const override { return "emulated"; }
  bool device_memory() const override { return false; }

  absl::StatusOr<void*> Input(int slot, int64_t rows) override {
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    At(&input_rows_, slot) = rows;
    return static_cast<void*>(Grow(&At(&inputs_, slot), Elements(rows, input_shape_)));
  }

  absl::Status LoadInput(int slot, const float* host, int64_t rows) override {
    DAPPLE_ASSIGN_OR_RETURN(void* dst, Input(slot, rows));
    if (dst != host) {
      std::memcpy(dst, host, static_cast<size_t>(Elements(rows, input_shape_)) * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status Forward(int slot, int64_t rows, const kernels::ForwardContext& ctx) override {
    (void)ctx;
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    if (At(&input_rows_, slot) != rows) {
      return absl::InternalError(absl::StrFormat("forward of %d rows on an input of %d rows", rows,
                                                 At(&input_rows_, slot)));
    }
    Grow(&At(&outputs_, slot), Elements(rows, output_shape_));
    // What the real layers would keep until the backward: their inner outputs and saved bytes;
    // with recomputation, in the one scratch set every forward runs through (which also holds
    // the last layer's output: layer_recompute.h).
    if (recompute_) {
      GrowScratch(rows);
    } else {
      Grow(&At(&kept_, slot), rows * kept_floats_per_sample_);
    }
    At(&output_rows_, slot) = rows;
    return sleeper_->Sleep(PerRows(forward_ms_, rows));
  }

  absl::StatusOr<double> Loss(int slot, const int32_t* labels, int64_t rows, float grad_scale,
                              bool training, int64_t* correct) override {
    (void)labels;
    (void)grad_scale;
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    if (At(&output_rows_, slot) != rows) return absl::InternalError("loss before its forward");
    if (correct != nullptr) *correct = 0;
    // dL/dlogits, which the real loss keeps in the slot for its backward.
    if (training) Grow(&At(&dlogits_, slot), Elements(rows, output_shape_));
    return static_cast<double>(rows) * kEmulatedLossPerSample;
  }

  absl::StatusOr<const void*> OutputForSend(int slot, int send_id, int64_t rows) override {
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    DAPPLE_RETURN_IF_ERROR(CheckIndex("send id", send_id));
    // No copy: the bytes are meaningless, only their number matters, and a copy would be real
    // work on the one core the emulation is meant not to need.
    return static_cast<const void*>(Grow(&At(&act_send_, send_id), Elements(rows, output_shape_)));
  }

  absl::StatusOr<void*> GradInput(int micro_batch, int64_t rows) override {
    DAPPLE_RETURN_IF_ERROR(CheckIndex("micro-batch", micro_batch));
    At(&grad_recv_rows_, micro_batch) = rows;
    return static_cast<void*>(Grow(&At(&grad_recv_, micro_batch), Elements(rows, output_shape_)));
  }

  absl::Status Backward(int slot, int micro_batch, int64_t rows, bool last_stage,
                        bool need_dx) override {
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    DAPPLE_RETURN_IF_ERROR(CheckIndex("micro-batch", micro_batch));
    const int64_t dy_rows =
        last_stage ? At(&output_rows_, slot) : At(&grad_recv_rows_, micro_batch);
    if (dy_rows != rows) return absl::InternalError("BACKWARD without its gradient");
    if (need_dx) Grow(&At(&grad_send_, micro_batch), Elements(rows, input_shape_));
    // The real backward's two buffers for the gradients between the stage's layers.
    for (int i = 0; i < 2; ++i) Grow(&inner_grads_[i], rows * inner_floats_per_sample_[i]);
    // Recomputation: the micro-batch's forward again, into the scratch set, before its backward.
    if (recompute_) {
      GrowScratch(rows);
      DAPPLE_RETURN_IF_ERROR(sleeper_->Sleep(PerRows(forward_ms_, rows)));
    }
    return sleeper_->Sleep(PerRows(backward_ms_, rows));
  }

  // The split waits the two parts of backward_ms by the one rule of the simulator
  // (schedule::kBackwardWeightFraction), so measured and simulated steps compare.
  absl::Status BackwardInput(int slot, int micro_batch, int64_t rows, bool last_stage,
                             bool need_dx) override {
    if (recompute_) return SplitBackwardWithRecomputeError();  // as the CPU backend
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    DAPPLE_RETURN_IF_ERROR(CheckIndex("micro-batch", micro_batch));
    const int64_t dy_rows =
        last_stage ? At(&output_rows_, slot) : At(&grad_recv_rows_, micro_batch);
    if (dy_rows != rows) return absl::InternalError("BACKWARD_INPUT without its gradient");
    if (need_dx) Grow(&At(&grad_send_, micro_batch), Elements(rows, input_shape_));
    // The real split keeps every inner layer's output gradient in the slot until the weight part.
    Grow(&At(&split_dys_, slot), rows * split_dy_floats_per_sample_);
    At(&split_rows_, slot) = rows;
    return sleeper_->Sleep(PerRows(backward_ms_ * (1 - schedule::kBackwardWeightFraction), rows));
  }

  absl::Status BackwardWeight(int slot, int micro_batch, int64_t rows, bool last_stage) override {
    (void)last_stage;
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    DAPPLE_RETURN_IF_ERROR(CheckIndex("micro-batch", micro_batch));
    if (At(&split_rows_, slot) != rows) {
      return absl::InternalError("BACKWARD_WEIGHT without its BACKWARD_INPUT");
    }
    At(&split_rows_, slot) = -1;
    return sleeper_->Sleep(PerRows(backward_ms_ * schedule::kBackwardWeightFraction, rows));
  }

  const void* GradForSend(int micro_batch) const override {
    return grad_send_.at(micro_batch).data();
  }

  absl::Status OptimizerStep() override {
    // Counted like a real update, so checkpoints and the learning-rate schedule see it.
    ++optimizer_steps_;
    // The optimizer's state, created by the first update as the real optimizers do.
    optimizer_state_.resize(static_cast<size_t>(optimizer_state_floats_));
    return sleeper_->Sleep(absl::Milliseconds(optimizer_ms_));
  }

  int64_t OptimizerUpdates() const override { return optimizer_steps_; }

  HeldBytes Held() const override {
    auto bytes = [](const std::vector<float>& v) {
      return static_cast<int64_t>(v.capacity() * sizeof(float));
    };
    HeldBytes held;
    held.parameters = bytes(optimizer_state_);
    for (const kernels::Param* p : params_) {
      held.parameters += HeldBytesOf(p->value) + HeldBytesOf(p->grad);
    }
    held.activations = message_.held_bytes();
    for (const auto* buffers : {&inputs_, &outputs_, &kept_, &dlogits_, &split_dys_, &act_send_,
                                &grad_recv_, &grad_send_}) {
      for (const std::vector<float>& v : *buffers) held.activations += bytes(v);
    }
    held.activations += bytes(inner_grads_[0]) + bytes(inner_grads_[1]) + bytes(scratch_);
    return held;
  }

  absl::Status ScaleGradients(float factor) override {
    (void)factor;  // the gradients are zeros
    return absl::OkStatus();
  }

  int64_t GradientFloats() const override { return gradient_floats_; }

  absl::Status ReadGradients(float* host) override {
    std::fill(host, host + gradient_floats_, 0.0f);
    return absl::OkStatus();
  }

  absl::Status WriteGradients(const float* host) override {
    (void)host;  // the gradients of an emulated stage are zeros whatever the AllReduce gives
    return absl::OkStatus();
  }

  absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) override {
    for (int i : params) {
      if (i < 0 || i >= static_cast<int>(params_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient position ", i, " outside [0, ", params_.size(), ")"));
      }
      const int64_t n = params_[i]->value.numel();
      std::fill(host, host + n, 0.0f);
      host += n;
    }
    return absl::OkStatus();
  }

  absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) override {
    (void)params, (void)host;
    return absl::OkStatus();
  }

  // PipeDream's weight stashing copies weights of the real size (so its bytes are real); an
  // emulated stage's weights are zeros, so every version reads back the same.
  int64_t WeightFloats() const override { return gradient_floats_; }

  absl::Status ReadWeights(float* host) override {
    std::fill(host, host + gradient_floats_, 0.0f);
    return absl::OkStatus();
  }

  absl::Status WriteWeights(const float* host) override {
    (void)host;
    return absl::OkStatus();
  }

  // The output holds whatever it was given (zeros): nothing to generate from, so the worker
  // skips an emulated job's sample; these exist so the backend honours the interface.
  absl::Status ReadOutput(int slot, int64_t offset, int64_t count, float* host) override {
    DAPPLE_RETURN_IF_ERROR(CheckIndex("slot", slot));
    const std::vector<float>& y = At(&outputs_, slot);
    DAPPLE_RETURN_IF_ERROR(CheckOutputRange(offset, count, y.size()));
    std::copy(y.begin() + offset, y.begin() + offset + count, host);
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

  // The real layers' sizes, so that the replicas exchange what a real job would; the values
  // are zeros (nothing ran) and applying them changes nothing.
  int64_t StepStatisticsSize() const override { return statistics_size_; }

  absl::Status ReadStepStatistics(double* host) override {
    std::fill(host, host + statistics_size_, 0.0);
    return absl::OkStatus();
  }

  absl::Status ApplyStepStatistics(const double* summed) override {
    (void)summed;
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
    for (const std::string& state : optimizer_state_names_) {
      for (const kernels::Param* p : params_) {
        if (!p->tied_to.empty()) continue;
        out.optimizer_state.push_back({absl::StrCat(p->name, ".", state), p->value.shape,
                                       std::vector<float>(p->value.data.size(), 0.0f)});
      }
    }
    out.optimizer_steps = optimizer_steps_;
    return out;
  }

  absl::Status ImportState(const StageState& state) override {
    DAPPLE_ASSIGN_OR_RETURN(const MatchedStageState matched,
                            MatchStageState(state, params_, buffers_, optimizer_state_names_));
    for (size_t i = 0; i < params_.size(); ++i) params_[i]->value.data = matched.params[i]->data;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i]->value.data = matched.buffers[i]->data;
    optimizer_steps_ = state.optimizer_steps;
    return absl::OkStatus();
  }

  std::vector<int64_t> input_shape_, output_shape_;
  double forward_ms_ = 0, backward_ms_ = 0, optimizer_ms_ = 0;  // at batch_size_ samples
  int64_t batch_size_ = 1;
  std::vector<std::unique_ptr<kernels::Layer>> layers_;  // owns params_ (never run)
  std::vector<kernels::Param*> params_;
  std::vector<kernels::Param*> buffers_;  // the layers' Buffers() (never updated)
  int64_t statistics_size_ = 0;
  std::vector<std::string> optimizer_state_names_;
  int64_t gradient_floats_ = 0;
  int64_t optimizer_steps_ = 0;
  // Memory the real device would hold that the emulation allocates too (Held): per sample of
  // a slot, the layers' inner outputs and saved bytes; the optimizer's state arrays.
  int64_t kept_floats_per_sample_ = 0;
  // Per sample, the largest gradient between layers each backward buffer takes (the CPU
  // backend's Backward: dx of layer k goes to buffer (last - k) % 2).
  int64_t inner_floats_per_sample_[2] = {0, 0};
  // Per sample, what the CPU backend's split backward keeps per slot from BackwardInput for
  // BackwardWeight: the output gradient of every layer below the top that it backwards.
  int64_t split_dy_floats_per_sample_ = 0;
  int64_t optimizer_state_floats_ = 0;
  std::vector<float> optimizer_state_;
  std::unique_ptr<Sleeper> sleeper_;
  bool recompute_ = false;  // activation recomputation (layer_recompute.h)

 private:
  // Indices come from the runtime (slots, micro-batches, send ids); a negative one is a bug.
  static absl::Status CheckIndex(const char* what, int index) {
    if (index < 0) return absl::InternalError(absl::StrCat("negative ", what, " ", index));
    return absl::OkStatus();
  }

  void GrowScratch(int64_t rows) {
    Grow(&scratch_, rows * kept_floats_per_sample_ + Elements(rows, output_shape_));
  }

  absl::Duration PerRows(double ms, int64_t rows) const {
    return absl::Milliseconds(ms * static_cast<double>(rows) / static_cast<double>(batch_size_));
  }

  std::vector<std::vector<float>> inputs_, outputs_;  // per slot
  std::vector<std::vector<float>> kept_;              // per slot: inner outputs, saved
  std::vector<float> scratch_;  // recomputation: one set of inner outputs, saved, output
  std::vector<std::vector<float>> dlogits_;                // per slot, last stage: dL/dlogits
  std::vector<std::vector<float>> split_dys_;              // per slot: the split's kept dy
  std::vector<int64_t> split_rows_;                        // per slot: awaiting its W, or -1
  std::vector<float> inner_grads_[2];                      // the backward's workspace
  std::vector<int64_t> input_rows_, output_rows_;          // per slot
  std::vector<std::vector<float>> act_send_;               // per send id
  std::vector<std::vector<float>> grad_recv_, grad_send_;  // per micro-batch
  std::vector<int64_t> grad_recv_rows_;                    // per micro-batch
  HostMessageBuffer message_;                              // MessageBuffer
};

absl::Status CheckTime(double ms, const char* field, int layer) {
  if (!std::isfinite(ms) || ms < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "emulated_profile.layers[%d].%s %g must be a finite number >= 0", layer, field, ms));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<StageBackend>> MakeEmulatedStageBackend(
    const v1::JobSpec& spec, int first_layer, int last_layer, const v1::ModelProfile& profile,
    std::unique_ptr<Sleeper> sleeper, bool recompute) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  const int num_layers = static_cast<int>(infos.size());
  if (first_layer < 0 || last_layer < first_layer || last_layer >= num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layers [%d, %d] outside a model of %d layers", first_layer, last_layer, num_layers));
  }
  std::vector<const v1::LayerProfile*> layers;
  for (const v1::LayerProfile& l : profile.layers()) {
    if (!l.input()) layers.push_back(&l);
  }
  if (static_cast<int>(layers.size()) != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("emulated_profile has %d layers (Input nodes excluded), the model %d",
                        layers.size(), num_layers));
  }
  if (profile.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("emulated_profile.batch_size ", profile.batch_size(), " must be > 0"));
  }
  auto b = std::make_unique<EmulatedStageBackend>();
  b->batch_size_ = profile.batch_size();
  for (int k = first_layer; k <= last_layer; ++k) {
    const v1::LayerProfile& l = *layers[k];
    DAPPLE_RETURN_IF_ERROR(CheckTime(l.forward_ms(), "forward_ms", k));
    DAPPLE_RETURN_IF_ERROR(CheckTime(l.backward_ms(), "backward_ms", k));
    DAPPLE_RETURN_IF_ERROR(CheckTime(l.optimizer_ms(), "optimizer_ms", k));
    b->forward_ms_ += l.forward_ms();
    b->backward_ms_ += l.backward_ms();
    b->optimizer_ms_ += l.optimizer_ms();
  }
  b->input_shape_ = infos[first_layer].input_shape;
  b->output_shape_ = infos[last_layer].output_shape;
  // Real layers only for their parameters' names, shapes and initial values (checkpoints and
  // HostParams look like the CPU backend's); they never run.
  DAPPLE_ASSIGN_OR_RETURN(b->layers_, kernels::BuildLayers(spec.model(), first_layer, last_layer,
                                                           spec.training().seed()));
  b->params_ = kernels::CollectParams(b->layers_);
  b->buffers_ = CollectBuffers(b->layers_);
  b->statistics_size_ = StepStatisticsSize(b->layers_);
  for (const kernels::Param* p : b->params_) b->gradient_floats_ += p->value.numel();
  b->kept_floats_per_sample_ = (StageActivationBytesPerSample(infos, first_layer, last_layer) -
                                InputBytes(infos[first_layer]) - infos[last_layer].output_bytes) /
                               static_cast<int64_t>(sizeof(float));
  // The first stage's backward stops at its first layer with parameters (no input gradient).
  int from = first_layer;
  while (first_layer == 0 && from <= last_layer && infos[from].param_count == 0) ++from;
  for (int l = from; l < last_layer; ++l) {
    int64_t& floats = b->inner_floats_per_sample_[(last_layer - 1 - l) % 2];
    floats = std::max(floats, infos[l].output_bytes / static_cast<int64_t>(sizeof(float)));
    b->split_dy_floats_per_sample_ += infos[l].output_bytes / static_cast<int64_t>(sizeof(float));
  }
  b->optimizer_state_floats_ =
      memory::OptimizerStateCopies(spec.training().optimizer()) * b->gradient_floats_;
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer,
                          kernels::MakeOptimizer(spec.training().optimizer()));
  b->optimizer_state_names_ = optimizer->StateNames();
  b->sleeper_ = sleeper != nullptr ? std::move(sleeper) : std::make_unique<PreciseSleeper>();
  b->recompute_ = recompute;
  return std::unique_ptr<StageBackend>(std::move(b));
}

}  // namespace dapple::worker
