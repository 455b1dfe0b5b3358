// StageRuntime::Create: checks an assignment against its plan and program, then sets the
// runtime up (this replica's rows and its split-concat peers, the stage's shapes, the backend
// and the gradient exchange, the weight stash and the asynchronous AllReduce's updater).
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/compute_throughput.h"
#include "common/memory_model.h"
#include "common/model_info.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/lowering.h"
#include "common/status.h"
#include "common/steps.h"
#include "worker/runtime/chunked_stage_backend.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {
namespace {

// The program's phases can be run: each covers steps and has actions for them.
absl::Status CheckPhases(const v1::RankProgram& program) {
  for (int i = 0; i < program.phases_size(); ++i) {
    const v1::ProgramPhase& phase = program.phases(i);
    if (phase.steps() <= 0 || phase.cycle().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("program phase %d covers %d steps with %d step programs: a phase needs "
                          "at least one of each",
                          i, phase.steps(), phase.cycle_size()));
    }
  }
  return absl::OkStatus();
}

// Every action of `program` runs on `stage` itself or on one of its `chunks` virtual stages
// stage + c * P (interleaved 1F1B: common/schedule/generators.h GenerateInterleavedOps); refused
// rather than run on the wrong layers.
absl::Status CheckVirtualStages(const v1::RankProgram& program, int stage, int num_stages,
                                int chunks) {
  auto check = [&](const google::protobuf::RepeatedPtrField<v1::Action>& actions) {
    for (const v1::Action& a : actions) {
      if (a.stage() < stage || a.stage() >= num_stages * chunks ||
          (a.stage() - stage) % num_stages != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "stage %d's program has an action of stage %d (%s): a rank of %d stages with %d "
            "layer ranges runs virtual stages %d + c * %d only",
            stage, a.stage(), v1::ActionKind_Name(a.kind()), num_stages, chunks, stage,
            num_stages));
      }
    }
    return absl::OkStatus();
  };
  DAPPLE_RETURN_IF_ERROR(check(program.actions()));
  for (const v1::ProgramPhase& phase : program.phases()) {
    for (const v1::StepActions& step : phase.cycle()) DAPPLE_RETURN_IF_ERROR(check(step.actions()));
  }
  return absl::OkStatus();
}

