// THE list of every Prometheus metric dapple exports: name, type, help, label names and the
// binary that exports it (docs/operations.md, "Metrics, alerts and dashboards", is generated
// from it and checked against it by metric_list_test.cc). Code refers to a metric through the
// name constants below; MetricSet (metric_set.h) builds the families from the table, so a
// metric cannot be exported without being declared here.
//
// Naming (https://prometheus.io/docs/practices/naming/): every name starts with `dapple_`,
// counters end in `_total`, durations are in seconds (`_seconds`), sizes in bytes (`_bytes`),
// fractions in [0, 1] end in `_ratio`, timestamps are Unix seconds (`_timestamp_seconds`).
// The job label is `job_id`, never `job`: Prometheus attaches its own `job` label (the scrape
// job) to every series and would rename ours to `exported_job`.
//
// Thread safety: the table is immutable after first use.
#ifndef DAPPLE_COMMON_METRICS_METRIC_LIST_H_
#define DAPPLE_COMMON_METRICS_METRIC_LIST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dapple::metrics {

enum class MetricType { kCounter, kGauge };
enum class Binary { kCoordinator, kWorker };

struct MetricDef {
  std::string name;
  MetricType type;
  Binary binary;
  std::string help;                 // one sentence, with the unit where there is one
  std::vector<std::string> labels;  // label names, in the order the docs list them
};

// Every metric of both binaries, coordinator first, in documentation order.
const std::vector<MetricDef>& MetricList();

// The entry named `name`, or nullptr.
const MetricDef* FindMetric(absl::string_view name);

// "counter" / "gauge"; "coordinator" / "worker".
const char* MetricTypeName(MetricType type);
const char* BinaryName(Binary binary);

// The metrics of `binary` as a Markdown table (name, type, labels, help), as docs/operations.md
// lists them; metric_list_test.cc checks that the document contains it.
std::string MetricTableMarkdown(Binary binary);

// Label names.
inline constexpr char kLabelState[] = "state";
inline constexpr char kLabelJobId[] = "job_id";
inline constexpr char kLabelJobName[] = "job_name";
inline constexpr char kLabelStage[] = "stage";
inline constexpr char kLabelReplica[] = "replica";
inline constexpr char kLabelWorker[] = "worker";
inline constexpr char kLabelHostname[] = "hostname";
inline constexpr char kLabelKind[] = "kind";
inline constexpr char kLabelCause[] = "cause";
inline constexpr char kLabelReason[] = "reason";
inline constexpr char kLabelSource[] = "source";
inline constexpr char kLabelTenant[] = "tenant";
inline constexpr char kLabelDeviceType[] = "device_type";

// --- dapple-coordinator: cluster ---
inline constexpr char kJobs[] = "dapple_jobs";
inline constexpr char kJobQueueLength[] = "dapple_job_queue_length";
inline constexpr char kJobsFinishedTotal[] = "dapple_jobs_finished_total";
inline constexpr char kJobRestartsTotal[] = "dapple_job_restarts_total";
inline constexpr char kAuthFailuresTotal[] = "dapple_auth_failures_total";
inline constexpr char kWorkers[] = "dapple_workers";
inline constexpr char kWorkerState[] = "dapple_worker_state";
// --- dapple-coordinator: per tenant (docs/scheduling.md) ---
inline constexpr char kTenantNominalDevices[] = "dapple_tenant_nominal_devices";
inline constexpr char kTenantInUseDevices[] = "dapple_tenant_in_use_devices";
inline constexpr char kTenantBorrowedDevices[] = "dapple_tenant_borrowed_devices";
inline constexpr char kTenantLentDevices[] = "dapple_tenant_lent_devices";
inline constexpr char kTenantPendingJobs[] = "dapple_tenant_pending_jobs";
inline constexpr char kTenantWaitedDeviceSecondsTotal[] =
    "dapple_tenant_waited_device_seconds_total";
