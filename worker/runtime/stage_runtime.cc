#include "worker/runtime/stage_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/compute_throughput.h"
#include "common/job_spec.h"
#include "common/lr_schedule.h"
#include "common/model_info.h"
#include "common/schedule/action.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/schedule/pipedream_steps.h"
#include "common/status.h"
#include "common/steps.h"
#include "worker/data/sample_order.h"

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

}  // namespace

bool IsTracedStep(int64_t step, int every, int64_t first_step) {
  return every > 0 && (step == 0 || step == first_step || (step + 1) % every == 0);
}

uint64_t MessageTag(MessageKind kind, int64_t index, int micro_batch, int link) {
  return (static_cast<uint64_t>(kind) << 44) | ((static_cast<uint64_t>(link) & 0x3Full) << 38) |
         ((static_cast<uint64_t>(index) & 0x3FFFFFull) << 16) |
         (static_cast<uint64_t>(micro_batch) & 0xFFFFull);
}

MessageKind MessageKindOf(uint64_t tag) { return static_cast<MessageKind>((tag >> 44) & 0xFull); }

absl::StatusOr<std::vector<kernels::Param*>> StageRuntime::Params() {
  return backend_->HostParams();
}

// Split-concat: the fixed overlapping replicas. 1F1B-RR: the one replica of the neighbouring
// stage that runs this micro-batch, whole.
const std::vector<StageRuntime::RowPeer>& StageRuntime::PeersFor(bool next, int64_t global_mb) {
  if (!whole_micro_batches_) return next ? next_peers_ : prev_peers_;
  const v1::ParallelPlanSummary& plan = assignment_.plan();
  const int other_stage = next ? stage_ + 1 : stage_ - 1;
  const int d = schedule::StageReplicas(plan, other_stage);
  rr_peer_.assign(
      1, RowPeer{schedule::RankIndex(plan, other_stage, schedule::PipeDreamReplicaOf(global_mb, d)),
                 0, rows_.size()});
  return rr_peer_;
}

int64_t StageRuntime::InputBytes(int64_t rows, int chunk) const {
  return rows * NumElements(chunks_[chunk].input_shape) * static_cast<int64_t>(sizeof(float));
}

int64_t StageRuntime::OutputBytes(int64_t rows, int chunk) const {
  return rows * NumElements(chunks_[chunk].output_shape) * static_cast<int64_t>(sizeof(float));
}

// Peak in-flight counts every chunk's micro-batches (schedule::InterleavedInFlight's figure).
int StageRuntime::SlotFor(int chunk, int micro_batch) {
  int& idx = SlotOf(chunk, micro_batch);
  if (idx < 0) {
    Chunk& c = chunks_[chunk];
    if (c.free_slots.empty()) c.free_slots.push_back(c.num_slots++);
    idx = c.free_slots.back();
    c.free_slots.pop_back();
    ++live_slots_;
    peak_live_slots_ = std::max(peak_live_slots_, live_slots_);
  }
  return idx;
}

void StageRuntime::ReleaseSlot(int chunk, int micro_batch) {
  int& idx = SlotOf(chunk, micro_batch);
  if (idx < 0) return;
  chunks_[chunk].free_slots.push_back(idx);
  idx = -1;
  --live_slots_;
}

// Between actions, so a kernel's transient scratch (freed within its action) is not counted:
// what stays allocated is what the schedule makes the stage hold.
void StageRuntime::MeasureMemory() {
  const StageBackend::HeldBytes held = backend_->Held();
  if (held.parameters < 0 || held.activations < 0) return;
  // Pipe-SGD's two flat gradient buffers live in its updater, not in the backend.
  const int64_t weights = held.parameters + stash_->held_bytes() +
                          (async_allreduce_ != nullptr ? async_allreduce_->buffer_bytes() : 0);
  held_weight_bytes_ = std::max(held_weight_bytes_, weights);
  held_activation_bytes_ = std::max(held_activation_bytes_, held.activations);
  held_peak_bytes_ = std::max(held_peak_bytes_, weights + held.activations);
}

