#include "worker/runtime/stage_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
    const v1::StageAssignment& assignment, const Dataset* train, const Dataset* eval,
    Transport* transport, std::unique_ptr<StageBackend> backend, Collective* replicas) {
  StageCollectives collectives;
  collectives.replicas = replicas;
  return Create(assignment, train, eval, transport, std::move(backend), collectives);
}

absl::StatusOr<std::unique_ptr<StageRuntime>> StageRuntime::Create(
    const v1::StageAssignment& assignment, const Dataset* train, const Dataset* eval,
    Transport* transport, std::unique_ptr<StageBackend> backend,
    const StageCollectives& collectives) {
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
    return absl::InvalidArgumentError(absl::StrFormat(
        "training.global_batch %d is not divisible by training.micro_batch %d: use a micro_batch "
        "that divides %d",
        spec.training().global_batch(), spec.training().micro_batch(),
        spec.training().global_batch()));
  }
  const v1::ParallelPlanSummary& plan = assignment.plan();
  const int64_t micro_batch = spec.training().micro_batch();
  const bool pipedream = spec.parallel().schedule() == "pipedream";
  const int64_t micro_batches = spec.training().global_batch() / micro_batch;
  for (int s = 0; s < num_stages; ++s) {
    const int d = schedule::StageReplicas(plan, s);
    if (!pipedream && micro_batch < d) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "training.micro_batch %d is smaller than the %d replicas of stage %d: a stage's "
          "replicas split every micro-batch (split-concat) and each needs at least one sample "
          "of it: use a micro_batch of at least %d, or fewer parallel.devices",
          micro_batch, d, s, d));
    }
    if (pipedream && micro_batches < d) {
      // The largest micro_batch that makes M >= d (global_batch / d or less, dividing it).
      const int64_t global_batch = spec.training().global_batch();
      int64_t fits = global_batch / d;
      while (fits > 1 && global_batch % fits != 0) --fits;
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d has %d replicas but training.global_batch %d / training.micro_batch %d = "
          "%d micro-batches per step: parallel.schedule pipedream gives every replica at least "
          "one whole micro-batch per step: use a micro_batch of %d or less (dividing %d), or "
          "fewer parallel.devices",
          s, d, global_batch, micro_batch, micro_batches, std::max<int64_t>(fits, 1),
          global_batch));
    }
  }
  const int num_replicas = schedule::StageReplicas(plan, stage);
  const int replica = assignment.replica();
  if (replica < 0 || replica >= num_replicas) {
    return absl::InvalidArgumentError(
        absl::StrFormat("assignment replica %d outside [0, %d): stage %d has %d replicas", replica,
                        num_replicas, stage, num_replicas));
  }
  // PipeDream generates its programs itself, with the collectives.
  if (num_replicas > 1 && !pipedream &&
      schedule::CountActions(assignment.program(), v1::ALLREDUCE) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d has %d replicas but its program has no ALLREDUCE before OPTIMIZER_STEP "
        "(lower it with LowerOptions.allreduce_stages[%d] = true)",
        stage, num_replicas, stage));
  }
  DAPPLE_ASSIGN_OR_RETURN(schedule::LowerOptions lower, schedule::LowerOptionsFor(spec, plan));
  if (!pipedream) {
    DAPPLE_RETURN_IF_ERROR(schedule::CheckProgramCollectives(assignment.program(), stage, lower));
  }
  auto rt = std::unique_ptr<StageRuntime>(new StageRuntime());
  rt->assignment_ = assignment;
  rt->lower_ = std::move(lower);
  rt->replica_ = replica;
  rt->num_replicas_ = num_replicas;
  // 1F1B-RR moves whole micro-batches: every replica owns all rows of the ones it runs.
  rt->rows_ = schedule::ReplicaRows(micro_batch, num_replicas, replica, pipedream);
  // Split-concat partners: every neighbouring replica whose rows overlap mine, in replica order
  // (the sender's and the receiver's lists agree, so both sides pair up).
  auto overlapping = [&](int other_stage) {
    std::vector<RowPeer> peers;
    const int n = schedule::StageReplicas(plan, other_stage);
    for (int q = 0; q < n; ++q) {
      const schedule::RowRange o =
          schedule::RowOverlap(rt->rows_, schedule::SplitRows(micro_batch, n, q));
      if (o.size() <= 0) continue;
      peers.push_back(
          {schedule::RankIndex(plan, other_stage, q), o.begin - rt->rows_.begin, o.size()});
    }
    return peers;
  };
  if (stage > 0 && !pipedream) rt->prev_peers_ = overlapping(stage - 1);
  if (stage + 1 < num_stages && !pipedream) rt->next_peers_ = overlapping(stage + 1);
  if (stage > 0) rt->eval_prev_rank_ = schedule::RankIndex(plan, stage - 1, 0);
  if (stage + 1 < num_stages) rt->eval_next_rank_ = schedule::RankIndex(plan, stage + 1, 0);
  rt->train_ = train;
  rt->eval_ = eval;
  rt->transport_ = transport;
  rt->stage_ = stage;
  rt->num_stages_ = num_stages;
  rt->micro_batch_size_ = spec.training().micro_batch();
  rt->global_batch_ = spec.training().global_batch();
  rt->num_micro_batches_ = static_cast<int>(rt->global_batch_ / rt->micro_batch_size_);
  rt->steps_per_epoch_ = StepsPerEpoch(spec);
  rt->seed_ = spec.training().seed();

  const v1::PlanStageSummary& range = plan.stages(stage);
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
  rt->slot_floats_per_sample_ =
      StageActivationBytesPerSample(infos, range.first_layer(), range.last_layer()) /
      static_cast<int64_t>(sizeof(float));
  int64_t params = 0;
  for (int l = range.first_layer(); l <= range.last_layer(); ++l) params += infos[l].param_count;
  rt->targets_per_sample_ = TargetsPerSample(infos);
  const std::vector<int64_t>& model_output = infos.back().output_shape;
  if (model_output.size() == 2) {
    rt->sample_positions_ = model_output[0];
    rt->sample_vocab_ = model_output[1];
  }
  // A byte-level language model: token ids in, the next byte's logits out at every position.
  rt->generates_sample_ = TokenInput(spec.model()) && model_output.size() == 2 &&
                          spec.model().input_shape_size() == 1 &&
                          spec.model().input_shape(0) == model_output[0] &&
                          model_output[1] <= 256 && spec.sample().tokens() > 0;
  rt->weight_bytes_ = params * static_cast<int64_t>(sizeof(float)) *
                      (2 + OptimizerCopies(spec.training().optimizer()));
  if (backend == nullptr) {
    DAPPLE_ASSIGN_OR_RETURN(backend,
                            MakeCpuStageBackend(spec, range.first_layer(), range.last_layer()));
  }
  rt->backend_ = std::move(backend);
  DAPPLE_ASSIGN_OR_RETURN(
      rt->exchange_,
      GradientExchange::Create(assignment, rt->lower_,
                               schedule::SplitTiedWeights(schedule::TiedWeights(infos), plan),
                               rt->backend_.get(), collectives));

  // PipeDream: one continuous 1F1B run over the whole job, cut into steps
  // (schedule/pipedream_steps.h); micro-batches of later steps are in flight across a step's end,
  // so ids cover M + K micro-batches, and weight stashing keeps the versions they used.
  rt->pipedream_ = pipedream;
  rt->vertical_sync_ = rt->pipedream_ && spec.parallel().pipedream().vertical_sync();
  rt->total_steps_ = TotalSteps(spec);
  rt->id_space_ = rt->num_micro_batches_;
  if (rt->pipedream_) {
    rt->first_step_ = assignment.first_step();
    schedule::PipeDreamLayout& layout = rt->layout_;
    for (int s = 0; s < num_stages; ++s) {
      layout.replicas.push_back(schedule::StageReplicas(plan, s));
    }
    layout.num_micro_batches = rt->num_micro_batches_;
    layout.num_steps = rt->RunSteps();
    layout.first_micro_batch = rt->first_step_ * rt->num_micro_batches_;
    rt->id_space_ =
        rt->num_micro_batches_ + static_cast<int>(schedule::PipeDreamWarmUp(layout, stage));
    rt->stash_ = std::make_unique<WeightStash>(rt->backend_.get(), assignment.first_step());
  }
  // Pipe-SGD: data parallelism whose AllReduce of step t overlaps step t + 1 (its updater owns
  // the AllReduce thread and the collective).
  if (spec.parallel().schedule() == "pipesgd") {
    if (num_stages != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "parallel.schedule pipesgd is data parallelism over one stage, got %d stages",
          num_stages));
    }
    if (collectives.replicas == nullptr) {
      return absl::InvalidArgumentError(
          "parallel.schedule pipesgd needs the collective of the stage's replicas");
    }
    PipeSgdOptions options;
    options.warmup_steps = spec.parallel().pipesgd().warmup_steps();
    options.max_grad_norm = spec.training().max_grad_norm();
    const std::string& compression = spec.parallel().pipesgd().compression();
    if (!compression.empty()) {
      DAPPLE_ASSIGN_OR_RETURN(options.compression, ParseCompression(compression));
    }
    DAPPLE_ASSIGN_OR_RETURN(
        rt->pipesgd_, PipeSgdUpdater::Create(collectives.replicas, rt->backend_.get(), options,
                                             assignment.first_step()));
  }
  rt->slot_of_.assign(rt->id_space_, -1);
  rt->version_of_.assign(rt->id_space_, -1);
  if (stage == 0 && train == nullptr) {
    return absl::InvalidArgumentError("stage 0 needs the training inputs");
  }
  if (stage == num_stages - 1 && train == nullptr) {
    return absl::InvalidArgumentError("the last stage needs the training targets");
  }
  DAPPLE_RETURN_IF_ERROR(rt->CheckDatasets());
  return rt;
}

