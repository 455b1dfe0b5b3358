#include "worker/runtime/stage_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model_info.h"
#include "common/schedule/action.h"
#include "common/status.h"
#include "common/steps.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"

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

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

uint64_t MessageTag(MessageKind kind, int64_t index, int micro_batch) {
  // 4 bits kind | 28 bits step or evaluation chunk | 16 bits micro-batch = the 48 bits a
  // Transport carries.
  return (static_cast<uint64_t>(kind) << 44) |
         ((static_cast<uint64_t>(index) & 0xFFFFFFFull) << 16) |
         (static_cast<uint64_t>(micro_batch) & 0xFFFFull);
}

absl::StatusOr<std::unique_ptr<StageRuntime>> StageRuntime::Create(
    const v1::StageAssignment& assignment, const Dataset* train, const Dataset* test,
    Transport* transport) {
  const v1::JobSpec& spec = assignment.spec();
  const int stage = assignment.stage();
  const int num_stages = assignment.num_stages();
  if (num_stages < 1 || stage < 0 || stage >= num_stages ||
      assignment.plan().stages_size() != num_stages) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "assignment for stage %d of %d does not match a plan of %d stages", stage, num_stages,
        assignment.plan().stages_size()));
  }
  if (num_stages > 1 && transport == nullptr) {
    return absl::InvalidArgumentError("a pipeline of more than one stage needs a transport");
  }
  if (spec.training().micro_batch() <= 0 ||
      spec.training().global_batch() % spec.training().micro_batch() != 0) {
    return absl::InvalidArgumentError("training.global_batch must be a multiple of micro_batch");
  }
  auto rt = std::unique_ptr<StageRuntime>(new StageRuntime());
  rt->assignment_ = assignment;
  rt->train_ = train;
  rt->test_ = test;
  rt->transport_ = transport;
  rt->stage_ = stage;
  rt->num_stages_ = num_stages;
  rt->micro_batch_size_ = spec.training().micro_batch();
  rt->global_batch_ = spec.training().global_batch();
  rt->num_micro_batches_ = static_cast<int>(rt->global_batch_ / rt->micro_batch_size_);
  rt->steps_per_epoch_ = StepsPerEpoch(spec);
  rt->seed_ = spec.training().seed();

  const v1::PlanStageSummary& range = assignment.plan().stages(stage);
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  if (range.first_layer() < 0 || range.last_layer() < range.first_layer() ||
      range.last_layer() >= static_cast<int>(infos.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d covers layers [%d, %d] but the model has %d layers", stage,
        range.first_layer(), range.last_layer(), infos.size()));
  }
  int64_t widest = NumElements(infos[0].input_shape);
  for (const LayerInfo& info : infos) widest = std::max(widest, NumElements(info.output_shape));
  rt->eval_chunk_ = std::clamp<int64_t>(kMaxEvalActivationFloats / widest, 1, kMaxEvalChunk);
  rt->input_shape_ = infos[range.first_layer()].input_shape;
  rt->output_shape_ = infos[range.last_layer()].output_shape;
  DAPPLE_ASSIGN_OR_RETURN(rt->layers_, kernels::BuildLayers(spec.model(), range.first_layer(),
                                                            range.last_layer(), rt->seed_));
  rt->params_ = kernels::CollectParams(rt->layers_);
  DAPPLE_ASSIGN_OR_RETURN(rt->optimizer_, kernels::MakeOptimizer(spec.training().optimizer()));

  const int m = rt->num_micro_batches_;
  rt->slot_of_.assign(m, -1);
  rt->act_send_.resize(m);
  rt->grad_send_.resize(m);
  rt->grad_recv_.resize(m);
  if (stage == 0 && train == nullptr) {
    return absl::InvalidArgumentError("stage 0 needs the training images");
  }
  if (stage == num_stages - 1 && train == nullptr) {
    return absl::InvalidArgumentError("the last stage needs the training labels");
  }
  return rt;
}

std::vector<kernels::Param*> StageRuntime::Params() { return params_; }

