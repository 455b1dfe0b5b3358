#include "common/metrics/metric_list.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dapple::metrics {
namespace {

constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;
constexpr Binary kCoord = Binary::kCoordinator;
constexpr Binary kWork = Binary::kWorker;

std::vector<MetricDef> Build() {
  const std::vector<std::string> job = {kLabelJobId, kLabelJobName};
  const std::vector<std::string> stage = {kLabelJobId, kLabelJobName, kLabelStage, kLabelReplica,
                                          kLabelWorker};
  return {
      // dapple-coordinator: the cluster.
      {kJobs,
       kGauge,
       kCoord,
       "Jobs in the job database by state (pending, planning, running, restarting, succeeded, "
       "failed, cancelled).",
       {kLabelState}},
      {kJobQueueLength, kGauge, kCoord, "Jobs waiting to start (state PENDING).", {}},
      {kJobsFinishedTotal,
       kCounter,
       kCoord,
       "Jobs that ended since the coordinator started, by final state (succeeded, failed, "
       "cancelled).",
       {kLabelState}},
      {kJobRestartsTotal,
       kCounter,
       kCoord,
       "Automatic restarts of jobs (training.restart) since the coordinator started, by the "
       "failure's cause (worker_lost, rank_error).",
       {kLabelCause}},
      {kAuthFailuresTotal,
       kCounter,
       kCoord,
       "Calls refused as unauthenticated since the coordinator started, by reason (missing, "
       "malformed, unknown, revoked, expired).",
       {kLabelReason}},
      {kWorkers, kGauge, kCoord, "Registered workers by state (idle, busy, dead).", {kLabelState}},
      {kWorkerState,
       kGauge,
       kCoord,
       "1 for the state a registered worker is in, 0 for the others (idle, busy, dead).",
       {kLabelWorker, kLabelHostname, kLabelState}},
      // dapple-coordinator: per tenant (an admin's jobs: tenant "_admin").
      {kTenantNominalDevices,
       kGauge,
       kCoord,
       "Devices of a type guaranteed to a tenant (its nominal quota).",
       {kLabelTenant, kLabelDeviceType}},
      {kTenantInUseDevices,
       kGauge,
       kCoord,
       "Devices of a type held by a tenant's admitted jobs (stopping ones included).",
       {kLabelTenant, kLabelDeviceType}},
      {kTenantBorrowedDevices,
       kGauge,
       kCoord,
       "Devices of a type a tenant holds above its nominal quota (borrowed from its cohort).",
       {kLabelTenant, kLabelDeviceType}},
      {kTenantLentDevices,
       kGauge,
       kCoord,
       "Devices of a tenant's nominal quota held by other tenants of its cohort.",
       {kLabelTenant, kLabelDeviceType}},
      {kTenantPendingJobs,
       kGauge,
       kCoord,
       "A tenant's queued jobs by pending reason (Misconfigured, ExceedsMaximum, "
       "WaitingForQuota, WaitingForDevices, WaitingForPreemption, BeingMeasured).",
       {kLabelTenant, kLabelReason}},
      {kTenantWaitedDeviceSecondsTotal,
       kCounter,
       kCoord,
       "Device-seconds a tenant's queued jobs waited (each job's devices times its time queued).",
       {kLabelTenant}},
      {kTenantWithinQuotaWaitSeconds,
       kGauge,
       kCoord,
       "Seconds the longest-waiting queued job of a tenant that fits its nominal quota (next to "
       "what the tenant uses) has waited, per device type; 0: none waits. Minutes: the tenant is "
       "starved within its quota (alert DappleTenantStarvedWithinQuota).",
       {kLabelTenant, kLabelDeviceType}},
      {kTenantPreemptionsTotal,
       kCounter,
       kCoord,
       "Jobs of a tenant preempted (checkpointed, stopped, queued again), by reason (reclaim, "
       "priority).",
       {kLabelTenant, kLabelReason}},
      {kCheckpointFailuresTotal,
       kCounter,
       kCoord,
       "Checkpoints of a tenant's jobs abandoned since the coordinator started (a rank could not "
       "write its shard, or the manifest or the folder's rename failed: a full or failing "
       "checkpoint disk); each is a CheckpointFailed event of its job (alert "
       "DappleCheckpointsFailing).",
       {kLabelTenant}},
      // dapple-coordinator: per job (kept for a while after the job ended).
      {kJobState,
       kGauge,
       kCoord,
       "1 for the state a job is in, 0 for the others (pending, planning, running, restarting, "
       "succeeded, failed, cancelled).",
       {kLabelJobId, kLabelJobName, kLabelState}},
      {kJobStep, kGauge, kCoord, "Training steps the job completed.", job},
      {kJobTotalSteps, kGauge, kCoord, "Training steps the job will run in all.", job},
      {kJobEpoch, kGauge, kCoord, "1-based epoch of the job's last completed step.", job},
      {kJobLoss, kGauge, kCoord, "Mean training loss of the job's last step.", job},
      {kJobSamplesPerSecond, kGauge, kCoord,
       "Training throughput of the job over its recent steps, samples per second.", job},
      {kJobLearningRate, kGauge, kCoord, "Learning rate of the job's last update.", job},
      {kJobGradientNorm, kGauge, kCoord,
       "L2 norm of the job's gradient in its last step (all stages; absent until every stage "
       "measured it).",
       job},
      {kJobTestAccuracy, kGauge, kCoord,
       "Accuracy of the job's last test-set evaluation, in [0, 1].", job},
      {kJobTestLoss, kGauge, kCoord, "Loss of the job's last test-set evaluation.", job},
      {kJobValidationLoss, kGauge, kCoord,
       "Text datasets: mean per-token cross-entropy of the job's last evaluation on the "
       "validation split, in nats.",
       job},
      // Not "_bits_per_byte": promtool's lint takes "bits" for a unit and wants bytes.
      {kJobValidationBpb, kGauge, kCoord,
       "Text datasets: the job's last validation loss in bits per byte (bpb: loss / ln 2).", job},
      {kJobEtaSeconds, kGauge, kCoord, "Estimated seconds until the job's last step.", job},
      {kJobLastStepTimestamp, kGauge, kCoord,
       "When the job's last step completed, Unix seconds (when it started RUNNING, before its "
       "first step).",
       job},
      // dapple-coordinator: per job, stage and replica, from the ranks' per-step reports; only
      // while the job is RUNNING.
      {kStageStep, kGauge, kCoord, "The step the rank's last report describes, 1-based.", stage},
      {kStageStepSeconds, kGauge, kCoord, "Wall time of the rank's last step, seconds.", stage},
      {kStageForwardSeconds, kGauge, kCoord,
       "Seconds the rank spent in forward actions during its last step.", stage},
      {kStageBackwardSeconds, kGauge, kCoord,
       "Seconds the rank spent in backward actions during its last step.", stage},
      {kStageIdleSeconds, kGauge, kCoord,
       "Seconds the rank waited for its neighbours during its last step (the bubble).", stage},
      {kStageCommSeconds, kGauge, kCoord,
       "Seconds the rank spent sending activations and gradients during its last step.", stage},
      {kStageAllreduceSeconds, kGauge, kCoord,
       "Seconds the rank spent in gradient AllReduce among replicas during its last step.", stage},
      {kStageOptimizerSeconds, kGauge, kCoord,
       "Seconds the rank spent in the optimizer update during its last step.", stage},
      {kStageBubbleRatio, kGauge, kCoord,
       "Fraction of the rank's last step spent idle (idle seconds / step seconds).", stage},
      {kStageSamplesPerSecond, kGauge, kCoord,
       "Throughput of the rank over its recent steps, samples per second.", stage},
      {kStageGradientNorm, kGauge, kCoord,
       "L2 norm of the rank's parameter gradients in its last step.", stage},
      {kStageSkippedStepsTotal, kCounter, kCoord,
       "Steps whose update the rank skipped (a non-finite loss or gradient anywhere in the job: "
       "every rank skips it; `training.max_consecutive_skipped_steps`).",
       stage},
      {kStagePeakMemoryBytes, kGauge, kCoord,
       "Peak memory of the rank in its last step (weights, gradients, optimizer state and "
       "activations), bytes.",
       stage},
      {kStagePeakActivationBytes, kGauge, kCoord,
       "Activations the rank held at its peak in its last step, bytes.", stage},
      {kStageWeightBytes, kGauge, kCoord,
       "Parameters, gradients and optimizer state of the rank, bytes.", stage},
      {kStageAchievedTflops, kGauge, kCoord,
       "TFLOP/s the rank achieved in its last step: the model FLOPs of its forwards and "
       "backwards / their compute seconds.",
       stage},
      {kStageMfu, kGauge, kCoord,
       "Model FLOPs utilisation of the rank's last step: achieved TFLOP/s / the device's stated "
       "dense peak for the job's precision; absent where no peak is known (CPUs, unlisted GPUs).",
       stage},
      {kStagePeakInFlight, kGauge, kCoord,
       "Most micro-batches whose activations the rank held at once in its last step.", stage},
      {kStageLastStepTimestamp, kGauge, kCoord,
       "When the rank's last step report arrived, Unix seconds.", stage},
      {kStageStraggler, kGauge, kCoord,
       "1 while the rank is a straggler: its median compute per step over the last 10 steps "
       "stayed above 1.5x that of its stage's other replicas for 3 reports; else 0.",
       stage},
      // dapple-worker.
      {kWorkerInfo,
       kGauge,
       kWork,
       "1, labelled with the id this worker is registered as and its host.",
       {kLabelWorker, kLabelHostname}},
      {kWorkerBusy, kGauge, kWork, "1 while the worker runs a job's rank, 0 while idle.", {}},
      {kWorkerEmulated,
       kGauge,
       kWork,
       "1 while the rank the worker runs is on the emulated device (device_type emulated: "
       "compute is waits of profiled times), else 0.",
       {}},
      {kWorkerRank,
       kGauge,
       kWork,
       "1, labelled with the job, stage and replica the worker runs.",
       {kLabelJobId, kLabelStage, kLabelReplica}},
      {kWorkerStepsTotal, kCounter, kWork, "Training steps the worker ran.", {}},
      {kWorkerActionSecondsTotal,
       kCounter,
       kWork,
       "Seconds the worker spent in its steps by kind (forward, backward, comm, allreduce, "
       "optimizer, idle).",
       {kLabelKind}},
      {kWorkerJobsTotal,
       kCounter,
       kWork,
       "Ranks the worker finished, by outcome (done, failed, aborted).",
       {kLabelState}},
      {kWorkerPeakMemoryBytes,
       kGauge,
       kWork,
       "Peak memory of the worker's rank in its last step, bytes.",
       {}},
      {kWorkerPeakActivationBytes,
       kGauge,
       kWork,
       "Activations the worker's rank held at its peak in its last step, bytes.",
       {}},
      {kWorkerAchievedTflops,
       kGauge,
       kWork,
       "TFLOP/s the worker's rank achieved in its last step (model FLOPs / compute seconds).",
       {}},
      {kWorkerMfu,
       kGauge,
       kWork,
       "Model FLOPs utilisation of the worker's rank in its last step; absent where the device "
       "has no stated peak.",
       {}},
      {kWorkerLastStepTimestamp,
       kGauge,
       kWork,
       "When the worker's last step completed, Unix seconds.",
       {}},
      {kWorkerCheckpointSavesTotal,
       kCounter,
       kWork,
       "Checkpoint shards the worker's ranks began to save (replica 0 of each stage).",
       {}},
      {kWorkerCheckpointStallSecondsTotal,
       kCounter,
       kWork,
       "Seconds the worker's training loop was blocked by checkpoint saves: the snapshot copy, "
       "a wait for the previous save still being written, and with --sync-checkpoints the "
       "write; divided by dapple_worker_checkpoint_saves_total, the mean stall per checkpoint.",
       {}},
      {kWorkerCheckpointLastStallRatio,
       kGauge,
       kWork,
       "The last checkpoint's stall of the training loop divided by the time of the step before "
       "it.",
       {}},
      {kWorkerCheckpointShardLoadsTotal,
       kCounter,
       kWork,
       "Checkpoint shards the worker's ranks resumed from, by source (memory: the worker's "
       "in-memory copy of its newest shard; disk: the file).",
       {kLabelSource}},
  };
}

}  // namespace

const std::vector<MetricDef>& MetricList() {
  static const std::vector<MetricDef>* const list = new std::vector<MetricDef>(Build());
  return *list;
}

const MetricDef* FindMetric(absl::string_view name) {
  for (const MetricDef& def : MetricList()) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
  }
  return "unknown";
}

const char* BinaryName(Binary binary) {
  switch (binary) {
    case Binary::kCoordinator:
      return "coordinator";
    case Binary::kWorker:
      return "worker";
  }
  return "unknown";
}

std::string MetricTableMarkdown(Binary binary) {
  std::string out = "| metric | type | labels | meaning |\n|---|---|---|---|\n";
  for (const MetricDef& def : MetricList()) {
    if (def.binary != binary) continue;
    absl::StrAppend(&out, "| `", def.name, "` | ", MetricTypeName(def.type), " | ",
                    absl::StrJoin(def.labels, ", "), " | ", def.help, " |\n");
  }
  return out;
}

}  // namespace dapple::metrics
