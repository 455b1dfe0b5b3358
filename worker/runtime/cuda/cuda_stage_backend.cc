#include "worker/runtime/cuda/cuda_stage_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/lr_schedule.h"
#include "common/model_info.h"
#include "common/status.h"
#include "common/steps.h"
#include "kernels/cpu/model.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/layer.h"
#include "kernels/cuda/layer_factory.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/optimizer.h"
#include "worker/runtime/layer_recompute.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {
namespace {

namespace kc = kernels::cuda;

// One layer of the stage: its CUDA kernel (kernels/cuda/layer_factory.h, computing in the job's
// precision) bound to the stage's device parameters, and what a micro-batch of `buffers_rows`
// needs.
struct StageLayer {
  std::unique_ptr<kc::DeviceLayer> kernel;
  int64_t in = 0;   // features per sample in
  int64_t out = 0;  // features per sample out
  int64_t buffers_rows = -1;
  kc::LayerBuffers buffers;
};

// Per slot and layer: the buffers of its DeviceCache (grow-only, as every buffer here).
struct LayerMemory {
  std::vector<DeviceBuffer> saved;
  std::vector<DeviceBuffer> grads;
  kc::DeviceCache cache;
};

class CudaStageBackend : public StageBackend {
 public:
  CudaStageBackend(CudaDevice* device, kc::Dtype dtype, bool recompute)
      : dev_(device), dtype_(dtype), recompute_(recompute) {}
  ~CudaStageBackend() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  std::string device() const override { return absl::StrCat("cuda:", dev_->index()); }
  std::string device_name() const override { return dev_->name(); }
  bool device_memory() const override { return true; }

  // The device time between the events recorded around each training Forward and Backward
  // (stream order puts only their kernels between the two of a pair). Waits for the last one,
  // so the host enqueues the next step only after this one's work has run.
  absl::StatusOr<double> TakeComputeSeconds() override {
    DAPPLE_ASSIGN_OR_RETURN(const double seconds, SumEventPairs());
    const double total = folded_seconds_ + seconds;
    folded_seconds_ = 0;
    return total;
  }

  absl::StatusOr<void*> Input(int slot, int64_t rows) override {
    DeviceBuffer& x = SlotAt(slot).acts[0];
    DAPPLE_RETURN_IF_ERROR(Ensure(&x, Bytes(rows, in_features_)));
    return x.data();
  }

  absl::Status LoadInput(int slot, const float* host, int64_t rows) override {
    DAPPLE_ASSIGN_OR_RETURN(void* dst, Input(slot, rows));
    // Pageable source: the copy has read `host` when cudaMemcpyAsync returns, so the runtime may
    // reuse its scratch at once.
    return kc::CudaStatus(
        cudaMemcpyAsync(dst, host, Bytes(rows, in_features_), cudaMemcpyHostToDevice, stream()),
        "copy input to the device");
  }

  absl::Status Forward(int slot, int64_t rows, const kernels::ForwardContext& context) override {
    Slot& s = SlotAt(slot);
    s.rows = rows;
    s.context = context;
    if (context.training) DAPPLE_RETURN_IF_ERROR(RecordComputeEvent());
    DAPPLE_ASSIGN_OR_RETURN(const void* x, LayerInput(s, rows));
    // A recomputing stage runs its layers through the replay set; only the output is the slot's.
    DAPPLE_RETURN_IF_ERROR(RunLayers(x, rows, context, recompute_ ? &replay_ : &s, &s.acts.back()));
    if (context.training) DAPPLE_RETURN_IF_ERROR(RecordComputeEvent());
    return absl::OkStatus();
  }

  absl::StatusOr<double> Loss(int slot, const int32_t* labels, int64_t rows, float grad_scale,
                              bool training, int64_t* correct) override {
    Slot& s = SlotAt(slot);
    // One target per `classes` outputs: [classes] per sample, or [T, vocab] (per token).
    const int64_t c = classes_;
    const int64_t targets = rows * (out_features_ / classes_);
    DAPPLE_RETURN_IF_ERROR(Ensure(&labels_, targets * sizeof(int32_t)));
    DAPPLE_RETURN_IF_ERROR(Ensure(&row_loss_, targets * sizeof(double)));
    DAPPLE_RETURN_IF_ERROR(Ensure(&row_correct_, targets * sizeof(int32_t)));
    if (training) DAPPLE_RETURN_IF_ERROR(Ensure(&s.dlogits, Bytes(rows, out_features_)));
    DAPPLE_RETURN_IF_ERROR(
        kc::CudaStatus(cudaMemcpyAsync(labels_.data(), labels, targets * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream()),
                       "copy labels to the device"));
    DAPPLE_ASSIGN_OR_RETURN(const float* logits, OutputFp32(s, &logits32_));
    DAPPLE_RETURN_IF_ERROR(
        kc::SoftmaxCrossEntropy(ctx(), logits, labels_.as<int32_t>(), targets, c, grad_scale,
                                training ? s.dlogits.as<float>() : nullptr, row_loss_.as<double>(),
                                row_correct_.as<int32_t>()));
    host_loss_.resize(targets);
    host_correct_.resize(targets);
    DAPPLE_RETURN_IF_ERROR(
        kc::CudaStatus(cudaMemcpyAsync(host_loss_.data(), row_loss_.data(),
                                       targets * sizeof(double), cudaMemcpyDeviceToHost, stream()),
                       "copy losses to the host"));
    DAPPLE_RETURN_IF_ERROR(
        kc::CudaStatus(cudaMemcpyAsync(host_correct_.data(), row_correct_.data(),
                                       targets * sizeof(int32_t), cudaMemcpyDeviceToHost, stream()),
                       "copy predictions to the host"));
    DAPPLE_RETURN_IF_ERROR(dev_->Synchronize());
    // Summed on the host in row order: the CPU reference's order, so the loss matches it.
    double total = 0;
    int64_t right = 0;
    for (int64_t r = 0; r < targets; ++r) {
      total += host_loss_[r];
      right += host_correct_[r];
    }
    if (correct != nullptr) *correct = right;
    return total;
  }