StageRuntime::Slot& StageRuntime::SlotFor(int micro_batch) {
  int& idx = slot_of_[micro_batch];
  if (idx < 0) {
    if (free_slots_.empty()) {
      free_slots_.push_back(static_cast<int>(slots_.size()));
      slots_.emplace_back();
      slots_.back().acts.resize(layers_.size() + 1);
    }
    idx = free_slots_.back();
    free_slots_.pop_back();
    ++live_slots_;
    peak_live_slots_ = std::max(peak_live_slots_, live_slots_);
  }
  return slots_[idx];
}

void StageRuntime::ReleaseSlot(int micro_batch) {
  int& idx = slot_of_[micro_batch];
  if (idx < 0) return;
  free_slots_.push_back(idx);
  idx = -1;
  --live_slots_;
}

void StageRuntime::MicroBatchIndices(int64_t step, int micro_batch, std::vector<int64_t>* out) {
  const int64_t epoch = step / steps_per_epoch_;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(train_->size, seed_, epoch);
    order_epoch_ = epoch;
  }
  const int64_t begin =
      (step % steps_per_epoch_) * global_batch_ + micro_batch * micro_batch_size_;
  out->assign(order_.begin() + begin, order_.begin() + begin + micro_batch_size_);
}

void StageRuntime::ForwardLayers(std::vector<Tensor>* acts) {
  for (size_t k = 0; k < layers_.size(); ++k) layers_[k]->Forward((*acts)[k], &(*acts)[k + 1]);
}

absl::StatusOr<StepResult> StageRuntime::RunStep(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  step_loss_sum_ = 0;
  peak_live_slots_ = live_slots_;
  for (const v1::Action& action : assignment_.program().actions()) {
    absl::Status s = RunAction(action, step);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("stage ", stage_, " step ", step + 1, " action ",
                                                 schedule::ActionToString(action), ": ",
                                                 s.message()));
    }
  }
  if (live_slots_ != 0) {
    return absl::InternalError(absl::StrFormat(
        "stage %d: %d micro-batches still stashed after the step (program without a backward?)",
        stage_, live_slots_));
  }
  StepResult r;
  r.seconds = SecondsSince(t0);
  r.peak_in_flight = peak_live_slots_;
  if (stage_ == num_stages_ - 1) {
    r.has_loss = true;
    r.loss = step_loss_sum_ / static_cast<double>(global_batch_);
  }
  return r;
}

