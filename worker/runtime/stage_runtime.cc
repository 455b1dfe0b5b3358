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

namespace dapple::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t NanosBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

int64_t SystemNowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Copies of the parameters the optimizer keeps (kernels/cpu/optimizer.h): sgd its velocity
// (allocated whatever the momentum), adamw both moments.
int OptimizerCopies(const v1::OptimizerSpec& spec) { return spec.type() == "adamw" ? 2 : 1; }

}  // namespace

bool IsTracedStep(int64_t step, int every) {
  return every > 0 && (step == 0 || (step + 1) % every == 0);
}

uint64_t MessageTag(MessageKind kind, int64_t index, int micro_batch) {
  // 4 bits kind | 28 bits step or evaluation chunk | 16 bits micro-batch = the 48 bits a
  // Transport carries.
  return (static_cast<uint64_t>(kind) << 44) |
         ((static_cast<uint64_t>(index) & 0xFFFFFFFull) << 16) |
         (static_cast<uint64_t>(micro_batch) & 0xFFFFull);
}

absl::StatusOr<std::unique_ptr<StageRuntime>> StageRuntime::Create(
    const v1::StageAssignment& assignment, const Dataset* train, const Dataset* test,
    Transport* transport, std::unique_ptr<StageBackend> backend, Collective* replicas) {
  (void)replicas;
  const v1::JobSpec& spec = assignment.spec();
  const int stage = assignment.stage();
  const int num_stages = assignment.num_stages();
  if (num_stages < 1 || stage < 0 || stage >= num_stages ||
      assignment.plan().stages_size() != num_stages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("assignment for stage %d of %d does not match a plan of %d stages", stage,
                        num_stages, assignment.plan().stages_size()));
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
    return absl::InvalidArgumentError(
        absl::StrFormat("stage %d covers layers [%d, %d] but the model has %d layers", stage,
                        range.first_layer(), range.last_layer(), infos.size()));
  }
  int64_t widest = NumElements(infos[0].input_shape);
  for (const LayerInfo& info : infos) widest = std::max(widest, NumElements(info.output_shape));
  rt->eval_chunk_ = std::clamp<int64_t>(kMaxEvalActivationFloats / widest, 1, kMaxEvalChunk);
  rt->input_shape_ = infos[range.first_layer()].input_shape;
  rt->output_shape_ = infos[range.last_layer()].output_shape;
  rt->slot_floats_per_sample_ = NumElements(rt->input_shape_);
  int64_t params = 0;
  for (int l = range.first_layer(); l <= range.last_layer(); ++l) {
    rt->slot_floats_per_sample_ += NumElements(infos[l].output_shape);
    params += infos[l].param_count;
  }
  rt->weight_bytes_ = params * static_cast<int64_t>(sizeof(float)) *
                      (2 + OptimizerCopies(spec.training().optimizer()));
  rt->learning_rate_ = spec.training().optimizer().lr();
  if (backend == nullptr) {
    DAPPLE_ASSIGN_OR_RETURN(backend,
                            MakeCpuStageBackend(spec, range.first_layer(), range.last_layer()));
  }
  rt->backend_ = std::move(backend);

  rt->slot_of_.assign(rt->num_micro_batches_, -1);
  if (stage == 0 && train == nullptr) {
    return absl::InvalidArgumentError("stage 0 needs the training images");
  }
  if (stage == num_stages - 1 && train == nullptr) {
    return absl::InvalidArgumentError("the last stage needs the training labels");
  }
  return rt;
}

absl::StatusOr<std::vector<kernels::Param*>> StageRuntime::Params() {
  return backend_->HostParams();
}

int64_t StageRuntime::InputBytes(int64_t rows) const {
  return rows * NumElements(input_shape_) * static_cast<int64_t>(sizeof(float));
}

int64_t StageRuntime::OutputBytes(int64_t rows) const {
  return rows * NumElements(output_shape_) * static_cast<int64_t>(sizeof(float));
}

