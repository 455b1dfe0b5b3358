// One job on a worker: its datasets, its links to the neighbouring stages, its collectives
// and its training loop (the WorkerDaemon members declared for them in worker_daemon.h;
// registration, heartbeats and the job's lifecycle are in worker_daemon.cc).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/eval_metrics.h"
#include "common/logging.h"
#include "common/schedule/action.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"
#include "common/text_data.h"
#include "common/utf8.h"
#include "grpcpp/grpcpp.h"
#include "worker/checkpoint/stage_checkpointer.h"
#include "worker/daemon/coordinator_store.h"
#include "worker/daemon/progress_reporter.h"
#include "worker/daemon/worker_daemon_internal.h"
#include "worker/runtime/nonfinite_injection.h"
#include "worker/runtime/param_io.h"

namespace dapple::worker {
namespace {

using daemon_internal::DeadlineIn;
using daemon_internal::Hostname;
using daemon_internal::kRpcDeadline;

// What decides the datasets LoadDatasets returns for `data`: its fields and, for a text file,
// the file's identity, so a file replaced or rewritten between jobs is read again (the cache
// would otherwise keep the old bytes and the data.file_bytes check would compare against them).
// Fashion-MNIST's folder is taken as it is (a Debian package).
std::string DataKey(const v1::DataSpec& data) {
  std::string key = absl::StrFormat("%s|%s|%d|%a", data.dataset(), data.path(), data.seq_len(),
                                    data.validation_fraction());
  struct stat st;
  if (data.dataset() == kTextDataset && stat(data.path().c_str(), &st) == 0) {
    absl::StrAppendFormat(&key, "|%d:%d:%d:%d.%09d", static_cast<uint64_t>(st.st_dev),
                          static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
                          static_cast<int64_t>(st.st_mtim.tv_sec),
                          static_cast<int64_t>(st.st_mtim.tv_nsec));
  }
  return key;
}

// "stage 1, worker w-2" for a stage of one replica (the label plain pipelines always had),
// "stage 1 replica 0, worker w-2" for a replica of a replicated stage.
std::string PeerLabel(const v1::ParallelPlanSummary& plan, const v1::PeerEndpoint& p) {
  return schedule::StageReplicas(plan, p.stage()) > 1
             ? absl::StrFormat("stage %d replica %d, worker %s", p.stage(), p.replica(),
                               p.worker_id())
             : absl::StrFormat("stage %d, worker %s", p.stage(), p.worker_id());
}

// A checkpoint step's stall of the training loop, logged (bench/checkpoint_stall.py reads the
// line) and counted in the worker's metrics.
void ReportCheckpointStall(const v1::StageAssignment& a, const SaveTiming& t, double step_seconds,
                           DaemonObserver* observer) {
  const double stall = t.stall_seconds();
  DAPPLE_LOG_INFO(
      "{}: stage {}: checkpoint after step {} stalled the loop {:.3f} ms (snapshot {:.3f} ms, "
      "waiting for the previous save {:.3f} ms, writing {:.3f} ms); the step took {:.3f} ms",
      a.job_id(), a.stage(), t.step, stall * 1e3, t.snapshot_seconds * 1e3, t.wait_seconds * 1e3,
      t.write_seconds * 1e3, step_seconds * 1e3);
  if (observer != nullptr) observer->OnCheckpointStall(stall, step_seconds);
}

// Puts an evaluation's metrics into its PROGRESS_EVAL report: a text dataset's validation
// split as validation_* (bits per byte from the loss), else the test set as test_*. Returns
// them as the log shows them.
std::string FillEvalReport(const v1::JobSpec& spec, const EvalResult& e, v1::ProgressReport* r) {
  if (EvaluatesValidationSplit(spec)) {
    const double bits = BitsPerByte(e.loss);
    r->set_validation_loss(e.loss);
    r->set_validation_bits_per_byte(bits);
    r->set_validation_accuracy(e.accuracy);
    return absl::StrFormat("validation loss %.4f (%.4f bits/byte), next-byte accuracy %.4f", e.loss,
                           bits, e.accuracy);
  }
  r->set_test_accuracy(e.accuracy);
  r->set_test_loss(e.loss);
  return absl::StrFormat("test accuracy %.4f loss %.4f", e.accuracy, e.loss);
}

}  // namespace

absl::StatusOr<Datasets> WorkerDaemon::LoadData(const v1::DataSpec& data) {
  const std::string key = DataKey(data);
  auto it = data_cache_.find(data.path());
  if (it != data_cache_.end() && it->second.key == key) return it->second.data;
  // Dropped before loading, so that two versions of a big dataset are never held at once.
  if (it != data_cache_.end()) data_cache_.erase(it);
  DAPPLE_ASSIGN_OR_RETURN(Datasets loaded, LoadDatasets(data));
  data_cache_[data.path()] = DataCache{key, loaded};
  return loaded;
}

absl::Status WorkerDaemon::ConnectNeighbours(const v1::StageAssignment& a,
                                             const std::string& worker_id, StageLinks* links,
                                             std::unique_ptr<UcxTransport>* out) {
  const int stage = a.stage();
  Transport::Options topts;
  topts.timeout = options_.transport_timeout;
  topts.abort = &abort_;
  // Handed to the caller at once, so that a failure below keeps the endpoints open until the
  // failure was reported (see RunJob). Ranks are addressed by their global index.
  DAPPLE_ASSIGN_OR_RETURN(
      *out, UcxTransport::Create(schedule::RankIndex(a.plan(), stage, a.replica()), topts));
  UcxTransport* transport = out->get();
  v1::PublishEndpointRequest pub;
  pub.set_job_id(a.job_id());
  pub.set_worker_id(worker_id);
  pub.set_stage(stage);
  pub.set_replica(a.replica());
  pub.set_ucx_address(transport->LocalAddress());
  DAPPLE_RETURN_IF_ERROR(links->AddNcclIds(a, &pub));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(absl::Seconds(5)));
    auth_.Attach(&ctx);
    // A connection being re-established is waited for (within the deadline) rather than failing
    // the job on the spot.
    ctx.set_wait_for_ready(true);
    v1::PublishEndpointResponse resp;
    grpc::Status s = stub_->PublishEndpoint(&ctx, pub, &resp);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("rendezvous: ", s.error_message()));
  }
  // Poll (every 50 ms) until every rank has published; the coordinator holds no waiting calls.
  const absl::Time deadline = absl::Now() + options_.rendezvous_timeout;
  v1::GetPeersResponse peers;
  while (true) {
    if (abort_.load()) return absl::AbortedError("aborted during rendezvous");
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(kRpcDeadline));
    auth_.Attach(&ctx);
    v1::GetPeersRequest req;
    req.set_job_id(a.job_id());
    grpc::Status s = stub_->GetPeers(&ctx, req, &peers);
    if (s.ok() && peers.job_ended()) return absl::AbortedError("job ended during rendezvous");
    if (s.ok() && peers.complete()) break;
    if (s.ok() &&
        std::none_of(peers.peers().begin(), peers.peers().end(), [&](const v1::PeerEndpoint& p) {
          return p.stage() == stage && p.replica() == a.replica();
        })) {
      // A coordinator restarted meanwhile forgot the endpoints: publish this rank's again.
      grpc::ClientContext again;
      again.set_deadline(DeadlineIn(kRpcDeadline));
      auth_.Attach(&again);
      v1::PublishEndpointResponse resp;
      (void)stub_->PublishEndpoint(&again, pub, &resp);
    }
    if (absl::Now() > deadline) {
      std::string missing;
      for (int st = 0; st < a.num_stages(); ++st) {
        const int replicas = schedule::StageReplicas(a.plan(), st);
        for (int r = 0; r < replicas; ++r) {
          bool found = false;
          for (const auto& p : peers.peers()) found |= p.stage() == st && p.replica() == r;
          if (found) continue;
          absl::StrAppend(&missing, missing.empty() ? "" : ", ", "stage ", st,
                          replicas > 1 ? absl::StrCat(" replica ", r) : "");
        }
      }
      return absl::DeadlineExceededError(
          absl::StrFormat("rendezvous: [%s] did not publish their address within %s", missing,
                          absl::FormatDuration(options_.rendezvous_timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Every rank of the neighbouring stages: split-concat exchanges rows with each of them,
  // 1F1B-RR whole micro-batches round-robin.
  const std::vector<int> neighbours = schedule::NeighbourStages(a.plan(), stage);
  for (const v1::PeerEndpoint& p : peers.peers()) {
    if (std::find(neighbours.begin(), neighbours.end(), p.stage()) != neighbours.end()) {
      DAPPLE_RETURN_IF_ERROR(
          transport->Connect(schedule::RankIndex(a.plan(), p.stage(), p.replica()), p.ucx_address(),
                             PeerLabel(a.plan(), p)));
    }
  }
  return links->Connect(a, peers, transport, topts);
}

absl::Status WorkerDaemon::CloseWithNeighbours(Transport* transport, const v1::StageAssignment& a) {
  // A rank hears FIN from a neighbour only after that neighbour finished all its work, so no
  // endpoint is closed while a message to or from it is still on the way.
  static const char kFin = 1;
  char fin_in = 0;
  const uint64_t tag = MessageTag(MessageKind::kFinish, 0, 0);
  // Every rank of the neighbouring stages, by global index.
  std::vector<int> peers;
  for (int peer_stage : schedule::NeighbourStages(a.plan(), a.stage())) {
    for (int r = 0; r < schedule::StageReplicas(a.plan(), peer_stage); ++r) {
      peers.push_back(schedule::RankIndex(a.plan(), peer_stage, r));
    }
  }
  for (int peer : peers) DAPPLE_RETURN_IF_ERROR(transport->Send(peer, tag, &kFin, 1));
  for (int peer : peers) DAPPLE_RETURN_IF_ERROR(transport->Recv(peer, tag, &fin_in, 1));
  return transport->WaitSends();
}

// Gloo names a lost peer by its socket address only; the runtime's message says which action
// failed (schedule::DescribeAction), which tells the group: the stage's other replicas for its
// ALLREDUCE (and Pipe-SGD's ALLREDUCE_ASYNC and STALE_OPTIMIZER_STEP), every other rank of the job
// for the step's GLOBAL_NORM (the non-finite check and clipping norm, which a rank may be waiting
// in when a peer dies). The message then names them, so that a user sees which worker was lost, not
// an address.
absl::Status NameLostPeers(const v1::StageAssignment& a, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const v1::ParallelPlanSummary& plan = a.plan();
  const auto in_message = [&](v1::ActionKind kind) {
    return absl::StrContains(status.message(),
                             schedule::DescribeAction(schedule::MakeAction(a.stage(), kind)));
  };
  const bool job_wide = in_message(v1::GLOBAL_NORM) || in_message(v1::GLOBAL_NORM_ASYNC);
  // Pipe-SGD's AllReduce runs beside the rank: its failure surfaces in the action that starts the
  // next one or in the stale update that awaits it.
  const bool replicas = in_message(v1::ALLREDUCE) || in_message(v1::ALLREDUCE_ASYNC) ||
                        in_message(v1::STALE_OPTIMIZER_STEP);
  if (!job_wide && !(replicas && schedule::StageReplicas(plan, a.stage()) > 1)) return status;
  std::vector<std::string> others;
  for (int s = 0; s < plan.stages_size(); ++s) {
    if (!job_wide && s != a.stage()) continue;
    const int replicas = schedule::StageReplicas(plan, s);
    for (int r = 0; r < replicas; ++r) {
      if (s == a.stage() && r == a.replica()) continue;
      others.push_back(
          absl::StrCat(schedule::RankName(s, r, replicas),
                       r < plan.stages(s).worker_ids_size()
                           ? absl::StrCat(" (worker ", plan.stages(s).worker_ids(r), ")")
                           : ""));
    }
  }
  // The lost peer first: the collective's own words (the action, Gloo's socket error) come
  // after it, since "the job-wide check of the gradients" alone reads like a non-finite value.
  return absl::Status(
      status.code(),
      absl::StrCat(
          "lost a peer of ",
          job_wide ? "the step's job-wide check (a collective of every rank)" : "the AllReduce",
          ": connection lost (the process exited or the network failed): ",
          others.size() == 1 ? "" : "one of ", absl::StrJoin(others, ", "),
          "; this rank was in: ", status.message()));
}

absl::Status WorkerDaemon::JoinCollectives(const v1::StageAssignment& a,
                                           const std::string& worker_id, JobResources* res) {
  const v1::ParallelPlanSummary& plan = a.plan();
  const int stage = a.stage();
  const int replicas = schedule::StageReplicas(plan, stage);
  DAPPLE_ASSIGN_OR_RETURN(const schedule::LowerOptions lower,
                          schedule::LowerOptionsFor(a.spec(), plan));
  const bool tied =
      stage >= 0 && stage < static_cast<int>(lower.tied_stages.size()) && lower.tied_stages[stage];
  const int ranks = schedule::NumRanks(plan);
  const bool job = lower.global_norm && ranks > 1;
  if (replicas == 1 && !tied && !job) return absl::OkStatus();
  CoordinatorStore::Options store_options;
  store_options.job_id = a.job_id();
  store_options.worker_id = worker_id;
  store_options.timeout = options_.transport_timeout;
  store_options.abort = &abort_;
  CoordinatorStore store(StoreCallsOver(stub_.get(), kRpcDeadline, &auth_), store_options);
  const std::string host = options_.collective_host.empty() ? CollectiveHost(options_.coordinator)
                                                            : options_.collective_host;
  auto join = [&](int member, int size, const std::string& group, const std::string& label) {
    return GlooCollective::Create(member, size, store, absl::StrCat(a.job_id(), "/", group), host,
                                  options_.transport_timeout, label);
  };
  // Every rank joins its groups in this order (replicas, tied, job), so no two ranks wait on
  // each other in different groups.
  if (replicas > 1) {
    DAPPLE_ASSIGN_OR_RETURN(
        res->replicas,
        join(a.replica(), replicas, absl::StrCat("stage-", stage), absl::StrCat("stage ", stage)));
    DAPPLE_LOG_INFO("{}: stage {} replica {} of {}: gradient AllReduce over Gloo on {}", a.job_id(),
                    stage, a.replica(), replicas, host);
  }
  const int rank = schedule::RankIndex(plan, stage, a.replica());
  if (tied) {
    const std::vector<int> group = schedule::TiedGroupRanks(lower.tied_stages, plan);
    const int member =
        static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
    DAPPLE_ASSIGN_OR_RETURN(res->tied,
                            join(member, static_cast<int>(group.size()), "tied", "tied weights"));
    DAPPLE_LOG_INFO("{}: stage {}: tied weights' AllReduce among {} ranks", a.job_id(), stage,
                    group.size());
  }
  if (job) {
    DAPPLE_ASSIGN_OR_RETURN(res->job, join(rank, ranks, "job", "the job's ranks"));
    DAPPLE_LOG_INFO("{}: stage {}: gradient norm over all {} ranks", a.job_id(), stage, ranks);
  }
  return absl::OkStatus();
}

absl::Status WorkerDaemon::TrainJob(const v1::StageAssignment& a, ProgressReporter* reporter,
                                    JobResources* res) {
  const std::string& job = a.job_id();
  const int stage = a.stage();
  const int num_stages = a.num_stages();
  std::string worker_id;
  {
    absl::MutexLock l(&mu_);
    worker_id = worker_id_;
  }
  // LoadDatasets' errors name data.path; the coordinator adds this rank and worker.
  DAPPLE_ASSIGN_OR_RETURN(const Datasets data, LoadData(a.spec().data()));
  DAPPLE_RETURN_IF_ERROR(CheckSubmittedData(
      data, a.spec().data(), absl::StrCat("worker ", worker_id, " (", Hostname(), ")")));

  DAPPLE_ASSIGN_OR_RETURN(res->links, StageLinks::Open(a, &abort_));
  StageLinks* links = res->links.get();
  // device_type emulated (worker/runtime/emulated_stage_backend.h): said at start, in every
  // step's stats, and evaluation is skipped (its accuracy would be a constant, not a result).
  const bool emulated = a.has_emulated_profile();
  if (emulated) {
    DAPPLE_LOG_WARN(
        "{}: stage {}: EMULATED device: compute is replaced by waits from {} (activations and "
        "gradients of the real sizes travel; losses are not real; no evaluation)",
        job, stage, a.emulated_profile().source());
  }
  if (num_stages > 1) {
    DAPPLE_RETURN_IF_ERROR(ConnectNeighbours(a, worker_id, links, &res->transport));
    DAPPLE_LOG_INFO("{}: stage {} on {}; {}", job, stage, links->device(), links->description());
  } else {
    DAPPLE_LOG_INFO("{}: stage {} on {}", job, stage, links->device());
  }
  UcxTransport* transport = res->transport.get();
  const int replicas = schedule::StageReplicas(a.plan(), stage);
  DAPPLE_RETURN_IF_ERROR(JoinCollectives(a, worker_id, res));

  Transport* runtime_transport = num_stages > 1 ? links->transport() : nullptr;
  if (runtime_transport != nullptr && options_.comm_delay_max > absl::ZeroDuration()) {
    // Fault injection (docs/worker.md): each rank draws its own reproducible delays.
    DelayTransport::Options delay;
    delay.max_delay = options_.comm_delay_max;
    delay.seed = DelayTransport::RankSeed(a.spec().training().seed(),
                                          schedule::RankIndex(a.plan(), stage, a.replica()));
    delay.abort = &abort_;
    // The training's messages only: an evaluation sends one piece per micro-batch of its
    // split (thousands), which the delays would stretch past the closing handshake's timeout.
    delay.delays_tag = [](uint64_t tag) {
      const MessageKind kind = MessageKindOf(tag);
      return kind == MessageKind::kActivation || kind == MessageKind::kGradient;
    };
    DAPPLE_ASSIGN_OR_RETURN(res->delay, DelayTransport::Create(runtime_transport, delay));
    runtime_transport = res->delay.get();
    DAPPLE_LOG_WARN(
        "{}: fault injection: a random 0..{} ms delay before every send and receive of "
        "activations and gradients",
        job, absl::ToInt64Milliseconds(options_.comm_delay_max));
  }
  StageCollectives collectives;
  collectives.replicas = res->replicas.get();
  collectives.tied = res->tied.get();
  collectives.job = res->job.get();
  DAPPLE_ASSIGN_OR_RETURN(
      res->runtime, StageRuntime::Create(a, data.train.get(), data.eval.get(), runtime_transport,
                                         links->TakeBackend(), collectives));
  StageRuntime* rt = res->runtime.get();
  if (const char* inject = std::getenv(kInjectNonFiniteEnv); inject != nullptr && *inject) {
    // A test hook (nonfinite_injection.h): said loudly, never silently in effect.
    DAPPLE_ASSIGN_OR_RETURN(const NonFiniteInjection injection, ParseNonFiniteInjection(inject));
    DAPPLE_LOG_WARN(
        "{}: stage {} replica {}: TEST HOOK {}={}: a NaN is injected on stage {} "
        "replica {} at steps {}-{}, micro-batch {}",
        job, stage, a.replica(), kInjectNonFiniteEnv, inject, injection.stage, injection.replica,
        injection.first_step, injection.last_step, injection.micro_batch);
    rt->InjectNonFinite(injection);
  }
  const int64_t total = TotalSteps(a.spec());
  // The last stage's loss reporters (schedule::ReportsLoss); replica 0 of each stage writes
  // checkpoints.
  const bool last = stage == num_stages - 1;
  const bool reports_loss = schedule::ReportsLoss(a.plan(), stage, a.replica());
  auto base_report = [&](v1::ProgressKind kind) {
    v1::ProgressReport r;
    r.set_worker_id(worker_id);
    r.set_job_id(job);
    r.set_stage(stage);
    r.set_replica(a.replica());
    r.set_kind(kind);
    return r;
  };
  auto checkpoint_report = [&](const CheckpointReport& c) {
    v1::ProgressReport rep = base_report(v1::PROGRESS_CHECKPOINT);
    rep.set_step(c.step);
    rep.set_checkpoint_file(c.file);
    rep.set_checkpoint_bytes(c.bytes);
    rep.set_message(c.error);
    reporter->Report(std::move(rep));
  };
  // Declared after what its sink uses: its destructor waits for the save in flight, whose report
  // is made on the writer's thread (ProgressReporter::Report is thread-safe).
  StageCheckpointer checkpointer(
      a, &checkpoint_step_,
      options_.sync_checkpoints
          ? AsyncShardWriter::Sink()
          : AsyncShardWriter::Sink([&](CheckpointReport c) { checkpoint_report(c); }),
      &ShardMemoryCache::Process());
  DAPPLE_RETURN_IF_ERROR(checkpointer.Resume(rt->backend()));
  if (options_.observer && !a.resume_manifest().empty()) {
    options_.observer->OnCheckpointLoad(checkpointer.resume_sources().shards_from_memory,
                                        checkpointer.resume_sources().shards_from_disk);
  }
  int64_t peak_memory = 0;  // the most any step's stats measured
  for (int64_t step = a.first_step(); step < total; ++step) {
    if (abort_.load()) return absl::AbortedError("aborted by the coordinator");
    const bool traced = IsTracedStep(step, a.trace_every_steps(), a.first_step());
    absl::StatusOr<StepResult> step_result = rt->RunStep(step, traced);
    if (!step_result.ok()) return NameLostPeers(a, step_result.status());
    StepResult r = *std::move(step_result);
    last_step_.store(step + 1);
    peak_memory = std::max(peak_memory, r.stats.peak_memory_bytes());
    const int epoch = EpochOfStep(a.spec(), step + 1);
    if (r.stats.skipped()) {
      // Every rank skipped it together (gradient_exchange.h); the streak limit fails RunStep.
      DAPPLE_LOG_WARN("{}: stage {} replica {}: step {} skipped: non-finite {}", job, stage,
                      a.replica(), step + 1, r.skip_reason);
    } else if (last && !std::isfinite(r.loss)) {
      // Without a job-wide decision (pipedream, pipesgd) a non-finite loss fails the job: the
      // update has been applied, and reporting success would hide it.
      // "NaN" / "Inf", as the synchronous schedules' messages say, not printf's "-nan".
      const char* value = std::isnan(r.loss) ? "NaN" : (r.loss > 0 ? "Inf" : "-Inf");
      return absl::FailedPreconditionError(absl::StrFormat(
          "training diverged at step %d: loss %s (try a lower training.optimizer.lr)", step + 1,
          value));
    }
    {
      // Every rank reports every step (its stats; the last stage also the loss). The reporter
      // sends from its own thread, so this costs the loop one proto move.
      v1::ProgressReport rep = base_report(v1::PROGRESS_STEP);
      rep.set_step(step + 1);
      rep.set_epoch(epoch);
      if (reports_loss) rep.set_loss(r.loss);
      rep.set_step_seconds(r.seconds);
      *rep.mutable_stats() = std::move(r.stats);
      if (emulated) rep.mutable_stats()->set_emulated(true);
      if (r.traced) {
        r.trace.set_job_id(job);
        r.trace.set_worker_id(worker_id);
        r.trace.set_device(rt->backend().device());
        *rep.mutable_trace() = std::move(r.trace);
      }
      if (options_.observer) options_.observer->OnReport(rep);
      reporter->Report(std::move(rep));
    }
    if (a.replica() == 0) {
      if (std::optional<CheckpointReport> c = checkpointer.AfterStep(step + 1, rt->backend())) {
        checkpoint_report(*c);
      }
      if (const SaveTiming& t = checkpointer.last_save(); t.step == step + 1) {
        ReportCheckpointStall(a, t, r.seconds, options_.observer.get());
      }
    }
    if (!emulated && EvaluatesAfterStep(a.spec(), step)) {
      DAPPLE_ASSIGN_OR_RETURN(EvalResult e, rt->Evaluate(step + 1));
      if (e.has_metrics && a.replica() == 0) {
        v1::ProgressReport rep = base_report(v1::PROGRESS_EVAL);
        rep.set_step(step + 1);
        rep.set_epoch(epoch);
        const std::string metrics = FillEvalReport(a.spec(), e, &rep);
        reporter->Report(std::move(rep));
        DAPPLE_LOG_INFO("{}: step {} (epoch {}): {}", job, step + 1, epoch, metrics);
      }
    }
  }
  // This rank's peak against the memory model's prediction for it (the plan shows each stage's
  // largest replica): bench/emulated/run.py reads the line.
  DAPPLE_LOG_INFO("{}: stage {} replica {}: peak memory {} bytes measured, {} bytes predicted", job,
                  stage, a.replica(), peak_memory, rt->predicted_memory().PeakBytes());
  // A language model shows what it learned (spec.sample); an emulated one learned nothing.
  if (!emulated && rt->GeneratesSample()) {
    DAPPLE_ASSIGN_OR_RETURN(GenerateResult g, rt->Generate());
    if (g.has_text) {
      v1::ProgressReport rep = base_report(v1::PROGRESS_SAMPLE);
      rep.set_step(total);
      rep.set_sample_text(DisplayText(g.bytes, kMaxSampleTextBytes));
      DAPPLE_LOG_INFO("{}: sample ({} bytes after sample.prompt):\n{}", job, g.bytes.size(),
                      rep.sample_text());
      reporter->Report(std::move(rep));
    }
  }
  // The last checkpoint's report goes before the rank's final one.
  checkpointer.Finish();
  if (transport != nullptr) DAPPLE_RETURN_IF_ERROR(CloseWithNeighbours(transport, a));
  if (!options_.dump_dir.empty()) {
    DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, rt->Params());
    // Replicated stages dump one file per replica (they must be bitwise identical).
    const std::string name =
        replicas > 1 ? absl::StrFormat("%s.stage%d.replica%d.params", job, stage, a.replica())
                     : absl::StrFormat("%s.stage%d.params", job, stage);
    DAPPLE_RETURN_IF_ERROR(SaveParams(absl::StrCat(options_.dump_dir, "/", name), params));
  }
  return absl::OkStatus();
}

}  // namespace dapple::worker