  absl::StatusOr<const void*> OutputForSend(int slot, int send_id, int64_t rows) override {
    if (send_id < 0) return absl::InternalError("negative send id");
    if (send_id >= static_cast<int>(act_send_.size())) act_send_.resize(send_id + 1);
    DeviceBuffer& dst = act_send_[send_id];
    if (bf16()) {  // the stage boundary carries fp32: cast straight into the send buffer
      DAPPLE_ASSIGN_OR_RETURN(const float* out, OutputFp32(SlotAt(slot), &dst));
      return static_cast<const void*>(out);
    }
    DAPPLE_RETURN_IF_ERROR(Ensure(&dst, Bytes(rows, out_features_)));
    DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
        cudaMemcpyAsync(dst.data(), SlotAt(slot).acts.back().data(), Bytes(rows, out_features_),
                        cudaMemcpyDeviceToDevice, stream()),
        "copy activations to their send buffer"));
    return static_cast<const void*>(dst.data());
  }

  absl::StatusOr<void*> GradInput(int micro_batch, int64_t rows) override {
    DeviceBuffer& g = At(&grad_recv_, micro_batch);
    DAPPLE_RETURN_IF_ERROR(Ensure(&g, Bytes(rows, out_features_)));
    return g.data();
  }

  absl::Status Backward(int slot, int micro_batch, int64_t rows, bool last_stage,
                        bool need_dx) override {
    Slot& s = SlotAt(slot);
    DAPPLE_RETURN_IF_ERROR(RecordComputeEvent());
    DAPPLE_ASSIGN_OR_RETURN(const void* dy,
                            IncomingGradient(s, micro_batch, rows, last_stage, &dy16_));
    if (recompute_) DAPPLE_RETURN_IF_ERROR(Replay(s));
    int next_scratch = 0;
    for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) {
      StageLayer& l = layers_[k];
      void* dx = nullptr;
      // In bf16 the stage's own dx is bf16 too, cast to fp32 into the send buffer below.
      if (k > 0 || (need_dx && bf16())) {
        // Ping-pong between two scratch buffers: dy of this layer may be the other one.
        DeviceBuffer& buf = scratch_[next_scratch];
        next_scratch ^= 1;
        DAPPLE_RETURN_IF_ERROR(Ensure(&buf, ActBytes(rows, l.in)));
        dx = buf.data();
      } else if (need_dx) {
        DAPPLE_ASSIGN_OR_RETURN(dx, GradSendBuffer(micro_batch, rows));
      }
      const LayerView v = ViewOf(s, k);
      DAPPLE_ASSIGN_OR_RETURN(const kc::Scratch scratch, Prepare(&l, v.memory, rows));
      kc::DeviceCache* cache = &v.memory->cache;
      DAPPLE_RETURN_IF_ERROR(
          l.kernel->BackwardInput(ctx(), v.x, v.y, dy, dx, rows, cache, scratch));
      DAPPLE_RETURN_IF_ERROR(l.kernel->BackwardWeight(ctx(), v.x, v.y, dy, rows, cache, scratch));
      dy = dx;
    }
    if (need_dx && bf16()) DAPPLE_RETURN_IF_ERROR(SendInputGradient(dy, micro_batch, rows));
    return RecordComputeEvent();
  }

  // The zero-bubble split (stage_backend.h): the slot keeps every layer's input gradient
  // (Slot::dxs) and, in bf16, its rounded incoming gradient from BackwardInput until its
  // BackwardWeight; the layers' caches hold the rest (kernels/cuda/layer.h).
  absl::Status BackwardInput(int slot, int micro_batch, int64_t rows, bool last_stage,
                             bool need_dx) override {
    // The replay set would be overwritten by other micro-batches before this one's W.
    if (recompute_) return SplitBackwardWithRecomputeError();
    Slot& s = SlotAt(slot);
    DAPPLE_RETURN_IF_ERROR(RecordComputeEvent());
    DAPPLE_ASSIGN_OR_RETURN(const void* dy,
                            IncomingGradient(s, micro_batch, rows, last_stage, &s.dy16));
    s.dxs.resize(layers_.size());
    for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) {
      StageLayer& l = layers_[k];
      void* dx = nullptr;
      if (k > 0 || (need_dx && bf16())) {
        DAPPLE_RETURN_IF_ERROR(Ensure(&s.dxs[k], ActBytes(rows, l.in)));
        dx = s.dxs[k].data();
      } else if (need_dx) {
        DAPPLE_ASSIGN_OR_RETURN(dx, GradSendBuffer(micro_batch, rows));
      }
      const LayerView v = ViewOf(s, k);
      DAPPLE_ASSIGN_OR_RETURN(const kc::Scratch scratch, Prepare(&l, v.memory, rows));
      DAPPLE_RETURN_IF_ERROR(
          l.kernel->BackwardInput(ctx(), v.x, v.y, dy, dx, rows, &v.memory->cache, scratch));
      dy = dx;
    }
    if (need_dx && bf16()) DAPPLE_RETURN_IF_ERROR(SendInputGradient(dy, micro_batch, rows));
    return RecordComputeEvent();
  }

  absl::Status BackwardWeight(int slot, int micro_batch, int64_t rows, bool last_stage) override {
    if (recompute_) return SplitBackwardWithRecomputeError();
    Slot& s = SlotAt(slot);
    if (s.dxs.size() != layers_.size()) {
      return absl::InternalError("BACKWARD_WEIGHT without its BACKWARD_INPUT");
    }
    // The gradient BackwardInput started from, kept in the slot (or GradInput) until now.
    const void* dy = bf16()       ? s.dy16.data()
                     : last_stage ? s.dlogits.data()
                                  : (micro_batch < static_cast<int>(grad_recv_.size())
                                         ? grad_recv_[micro_batch].data()
                                         : nullptr);
    if (dy == nullptr) return absl::InternalError("BACKWARD_WEIGHT without its gradient");
    DAPPLE_RETURN_IF_ERROR(RecordComputeEvent());
    for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) {
      StageLayer& l = layers_[k];
      const LayerView v = ViewOf(s, k);
      DAPPLE_ASSIGN_OR_RETURN(const kc::Scratch scratch, Prepare(&l, v.memory, rows));
      DAPPLE_RETURN_IF_ERROR(
          l.kernel->BackwardWeight(ctx(), v.x, v.y, dy, rows, &v.memory->cache, scratch));
      dy = s.dxs[k].data();
    }
    return RecordComputeEvent();
  }

  const void* GradForSend(int micro_batch) const override {
    return micro_batch < static_cast<int>(grad_send_.size()) ? grad_send_[micro_batch].data()
                                                             : nullptr;
  }

  absl::Status OptimizerStep() override {
    const v1::OptimizerSpec& o = training_.optimizer();
    const kernels::AdamWBetas betas = kernels::AdamWBetasOf(o);
    // The rate of this update (the t_-th, 0-based), rounded as the CPU optimizer rounds it.
    const double lr = LearningRate(training_, t_, total_steps_);
    ++t_;
    for (size_t i = 0; i < dev_params_.size(); ++i) {
      const int64_t count = static_cast<int64_t>(host_params_[i]->value.data.size());
      float* w = dev_params_[i].as<float>();
      float* g = dev_grads_[i].as<float>();
      if (o.type() == "sgd") {
        DAPPLE_RETURN_IF_ERROR(kc::SgdStep(ctx(), w, g, state1_[i].as<float>(), count,
                                           static_cast<float>(lr), static_cast<float>(o.momentum()),
                                           static_cast<float>(o.weight_decay())));
      } else {
        DAPPLE_RETURN_IF_ERROR(kc::AdamWStep(ctx(), w, g, state1_[i].as<float>(),
                                             state2_[i].as<float>(), count, lr, betas.beta1,
                                             betas.beta2, betas.eps, o.weight_decay(), t_));
      }
      DAPPLE_RETURN_IF_ERROR(
          kc::CudaStatus(cudaMemsetAsync(g, 0, count * sizeof(float), stream()), "zero gradients"));
    }
    return RefreshBf16Weights();
  }

  int64_t OptimizerUpdates() const override { return t_; }

  // cublasSscal per gradient (in chunks that fit its int count): g = factor * g in fp32, one
  // rounding, as the CPU backend. Host pointer mode: `factor` is read at the call.
  absl::Status ScaleGradients(float factor) override {
    for (size_t i = 0; i < dev_grads_.size(); ++i) {
      const int64_t count = static_cast<int64_t>(host_params_[i]->grad.data.size());
      float* g = dev_grads_[i].as<float>();
      for (int64_t begin = 0; begin < count; begin += kBlasChunk) {
        const int n = static_cast<int>(std::min(kBlasChunk, count - begin));
        DAPPLE_RETURN_IF_ERROR(kc::CublasStatus(cublasSscal(ctx().cublas, n, &factor, g + begin, 1),
                                                "cublasSscal of a gradient"));
      }
    }
    return absl::OkStatus();
  }

  // cublasSnrm2 per gradient (in chunks that fit its int count), squared and summed in double;
  // a tied copy is left out (its owner's stage counts it). The handle's pointer mode is host
  // (cuBLAS's default, never changed in dapple), so each call returns once its result is on the
  // host, after the stream's earlier work.
  absl::StatusOr<double> GradientSquaredNorm() override {
    double sum = 0;
    for (size_t i = 0; i < dev_grads_.size(); ++i) {
      if (!host_params_[i]->tied_to.empty()) continue;
      const int64_t count = static_cast<int64_t>(host_params_[i]->grad.data.size());
      const float* g = dev_grads_[i].as<float>();
      for (int64_t begin = 0; begin < count; begin += kBlasChunk) {
        const int n = static_cast<int>(std::min(kBlasChunk, count - begin));
        float norm = 0;
        DAPPLE_RETURN_IF_ERROR(kc::CublasStatus(cublasSnrm2(ctx().cublas, n, g + begin, 1, &norm),
                                                "cublasSnrm2 of a gradient"));
        sum += static_cast<double>(norm) * static_cast<double>(norm);
      }
    }
    return sum;
  }

  int64_t GradientFloats() const override {
    int64_t n = 0;
    for (const kernels::Param* p : host_params_) n += static_cast<int64_t>(p->grad.data.size());
    return n;
  }

  // Device to pageable host memory after the stream's backwards; the Synchronize makes the host
  // copy complete before the AllReduce reads it.
  absl::Status ReadGradients(float* host) override {
    return Copy(Tensors::kGradients, nullptr, cudaMemcpyDeviceToHost, host);
  }

  // Synchronised too, so the caller may reuse `host` at once and the update that follows on
  // the stream sees the reduced gradients.
  absl::Status WriteGradients(const float* host) override {
    return Copy(Tensors::kGradients, nullptr, cudaMemcpyHostToDevice, const_cast<float*>(host));
  }

  // The same copies for some parameters, synchronised the same way.
  absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) override {
    DAPPLE_RETURN_IF_ERROR(CheckPositions(params));
    return Copy(Tensors::kGradients, &params, cudaMemcpyDeviceToHost, host);
  }

  absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) override {
    DAPPLE_RETURN_IF_ERROR(CheckPositions(params));
    return Copy(Tensors::kGradients, &params, cudaMemcpyHostToDevice, const_cast<float*>(host));
  }

  // PipeDream's weight stashing: the same copies for the parameters (synchronised both ways, so
  // a swapped-in version is what the next kernel on the stream reads).
  int64_t WeightFloats() const override {
    int64_t n = 0;
    for (const kernels::Param* p : host_params_) n += static_cast<int64_t>(p->value.data.size());
    return n;
  }

  absl::Status ReadWeights(float* host) override {
    return Copy(Tensors::kWeights, nullptr, cudaMemcpyDeviceToHost, host);
  }

  absl::Status WriteWeights(const float* host) override {
    DAPPLE_RETURN_IF_ERROR(
        Copy(Tensors::kWeights, nullptr, cudaMemcpyHostToDevice, const_cast<float*>(host)));
    DAPPLE_RETURN_IF_ERROR(RefreshBf16Weights());
    return dev_->Synchronize();
  }

  // Device to pageable host memory after the stream's forward; synchronised.
  absl::Status ReadOutput(int slot, int64_t offset, int64_t count, float* host) override {
    Slot& s = SlotAt(slot);
    if (offset < 0 || count < 0 || offset + count > s.rows * out_features_) {
      return absl::InternalError(
          absl::StrFormat("output floats [%d, %d) outside the stage output of %d floats", offset,
                          offset + count, s.rows * out_features_));
    }
    DAPPLE_ASSIGN_OR_RETURN(const float* out, OutputFp32(s, &logits32_));
    DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(cudaMemcpyAsync(host, out + offset, count * sizeof(float),
                                                          cudaMemcpyDeviceToHost, stream()),
                                          "copy output to the host"));
    return dev_->Synchronize();
  }

  absl::StatusOr<void*> MessageBuffer(int64_t bytes) override {
    DAPPLE_RETURN_IF_ERROR(Ensure(&message_, static_cast<size_t>(bytes)));
    return message_.data();
  }

  // On the compute stream, where the transports order their copies into and out of device
  // buffers (worker/comm/cuda); synchronised both ways.
  absl::Status WriteMessage(const void* host, int64_t bytes) override {
    if (message_.empty() || static_cast<size_t>(bytes) > message_.bytes()) {
      return absl::InternalError("message larger than its buffer");
    }
    DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
        cudaMemcpyAsync(message_.data(), host, bytes, cudaMemcpyHostToDevice, stream()),
        "copy a message to the device"));
    return dev_->Synchronize();
  }

  absl::Status ReadMessage(void* host, int64_t bytes) override {
    if (message_.empty() || static_cast<size_t>(bytes) > message_.bytes()) {
      return absl::InternalError("message larger than its buffer");
    }
    DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
        cudaMemcpyAsync(host, message_.data(), bytes, cudaMemcpyDeviceToHost, stream()),
        "copy a message to the host"));
    return dev_->Synchronize();
  }

  absl::Status Synchronize() override { return dev_->Synchronize(); }

  absl::StatusOr<std::vector<kernels::Param*>> HostParams() override {
    for (size_t i = 0; i < dev_params_.size(); ++i) {
      kernels::Param* p = host_params_[i];
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemcpyAsync(p->value.data.data(), dev_params_[i].data(),
                          p->value.data.size() * sizeof(float), cudaMemcpyDeviceToHost, stream()),
          "copy weights to the host"));
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemcpyAsync(p->grad.data.data(), dev_grads_[i].data(),
                          p->grad.data.size() * sizeof(float), cudaMemcpyDeviceToHost, stream()),
          "copy gradients to the host"));
    }
    DAPPLE_RETURN_IF_ERROR(dev_->Synchronize());
    return host_params_;
  }

  int64_t StepStatisticsSize() const override { return statistics_size_; }

  absl::Status ReadStepStatistics(double* host) override {
    for (StageLayer& l : layers_) {
      DAPPLE_RETURN_IF_ERROR(l.kernel->ReadStepStatistics(ctx(), host));
      host += l.kernel->StepStatisticsSize();
    }
    return absl::OkStatus();
  }

  absl::Status ApplyStepStatistics(const double* summed) override {
    for (StageLayer& l : layers_) {
      DAPPLE_RETURN_IF_ERROR(l.kernel->ApplyStepStatistics(ctx(), summed));
      summed += l.kernel->StepStatisticsSize();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<kernels::Param*>> HostBuffers() override {
    DAPPLE_RETURN_IF_ERROR(CopyBuffersToHost());
    return host_buffers_;
  }

  absl::StatusOr<StageState> ExportState() override {
    StageState out;
    const std::vector<std::string> names = OptimizerStateNames(training_.optimizer().type());
    // A tied copy is its owner's tensor: the owner's stage writes it (once).
    std::vector<size_t> exported;
    for (size_t i = 0; i < host_params_.size(); ++i) {
      if (host_params_[i]->tied_to.empty()) exported.push_back(i);
    }
    out.params.resize(exported.size());
    out.optimizer_state.resize(names.size() * exported.size());
    // Device to pageable host memory; one Synchronize at the end makes every copy complete.
    auto copy_out = [&](NamedTensor* t, const kernels::Param& p, const std::string& name,
                        const DeviceBuffer& src) {
      t->name = name;
      t->shape = p.value.shape;
      t->data.resize(p.value.data.size());
      return kc::CudaStatus(
          cudaMemcpyAsync(t->data.data(), src.data(), t->data.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream()),
          "copy checkpoint state to the host");
    };
    for (size_t e = 0; e < exported.size(); ++e) {
      const size_t i = exported[e];
      const kernels::Param& p = *host_params_[i];
      DAPPLE_RETURN_IF_ERROR(copy_out(&out.params[e], p, p.name, dev_params_[i]));
      for (size_t k = 0; k < names.size(); ++k) {
        // state1_ is sgd's velocity or adamw's m, state2_ adamw's v (zeroed at Init, so the
        // state before the first update exports as zeros, as on the CPU).
        const DeviceBuffer& src = k == 0 ? state1_[i] : state2_[i];
        DAPPLE_RETURN_IF_ERROR(copy_out(&out.optimizer_state[k * exported.size() + e], p,
                                        absl::StrCat(p.name, ".", names[k]), src));
      }
    }
    DAPPLE_RETURN_IF_ERROR(CopyBuffersToHost());
    out.buffers = BufferTensors(host_buffers_);
    out.optimizer_steps = t_;
    return out;
  }

  absl::Status ImportState(const StageState& state) override {
    // Every tensor is found and checked before the first copy, so a refused import changes
    // nothing.
    const std::vector<std::string> names = OptimizerStateNames(training_.optimizer().type());
    DAPPLE_ASSIGN_OR_RETURN(const MatchedStageState matched,
                            MatchStageState(state, host_params_, host_buffers_, names));
    const std::vector<const NamedTensor*>& params = matched.params;
    const std::vector<std::vector<const NamedTensor*>>& states = matched.optimizer_state;
    auto copy_in = [&](DeviceBuffer& dst, const NamedTensor& src) {
      return kc::CudaStatus(
          cudaMemcpyAsync(dst.data(), src.data.data(), src.data.size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream()),
          "copy checkpoint state to the device");
    };
    for (size_t i = 0; i < host_params_.size(); ++i) {
      DAPPLE_RETURN_IF_ERROR(copy_in(dev_params_[i], *params[i]));
      for (size_t k = 0; k < names.size(); ++k) {
        DAPPLE_RETURN_IF_ERROR(copy_in(k == 0 ? state1_[i] : state2_[i], *states[k][i]));
      }
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemsetAsync(dev_grads_[i].data(), 0,
                          host_params_[i]->value.data.size() * sizeof(float), stream()),
          "zero gradients"));
    }
    for (size_t i = 0; i < host_buffers_.size(); ++i) {
      DAPPLE_RETURN_IF_ERROR(copy_in(dev_buffers_[i], *matched.buffers[i]));
    }
    DAPPLE_RETURN_IF_ERROR(RefreshBf16Weights());
    // The host vectors belong to the caller: wait until the device has read them.
    DAPPLE_RETURN_IF_ERROR(dev_->Synchronize());
    t_ = state.optimizer_steps;
    return absl::OkStatus();
  }

  // Builds the device copy of `host_layers` (already initialised), zeroed state and the layers'
  // CUDA kernels bound to it.
  absl::Status Init(const std::vector<LayerInfo>& infos, int first, int last,
                    std::vector<std::unique_ptr<kernels::Layer>> host_layers,
                    const v1::JobSpec& spec) {
    host_layers_ = std::move(host_layers);
    host_params_ = kernels::CollectParams(host_layers_);
    training_ = spec.training();
    total_steps_ = TotalSteps(spec);
    in_features_ = NumElements(infos[first].input_shape);
    // Token ids stay fp32 whatever the precision (the embedding reads them so: layer.h).
    cast_input_ = bf16() && !infos[first].token_input;
    out_features_ = NumElements(infos[last].output_shape);
    classes_ = infos[last].output_shape.back();
    const bool adam = training_.optimizer().type() == "adamw";
    for (kernels::Param* p : host_params_) {
      const size_t bytes = p->value.data.size() * sizeof(float);
      DAPPLE_ASSIGN_OR_RETURN(DeviceBuffer w, dev_->Allocate(bytes));
      DAPPLE_ASSIGN_OR_RETURN(DeviceBuffer g, dev_->Allocate(bytes));
      DAPPLE_ASSIGN_OR_RETURN(DeviceBuffer s1, dev_->Allocate(bytes));
      DeviceBuffer s2;
      if (adam) {
        DAPPLE_ASSIGN_OR_RETURN(s2, dev_->Allocate(bytes));
      }
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemcpyAsync(w.data(), p->value.data.data(), bytes, cudaMemcpyHostToDevice, stream()),
          "copy initial weights to the device"));
      DAPPLE_RETURN_IF_ERROR(
          kc::CudaStatus(cudaMemsetAsync(g.data(), 0, bytes, stream()), "zero gradients"));
      DAPPLE_RETURN_IF_ERROR(
          kc::CudaStatus(cudaMemsetAsync(s1.data(), 0, bytes, stream()), "zero optimizer state"));
      if (adam) {
        DAPPLE_RETURN_IF_ERROR(
            kc::CudaStatus(cudaMemsetAsync(s2.data(), 0, bytes, stream()), "zero optimizer state"));
      }
      if (bf16()) {
        DAPPLE_ASSIGN_OR_RETURN(DeviceBuffer w16,
                                dev_->Allocate(p->value.data.size() * sizeof(kc::bf16)));
        dev_params_bf16_.push_back(std::move(w16));
      }
      dev_params_.push_back(std::move(w));
      dev_grads_.push_back(std::move(g));
      state1_.push_back(std::move(s1));
      state2_.push_back(std::move(s2));
    }
    // Buffers (batch norm's running statistics): device copies of the CPU layers' initial values.
    host_buffers_ = CollectBuffers(host_layers_);
    for (kernels::Param* b : host_buffers_) {
      const size_t bytes = b->value.data.size() * sizeof(float);
      DAPPLE_ASSIGN_OR_RETURN(DeviceBuffer d, dev_->Allocate(bytes));
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemcpyAsync(d.data(), b->value.data.data(), bytes, cudaMemcpyHostToDevice, stream()),
          "copy initial buffers to the device"));
      dev_buffers_.push_back(std::move(d));
    }
    DAPPLE_RETURN_IF_ERROR(RefreshBf16Weights());
    for (int i = first; i <= last; ++i) {
      DAPPLE_RETURN_IF_ERROR(AddLayer(infos[i], spec.model().layers(i), *host_layers_[i - first]));
    }
    replay_.acts.resize(layers_.size() + 1);
    replay_.caches.resize(layers_.size());
    // The runtime sums the statistics of CPU and GPU replicas alike: the layouts must agree.
    for (const StageLayer& l : layers_) statistics_size_ += l.kernel->StepStatisticsSize();
    if (statistics_size_ != worker::StepStatisticsSize(host_layers_)) {
      return absl::InternalError(absl::StrCat("step statistics: the CUDA layers have ",
                                              statistics_size_, " values, the CPU layers ",
                                              worker::StepStatisticsSize(host_layers_)));
    }
    return dev_->Synchronize();
  }

 private:
  struct Slot {
    std::vector<DeviceBuffer> acts;   // acts[0] = stage input, acts[k + 1] = layer k output
    DeviceBuffer input16;             // bf16 with cast_input_: acts[0] rounded, layer 0's x
    std::vector<LayerMemory> caches;  // per layer: what its backward needs
    DeviceBuffer dlogits;
    // The zero-bubble split, BackwardInput -> BackwardWeight: dxs[k] = dL/d(layer k's input)
    // for k > 0 (layer k - 1's dy); in bf16 dxs[0] too, and dy16 the incoming gradient rounded.
    std::vector<DeviceBuffer> dxs;
    DeviceBuffer dy16;
    kernels::ForwardContext context;  // of the last Forward: a recomputing backward replays it
    int64_t rows = 0;                 // of the last Forward
  };

  // What layer k's backward reads for slot `s`: its x, y and cache (the slot's, or the replay
  // set's on a recomputing stage, refilled by Replay).
  struct LayerView {
    const void* x;
    const void* y;
    LayerMemory* memory;
  };
  LayerView ViewOf(Slot& s, int k) {
    Slot& a = recompute_ ? replay_ : s;
    return {k == 0 ? LayerInputOf(s) : a.acts[k].data(), a.acts[k + 1].data(), &a.caches[k]};
  }

  // Every layer's Forward from `x` (rows samples), with outputs and caches in `into`, except
  // the last layer's output, written into *out.
  absl::Status RunLayers(const void* x, int64_t rows, const kernels::ForwardContext& context,
                         Slot* into, DeviceBuffer* out) {
    for (size_t k = 0; k < layers_.size(); ++k) {
      StageLayer& l = layers_[k];
      DeviceBuffer& y = k + 1 == layers_.size() ? *out : into->acts[k + 1];
      DAPPLE_RETURN_IF_ERROR(Ensure(&y, ActBytes(rows, l.out)));
      DAPPLE_ASSIGN_OR_RETURN(const kc::Scratch scratch, Prepare(&l, &into->caches[k], rows));
      DAPPLE_RETURN_IF_ERROR(
          l.kernel->Forward(ctx(), x, y.data(), rows, &into->caches[k].cache, context, scratch));
      x = y.data();
    }
    return absl::OkStatus();
  }

  // Activation recomputation (layer_recompute.h, the CPU's twin): slot s's forward again from
  // its kept input with its own ForwardContext (recompute set: batch norm does not count the
  // micro-batch twice), refilling the replay set for the backward that follows. Exact: the
  // kernels are deterministic and the weights are those of the first forward.
  absl::Status Replay(Slot& s) {
    if (!s.context.training) return absl::InternalError("BACKWARD of an evaluation forward");
    kernels::ForwardContext again = s.context;
    again.recompute = true;
    return RunLayers(LayerInputOf(s), s.rows, again, &replay_, &replay_.acts.back());
  }

  // The gradient a backward of slot s starts from: the slot's dL/dlogits on the last stage,
  // else the one received for `micro_batch` (GradInput); in bf16 rounded into *dy16.
  absl::StatusOr<const void*> IncomingGradient(Slot& s, int micro_batch, int64_t rows,
                                               bool last_stage, DeviceBuffer* dy16) {
    const void* dy = last_stage ? s.dlogits.data()
                     : micro_batch < static_cast<int>(grad_recv_.size())
                         ? grad_recv_[micro_batch].data()
                         : nullptr;
    if (dy == nullptr) return absl::InternalError("BACKWARD without its gradient");
    if (!bf16()) return dy;
    DAPPLE_RETURN_IF_ERROR(Ensure(dy16, ActBytes(rows, out_features_)));
    DAPPLE_RETURN_IF_ERROR(kc::CastToBf16(ctx(), static_cast<const float*>(dy),
                                          dy16->as<kc::bf16>(), rows * out_features_));
    return static_cast<const void*>(dy16->data());
  }

  // The fp32 send buffer of `micro_batch`'s input gradient (GradForSend).
  absl::StatusOr<void*> GradSendBuffer(int micro_batch, int64_t rows) {
    DeviceBuffer& buf = At(&grad_send_, micro_batch);
    DAPPLE_RETURN_IF_ERROR(Ensure(&buf, Bytes(rows, in_features_)));
    return buf.data();
  }

  // bf16: the stage's own input gradient `dx16` cast to fp32 into the send buffer (the stage
  // boundary carries fp32).
  absl::Status SendInputGradient(const void* dx16, int micro_batch, int64_t rows) {
    DAPPLE_ASSIGN_OR_RETURN(void* dst, GradSendBuffer(micro_batch, rows));
    return kc::CastToFloat(ctx(), static_cast<const kc::bf16*>(dx16), static_cast<float*>(dst),
                           rows * in_features_);
  }

  // cuBLAS level-1 calls take an int count: larger gradients go in chunks of this many.
  static constexpr int64_t kBlasChunk = int64_t{1} << 30;

  // Copies the gradients or weights of `params` (increasing positions; nullptr: every
  // parameter) between their device buffers and consecutive floats at `host`, in `kind`'s
  // direction, then synchronises the stream. A host-to-device copy only reads `host`.
  enum class Tensors { kGradients, kWeights };
  absl::Status Copy(Tensors which, const std::vector<int>* params, cudaMemcpyKind kind,
                    float* host) {
    const bool grads = which == Tensors::kGradients;
    const bool to_host = kind == cudaMemcpyDeviceToHost;
    const size_t n = params != nullptr ? params->size() : host_params_.size();
    for (size_t k = 0; k < n; ++k) {
      const int i = params != nullptr ? (*params)[k] : static_cast<int>(k);
      const kernels::Param& p = *host_params_[i];
      const size_t count = (grads ? p.grad : p.value).data.size();
      void* device = (grads ? dev_grads_ : dev_params_)[i].data();
      DAPPLE_RETURN_IF_ERROR(
          kc::CudaStatus(cudaMemcpyAsync(to_host ? static_cast<void*>(host) : device,
                                         to_host ? device : static_cast<const void*>(host),
                                         count * sizeof(float), kind, stream()),
                         absl::StrCat("copy ", grads ? "gradients" : "weights",
                                      to_host ? " to the host" : " to the device")));
      host += count;
    }
    return dev_->Synchronize();
  }

  // The device buffers into the host layers' Buffers() (host_buffers_), synchronously.
  absl::Status CopyBuffersToHost() {
    for (size_t i = 0; i < host_buffers_.size(); ++i) {
      std::vector<float>& host = host_buffers_[i]->value.data;
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(
          cudaMemcpyAsync(host.data(), dev_buffers_[i].data(), host.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream()),
          "copy buffers to the host"));
    }
    return dev_->Synchronize();
  }

  absl::Status CheckPositions(const std::vector<int>& params) const {
    for (size_t k = 0; k < params.size(); ++k) {
      if (params[k] < 0 || params[k] >= static_cast<int>(host_params_.size()) ||
          (k > 0 && params[k] <= params[k - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient positions must be increasing in [0, ", host_params_.size(),
                         "), got ", params[k], " at ", k));
      }
    }
    return absl::OkStatus();
  }

  // The CUDA kernel of `info`, bound to the device copies of the CPU layer's parameters (in
  // its Params() order; a parameter shared with an earlier layer of the stage, the tied
  // embedding table, is that layer's device buffer: one tensor, both gradients into it).
  absl::Status AddLayer(const LayerInfo& info, const v1::LayerSpec& spec,
                        kernels::Layer& host_layer) {
    DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<kc::DeviceLayer> kernel,
                            kc::MakeCudaLayer(info, spec, dtype_));
    std::vector<kc::DeviceParam> params;
    for (kernels::Param* p : host_layer.Params()) {
      const auto it = std::find(host_params_.begin(), host_params_.end(), p);
      if (it == host_params_.end()) {
        return absl::InternalError(absl::StrCat("model.layers[", info.index, "]: parameter ",
                                                p->name, " missing from the stage's list"));
      }
      const size_t i = static_cast<size_t>(it - host_params_.begin());
      params.push_back({dev_params_[i].as<float>(), dev_grads_[i].as<float>(),
                        bf16() ? dev_params_bf16_[i].as<kc::bf16>() : nullptr,
                        static_cast<int64_t>(p->value.data.size())});
    }
    DAPPLE_RETURN_IF_ERROR(kernel->BindParams(std::move(params)));
    std::vector<float*> buffers;
    for (kernels::Param* b : host_layer.Buffers()) {
      const auto it = std::find(host_buffers_.begin(), host_buffers_.end(), b);
      if (it == host_buffers_.end()) {
        return absl::InternalError(absl::StrCat("model.layers[", info.index, "]: buffer ", b->name,
                                                " missing from the stage's list"));
      }
      buffers.push_back(dev_buffers_[static_cast<size_t>(it - host_buffers_.begin())].as<float>());
    }
    if (!buffers.empty()) DAPPLE_RETURN_IF_ERROR(kernel->BindBuffers(std::move(buffers)));
    StageLayer l;
    l.kernel = std::move(kernel);
    l.in = NumElements(info.input_shape);
    l.out = NumElements(info.output_shape);
    layers_.push_back(std::move(l));
    return absl::OkStatus();
  }

  // Sizes `memory`'s cache buffers for `rows` samples of layer `l` and returns the scratch a
  // call may use (one buffer shared by every layer and slot: the stream orders its users).
  absl::StatusOr<kc::Scratch> Prepare(StageLayer* l, LayerMemory* memory, int64_t rows) {
    if (l->buffers_rows != rows) {
      DAPPLE_ASSIGN_OR_RETURN(l->buffers, l->kernel->Buffers(rows));
      l->buffers_rows = rows;
    }
    const kc::LayerBuffers& b = l->buffers;
    memory->saved.resize(b.saved.size());
    memory->grads.resize(b.grads.size());
    memory->cache.saved.resize(b.saved.size());
    memory->cache.grads.resize(b.grads.size());
    for (size_t i = 0; i < b.saved.size(); ++i) {
      DAPPLE_RETURN_IF_ERROR(Ensure(&memory->saved[i], b.saved[i]));
      memory->cache.saved[i] = memory->saved[i].data();
    }
    for (size_t i = 0; i < b.grads.size(); ++i) {
      DAPPLE_RETURN_IF_ERROR(Ensure(&memory->grads[i], b.grads[i]));
      memory->cache.grads[i] = memory->grads[i].data();
    }
    if (b.scratch == 0) return kc::Scratch{};
    DAPPLE_RETURN_IF_ERROR(Ensure(&layer_scratch_, b.scratch));
    return kc::Scratch{layer_scratch_.data(), b.scratch};
  }

  static size_t Bytes(int64_t rows, int64_t features) {
    return static_cast<size_t>(rows * features) * sizeof(float);
  }
  // An activation or gradient between the stage's layers: the job's precision.
  size_t ActBytes(int64_t rows, int64_t features) const {
    return static_cast<size_t>(rows * features) * kc::DtypeBytes(dtype_);
  }
  bool bf16() const { return dtype_ == kc::Dtype::kBf16; }

  // The bf16 copies of the fp32 master weights that bf16 layers multiply with (DeviceParam::
  // value_bf16), rounded again after every write of the weights. Nothing in fp32.
  absl::Status RefreshBf16Weights() {
    for (size_t i = 0; i < dev_params_bf16_.size(); ++i) {
      DAPPLE_RETURN_IF_ERROR(
          kc::CastToBf16(ctx(), dev_params_[i].as<float>(), dev_params_bf16_[i].as<kc::bf16>(),
                         static_cast<int64_t>(host_params_[i]->value.data.size())));
    }
    return absl::OkStatus();
  }

  // Layer 0's x for slot `s`: the stage input (fp32: the runtime's format, and token ids), or
  // in bf16 its rounded copy, made here.
  absl::StatusOr<const void*> LayerInput(Slot& s, int64_t rows) {
    if (!cast_input_) return static_cast<const void*>(s.acts[0].data());
    DAPPLE_RETURN_IF_ERROR(Ensure(&s.input16, ActBytes(rows, in_features_)));
    DAPPLE_RETURN_IF_ERROR(kc::CastToBf16(ctx(), s.acts[0].as<float>(), s.input16.as<kc::bf16>(),
                                          rows * in_features_));
    return static_cast<const void*>(s.input16.data());
  }
  const void* LayerInputOf(const Slot& s) const {
    return cast_input_ ? s.input16.data() : s.acts[0].data();
  }

  // The slot's stage output as fp32 (the loss, the send buffers and the host read it so): the
  // layer's own buffer in fp32; in bf16 cast into `dst` (grown to fit).
  absl::StatusOr<const float*> OutputFp32(Slot& s, DeviceBuffer* dst) {
    if (!bf16()) return s.acts.back().as<float>();
    DAPPLE_RETURN_IF_ERROR(Ensure(dst, Bytes(s.rows, out_features_)));
    DAPPLE_RETURN_IF_ERROR(kc::CastToFloat(ctx(), s.acts.back().as<kc::bf16>(), dst->as<float>(),
                                           s.rows * out_features_));
    return dst->as<float>();
  }

  // The seconds between each recorded pair of events, waiting for them; frees the events.
  absl::StatusOr<double> SumEventPairs() {
    double seconds = 0;
    for (int i = 0; i + 1 < events_used_; i += 2) {
      DAPPLE_RETURN_IF_ERROR(
          kc::CudaStatus(cudaEventSynchronize(events_[i + 1]), "wait for a compute event"));
      float ms = 0;
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]),
                                            "time the forwards and backwards"));
      seconds += static_cast<double>(ms) * 1e-3;
    }
    events_used_ = 0;
    return seconds;
  }

  // Records the next event of the compute-time pairs on the stream (TakeComputeSeconds). A
  // caller that never takes them (a test driving the backend alone) folds them into a sum
  // instead of growing the pool without bound.
  absl::Status RecordComputeEvent() {
    if (events_used_ >= kMaxComputeEvents && events_used_ % 2 == 0) {
      DAPPLE_ASSIGN_OR_RETURN(const double seconds, SumEventPairs());
      folded_seconds_ += seconds;
    }
    if (events_used_ == static_cast<int>(events_.size())) {
      cudaEvent_t e = nullptr;
      DAPPLE_RETURN_IF_ERROR(kc::CudaStatus(cudaEventCreate(&e), "create a compute event"));
      events_.push_back(e);
    }
    return kc::CudaStatus(cudaEventRecord(events_[events_used_++], stream()),
                          "record a compute event");
  }
  const kc::KernelContext& ctx() const { return dev_->ctx(); }
  cudaStream_t stream() const { return dev_->compute_stream(); }

  // Grow-only: a buffer is replaced only when too small. The old block goes back to the cache,
  // and stream order keeps pending work on it before later users (caching_allocator.h).
  absl::Status Ensure(DeviceBuffer* buf, size_t bytes) {
    if (buf->bytes() >= bytes && !buf->empty()) return absl::OkStatus();
    DAPPLE_ASSIGN_OR_RETURN(*buf, dev_->Allocate(std::max<size_t>(bytes, 256)));
    return absl::OkStatus();
  }

  Slot& SlotAt(int slot) {
    if (slot >= static_cast<int>(slots_.size())) {
      slots_.resize(slot + 1);
      for (Slot& s : slots_) {
        s.acts.resize(layers_.size() + 1);
        s.caches.resize(layers_.size());
      }
    }
    return slots_[slot];
  }

  static DeviceBuffer& At(std::vector<DeviceBuffer>* v, int i) {
    if (i >= static_cast<int>(v->size())) v->resize(i + 1);
    return (*v)[i];
  }

  CudaDevice* dev_;
  kc::Dtype dtype_;  // the layers' activations (training.precision)
  // Activation recomputation (PlanStageSummary.recompute): every slot keeps only its input and
  // output; the layers' outputs and caches live in replay_, one micro-batch's worth.
  bool recompute_;
  Slot replay_;
  bool cast_input_ = false;  // bf16 and the stage input is not token ids
  std::vector<StageLayer> layers_;
  int64_t in_features_ = 0;
  int64_t out_features_ = 0;
  int64_t classes_ = 0;  // the output's last dimension: what the loss's softmax spans
  std::vector<std::unique_ptr<kernels::Layer>> host_layers_;  // host mirror of the parameters
  std::vector<kernels::Param*> host_params_;
  std::vector<DeviceBuffer> dev_params_;
  std::vector<DeviceBuffer> dev_grads_;
  std::vector<DeviceBuffer> dev_params_bf16_;  // bf16 only: the layers' copies of dev_params_
  std::vector<DeviceBuffer> state1_;           // sgd velocity / adamw m
  std::vector<DeviceBuffer> state2_;           // adamw v
  std::vector<kernels::Param*> host_buffers_;  // the host layers' Buffers(), in layer order
  std::vector<DeviceBuffer> dev_buffers_;      // their device copies, the layers' own
  int64_t statistics_size_ = 0;
  v1::TrainingSpec training_;  // the optimizer and the learning-rate schedule
  int64_t total_steps_ = 0;
  int64_t t_ = 0;  // updates applied

  std::vector<Slot> slots_;
  std::vector<DeviceBuffer> act_send_;
  std::vector<DeviceBuffer> grad_send_;
  std::vector<DeviceBuffer> grad_recv_;
  DeviceBuffer scratch_[2];  // the backward's dx, ping-pong
  DeviceBuffer dy16_;        // bf16: the stage's incoming gradient rounded
  DeviceBuffer logits32_;    // bf16: the stage output as fp32 for the loss and ReadOutput
  static constexpr int kMaxComputeEvents = 4096;
  std::vector<cudaEvent_t> events_;  // pairs around training Forwards and Backwards
  int events_used_ = 0;
  double folded_seconds_ = 0;  // of pairs summed before TakeComputeSeconds
  DeviceBuffer layer_scratch_;
  DeviceBuffer labels_;
  DeviceBuffer row_loss_;
  DeviceBuffer row_correct_;
  std::vector<double> host_loss_;
  std::vector<int32_t> host_correct_;
  DeviceBuffer message_;  // MessageBuffer
};

}  // namespace