// What Create checks before it builds anything: the assignment matches its plan, the batch
// splits over every stage's replicas, the program has the collectives the plan needs. Sets
// `*lower` to the job's lowering options.
absl::Status CheckAssignment(const v1::StageAssignment& assignment, const Transport* transport,
                             schedule::LowerOptions* lower) {
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
  // 1F1B-RR (PipeDream) runs whole micro-batches on the replicas instead of splitting them.
  const bool round_robin = assignment.program().whole_micro_batches();
  const int64_t micro_batches = spec.training().global_batch() / micro_batch;
  for (int s = 0; s < num_stages; ++s) {
    const int d = schedule::StageReplicas(plan, s);
    if (!round_robin && micro_batch < d) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "training.micro_batch %d is smaller than the %d replicas of stage %d: a stage's "
          "replicas split every micro-batch (split-concat) and each needs at least one sample "
          "of it: use a micro_batch of at least %d, or fewer parallel.devices",
          micro_batch, d, s, d));
    }
    if (round_robin && micro_batches < d) {
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
  DAPPLE_RETURN_IF_ERROR(CheckPhases(assignment.program()));
  DAPPLE_RETURN_IF_ERROR(
      CheckVirtualStages(assignment.program(), stage, num_stages,
                         static_cast<int>(schedule::StageChunks(assignment.plan(), stage).size())));
  if (num_replicas > 1 && schedule::CountActions(assignment.program(), v1::ALLREDUCE) == 0 &&
      schedule::CountActions(assignment.program(), v1::ALLREDUCE_ASYNC) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d has %d replicas but its program has no ALLREDUCE before OPTIMIZER_STEP "
        "(lower it with LowerOptions.allreduce_stages[%d] = true)",
        stage, num_replicas, stage));
  }
  DAPPLE_ASSIGN_OR_RETURN(*lower, schedule::LowerOptionsFor(spec, plan));
  DAPPLE_RETURN_IF_ERROR(schedule::CheckProgramCollectives(assignment.program(), stage, *lower));
  // What this program runs: a hand-built synchronous one may lack the job-wide decision.
  lower->global_norm = schedule::HoldsNonFiniteCheck(assignment.program());
  return absl::OkStatus();
}

}  // namespace

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
  schedule::LowerOptions lower;
  DAPPLE_RETURN_IF_ERROR(CheckAssignment(assignment, transport, &lower));
  const v1::JobSpec& spec = assignment.spec();
  const int stage = assignment.stage();
  const int num_stages = assignment.num_stages();
  const v1::ParallelPlanSummary& plan = assignment.plan();
  auto rt = std::unique_ptr<StageRuntime>(new StageRuntime());
  rt->assignment_ = assignment;
  rt->lower_ = std::move(lower);
  rt->replica_ = assignment.replica();
  rt->num_replicas_ = schedule::StageReplicas(plan, stage);
  rt->whole_micro_batches_ = assignment.program().whole_micro_batches();
  rt->InitRows();
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
  const std::vector<v1::StageRange> ranges = schedule::StageChunks(plan, stage);
  if (backend == nullptr) {
    DAPPLE_ASSIGN_OR_RETURN(backend, MakeChunkedStageBackend(ranges, [&](int first, int last) {
                              return MakeCpuStageBackend(spec, first, last, range.recompute());
                            }));
  }
  if (backend->num_chunks() != static_cast<int>(ranges.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stage %d holds %d layer ranges (plan chunks) but its backend %d", stage,
                        ranges.size(), backend->num_chunks()));
  }
  rt->backend_ = std::move(backend);
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, rt->InitShapes());
  DAPPLE_ASSIGN_OR_RETURN(
      rt->exchange_,
      GradientExchange::Create(assignment, rt->lower_,
                               schedule::SplitTiedWeights(schedule::TiedWeights(infos), plan),
                               rt->backend_.get(), collectives));
  rt->InitProgram();
  DAPPLE_RETURN_IF_ERROR(rt->InitAsyncAllReduce(collectives));
  rt->slot_of_.assign(rt->id_space_ * rt->chunks_.size(), -1);
  if (stage == 0 && train == nullptr) {
    return absl::InvalidArgumentError("stage 0 needs the training inputs");
  }
  if (stage == num_stages - 1 && train == nullptr) {
    return absl::InvalidArgumentError("the last stage needs the training targets");
  }
  DAPPLE_RETURN_IF_ERROR(rt->CheckDatasets());
  return rt;
}

void StageRuntime::InitRows() {
  const v1::ParallelPlanSummary& plan = assignment_.plan();
  const int64_t micro_batch = assignment_.spec().training().micro_batch();
  const int stage = assignment_.stage();
  const int num_stages = assignment_.num_stages();
  // 1F1B-RR moves whole micro-batches: every replica owns all rows of the ones it runs.
  rows_ = schedule::ReplicaRows(micro_batch, num_replicas_, replica_, whole_micro_batches_);
  // Split-concat partners: every neighbouring replica whose rows overlap mine, in replica order
  // (the sender's and the receiver's lists agree, so both sides pair up).
  auto overlapping = [&](int other_stage) {
    std::vector<RowPeer> peers;
    const int n = schedule::StageReplicas(plan, other_stage);
    for (int q = 0; q < n; ++q) {
      const schedule::RowRange o =
          schedule::RowOverlap(rows_, schedule::SplitRows(micro_batch, n, q));
      if (o.size() <= 0) continue;
      peers.push_back({schedule::RankIndex(plan, other_stage, q), o.begin - rows_.begin, o.size()});
    }
    return peers;
  };
  // Virtual stages (interleaved): rank 0's later chunks follow rank P - 1's earlier ones.
  const bool virtual_stages = schedule::StageChunks(plan, stage).size() > 1;
  const bool has_prev = stage > 0 || (virtual_stages && num_stages > 1);
  const bool has_next = stage + 1 < num_stages || (virtual_stages && num_stages > 1);
  const int prev = (stage - 1 + num_stages) % num_stages;
  const int next = (stage + 1) % num_stages;
  if (has_prev && !whole_micro_batches_) prev_peers_ = overlapping(prev);
  if (has_next && !whole_micro_batches_) next_peers_ = overlapping(next);
  if (has_prev) eval_prev_rank_ = schedule::RankIndex(plan, prev, 0);
  if (has_next) eval_next_rank_ = schedule::RankIndex(plan, next, 0);
}