int StageRuntime::SlotFor(int micro_batch) {
  int& idx = slot_of_[micro_batch];
  if (idx < 0) {
    if (free_slots_.empty()) free_slots_.push_back(num_slots_++);
    idx = free_slots_.back();
    free_slots_.pop_back();
    ++live_slots_;
    peak_live_slots_ = std::max(peak_live_slots_, live_slots_);
  }
  return idx;
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
  const int64_t begin = (step % steps_per_epoch_) * global_batch_ + micro_batch * micro_batch_size_;
  out->assign(order_.begin() + begin, order_.begin() + begin + micro_batch_size_);
}

absl::StatusOr<StepResult> StageRuntime::RunStep(int64_t step, bool trace) {
  StepResult r;
  const int64_t anchor_us = SystemNowMicros();
  const SteadyClock::time_point anchor = SteadyClock::now();
  step_loss_sum_ = 0;
  peak_live_slots_ = live_slots_;
  gradient_sq_norm_ = -1;
  const auto& actions = assignment_.program().actions();
  if (trace) r.trace.mutable_events()->Reserve(actions.size());
  // Integer nanoseconds, so that idle = step - the rest is exact and never negative.
  int64_t forward_ns = 0, backward_ns = 0, comm_ns = 0, allreduce_ns = 0, optimizer_ns = 0;
  int64_t busy_ns = 0;
  SteadyClock::time_point first_start{}, last_end{};
  for (int i = 0; i < actions.size(); ++i) {
    const v1::Action& action = actions[i];
    send_wait_ns_ = 0;
    const SteadyClock::time_point start = SteadyClock::now();
    absl::Status s = RunAction(action, step);
    const SteadyClock::time_point end = SteadyClock::now();
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("stage ", stage_, " step ", step + 1, " action ",
                                       schedule::ActionToString(action), ": ", s.message()));
    }
    if (i == 0) first_start = start;
    last_end = end;
    const int64_t ns = NanosBetween(start, end);
    switch (action.kind()) {
      case v1::FORWARD:
        forward_ns += ns;
        break;
      case v1::BACKWARD:
        backward_ns += ns;
        break;
      case v1::SEND_ACT:
      case v1::SEND_GRAD:
        comm_ns += ns;
        break;
      case v1::ALLREDUCE:
        allreduce_ns += ns;
        break;
      case v1::OPTIMIZER_STEP:
        comm_ns += send_wait_ns_;
        optimizer_ns += ns - send_wait_ns_;
        break;
      case v1::RECV_ACT:  // waiting for a neighbour: part of the bubble
      case v1::RECV_GRAD:
      case v1::ACTION_KIND_UNSPECIFIED:
      case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
      case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
        break;
    }
    if (action.kind() != v1::RECV_ACT && action.kind() != v1::RECV_GRAD) busy_ns += ns;
    if (trace) {
      v1::TraceEvent* e = r.trace.add_events();
      e->set_kind(action.kind());
      const bool per_mb = action.kind() != v1::OPTIMIZER_STEP && action.kind() != v1::ALLREDUCE;
      e->set_micro_batch(per_mb ? action.micro_batch() : -1);
      e->set_start_us(anchor_us + NanosBetween(anchor, start) / 1000);
      e->set_end_us(anchor_us + NanosBetween(anchor, end) / 1000);
    }
  }
  if (live_slots_ != 0) {
    return absl::InternalError(absl::StrFormat(
        "stage %d: %d micro-batches still stashed after the step (program without a backward?)",
        stage_, live_slots_));
  }
  const int64_t step_ns = actions.empty() ? 0 : NanosBetween(first_start, last_end);
  r.seconds = Seconds(step_ns);
  r.peak_in_flight = peak_live_slots_;
  if (stage_ == num_stages_ - 1) {
    r.has_loss = true;
    r.loss = step_loss_sum_ / static_cast<double>(global_batch_);
  }
  v1::StageStepStats& st = r.stats;
  st.set_step(step + 1);
  st.set_step_seconds(r.seconds);
  st.set_forward_seconds(Seconds(forward_ns));
  st.set_backward_seconds(Seconds(backward_ns));
  st.set_comm_seconds(Seconds(comm_ns));
  st.set_allreduce_seconds(Seconds(allreduce_ns));
  st.set_optimizer_seconds(Seconds(optimizer_ns));
  st.set_idle_seconds(Seconds(step_ns - busy_ns));
  st.set_peak_in_flight(peak_live_slots_);
  const int64_t activation_bytes = static_cast<int64_t>(peak_live_slots_) * micro_batch_size_ *
                                   slot_floats_per_sample_ * static_cast<int64_t>(sizeof(float));
  st.set_peak_activation_bytes(activation_bytes);
  st.set_weight_bytes(weight_bytes_);
  st.set_peak_memory_bytes(weight_bytes_ + activation_bytes);
  st.set_gradient_sq_norm(gradient_sq_norm_);
  st.set_learning_rate(learning_rate_);
  st.set_samples(micro_batch_size_ * num_micro_batches_);
  st.set_skipped(false);
  if (trace) {
    r.traced = true;
    v1::StepTrace& t = r.trace;
    t.set_stage(stage_);
    t.set_replica(assignment_.replica());
    t.set_step(step + 1);
    if (!actions.empty()) {
      t.set_start_us(anchor_us + NanosBetween(anchor, first_start) / 1000);
      t.set_end_us(anchor_us + NanosBetween(anchor, last_end) / 1000);
    }
    *t.mutable_stats() = st;
  }
  return r;
}