absl::StatusOr<std::unique_ptr<StageBackend>> MakeCudaStageBackend(const v1::JobSpec& spec,
                                                                   int first_layer, int last_layer,
                                                                   CudaDevice* device,
                                                                   bool recompute) {
  if (device == nullptr) return absl::InvalidArgumentError("no CUDA device");
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  if (first_layer < 0 || last_layer < first_layer || last_layer >= static_cast<int>(infos.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layers [%d, %d] outside a model of %d layers", first_layer, last_layer, infos.size()));
  }
  // The CPU optimizer factory validates the spec (the same rules and messages on both backends).
  DAPPLE_RETURN_IF_ERROR(kernels::MakeOptimizer(spec.training().optimizer()).status());
  DAPPLE_ASSIGN_OR_RETURN(
      std::vector<std::unique_ptr<kernels::Layer>> host_layers,
      kernels::BuildLayers(spec.model(), first_layer, last_layer, spec.training().seed()));
  auto b = std::make_unique<CudaStageBackend>(
      device, UsesBf16(spec.training()) ? kc::Dtype::kBf16 : kc::Dtype::kFp32, recompute);
  DAPPLE_RETURN_IF_ERROR(b->Init(infos, first_layer, last_layer, std::move(host_layers), spec));
  return std::unique_ptr<StageBackend>(std::move(b));
}

}  // namespace dapple::worker