// The interpreter: one switch with no default (-Werror=switch), so a new ActionKind cannot be
// silently ignored.
absl::Status StageRuntime::RunAction(const v1::Action& action, int64_t step) {
  const int m = action.micro_batch();
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  const bool needs_mb = action.kind() != v1::OPTIMIZER_STEP && action.kind() != v1::ALLREDUCE;
  if (needs_mb && (m < 0 || m >= num_micro_batches_)) {
    return absl::InternalError(absl::StrFormat("micro-batch %d outside [0, %d)", m,
                                               num_micro_batches_));
  }
  switch (action.kind()) {
    case v1::FORWARD: {
      Slot& slot = SlotFor(m);
      if (first) {
        MicroBatchIndices(step, m, &index_scratch_);
        slot.acts[0].Resize(WithBatch(micro_batch_size_, input_shape_));
        GatherBatch(*train_, index_scratch_.data(), micro_batch_size_, slot.acts[0].data.data(),
                    nullptr);
      } else if (slot.acts[0].rows() != micro_batch_size_) {
        return absl::InternalError("FORWARD before its RECV_ACT");
      }
      ForwardLayers(&slot.acts);
      if (last) {
        MicroBatchIndices(step, m, &index_scratch_);
        label_scratch_.resize(micro_batch_size_);
        GatherBatch(*train_, index_scratch_.data(), micro_batch_size_, nullptr,
                    label_scratch_.data());
        slot.loss_sum = kernels::SoftmaxCrossEntropy(
            slot.acts.back(), label_scratch_.data(),
            1.0f / static_cast<float>(global_batch_), &slot.dlogits, nullptr);
        step_loss_sum_ += slot.loss_sum;
      } else {
        act_send_[m] = slot.acts.back();
      }
      return absl::OkStatus();
    }
    case v1::BACKWARD: {
      if (slot_of_[m] < 0) return absl::InternalError("BACKWARD without its FORWARD");
      Slot& slot = slots_[slot_of_[m]];
      Tensor* dy = last ? &slot.dlogits : &grad_recv_[m];
      Tensor scratch;
      for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) {
        Tensor* dx = nullptr;
        if (k > 0) {
          dx = &scratch;
        } else if (!first) {
          dx = &grad_send_[m];
        }
        layers_[k]->Backward(slot.acts[k], slot.acts[k + 1], *dy, dx);
        if (k > 0) {
          std::swap(slot.dlogits, scratch);  // reuse the slot's buffer as the next dy
          dy = &slot.dlogits;
        }
      }
      ReleaseSlot(m);
      return absl::OkStatus();
    }
    case v1::SEND_ACT:
      return transport_->Send(stage_ + 1, MessageTag(MessageKind::kActivation, step, m),
                              act_send_[m].data.data(), act_send_[m].bytes());
    case v1::RECV_ACT: {
      Slot& slot = SlotFor(m);
      slot.acts[0].Resize(WithBatch(micro_batch_size_, input_shape_));
      return transport_->Recv(stage_ - 1, MessageTag(MessageKind::kActivation, step, m),
                              slot.acts[0].data.data(), slot.acts[0].bytes());
    }
    case v1::SEND_GRAD:
      return transport_->Send(stage_ - 1, MessageTag(MessageKind::kGradient, step, m),
                              grad_send_[m].data.data(), grad_send_[m].bytes());
    case v1::RECV_GRAD:
      grad_recv_[m].Resize(WithBatch(micro_batch_size_, output_shape_));
      return transport_->Recv(stage_ + 1, MessageTag(MessageKind::kGradient, step, m),
                              grad_recv_[m].data.data(), grad_recv_[m].bytes());
    case v1::ALLREDUCE:
      return absl::UnimplementedError("ALLREDUCE needs stage replicas, which this build lacks");
    case v1::OPTIMIZER_STEP:
      // The flush: every send of this step must be done before its buffers are reused.
      if (transport_ != nullptr) DAPPLE_RETURN_IF_ERROR(transport_->WaitSends());
      optimizer_->Step(params_);
      kernels::ZeroGrads(params_);
      return absl::OkStatus();
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return absl::InternalError("unspecified action kind");
  }
  return absl::InternalError(absl::StrCat("unknown action kind ", action.kind()));
}

absl::StatusOr<EvalResult> StageRuntime::Evaluate(int64_t eval_index) {
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  const Dataset& test = *test_;
  const int64_t chunks = (test.size + eval_chunk_ - 1) / eval_chunk_;
  std::vector<Tensor> acts(layers_.size() + 1);
  // Sent chunks stay alive until WaitSends (Transport rules); chunks of a wide model are few MiB
  // each at most kMaxEvalActivationFloats floats.
  std::vector<Tensor> sent(last ? 0 : chunks);
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * eval_chunk_;
    const int64_t n = std::min(eval_chunk_, test.size - begin);
    acts[0].Resize(WithBatch(n, input_shape_));
    const uint64_t tag = MessageTag(MessageKind::kEvalActivation, eval_index, static_cast<int>(c));
    if (first) {
      indices.resize(n);
      for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
      GatherBatch(test, indices.data(), n, acts[0].data.data(), nullptr);
    } else {
      absl::Status s = transport_->Recv(stage_ - 1, tag, acts[0].data.data(), acts[0].bytes());
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("stage ", stage_, " evaluation chunk ", c,
                                                   ": ", s.message()));
      }
    }
    ForwardLayers(&acts);
    if (last) {
      labels.assign(test.labels.begin() + begin, test.labels.begin() + begin + n);
      int64_t ok = 0;
      loss_sum += kernels::SoftmaxCrossEntropyEval(acts.back(), labels.data(), &ok);
      correct += ok;
    } else {
      sent[c] = acts.back();
      absl::Status s = transport_->Send(stage_ + 1, tag, sent[c].data.data(), sent[c].bytes());
      if (!s.ok()) return s;
    }
  }
  if (transport_ != nullptr) DAPPLE_RETURN_IF_ERROR(transport_->WaitSends());
  if (last) {
    result.has_metrics = true;
    result.samples = test.size;
    result.loss = loss_sum / static_cast<double>(test.size);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(test.size);
  }
  return result;
}

}  // namespace dapple::worker