absl::Status StageRuntime::CheckDatasets() const {
  // The spec's validation ties the model to data.dataset; this guards against a caller that
  // hands the runtime another dataset than the spec's.
  const int64_t elements = NumElements(input_shape_);
  // The step arithmetic (steps per epoch) counts the spec's training samples; the sample order
  // must not index past the dataset's.
  const int64_t samples = TrainSamples(assignment_.spec());
  if (train_ != nullptr && samples > train_->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the job counts %d training samples (data.train_samples) but the "
                        "dataset has %d",
                        samples, train_->size()));
  }
  for (const Dataset* d : {train_, eval_}) {
    if (d == nullptr) continue;
    if (stage_ == 0 && d->sample_elements() != elements) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the dataset's samples have %d input elements but model.input_shape "
                          "has %d",
                          d->sample_elements(), elements));
    }
    if (stage_ == num_stages_ - 1 && d->targets_per_sample() != targets_per_sample_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the dataset has %d targets per sample but the model's output has %d",
                          d->targets_per_sample(), targets_per_sample_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<kernels::Param*>> StageRuntime::Params() {
  return backend_->HostParams();
}

absl::Status StageRuntime::SetPipeDreamWarmUpsForTesting(std::vector<int64_t> warm_ups) {
  if (!pipedream_ || static_cast<int>(warm_ups.size()) != num_stages_ || num_slots_ > 0) {
    return absl::FailedPreconditionError(
        "pipedream warm-ups are set once per stage, before the first step");
  }
  layout_.warm_ups = std::move(warm_ups);
  id_space_ = num_micro_batches_ + static_cast<int>(schedule::PipeDreamWarmUp(layout_, stage_));
  slot_of_.assign(id_space_, -1);
  version_of_.assign(id_space_, -1);
  return absl::OkStatus();
}

// Split-concat: the fixed overlapping replicas. 1F1B-RR: the one replica of the neighbouring
// stage that runs this micro-batch, whole.
const std::vector<StageRuntime::RowPeer>& StageRuntime::PeersFor(int other_stage,
                                                                 int64_t global_mb) {
  if (!pipedream_) return other_stage < stage_ ? prev_peers_ : next_peers_;
  const v1::ParallelPlanSummary& plan = assignment_.plan();
  const int d = schedule::StageReplicas(plan, other_stage);
  rr_peer_.assign(
      1, RowPeer{schedule::RankIndex(plan, other_stage, schedule::PipeDreamReplicaOf(global_mb, d)),
                 0, rows_.size()});
  return rr_peer_;
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
  if (auto it = pending_loss_.find(step); it != pending_loss_.end()) {
    step_loss_sum_ = it->second;
    pending_loss_.erase(it);
  }
  peak_live_slots_ = live_slots_;
  gradient_sq_norm_ = -1;
  if (pipedream_) {
    DAPPLE_RETURN_IF_ERROR(PreparePipeDreamStep(step));
    stash_->ResetPeak();
  }
  const auto& actions = pipedream_ ? step_program_.actions() : assignment_.program().actions();
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
      return absl::Status(s.code(),
                          absl::StrCat(who, " step ", step + 1, " action ",
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
      case v1::TIED_ALLREDUCE:
      case v1::GLOBAL_NORM:
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
      e->set_micro_batch(schedule::KindHasMicroBatch(action.kind()) ? action.micro_batch() : -1);
      e->set_start_us(anchor_us + NanosBetween(anchor, start) / 1000);
      e->set_end_us(anchor_us + NanosBetween(anchor, end) / 1000);
    }
  }
  // PipeDream never flushes: forwards of later steps stay in flight, except after the last.
  if (live_slots_ != 0 && (!pipedream_ || step + 1 == total_steps_)) {
    return absl::InternalError(absl::StrFormat(
        "stage %d: %d micro-batches still stashed after the step (program without a backward?)",
        stage_, live_slots_));
  }
  const int64_t step_ns = actions.empty() ? 0 : NanosBetween(first_start, last_end);
  r.seconds = Seconds(step_ns);
  r.peak_in_flight = peak_live_slots_;
  if (stage_ == num_stages_ - 1) {
    r.has_loss = true;
    // Pipe-SGD reduces only gradients: its loss is the mean over this replica's share.
    r.loss = pipesgd_ != nullptr
                 ? step_loss_sum_ /
                       static_cast<double>(rows_.size() * num_micro_batches_ * targets_per_sample_)
                 : step_loss_sum_ / static_cast<double>(global_batch_ * targets_per_sample_);
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
  const int64_t activation_bytes = static_cast<int64_t>(peak_live_slots_) * rows_.size() *
                                   slot_floats_per_sample_ * static_cast<int64_t>(sizeof(float));
  st.set_peak_activation_bytes(activation_bytes);
  st.set_weight_bytes(weight_bytes_);
  const int64_t version_bytes = pipedream_ ? stash_->peak_stashed_bytes() : 0;
  st.set_weight_versions(pipedream_ ? stash_->peak_versions() : 1);
  st.set_weight_version_bytes(version_bytes);
  st.set_peak_memory_bytes(weight_bytes_ + activation_bytes + version_bytes);
  r.weight_uses = std::move(weight_uses_);
  st.set_gradient_sq_norm(gradient_sq_norm_);
  st.set_learning_rate(learning_rate_);
  st.set_samples(rows_.size() * (pipedream_ ? own_micro_batches_ : num_micro_batches_));
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
  const int j = action.micro_batch();
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  const int64_t rows = rows_.size();  // this replica's share of the micro-batch
  const bool needs_mb = schedule::KindHasMicroBatch(action.kind());
  // Actions name micro-batches relative to the step; j >= M (PipeDream only) is micro-batch
  // j % M of step step + j / M. Buffers and slots are keyed by the global index modulo the id
  // space, which holds every micro-batch in flight at once; tags and data use (step, m).
  const int max_j = pipedream_ ? id_space_ - 1 : num_micro_batches_;
  if (needs_mb && (j < 0 || j >= max_j)) {
    return absl::InternalError(absl::StrFormat("micro-batch %d outside [0, %d)", j, max_j));
  }
  const int64_t global_mb = step * num_micro_batches_ + (needs_mb ? j : 0);
  const int64_t mb_step = global_mb / num_micro_batches_;
  const int mb = static_cast<int>(global_mb % num_micro_batches_);
  const int m = static_cast<int>(global_mb % id_space_);
  StageBackend& b = *backend_;
  switch (action.kind()) {
    case v1::FORWARD: {
      const bool received = slot_of_[m] >= 0;
      const int slot = SlotFor(m);
      if (first) {
        MicroBatchIndices(mb_step, mb, &index_scratch_);
        DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
        float* host = static_cast<float*>(in);
        if (b.device_memory()) {
          input_scratch_.resize(static_cast<size_t>(InputBytes(rows) / sizeof(float)));
          host = input_scratch_.data();
        }
        train_->Gather(index_scratch_.data(), rows, host, nullptr);
        DAPPLE_RETURN_IF_ERROR(b.LoadInput(slot, host, rows));
      } else if (!received) {
        return absl::InternalError("FORWARD before its RECV_ACT");
      }
      if (pipedream_) {
        version_of_[m] = ForwardVersion(global_mb);
        DAPPLE_RETURN_IF_ERROR(stash_->Use(version_of_[m]));
        RecordWeightUse(global_mb, v1::FORWARD, version_of_[m]);
      }
      kernels::ForwardContext ctx;
      ctx.training = true;
      ctx.seed = seed_;
      ctx.step = mb_step;
      ctx.first_sample = static_cast<int64_t>(mb) * micro_batch_size_ + rows_.begin;
      DAPPLE_RETURN_IF_ERROR(b.Forward(slot, rows, ctx));
      if (pipedream_) DAPPLE_RETURN_IF_ERROR(stash_->Restore());
      if (last) {
        MicroBatchIndices(mb_step, mb, &index_scratch_);
        label_scratch_.resize(rows * targets_per_sample_);
        train_->Gather(index_scratch_.data(), rows, nullptr, label_scratch_.data());
        // The mean over every target of the global batch (per sample, or per token).
        const float grad_scale = 1.0f / static_cast<float>(global_batch_ * targets_per_sample_);
        DAPPLE_ASSIGN_OR_RETURN(double loss_sum, b.Loss(slot, label_scratch_.data(), rows,
                                                        grad_scale, /*training=*/true, nullptr));
        // 1F1B-RR on a replicated last stage runs forwards of the next step before this
        // step's update: their loss belongs to their own step.
        if (mb_step == step) {
          step_loss_sum_ += loss_sum;
        } else {
          pending_loss_[mb_step] += loss_sum;
        }
      }
      return absl::OkStatus();
    }
    case v1::BACKWARD: {
      if (slot_of_[m] < 0) return absl::InternalError("BACKWARD without its FORWARD");
      // Weight stashing: the backward runs with exactly the weights its forward used.
      if (pipedream_) {
        DAPPLE_RETURN_IF_ERROR(stash_->Use(version_of_[m]));
        RecordWeightUse(global_mb, v1::BACKWARD, version_of_[m]);
      }
      DAPPLE_RETURN_IF_ERROR(b.Backward(slot_of_[m], m, rows, last, /*need_dx=*/!first));
      ReleaseSlot(m);
      if (pipedream_) {
        DAPPLE_RETURN_IF_ERROR(stash_->Restore());
        version_of_[m] = -1;
        stash_->Prune(OldestNeededVersion(NextForward(step)));
      }
      return absl::OkStatus();
    }
    // Split-concat: one message per overlapping neighbour replica, each a contiguous row slice
    // (rows are the outer dimension), all with the micro-batch's tag.
    case v1::SEND_ACT: {
      if (slot_of_[m] < 0) return absl::InternalError("SEND_ACT without its FORWARD");
      DAPPLE_ASSIGN_OR_RETURN(const void* out, b.OutputForSend(slot_of_[m], m, rows));
      for (const RowPeer& p : PeersFor(stage_ + 1, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(transport_->Send(
            p.rank, MessageTag(MessageKind::kActivation, mb_step, mb),
            static_cast<const char*>(out) + OutputBytes(p.offset), OutputBytes(p.rows)));
      }
      return absl::OkStatus();
    }
    case v1::RECV_ACT: {
      const int slot = SlotFor(m);
      DAPPLE_ASSIGN_OR_RETURN(void* in, b.Input(slot, rows));
      for (const RowPeer& p : PeersFor(stage_ - 1, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(
            transport_->Recv(p.rank, MessageTag(MessageKind::kActivation, mb_step, mb),
                             static_cast<char*>(in) + InputBytes(p.offset), InputBytes(p.rows)));
      }
      return absl::OkStatus();
    }
    case v1::SEND_GRAD: {
      const char* dx = static_cast<const char*>(b.GradForSend(m));
      for (const RowPeer& p : PeersFor(stage_ - 1, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(transport_->Send(p.rank,
                                                MessageTag(MessageKind::kGradient, mb_step, mb),
                                                dx + InputBytes(p.offset), InputBytes(p.rows)));
      }
      return absl::OkStatus();
    }
    case v1::RECV_GRAD: {
      DAPPLE_ASSIGN_OR_RETURN(void* g, b.GradInput(m, rows));
      for (const RowPeer& p : PeersFor(stage_ + 1, global_mb)) {
        DAPPLE_RETURN_IF_ERROR(
            transport_->Recv(p.rank, MessageTag(MessageKind::kGradient, mb_step, mb),
                             static_cast<char*>(g) + OutputBytes(p.offset), OutputBytes(p.rows)));
      }
      return absl::OkStatus();
    }
    case v1::ALLREDUCE:
      // Pipe-SGD hands the gradient to its AllReduce thread and goes on.
      if (pipesgd_ != nullptr) {
        DAPPLE_RETURN_IF_ERROR(exchange_->ReplicasReducedElsewhere());
        return pipesgd_->OnGradients(step);
      }
      return exchange_->AllReduceReplicas(last ? &step_loss_sum_ : nullptr);
    case v1::TIED_ALLREDUCE:
      return exchange_->AllReduceTied();
    case v1::GLOBAL_NORM:
      return exchange_->GlobalNorm().status();
    case v1::OPTIMIZER_STEP: {
      // The flush: every send of this step must be done before its buffers are reused. Its
      // wait is communication, not optimizer time (RunStep splits the action).
      // PipeDream before an evaluation (the end of an epoch) skips it: this step's forwards of
      // the next step's micro-batches are received by the next stage only after that stage
      // evaluated, which needs this stage's evaluation first; Evaluate's own wait covers them.
      // Their buffers are safe meanwhile: an id is reused only M + K micro-batches later, after
      // 1F1B made the neighbour receive it.
      const bool before_eval = pipedream_ && EvaluatesAfterStep(assignment_.spec(), step);
      if (transport_ != nullptr && !before_eval) {
        const SteadyClock::time_point wait_start = SteadyClock::now();
        absl::Status s = transport_->WaitSends();
        send_wait_ns_ = NanosBetween(wait_start, SteadyClock::now());
        DAPPLE_RETURN_IF_ERROR(s);
      }
      // The collectives' checks, the stage's norm and clipping (gradient_exchange.h).
      DAPPLE_ASSIGN_OR_RETURN(gradient_sq_norm_, exchange_->PrepareUpdate());
      learning_rate_ =
          LearningRate(assignment_.spec().training(), b.OptimizerUpdates(), total_steps_);
      if (pipesgd_ != nullptr) {
        DAPPLE_RETURN_IF_ERROR(pipesgd_->OnOptimizerStep(step));
        // The last step's gradient is still in its AllReduce: apply it before training ends.
        if (step + 1 == total_steps_) DAPPLE_RETURN_IF_ERROR(pipesgd_->Finish());
        return absl::OkStatus();
      }
      if (!pipedream_) return b.OptimizerStep();
      // Keep the version being replaced while an in-flight micro-batch still needs it.
      const int64_t current = stash_->current();
      bool keep = vertical_sync_ && ForwardVersion(NextForward(step)) <= current;
      for (int64_t v : version_of_) keep = keep || v == current;
      DAPPLE_RETURN_IF_ERROR(stash_->BeforeUpdate(keep));
      DAPPLE_RETURN_IF_ERROR(b.OptimizerStep());
      stash_->AfterUpdate();
      return absl::OkStatus();
    }
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return absl::InternalError("unspecified action kind");
  }
  return absl::InternalError(absl::StrCat("unknown action kind ", action.kind()));
}

int64_t StageRuntime::RunSteps() const { return std::max<int64_t>(1, total_steps_ - first_step_); }

absl::Status StageRuntime::PreparePipeDreamStep(int64_t step) {
  if (step < first_step_ || step >= total_steps_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipedream step %d outside the job's run [%d, %d)", step + 1,
                        first_step_ + 1, total_steps_));
  }
  const schedule::OpProgram ops =
      schedule::GeneratePipeDreamStepOps(layout_, stage_, replica_, step - first_step_);
  own_micro_batches_ = 0;
  for (const schedule::Op& op : ops) own_micro_batches_ += op.kind == v1::BACKWARD;
  step_program_ = schedule::Lower(schedule::ToActions(stage_, ops), num_stages_, stage_, lower_);
  return absl::OkStatus();
}

// Stage 0's version when it ran the forward of global micro-batch g: its updates before that
// forward in the continuous run (an update follows every M-th backward; the forward of g pairs
// with the backward of g - K0). Vertical sync makes every stage use it.
int64_t StageRuntime::ForwardVersion(int64_t global_mb) const {
  if (!vertical_sync_) return stash_->current();
  const int64_t g = global_mb - first_step_ * num_micro_batches_;
  const int64_t k0 = schedule::PipeDreamWarmUp(layout_, 0);
  const int64_t updates = g < k0 ? 0 : (g - k0 + 1) / num_micro_batches_;
  return first_step_ + updates;
}

// A lower bound of the global index of any forward this stage still runs during or after
// step `step`: its first micro-batch (ForwardVersion grows with the index, so versions are kept
// conservatively).
int64_t StageRuntime::NextForward(int64_t step) const { return step * num_micro_batches_; }

// The oldest version still needed: by a micro-batch in flight, or by the next forward (global
// micro-batch `next_forward` or later, which needs at least ForwardVersion of it).
int64_t StageRuntime::OldestNeededVersion(int64_t next_forward) const {
  int64_t oldest = vertical_sync_ ? ForwardVersion(next_forward) : stash_->current();
  for (int64_t v : version_of_) {
    if (v >= 0) oldest = std::min(oldest, v);
  }
  return oldest;
}

void StageRuntime::RecordWeightUse(int64_t global_mb, v1::ActionKind kind, int64_t version) {
  if (!record_weight_uses_) return;
  WeightUse use;
  use.micro_batch = global_mb;
  use.kind = kind;
  use.version = version;
  use.versions_held = stash_->versions();
  std::vector<float> w(static_cast<size_t>(backend_->WeightFloats()));
  if (backend_->ReadWeights(w.data()).ok()) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes of the weights in use
    const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
    for (size_t i = 0; i < w.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    use.weights_hash = h;
  }
  weight_uses_.push_back(use);
}

absl::StatusOr<EvalResult> StageRuntime::Evaluate(int64_t eval_index) {
  const bool first = stage_ == 0;
  const bool last = stage_ == num_stages_ - 1;
  // Replicas hold identical weights: replica 0 of every stage evaluates for all of them.
  if (replica_ != 0) return EvalResult{};
  if (eval_ == nullptr) return absl::FailedPreconditionError("evaluation without an eval split");
  const Dataset& eval = *eval_;
  const int64_t chunks = (eval.size() + eval_chunk_ - 1) / eval_chunk_;
  StageBackend& b = *backend_;
  // Sent chunks keep their own send buffers (ids 0..chunks-1) until WaitSends (Transport rules).
  DAPPLE_ASSIGN_OR_RETURN(const int slot, SlotBetweenSteps());
  std::vector<int64_t> indices;
  std::vector<int32_t> targets;
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  auto with_chunk = [&](int64_t c, const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("stage ", stage_, " evaluation chunk ", c, ": ", s.message()));
  };
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * eval_chunk_;
    const int64_t n = std::min(eval_chunk_, eval.size() - begin);
    const uint64_t tag = MessageTag(MessageKind::kEvalActivation, eval_index, static_cast<int>(c));
    absl::StatusOr<void*> in = b.Input(slot, n);
    if (!in.ok()) return with_chunk(c, in.status());
    // The evaluation split in its stored order, chunk after chunk.
    indices.resize(n);
    for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
    if (first) {
      float* host = static_cast<float*>(*in);
      if (b.device_memory()) {
        input_scratch_.resize(static_cast<size_t>(InputBytes(n) / sizeof(float)));
        host = input_scratch_.data();
      }
      eval.Gather(indices.data(), n, host, nullptr);
      absl::Status s = b.LoadInput(slot, host, n);
      if (!s.ok()) return with_chunk(c, s);
    } else {
      absl::Status s = transport_->Recv(eval_prev_rank_, tag, *in, InputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
    }
    absl::Status s = b.Forward(slot, n, kernels::ForwardContext{});
    if (!s.ok()) return with_chunk(c, s);
    if (last) {
      targets.resize(n * targets_per_sample_);
      eval.Gather(indices.data(), n, nullptr, targets.data());
      int64_t ok = 0;
      absl::StatusOr<double> sum = b.Loss(slot, targets.data(), n, 0.0f, /*training=*/false, &ok);
      if (!sum.ok()) return with_chunk(c, sum.status());
      loss_sum += *sum;
      correct += ok;
    } else {
      absl::StatusOr<const void*> out = b.OutputForSend(slot, static_cast<int>(c), n);
      if (!out.ok()) return with_chunk(c, out.status());
      s = transport_->Send(eval_next_rank_, tag, *out, OutputBytes(n));
      if (!s.ok()) return with_chunk(c, s);
    }
  }
  if (transport_ != nullptr) DAPPLE_RETURN_IF_ERROR(transport_->WaitSends());
  if (last) {
    result.has_metrics = true;
    // Means per target, as the training loss (per sample, or per token).
    const auto targets_total = static_cast<double>(eval.size() * targets_per_sample_);
    result.samples = eval.size();
    result.loss = loss_sum / targets_total;
    result.accuracy = static_cast<double>(correct) / targets_total;
  }
  return result;
}

absl::StatusOr<int> StageRuntime::SlotBetweenSteps() {
  // Between steps no micro-batch holds a slot: borrow slot 0. PipeDream keeps forwards of the
  // next step in flight: a free slot instead.
  if (live_slots_ != 0 && !pipedream_) {
    return absl::InternalError("evaluation or generation during a step");
  }
  if (live_slots_ == 0 && num_slots_ == 0) free_slots_.push_back(num_slots_++);
  if (free_slots_.empty()) free_slots_.push_back(num_slots_++);
  return live_slots_ == 0 ? 0 : free_slots_.back();
}

}  // namespace dapple::worker