// The interpreter: one switch with no default (-Werror=switch), so a new ActionKind cannot be
// silently ignored.
absl::Status StageRuntime::RunAction(const v1::Action& action, int64_t step) {
  const int m = action.micro_batch();
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  const int64_t rows = micro_batch_size_;
  const bool needs_mb = action.kind() != v1::OPTIMIZER_STEP && action.kind() != v1::ALLREDUCE;
  if (needs_mb && (m < 0 || m >= num_micro_batches_)) {
    return absl::InternalError(
        absl::StrFormat("micro-batch %d outside [0, %d)", m, num_micro_batches_));
  }
  StageBackend& b = *backend_;
  switch (action.kind()) {
    case v1::FORWARD: {
      const bool received = slot_of_[m] >= 0;
      const int slot = SlotFor(m);
      if (first) {
        MicroBatchIndices(step, m, &index_scratch_);
        DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
        float* host = static_cast<float*>(in);
        if (b.device_memory()) {
          input_scratch_.resize(static_cast<size_t>(InputBytes(rows) / sizeof(float)));
          host = input_scratch_.data();
        }
        GatherBatch(*train_, index_scratch_.data(), rows, host, nullptr);
        DAPPLE_RETURN_IF_ERROR(b.LoadInput(slot, host, rows));
      } else if (!received) {
        return absl::InternalError("FORWARD before its RECV_ACT");
      }
      DAPPLE_RETURN_IF_ERROR(b.Forward(slot, rows));
      if (last) {
        MicroBatchIndices(step, m, &index_scratch_);
        label_scratch_.resize(rows);
        GatherBatch(*train_, index_scratch_.data(), rows, nullptr, label_scratch_.data());
        DAPPLE_ASSIGN_OR_RETURN(double loss_sum, b.Loss(slot, label_scratch_.data(), rows,
                                                        1.0f / static_cast<float>(global_batch_),
                                                        /*training=*/true, nullptr));
        step_loss_sum_ += loss_sum;
      }
      return absl::OkStatus();
    }
    case v1::BACKWARD: {
      if (slot_of_[m] < 0) return absl::InternalError("BACKWARD without its FORWARD");
      DAPPLE_RETURN_IF_ERROR(b.Backward(slot_of_[m], m, rows, last, /*need_dx=*/!first));
      ReleaseSlot(m);
      return absl::OkStatus();
    }
    case v1::SEND_ACT: {
      if (slot_of_[m] < 0) return absl::InternalError("SEND_ACT without its FORWARD");
      DAPPLE_ASSIGN_OR_RETURN(const void* out, b.OutputForSend(slot_of_[m], m, rows));
      return transport_->Send(stage_ + 1, MessageTag(MessageKind::kActivation, step, m), out,
                              OutputBytes(rows));
    }
    case v1::RECV_ACT: {
      const int slot = SlotFor(m);
      DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
      return transport_->Recv(stage_ - 1, MessageTag(MessageKind::kActivation, step, m), in,
                              InputBytes(rows));
    }
    case v1::SEND_GRAD:
      return transport_->Send(stage_ - 1, MessageTag(MessageKind::kGradient, step, m),
                              b.GradForSend(m), InputBytes(rows));
    case v1::RECV_GRAD: {
      DAPPLE_ASSIGN_OR_RETURN(void* g, b.GradInput(m, rows));
      return transport_->Recv(stage_ + 1, MessageTag(MessageKind::kGradient, step, m), g,
                              OutputBytes(rows));
    }
    case v1::ALLREDUCE:
      return absl::UnimplementedError("ALLREDUCE needs stage replicas, which this build lacks");
    case v1::OPTIMIZER_STEP: {
      // The flush: every send of this step must be done before its buffers are reused. Its
      // wait is communication, not optimizer time (RunStep splits the action).
      if (transport_ != nullptr) {
        const SteadyClock::time_point wait_start = SteadyClock::now();
        absl::Status s = transport_->WaitSends();
        send_wait_ns_ = NanosBetween(wait_start, SteadyClock::now());
        DAPPLE_RETURN_IF_ERROR(s);
      }
      DAPPLE_ASSIGN_OR_RETURN(gradient_sq_norm_, b.GradientSquaredNorm());
      return b.OptimizerStep();
    }
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
  StageBackend& b = *backend_;
  // Evaluation runs between steps, when no micro-batch holds a slot: it borrows slot 0. Sent
  // chunks keep their own send buffers (ids 0..chunks-1) until WaitSends (Transport rules).
  if (live_slots_ != 0) return absl::InternalError("evaluation during a step");
  if (num_slots_ == 0) free_slots_.push_back(num_slots_++);
  const int slot = 0;
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  auto with_chunk = [&](int64_t c, const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("stage ", stage_, " evaluation chunk ", c, ": ", s.message()));
  };
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * eval_chunk_;
    const int64_t n = std::min(eval_chunk_, test.size - begin);
    const uint64_t tag = MessageTag(MessageKind::kEvalActivation, eval_index, static_cast<int>(c));
    absl::StatusOr<void*> in = b.Input(slot, n);
    if (!in.ok()) return with_chunk(c, in.status());
    if (first) {
      indices.resize(n);
      for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
      float* host = static_cast<float*>(*in);
      if (b.device_memory()) {
        input_scratch_.resize(static_cast<size_t>(InputBytes(n) / sizeof(float)));
        host = input_scratch_.data();
      }
      GatherBatch(test, indices.data(), n, host, nullptr);
      absl::Status s = b.LoadInput(slot, host, n);
      if (!s.ok()) return with_chunk(c, s);
    } else {
      absl::Status s = transport_->Recv(stage_ - 1, tag, *in, InputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
    }
    absl::Status s = b.Forward(slot, n);
    if (!s.ok()) return with_chunk(c, s);
    if (last) {
      labels.assign(test.labels.begin() + begin, test.labels.begin() + begin + n);
      int64_t ok = 0;
      absl::StatusOr<double> sum = b.Loss(slot, labels.data(), n, 0.0f, /*training=*/false, &ok);
      if (!sum.ok()) return with_chunk(c, sum.status());
      loss_sum += *sum;
      correct += ok;
    } else {
      absl::StatusOr<const void*> out = b.OutputForSend(slot, static_cast<int>(c), n);
      if (!out.ok()) return with_chunk(c, out.status());
      s = transport_->Send(stage_ + 1, tag, *out, OutputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
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