void StageRuntime::MicroBatchIndices(int64_t step, int micro_batch, std::vector<int64_t>* out) {
  const int64_t epoch = step / steps_per_epoch_;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(train_->size(), seed_, epoch);
    order_epoch_ = epoch;
  }
  const int64_t begin =
      (step % steps_per_epoch_) * global_batch_ + micro_batch * micro_batch_size_ + rows_.begin;
  out->assign(order_.begin() + begin, order_.begin() + begin + rows_.size());
}

absl::StatusOr<StepResult> StageRuntime::RunStep(int64_t step, bool trace) {
  StepResult r;
  const int64_t anchor_us = SystemNowMicros();
  const SteadyClock::time_point anchor = SteadyClock::now();
  step_loss_sum_ = 0;
  loss_rows_ = rows_.size() * num_micro_batches_;
  if (auto it = pending_loss_.find(step); it != pending_loss_.end()) {
    step_loss_sum_ = it->second;
    pending_loss_.erase(it);
  }
  peak_live_slots_ = live_slots_;
  held_weight_bytes_ = held_activation_bytes_ = held_peak_bytes_ = -1;
  gradient_sq_norm_ = -1;
  update_skipped_ = false;
  skip_reason_.clear();
  stash_->ResetPeak();
  DAPPLE_ASSIGN_OR_RETURN(const auto* step_actions, StepActions(step));
  const auto& actions = *step_actions;
  int backwards = 0;  // this rank's micro-batches of the step
  weight_uses_.clear();
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
      const std::string who = num_replicas_ > 1
                                  ? absl::StrCat("stage ", stage_, " replica ", replica_)
                                  : absl::StrCat("stage ", stage_);
      return absl::Status(
          s.code(), absl::StrCat(who, " step ", step + 1, ", ", schedule::DescribeAction(action),
                                 ": ", s.message()));
    }
    if (i == 0) first_start = start;
    last_end = end;
    MeasureMemory();
    const int64_t ns = NanosBetween(start, end);
    int64_t computed_ns = 0;  // of a waiting action: what it computed (TraceEvent.busy_us)
    switch (action.kind()) {
      case v1::FORWARD:
        forward_ns += ns;
        break;
      case v1::BACKWARD:
      case v1::BACKWARD_INPUT:
      case v1::BACKWARD_WEIGHT:
        backward_ns += ns;
        // One per micro-batch: a BACKWARD, or the weight part of a split one.
        backwards += action.kind() != v1::BACKWARD_INPUT;
        break;
      case v1::SEND_ACT:
      case v1::SEND_GRAD:
        comm_ns += ns;
        break;
      case v1::ALLREDUCE:
      case v1::TIED_ALLREDUCE:
      case v1::ALLREDUCE_ASYNC:
        comm_ns += send_wait_ns_;  // the sends flushed before it
        allreduce_ns += ns - send_wait_ns_;
        break;
      case v1::GLOBAL_NORM_ASYNC: {  // measures the norm and hands the record over
        const int64_t norm_ns = std::min(ns, exchange_->TakeNormNanos());
        optimizer_ns += norm_ns;
        allreduce_ns += ns - norm_ns;
        break;
      }
      case v1::OPTIMIZER_STEP:
      case v1::STALE_OPTIMIZER_STEP:
        comm_ns += send_wait_ns_;
        optimizer_ns += ns - send_wait_ns_;
        break;
      case v1::USE_WEIGHTS:
      case v1::RESTORE_WEIGHTS:
      case v1::STASH_WEIGHTS:
      case v1::DROP_WEIGHTS:
        optimizer_ns += ns;
        break;
      // The rank's squared norm, then waiting for the last rank to end its step (16 bytes per
      // rank move meanwhile): the norm is compute, counted with the update as the profile's
      // optimizer_ms counts it; the wait is the bubble, as the simulator counts a barrier's.
      case v1::GLOBAL_NORM:
        computed_ns = std::min(ns - send_wait_ns_, exchange_->TakeNormNanos());
        optimizer_ns += computed_ns;
        comm_ns += send_wait_ns_;  // the sends flushed before it: communication, not the bubble
        computed_ns += send_wait_ns_;
        busy_ns += computed_ns;
        break;
      case v1::RECV_ACT:  // waiting for a neighbour: part of the bubble
      case v1::RECV_GRAD:
      case v1::ACTION_KIND_UNSPECIFIED:
      case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
      case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
        break;
    }
    if (!schedule::KindIsWait(action.kind())) busy_ns += ns;
    if (trace) {
      v1::TraceEvent* e = r.trace.add_events();
      e->set_kind(action.kind());
      e->set_micro_batch(schedule::KindHasMicroBatch(action.kind()) ? action.micro_batch() : -1);
      e->set_start_us(anchor_us + NanosBetween(anchor, start) / 1000);
      e->set_end_us(anchor_us + NanosBetween(anchor, end) / 1000);
      if (computed_ns > 0) e->set_busy_us(computed_ns / 1000);
    }
  }
  // A program without a flush keeps forwards of later steps in flight, except after the last.
  if (live_slots_ != 0 && (!carries_across_steps_ || step + 1 == total_steps_)) {
    return absl::InternalError(absl::StrFormat(
        "stage %d: %d micro-batches still stashed after the step (program without a backward?)",
        stage_, live_slots_));
  }
  const int64_t step_ns = actions.empty() ? 0 : NanosBetween(first_start, last_end);
  r.seconds = Seconds(step_ns);
  r.peak_in_flight = peak_live_slots_;
  if (stage_ == num_stages_ - 1) {
    r.has_loss = true;
    // Without a synchronous ALLREDUCE (Pipe-SGD's is asynchronous and carries only gradients)
    // the loss is the mean over this replica's share.
    r.loss = step_loss_sum_ / static_cast<double>(loss_rows_ * targets_per_sample_);
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
  const int64_t version_bytes = stash_->peak_stashed_bytes();
  st.set_weight_versions(stash_->peak_versions());
  st.set_weight_version_bytes(version_bytes);
  if (held_peak_bytes_ >= 0) {
    st.set_weight_bytes(held_weight_bytes_);
    st.set_peak_activation_bytes(held_activation_bytes_);
    st.set_peak_memory_bytes(held_peak_bytes_);
  } else {
    // Not measured: the model's figures, with the in-flight count this step really reached.
    const int64_t activations =
        std::llround(memory::ActivationBytes(memory_place_, memory_sizes_, peak_live_slots_)) +
        predicted_memory_.communication;
    const int64_t weights =
        predicted_memory_.WeightBytes() - predicted_memory_.stashed_weights + version_bytes;
    st.set_weight_bytes(weights);
    st.set_peak_activation_bytes(activations);
    st.set_peak_memory_bytes(weights + activations);
  }
  r.weight_uses = std::move(weight_uses_);
  st.set_gradient_sq_norm(gradient_sq_norm_);
  st.set_learning_rate(learning_rate_);
  st.set_samples(rows_.size() * backwards);
  st.set_skipped(update_skipped_);
  r.skip_reason = skip_reason_;
  DAPPLE_ASSIGN_OR_RETURN(const double device_seconds, backend_->TakeComputeSeconds());
  SetComputeThroughput(train_flops_per_sample_ * static_cast<double>(st.samples()),
                       device_seconds >= 0 ? device_seconds : Seconds(forward_ns + backward_ns),
                       backend_->device_name(), UsesBf16(assignment_.spec().training()), &st);
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
  const int j = action.micro_batch();
  // Virtual stage k = c * P + stage_ runs on chunk c (Create checked every action's stage); the
  // rank's own actions (collectives, the update) name the stage itself: chunk 0.
  const int chunk = action.stage() / num_stages_;
  const Chunk& ck = chunks_[chunk];
  const bool first = ck.first;
  const bool last = ck.last;
  const int64_t rows = rows_.size();  // this replica's share of the micro-batch
  const bool needs_mb = schedule::KindHasMicroBatch(action.kind());
  // Actions name micro-batches relative to the step; j >= M (a program without a flush) is
  // micro-batch j % M of step step + j / M. Buffers and slots are keyed by the global index
  // modulo the id space, which holds every micro-batch in flight at once; tags and data use
  // (step, m).
  const int max_j = id_space_;
  if (needs_mb && (j < 0 || j >= max_j)) {
    return absl::InternalError(absl::StrFormat("micro-batch %d outside [0, %d)", j, max_j));
  }
  const int64_t global_mb = step * num_micro_batches_ + (needs_mb ? j : 0);
  const int64_t mb_step = global_mb / num_micro_batches_;
  const int mb = static_cast<int>(global_mb % num_micro_batches_);
  const int m = static_cast<int>(global_mb % id_space_);
  StageBackend& b = *ck.backend;  // the chunk's: the per-micro-batch work
  int& slot_of = SlotOf(chunk, m);
  switch (action.kind()) {
    case v1::FORWARD: {
      const bool received = slot_of >= 0;
      const int slot = SlotFor(chunk, m);
      if (first) {
        MicroBatchIndices(mb_step, mb, &index_scratch_);
        DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
        float* host = static_cast<float*>(in);
        if (b.device_memory()) {
          input_scratch_.resize(static_cast<size_t>(InputBytes(rows, chunk) / sizeof(float)));
          host = input_scratch_.data();
        }
        train_->Gather(index_scratch_.data(), rows, host, nullptr);
        DAPPLE_RETURN_IF_ERROR(b.LoadInput(slot, host, rows));
      } else if (!received) {
        return absl::InternalError("FORWARD before its RECV_ACT");
      }
      RecordWeightUse(global_mb, v1::FORWARD);
      kernels::ForwardContext ctx;
      ctx.training = true;
      ctx.seed = seed_;
      ctx.step = mb_step;
      ctx.first_sample = static_cast<int64_t>(mb) * micro_batch_size_ + rows_.begin;
      DAPPLE_RETURN_IF_ERROR(b.Forward(slot, rows, ctx));
      if (last) {
        MicroBatchIndices(mb_step, mb, &index_scratch_);
        label_scratch_.resize(rows * targets_per_sample_);
        train_->Gather(index_scratch_.data(), rows, nullptr, label_scratch_.data());
        // The mean over every target of the global batch (per sample, or per token).
        const float grad_scale = 1.0f / static_cast<float>(global_batch_ * targets_per_sample_);
        DAPPLE_ASSIGN_OR_RETURN(double loss_sum, b.Loss(slot, label_scratch_.data(), rows,
                                                        grad_scale, /*training=*/true, nullptr));
        if (inject_ && injection_.Hits(mb_step, mb)) {
          loss_sum = std::numeric_limits<double>::quiet_NaN();
        }
        // A program without a flush (1F1B-RR on a replicated last stage) runs forwards of the
        // next step before this step's update: their loss belongs to their own step.
        if (mb_step == step) {
          step_loss_sum_ += loss_sum;
          exchange_->NoteLoss(mb, loss_sum);
        } else {
          pending_loss_[mb_step] += loss_sum;
        }
      }
      return absl::OkStatus();
    }
    case v1::BACKWARD: {
      if (slot_of < 0) return absl::InternalError("BACKWARD without its FORWARD");
      RecordWeightUse(global_mb, v1::BACKWARD);
      DAPPLE_RETURN_IF_ERROR(b.Backward(slot_of, m, rows, last, /*need_dx=*/!first));
      ReleaseSlot(chunk, m);
      return MaybeInjectIntoGradient(mb_step, mb);
    }
    // The zero-bubble split: the slot (the stashed activations) lives until the weight part.
    case v1::BACKWARD_INPUT:
      if (slot_of < 0) return absl::InternalError("BACKWARD_INPUT without its FORWARD");
      return b.BackwardInput(slot_of, m, rows, last, /*need_dx=*/!first);
    case v1::BACKWARD_WEIGHT:
      if (slot_of < 0) return absl::InternalError("BACKWARD_WEIGHT without its FORWARD");
      DAPPLE_RETURN_IF_ERROR(b.BackwardWeight(slot_of, m, rows, last));
      ReleaseSlot(chunk, m);
      return MaybeInjectIntoGradient(mb_step, mb);
    // Split-concat: one message per overlapping neighbour replica, each a contiguous row slice
    // (rows are the outer dimension), all with the micro-batch's tag. The tag's link is the
    // chunk of the lower virtual stage: k's to k + 1, k - 1's from k - 1 (PeersFor: ranks
    // stage +- 1, mod P with virtual stages).
    case v1::SEND_ACT: {
      if (slot_of < 0) return absl::InternalError("SEND_ACT without its FORWARD");
      DAPPLE_ASSIGN_OR_RETURN(const void* out, b.OutputForSend(slot_of, m, rows));
      const uint64_t tag = MessageTag(MessageKind::kActivation, mb_step, mb, chunk);
      for (const RowPeer& p : PeersFor(/*next=*/true, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(transport_->Send(
            p.rank, tag, static_cast<const char*>(out) + OutputBytes(p.offset, chunk),
            OutputBytes(p.rows, chunk)));
      }
      return absl::OkStatus();
    }
    case v1::RECV_ACT: {
      const int slot = SlotFor(chunk, m);
      DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
      const int link = (ck.virtual_stage - 1) / num_stages_;
      const uint64_t tag = MessageTag(MessageKind::kActivation, mb_step, mb, link);
      for (const RowPeer& p : PeersFor(/*next=*/false, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(
            transport_->Recv(p.rank, tag, static_cast<char*>(in) + InputBytes(p.offset, chunk),
                             InputBytes(p.rows, chunk)));
      }
      return absl::OkStatus();
    }
    case v1::SEND_GRAD: {
      const char* dx = static_cast<const char*>(b.GradForSend(m));
      const int link = (ck.virtual_stage - 1) / num_stages_;
      const uint64_t tag = MessageTag(MessageKind::kGradient, mb_step, mb, link);
      for (const RowPeer& p : PeersFor(/*next=*/false, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(transport_->Send(p.rank, tag, dx + InputBytes(p.offset, chunk),
                                                InputBytes(p.rows, chunk)));
      }
      return absl::OkStatus();
    }
    case v1::RECV_GRAD: {
      DAPPLE_ASSIGN_OR_RETURN(void* g, b.GradInput(m, rows));
      const uint64_t tag = MessageTag(MessageKind::kGradient, mb_step, mb, chunk);
      for (const RowPeer& p : PeersFor(/*next=*/true, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(
            transport_->Recv(p.rank, tag, static_cast<char*>(g) + OutputBytes(p.offset, chunk),
                             OutputBytes(p.rows, chunk)));
      }
      return absl::OkStatus();
    }
    case v1::ALLREDUCE: {
      DAPPLE_RETURN_IF_ERROR(FlushSends(step));
      // The rank's: the last stage (the loss's rank) lets its replicas' loss sums ride along.
      const bool loss_rank = stage_ == num_stages_ - 1;
      if (loss_rank) loss_rows_ = global_batch_;
      return exchange_->AllReduceReplicas(loss_rank ? &step_loss_sum_ : nullptr);
    }
    case v1::ALLREDUCE_ASYNC:
      // The updater's thread reduces the gradient while the rank goes on.
      if (async_allreduce_ == nullptr) return absl::InternalError("no asynchronous AllReduce");
      DAPPLE_RETURN_IF_ERROR(exchange_->ReplicasReducedElsewhere());
      return async_allreduce_->OnGradients(step);
    case v1::TIED_ALLREDUCE:
      DAPPLE_RETURN_IF_ERROR(FlushSends(step));
      return exchange_->AllReduceTied();
    case v1::GLOBAL_NORM: {
      DAPPLE_RETURN_IF_ERROR(FlushSends(step));
      DAPPLE_ASSIGN_OR_RETURN(const GlobalNormResult norm, exchange_->GlobalNorm());
      if (norm.skip) skip_reason_ = DescribeNonFinite(norm.first);
      return absl::OkStatus();
    }
    case v1::GLOBAL_NORM_ASYNC:
      // The job's last step awaits its own decision: no later action would.
      return exchange_->PostGlobalNorm(step, /*await_now=*/step + 1 == total_steps_);
    case v1::OPTIMIZER_STEP: {
      DAPPLE_ASSIGN_OR_RETURN(const bool skip, PrepareUpdate(step));
      if (stash_->in_use() != stash_->current()) {
        return absl::InternalError("update while a stashed weight version is swapped in");
      }
      // A skipped update keeps weights, optimizer state and the update count; the version
      // still counts the step (the same weights under the next number).
      // The rank's whole backend: every chunk drops or updates.
      DAPPLE_RETURN_IF_ERROR(skip ? backend_->DropGradients() : backend_->OptimizerStep());
      update_skipped_ = update_skipped_ || skip;
      stash_->AfterUpdate();
      return absl::OkStatus();
    }
    case v1::STALE_OPTIMIZER_STEP: {
      if (async_allreduce_ == nullptr) return absl::InternalError("no asynchronous AllReduce");
      DAPPLE_ASSIGN_OR_RETURN(const bool skip, PrepareUpdate(step));
      // Pipe-SGD's programs hold no GLOBAL_NORM (job_lowering.h): nothing decides a skip.
      if (skip) return absl::InternalError("a skipped update under Pipe-SGD's stale update");
      DAPPLE_RETURN_IF_ERROR(async_allreduce_->OnOptimizerStep(step));
      // The last step's gradient is still in its AllReduce: apply it before training ends.
      if (step + 1 == total_steps_) DAPPLE_RETURN_IF_ERROR(async_allreduce_->Finish());
      stash_->AfterUpdate();
      return absl::OkStatus();
    }
    // Weight stashing: versions relative to the step's (the updates before it).
    case v1::USE_WEIGHTS:
      return stash_->Use(step + action.weight_version());
    case v1::RESTORE_WEIGHTS:
      return stash_->Restore();
    case v1::STASH_WEIGHTS:
      return stash_->BeforeUpdate(/*keep=*/true);
    case v1::DROP_WEIGHTS:
      stash_->Prune(step + action.weight_version());
      return absl::OkStatus();
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return absl::InternalError("unspecified action kind");
  }
  return absl::InternalError(absl::StrCat("unknown action kind ", action.kind()));
}

void StageRuntime::InjectNonFinite(const NonFiniteInjection& injection) {
  inject_ = injection.stage == stage_ && injection.replica == replica_;
  injection_ = injection;
}

absl::Status StageRuntime::MaybeInjectIntoGradient(int64_t step, int mb) {
  if (!inject_ || stage_ == num_stages_ - 1 || !injection_.Hits(step, mb)) return absl::OkStatus();
  const int64_t floats = backend_->GradientFloats();
  if (floats <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kInjectNonFiniteEnv, ": stage ", stage_,
                                                   " has no gradient to inject a NaN into"));
  }
  std::vector<float> grads(static_cast<size_t>(floats));
  DAPPLE_RETURN_IF_ERROR(backend_->ReadGradients(grads.data()));
  grads[0] = std::numeric_limits<float>::quiet_NaN();
  return backend_->WriteGradients(grads.data());
}

absl::Status StageRuntime::FlushSends(int64_t step) {
  // Its wait is communication, not optimizer time (RunStep splits the action). A program
  // without a flush skips it before an evaluation (the end of an epoch): its sends of later
  // steps' micro-batches are received by the next stage only after that stage evaluated, which
  // needs this stage's evaluation first; Evaluate's own wait covers them. Their buffers are safe
  // meanwhile: an id is reused only micro_batch_ids micro-batches later, after the neighbour
  // received it.
  if (transport_ == nullptr ||
      (carries_across_steps_ && EvaluatesAfterStep(assignment_.spec(), step))) {
    return absl::OkStatus();
  }
  const SteadyClock::time_point wait_start = SteadyClock::now();
  absl::Status s = transport_->WaitSends();
  send_wait_ns_ += NanosBetween(wait_start, SteadyClock::now());
  return s;
}

absl::StatusOr<bool> StageRuntime::PrepareUpdate(int64_t step) {
  // The flush: every send of this step must be done before its buffers are reused.
  DAPPLE_RETURN_IF_ERROR(FlushSends(step));
  // The collectives' checks, the stage's norm and clipping (gradient_exchange.h).
  DAPPLE_ASSIGN_OR_RETURN(const UpdateDecision decision, exchange_->PrepareUpdate());
  gradient_sq_norm_ = decision.sq_norm;
  learning_rate_ =
      LearningRate(assignment_.spec().training(), backend_->OptimizerUpdates(), total_steps_);
  return decision.skip;
}

}  // namespace dapple::worker