absl::StatusOr<std::vector<LayerInfo>> StageRuntime::InitShapes() {
  const v1::JobSpec& spec = assignment_.spec();
  const int stage = assignment_.stage();
  const std::vector<v1::StageRange> ranges = schedule::StageChunks(assignment_.plan(), stage);
  const int v = static_cast<int>(ranges.size());
  DAPPLE_ASSIGN_OR_RETURN(std::vector<LayerInfo> infos, InferLayers(spec.model()));
  train_flops_per_sample_ = 0;
  for (int c = 0; c < v; ++c) {
    const v1::StageRange& r = ranges[c];
    if (r.first_layer() < 0 || r.last_layer() < r.first_layer() ||
        r.last_layer() >= static_cast<int>(infos.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stage %d covers layers [%d, %d] but the model has %d layers", stage,
                          r.first_layer(), r.last_layer(), infos.size()));
    }
    Chunk ck;
    ck.virtual_stage = c * num_stages_ + stage;
    ck.first = ck.virtual_stage == 0;
    ck.last = ck.virtual_stage == num_stages_ * v - 1;
    ck.backend = backend_->chunk(c);
    ck.input_shape = infos[r.first_layer()].input_shape;
    ck.output_shape = infos[r.last_layer()].output_shape;
    chunks_.push_back(std::move(ck));
    train_flops_per_sample_ += StageTrainFlopsPerSample(infos, r.first_layer(), r.last_layer());
  }
  eval_chunk_ = memory::EvalPieceRows(micro_batch_size_, WidestFloatsPerSample(infos));
  targets_per_sample_ = TargetsPerSample(infos);
  const std::vector<int64_t>& model_output = infos.back().output_shape;
  if (model_output.size() == 2) {
    sample_positions_ = model_output[0];
    sample_vocab_ = model_output[1];
  }
  // A byte-level language model: token ids in, the next byte's logits out at every position.
  // Not with virtual stages (its byte would travel through every chunk: not implemented).
  generates_sample_ = v == 1 && TokenInput(spec.model()) && model_output.size() == 2 &&
                      spec.model().input_shape_size() == 1 &&
                      spec.model().input_shape(0) == model_output[0] && model_output[1] <= 256 &&
                      spec.sample().tokens() > 0;
  InitMemoryModel(infos, ranges);
  return infos;
}