inline constexpr char kTenantPreemptionsTotal[] = "dapple_tenant_preemptions_total";
inline constexpr char kTenantWithinQuotaWaitSeconds[] = "dapple_tenant_within_quota_wait_seconds";
inline constexpr char kCheckpointFailuresTotal[] = "dapple_checkpoint_failures_total";
// --- dapple-coordinator: per job ---
inline constexpr char kJobState[] = "dapple_job_state";
inline constexpr char kJobStep[] = "dapple_job_step";
inline constexpr char kJobTotalSteps[] = "dapple_job_total_steps";
inline constexpr char kJobEpoch[] = "dapple_job_epoch";
inline constexpr char kJobLoss[] = "dapple_job_loss";
inline constexpr char kJobSamplesPerSecond[] = "dapple_job_samples_per_second";
inline constexpr char kJobLearningRate[] = "dapple_job_learning_rate";
inline constexpr char kJobGradientNorm[] = "dapple_job_gradient_norm";
inline constexpr char kJobTestAccuracy[] = "dapple_job_test_accuracy_ratio";
inline constexpr char kJobTestLoss[] = "dapple_job_test_loss";
inline constexpr char kJobValidationLoss[] = "dapple_job_validation_loss";
inline constexpr char kJobValidationBpb[] = "dapple_job_validation_bpb";
inline constexpr char kJobEtaSeconds[] = "dapple_job_eta_seconds";
inline constexpr char kJobLastStepTimestamp[] = "dapple_job_last_step_timestamp_seconds";
// --- dapple-coordinator: per job, stage and replica (Job.stage_metrics) ---
inline constexpr char kStageStep[] = "dapple_stage_step";
inline constexpr char kStageStepSeconds[] = "dapple_stage_step_seconds";
inline constexpr char kStageForwardSeconds[] = "dapple_stage_forward_seconds";
inline constexpr char kStageBackwardSeconds[] = "dapple_stage_backward_seconds";
inline constexpr char kStageIdleSeconds[] = "dapple_stage_idle_seconds";
inline constexpr char kStageCommSeconds[] = "dapple_stage_comm_seconds";
inline constexpr char kStageAllreduceSeconds[] = "dapple_stage_allreduce_seconds";
inline constexpr char kStageOptimizerSeconds[] = "dapple_stage_optimizer_seconds";
inline constexpr char kStageBubbleRatio[] = "dapple_stage_bubble_ratio";
inline constexpr char kStageSamplesPerSecond[] = "dapple_stage_samples_per_second";
inline constexpr char kStageGradientNorm[] = "dapple_stage_gradient_norm";
inline constexpr char kStageSkippedStepsTotal[] = "dapple_stage_skipped_steps_total";
inline constexpr char kStagePeakMemoryBytes[] = "dapple_stage_peak_memory_bytes";
inline constexpr char kStagePeakActivationBytes[] = "dapple_stage_peak_activation_bytes";
inline constexpr char kStageWeightBytes[] = "dapple_stage_weight_bytes";
inline constexpr char kStageAchievedTflops[] = "dapple_stage_achieved_tflops";
inline constexpr char kStageMfu[] = "dapple_stage_mfu_ratio";
inline constexpr char kStagePeakInFlight[] = "dapple_stage_peak_in_flight_micro_batches";
inline constexpr char kStageLastStepTimestamp[] = "dapple_stage_last_step_timestamp_seconds";
inline constexpr char kStageStraggler[] = "dapple_stage_straggler";
// --- dapple-worker ---
inline constexpr char kWorkerInfo[] = "dapple_worker_info";
inline constexpr char kWorkerBusy[] = "dapple_worker_busy";
inline constexpr char kWorkerEmulated[] = "dapple_worker_emulated";
inline constexpr char kWorkerRank[] = "dapple_worker_rank";
inline constexpr char kWorkerStepsTotal[] = "dapple_worker_steps_total";
inline constexpr char kWorkerActionSecondsTotal[] = "dapple_worker_action_seconds_total";
inline constexpr char kWorkerJobsTotal[] = "dapple_worker_jobs_total";
inline constexpr char kWorkerPeakMemoryBytes[] = "dapple_worker_peak_memory_bytes";
inline constexpr char kWorkerPeakActivationBytes[] = "dapple_worker_peak_activation_bytes";
inline constexpr char kWorkerAchievedTflops[] = "dapple_worker_achieved_tflops";
inline constexpr char kWorkerMfu[] = "dapple_worker_mfu_ratio";
inline constexpr char kWorkerLastStepTimestamp[] = "dapple_worker_last_step_timestamp_seconds";
inline constexpr char kWorkerCheckpointSavesTotal[] = "dapple_worker_checkpoint_saves_total";
inline constexpr char kWorkerCheckpointStallSecondsTotal[] =
    "dapple_worker_checkpoint_stall_seconds_total";
inline constexpr char kWorkerCheckpointLastStallRatio[] =
    "dapple_worker_checkpoint_last_stall_ratio";
inline constexpr char kWorkerCheckpointShardLoadsTotal[] =
    "dapple_worker_checkpoint_shard_loads_total";

}  // namespace dapple::metrics

#endif  // DAPPLE_COMMON_METRICS_METRIC_LIST_H_