void StageRuntime::InitMemoryModel(const std::vector<LayerInfo>& infos,
                                   const std::vector<v1::StageRange>& ranges) {
  const v1::JobSpec& spec = assignment_.spec();
  const int stage = assignment_.stage();
  const v1::PlanStageSummary& range = assignment_.plan().stages(stage);
  const int v = static_cast<int>(ranges.size());
  int64_t params = 0;
  for (const v1::StageRange& r : ranges) {
    for (int l = r.first_layer(); l <= r.last_layer(); ++l) params += infos[l].param_count;
  }
  // The memory model's prediction for this replica: what the planner predicted for its stage.
  // The plan names the schedule that runs (under parallel.schedule auto the planner chose it;
  // the spec says "auto"); an assignment built by hand may leave both empty (the program alone
  // says what runs): predict as for dapple then.
  const std::string schedule_name = schedule::RunningSchedule(spec, assignment_.plan());
  const absl::StatusOr<schedule::ScheduleKind> kind = schedule::ParseScheduleKind(schedule_name);
  memory::ReplicaPlace place;
  place.schedule = kind.ok() ? *kind : schedule::ScheduleKind::kDapple;
  place.stage = stage;
  place.replica = assignment_.replica();
  place.micro_batches = static_cast<int>(spec.training().global_batch() /
                                         std::max<int64_t>(1, spec.training().micro_batch()));
  for (int s = 0; s < assignment_.plan().stages_size(); ++s) {
    place.replicas.push_back(schedule::StageReplicas(assignment_.plan(), s));
  }
  place.vertical_sync = spec.parallel().pipedream().vertical_sync();
  place.num_steps = TotalSteps(spec);
  place.recompute = range.recompute();
  place.chunks = v;
  // Each chunk's own sizes (memory_model.h StageSizes.chunks); the fields of all are the means.
  const int64_t rows = rows_.size();
  memory::StageSizes sizes;
  sizes.parameter_bytes = static_cast<double>(params) * sizeof(float);
  sizes.optimizer_state_copies = memory::OptimizerStateCopies(spec.training().optimizer());
  int64_t activation_bytes = 0;
  for (int c = 0; c < v; ++c) {
    const v1::StageRange& r = ranges[c];
    memory::ChunkSizes chunk;
    const int64_t chunk_activations =
        StageActivationBytesPerSample(infos, r.first_layer(), r.last_layer()) * rows;
    activation_bytes += chunk_activations;
    chunk.activation_bytes = static_cast<double>(chunk_activations);
    chunk.input_bytes = static_cast<double>(dapple::InputBytes(infos[r.first_layer()]) * rows);
    chunk.output_bytes = static_cast<double>(infos[r.last_layer()].output_bytes * rows);
    // The first stage's backward stops at its first layer with parameters (no input gradient).
    int from = r.first_layer();
    while (chunks_[c].first && from <= r.last_layer() && infos[from].param_count == 0) ++from;
    for (int l = from; l < r.last_layer(); ++l) {
      chunk.inner_output_bytes.push_back(static_cast<double>(infos[l].output_bytes * rows));
    }
    memory::AddChunkSizes(std::move(chunk), v, &sizes);
  }
  // The whole bytes of the mean (what ActivationBytes counts per live slot when unmeasured).
  activation_bytes_per_micro_batch_ = activation_bytes / v;
  sizes.activation_bytes = static_cast<double>(activation_bytes_per_micro_batch_);
  // What an evaluation piece sends (InitShapes set eval_chunk_ first).
  place.evaluates_between_steps = EvaluatesBetweenSteps(spec);
  sizes.eval_piece_output_bytes =
      static_cast<double>(infos[ranges.back().last_layer()].output_bytes * eval_chunk_);
  predicted_memory_ = memory::PredictReplicaMemory(place, sizes);
  memory_place_ = std::move(place);
  memory_sizes_ = std::move(sizes);
}

void StageRuntime::InitProgram() {
  // Micro-batches of later steps may be in flight across a step's end (a program without a
  // flush): ids then cover more than M, and the weight stash keeps the versions the program's
  // weight actions name (versions count updates from the first step on).
  total_steps_ = TotalSteps(assignment_.spec());
  first_step_ = assignment_.first_step();
  const int ids = assignment_.program().micro_batch_ids();
  id_space_ = ids > 0 ? ids : num_micro_batches_;
  carries_across_steps_ = id_space_ > num_micro_batches_;
  stash_ = std::make_unique<WeightStash>(backend_.get(), first_step_);
}

absl::Status StageRuntime::InitAsyncAllReduce(const StageCollectives& collectives) {
  const v1::JobSpec& spec = assignment_.spec();
  const int num_stages = assignment_.num_stages();
  // Pipe-SGD: data parallelism whose AllReduce of step t overlaps step t + 1 (its updater owns
  // the AllReduce thread and the collective).
  if (schedule::CountActions(assignment_.program(), v1::ALLREDUCE_ASYNC) == 0) {
    return absl::OkStatus();
  }
  if (num_stages != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parallel.schedule pipesgd is data parallelism over one stage, got %d stages", num_stages));
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
  DAPPLE_ASSIGN_OR_RETURN(async_allreduce_,
                          PipeSgdUpdater::Create(collectives.replicas, backend_.get(), options,
                                                 assignment_.first_step()));
  return absl::OkStatus();
}

absl::Status StageRuntime::CheckDatasets() const {
  // The spec's validation ties the model to data.dataset; this guards against a caller that
  // hands the runtime another dataset than the spec's.
  const int64_t elements = NumElements(chunks_[0].input_shape);
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

}  // namespace dapple::worker
