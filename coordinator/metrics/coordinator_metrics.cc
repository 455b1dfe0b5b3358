#include "coordinator/metrics/coordinator_metrics.h"

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/metric_list.h"
#include "coordinator/jobs/job_lifecycle.h"

namespace dapple::coordinator {
namespace {

namespace m = ::dapple::metrics;

constexpr v1::JobState kJobStates[] = {v1::JOB_STATE_PENDING,   v1::JOB_STATE_PLANNING,
                                       v1::JOB_STATE_RUNNING,   v1::JOB_STATE_RESTARTING,
                                       v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,
                                       v1::JOB_STATE_CANCELLED};
// JobRestart.cause values (coordinator/jobs/restart_policy.h FailureCauseName) that restart.
constexpr const char* kRestartCauses[] = {"worker_lost", "rank_error"};
constexpr v1::WorkerState kWorkerStates[] = {v1::WORKER_STATE_IDLE, v1::WORKER_STATE_BUSY,
                                             v1::WORKER_STATE_DEAD};

// The per-job series besides dapple_job_state.
constexpr const char* kJobProgress[] = {m::kJobStep,
                                        m::kJobTotalSteps,
                                        m::kJobEpoch,
                                        m::kJobLoss,
                                        m::kJobSamplesPerSecond,
                                        m::kJobLearningRate,
                                        m::kJobGradientNorm,
                                        m::kJobTestAccuracy,
                                        m::kJobTestLoss,
                                        m::kJobValidationLoss,
                                        m::kJobValidationBpb,
                                        m::kJobEtaSeconds,
                                        m::kJobLastStepTimestamp};
constexpr const char* kStageSeries[] = {m::kStageStep,
                                        m::kStageStepSeconds,
                                        m::kStageForwardSeconds,
                                        m::kStageBackwardSeconds,
                                        m::kStageIdleSeconds,
                                        m::kStageCommSeconds,
                                        m::kStageAllreduceSeconds,
                                        m::kStageOptimizerSeconds,
                                        m::kStageBubbleRatio,
                                        m::kStageSamplesPerSecond,
                                        m::kStageGradientNorm,
                                        m::kStageSkippedStepsTotal,
                                        m::kStagePeakMemoryBytes,
                                        m::kStageAchievedTflops,
                                        m::kStageMfu,
                                        m::kStagePeakActivationBytes,
                                        m::kStageWeightBytes,
                                        m::kStagePeakInFlight,
                                        m::kStageLastStepTimestamp,
                                        m::kStageStraggler};

std::string LowerSuffix(const std::string& enum_name, absl::string_view prefix) {
  if (!absl::StartsWith(enum_name, prefix)) return "unspecified";
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

// The `tenant` label of a job's series: its tenant, "_admin" for an admin's job.
std::string TenantLabel(const v1::Job& job) {
  return job.tenant().empty() ? std::string(scheduling::kAdminTenantLabel) : job.tenant();
}

}  // namespace

std::string JobStateLabel(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "unspecified";
  return LowerSuffix(v1::JobState_Name(state), "JOB_STATE_");
}

std::string WorkerStateLabel(v1::WorkerState state) {
  if (state == v1::WORKER_STATE_UNSPECIFIED) return "unspecified";
  return LowerSuffix(v1::WorkerState_Name(state), "WORKER_STATE_");
}

CoordinatorMetrics::CoordinatorMetrics(CoordinatorMetricsOptions options)
    : options_(std::move(options)), set_(std::make_shared<m::MetricSet>(m::Binary::kCoordinator)) {
  // Every cluster-wide series exists from the start at 0, so a first failure is an increase
  // from 0 (increase() needs two samples) and dashboards show 0 rather than "no data".
  for (v1::JobState s : kJobStates) {
    set_->Gauge(m::kJobs, {{m::kLabelState, JobStateLabel(s)}}).Set(0);
    if (IsTerminal(s)) set_->Counter(m::kJobsFinishedTotal, {{m::kLabelState, JobStateLabel(s)}});
  }
  set_->Gauge(m::kJobQueueLength).Set(0);
  for (const char* reason : {"missing", "malformed", "unknown", "revoked", "expired"}) {
    set_->Counter(m::kAuthFailuresTotal, {{m::kLabelReason, reason}});
  }
  for (const char* cause : kRestartCauses)
    set_->Counter(m::kJobRestartsTotal, {{m::kLabelCause, cause}});
  for (v1::WorkerState s : kWorkerStates) {
    set_->Gauge(m::kWorkers, {{m::kLabelState, WorkerStateLabel(s)}}).Set(0);
  }
  // The set lives as long as the HTTP server may call it; `this` must outlive the server
  // (main destroys the server first).
  set_->SetBeforeCollect([this] { ExpireEndedJobs(); });
}

CoordinatorMetrics::~CoordinatorMetrics() { set_->SetBeforeCollect(nullptr); }

prometheus::Labels CoordinatorMetrics::JobLabels(const std::string& id,
                                                 const std::string& name) const {
  return {{m::kLabelJobId, id}, {m::kLabelJobName, name}};
}

void CoordinatorMetrics::CountJobLocked(v1::JobState state, int delta) {
  const int64_t n = job_counts_[state] += delta;
  set_->Gauge(m::kJobs, {{m::kLabelState, JobStateLabel(state)}}).Set(static_cast<double>(n));
  if (state == v1::JOB_STATE_PENDING) set_->Gauge(m::kJobQueueLength).Set(static_cast<double>(n));
}

void CoordinatorMetrics::SetJobStateLocked(const std::string& id, Exported& e) {
  for (v1::JobState s : kJobStates) {
    prometheus::Labels labels = JobLabels(id, e.name);
    labels[m::kLabelState] = JobStateLabel(s);
    set_->Gauge(m::kJobState, labels).Set(s == e.state ? 1 : 0);
  }
}

void CoordinatorMetrics::OnJobState(const v1::Job& job, v1::JobState from) {
  absl::MutexLock lock(&mu_);
  const v1::JobState to = job.state();
  // The stored state, not `from`, is what the gauges counted: they stay exact whatever order
  // or repetition the calls come in.
  auto known = job_states_.find(job.id());
  const bool appeared = known == job_states_.end();
  if (!appeared) CountJobLocked(known->second, -1);
  job_states_[job.id()] = to;
  CountJobLocked(to, +1);
  // From 0 as soon as the tenant has a job, so that its first failure is an increase.
  if (appeared) set_->Counter(m::kCheckpointFailuresTotal, {{m::kLabelTenant, TenantLabel(job)}});
  const bool ended = IsTerminal(to);
  if (ended && !appeared && !IsTerminal(from)) {
    set_->Counter(m::kJobsFinishedTotal, {{m::kLabelState, JobStateLabel(to)}}).Increment();
  }
  if (to == v1::JOB_STATE_RESTARTING && from == v1::JOB_STATE_RUNNING &&
      !job.restart_history().empty()) {
    set_->Counter(m::kJobRestartsTotal, {{m::kLabelCause, job.restart_history().rbegin()->cause()}})
        .Increment();
  }

  auto it = exported_.find(job.id());
  if (it == exported_.end()) {
    // A job loaded in a final state is shown only while its end is recent.
    if (ended &&
        options_.now_unix_ms() - job.updated_unix_ms() >= options_.ended_job_retention_ms) {
      return;
    }
    it = exported_.emplace(job.id(), Exported{}).first;
    it->second.name = job.name();
  }
  Exported& e = it->second;
  e.state = to;
  SetJobStateLocked(job.id(), e);
  if (to == v1::JOB_STATE_RUNNING) {
    e.ran = true;
    // Until the first step the "last step" is the start, so a job that never gets going is
    // seen as stuck too.
    e.last_step = job.metrics().step();
    set_->Gauge(m::kJobLastStepTimestamp, JobLabels(job.id(), e.name))
        .Set(static_cast<double>(options_.now_unix_ms()) / 1000.0);
  }
  if (e.ran) SetProgressLocked(job, e);
  if (ended) {
    e.ended_unix_ms = job.updated_unix_ms() > 0 ? job.updated_unix_ms() : options_.now_unix_ms();
    RemoveStagesLocked(job.id(), e);
  } else if (to == v1::JOB_STATE_RUNNING) {
    SetStagesLocked(job, e);
  }
}

void CoordinatorMetrics::OnJobUpdate(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  auto it = exported_.find(job.id());
  if (it == exported_.end() || job.state() != v1::JOB_STATE_RUNNING) return;
  Exported& e = it->second;
  e.ran = true;
  SetProgressLocked(job, e);
  SetStagesLocked(job, e);
}

void CoordinatorMetrics::SetProgressLocked(const v1::Job& job, Exported& e) {
  const prometheus::Labels labels = JobLabels(job.id(), e.name);
  const v1::JobMetrics& jm = job.metrics();
  set_->Gauge(m::kJobStep, labels).Set(static_cast<double>(jm.step()));
  set_->Gauge(m::kJobTotalSteps, labels).Set(static_cast<double>(jm.total_steps()));
  set_->Gauge(m::kJobEpoch, labels).Set(jm.epoch());
  set_->Gauge(m::kJobSamplesPerSecond, labels).Set(jm.samples_per_second());
  set_->Gauge(m::kJobEtaSeconds, labels).Set(jm.eta_seconds());
  if (jm.step() > 0) set_->Gauge(m::kJobLoss, labels).Set(jm.loss());
  if (jm.has_test_accuracy()) set_->Gauge(m::kJobTestAccuracy, labels).Set(jm.test_accuracy());
  if (jm.has_test_loss()) set_->Gauge(m::kJobTestLoss, labels).Set(jm.test_loss());
  if (jm.has_validation_loss()) {
    set_->Gauge(m::kJobValidationLoss, labels).Set(jm.validation_loss());
  }
  if (jm.has_validation_bits_per_byte()) {
    set_->Gauge(m::kJobValidationBpb, labels).Set(jm.validation_bits_per_byte());
  }
  if (jm.step() > e.last_step) {
    e.last_step = jm.step();
    set_->Gauge(m::kJobLastStepTimestamp, labels)
        .Set(static_cast<double>(options_.now_unix_ms()) / 1000.0);
  }
  // The rate the ranks last used; the spec's (constant) rate until a rank reported one.
  double lr = job.spec().training().optimizer().lr();
  double sq_norm = 0;
  int measured = 0, unmeasured = 0;
  for (const v1::StageMetrics& sm : job.stage_metrics()) {
    if (sm.last().step() <= 0) continue;
    if (sm.last().learning_rate() > 0) lr = sm.last().learning_rate();
    if (sm.last().gradient_sq_norm() >= 0) {
      sq_norm += sm.last().gradient_sq_norm();
      ++measured;
    } else {
      ++unmeasured;
    }
  }
  set_->Gauge(m::kJobLearningRate, labels).Set(lr);
  // The job's norm needs every stage's share (the square root of the sum over stages).
  if (measured > 0 && unmeasured == 0) {
    set_->Gauge(m::kJobGradientNorm, labels).Set(std::sqrt(sq_norm));
  }
}

void CoordinatorMetrics::SetStagesLocked(const v1::Job& job, Exported& e) {
  std::set<StageKey> present;
  for (const v1::StageMetrics& sm : job.stage_metrics()) {
    const v1::StageStepStats& st = sm.last();
    if (st.step() <= 0) continue;  // nothing measured yet
    const StageKey key{sm.stage(), sm.replica(), sm.worker_id()};
    present.insert(key);
    prometheus::Labels labels = JobLabels(job.id(), e.name);
    labels[m::kLabelStage] = absl::StrCat(sm.stage());
    labels[m::kLabelReplica] = absl::StrCat(sm.replica());
    labels[m::kLabelWorker] = sm.worker_id();
    set_->Gauge(m::kStageStep, labels).Set(static_cast<double>(st.step()));
    set_->Gauge(m::kStageStepSeconds, labels).Set(st.step_seconds());
    set_->Gauge(m::kStageForwardSeconds, labels).Set(st.forward_seconds());
    set_->Gauge(m::kStageBackwardSeconds, labels).Set(st.backward_seconds());
    set_->Gauge(m::kStageIdleSeconds, labels).Set(st.idle_seconds());
    set_->Gauge(m::kStageCommSeconds, labels).Set(st.comm_seconds());
    set_->Gauge(m::kStageAllreduceSeconds, labels).Set(st.allreduce_seconds());
    set_->Gauge(m::kStageOptimizerSeconds, labels).Set(st.optimizer_seconds());
    set_->Gauge(m::kStageBubbleRatio, labels)
        .Set(st.step_seconds() > 0 ? st.idle_seconds() / st.step_seconds() : 0);
    set_->Gauge(m::kStageSamplesPerSecond, labels).Set(sm.samples_per_second());
    if (st.gradient_sq_norm() >= 0) {
      set_->Gauge(m::kStageGradientNorm, labels).Set(std::sqrt(st.gradient_sq_norm()));
    }
    // StageMetrics carries the running total; the counter takes the increase.
    int64_t& counted = e.stages[key];
    prometheus::Counter& skipped = set_->Counter(m::kStageSkippedStepsTotal, labels);
    if (sm.skipped_steps() > counted) {
      skipped.Increment(static_cast<double>(sm.skipped_steps() - counted));
      counted = sm.skipped_steps();
    }
    set_->Gauge(m::kStagePeakMemoryBytes, labels).Set(static_cast<double>(st.peak_memory_bytes()));
    set_->Gauge(m::kStagePeakActivationBytes, labels)
        .Set(static_cast<double>(st.peak_activation_bytes()));
    set_->Gauge(m::kStageWeightBytes, labels).Set(static_cast<double>(st.weight_bytes()));
    set_->Gauge(m::kStagePeakInFlight, labels).Set(st.peak_in_flight());
    set_->Gauge(m::kStageAchievedTflops, labels).Set(st.achieved_tflops());
    if (st.has_mfu()) {
      set_->Gauge(m::kStageMfu, labels).Set(st.mfu());
    } else {
      set_->Remove(m::kStageMfu, labels);
    }
    set_->Gauge(m::kStageLastStepTimestamp, labels)
        .Set(static_cast<double>(sm.last_step_unix_ms()) / 1000.0);
    set_->Gauge(m::kStageStraggler, labels).Set(sm.straggler() ? 1 : 0);
  }
  // A rank that is no longer listed (its worker replaced) loses its series.
  for (auto it = e.stages.begin(); it != e.stages.end();) {
    if (present.count(it->first)) {
      ++it;
      continue;
    }
    prometheus::Labels labels = JobLabels(job.id(), e.name);
    labels[m::kLabelStage] = absl::StrCat(std::get<0>(it->first));
    labels[m::kLabelReplica] = absl::StrCat(std::get<1>(it->first));
    labels[m::kLabelWorker] = std::get<2>(it->first);
    for (const char* name : kStageSeries) set_->Remove(name, labels);
    it = e.stages.erase(it);
  }
}

void CoordinatorMetrics::RemoveStagesLocked(const std::string& id, Exported& e) {
  for (const auto& [key, counted] : e.stages) {
    prometheus::Labels labels = JobLabels(id, e.name);
    labels[m::kLabelStage] = absl::StrCat(std::get<0>(key));
    labels[m::kLabelReplica] = absl::StrCat(std::get<1>(key));
    labels[m::kLabelWorker] = std::get<2>(key);
    for (const char* name : kStageSeries) set_->Remove(name, labels);
  }
  e.stages.clear();
}

void CoordinatorMetrics::RemoveJobLocked(const std::string& id, Exported& e) {
  RemoveStagesLocked(id, e);
  const prometheus::Labels labels = JobLabels(id, e.name);
  for (const char* name : kJobProgress) set_->Remove(name, labels);
  for (v1::JobState s : kJobStates) {
    prometheus::Labels with_state = labels;
    with_state[m::kLabelState] = JobStateLabel(s);
    set_->Remove(m::kJobState, with_state);
  }
}

void CoordinatorMetrics::OnJobEvent(const v1::Job& job, JobEventReason reason) {
  if (reason != JobEventReason::kCheckpointFailed) return;
  absl::MutexLock lock(&mu_);
  set_->Counter(m::kCheckpointFailuresTotal, {{m::kLabelTenant, TenantLabel(job)}}).Increment();
}

void CoordinatorMetrics::OnAuthFailure(absl::string_view reason) {
  set_->Counter(m::kAuthFailuresTotal, {{m::kLabelReason, std::string(reason)}}).Increment();
}

void CoordinatorMetrics::ExpireEndedJobs() {
  absl::MutexLock lock(&mu_);
  const int64_t now = options_.now_unix_ms();
  for (auto it = exported_.begin(); it != exported_.end();) {
    Exported& e = it->second;
    if (e.ended_unix_ms > 0 && now - e.ended_unix_ms >= options_.ended_job_retention_ms) {
      RemoveJobLocked(it->first, e);
      it = exported_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinatorMetrics::CountWorkerLocked(v1::WorkerState state, int delta) {
  const int64_t n = worker_counts_[state] += delta;
  set_->Gauge(m::kWorkers, {{m::kLabelState, WorkerStateLabel(state)}}).Set(static_cast<double>(n));
}

void CoordinatorMetrics::SetWorkerSeriesLocked(const v1::WorkerInfo& worker) {
  for (v1::WorkerState s : kWorkerStates) {
    set_->Gauge(m::kWorkerState, {{m::kLabelWorker, worker.id()},
                                  {m::kLabelHostname, worker.hostname()},
                                  {m::kLabelState, WorkerStateLabel(s)}})
        .Set(s == worker.state() ? 1 : 0);
  }
}

void CoordinatorMetrics::RemoveWorkerSeriesLocked(const std::string& id,
                                                  const std::string& hostname) {
  for (v1::WorkerState s : kWorkerStates) {
    set_->Remove(m::kWorkerState, {{m::kLabelWorker, id},
                                   {m::kLabelHostname, hostname},
                                   {m::kLabelState, WorkerStateLabel(s)}});
  }
}

void CoordinatorMetrics::OnWorkerState(const v1::WorkerInfo& worker, v1::WorkerState from) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker.id());
  if (it != workers_.end()) {
    CountWorkerLocked(it->second.state, -1);
    // A name that came back from another host keeps no series of the old one.
    if (it->second.hostname != worker.hostname()) {
      RemoveWorkerSeriesLocked(worker.id(), it->second.hostname);
    }
  }
  workers_[worker.id()] = WorkerSeen{worker.hostname(), worker.state()};
  CountWorkerLocked(worker.state(), +1);
  SetWorkerSeriesLocked(worker);
}

void CoordinatorMetrics::OnWorkerRemoved(const v1::WorkerInfo& worker) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker.id());
  if (it == workers_.end()) return;
  CountWorkerLocked(it->second.state, -1);
  RemoveWorkerSeriesLocked(worker.id(), it->second.hostname);
  workers_.erase(it);
}

void CoordinatorMetrics::OnSchedulingPass(
    const std::map<std::string, scheduling::TenantSchedulingState>& tenants, int64_t now_unix_ms) {
  namespace m = metrics;
  static constexpr scheduling::PendingReason kReasons[] = {
      scheduling::PendingReason::kMisconfigured,
      scheduling::PendingReason::kExceedsMaximum,
      scheduling::PendingReason::kWaitingForQuota,
      scheduling::PendingReason::kWaitingForDevices,
      scheduling::PendingReason::kWaitingForPreemption,
      scheduling::PendingReason::kBeingMeasured};
  absl::MutexLock lock(&mu_);
  const double waited_s =
      last_pass_unix_ms_ > 0 ? std::max<int64_t>(0, now_unix_ms - last_pass_unix_ms_) / 1000.0 : 0;
  last_pass_unix_ms_ = now_unix_ms;
  // Tenants seen before and absent now read 0.
  std::map<std::string, scheduling::TenantSchedulingState> all = tenants;
  for (const auto& [tenant, types] : tenant_types_) {
    scheduling::TenantSchedulingState& t = all[tenant];
    for (const std::string& type : types) t.devices[type];
  }
  for (auto& [tenant, t] : all) {
    // Every type of the tenant's quota or use reads its wait, 0 when no job waits within quota.
    for (const auto& [type, queued] : t.oldest_within_quota_unix_ms) t.devices[type];
    for (const auto& [type, u] : t.devices) {
      const prometheus::Labels labels = {{m::kLabelTenant, tenant}, {m::kLabelDeviceType, type}};
      set_->Gauge(m::kTenantNominalDevices, labels).Set(static_cast<double>(u.nominal));
      set_->Gauge(m::kTenantInUseDevices, labels).Set(static_cast<double>(u.in_use));
      set_->Gauge(m::kTenantBorrowedDevices, labels).Set(static_cast<double>(u.borrowed));
      set_->Gauge(m::kTenantLentDevices, labels).Set(static_cast<double>(u.lent));
      auto queued = t.oldest_within_quota_unix_ms.find(type);
      set_->Gauge(m::kTenantWithinQuotaWaitSeconds, labels)
          .Set(queued == t.oldest_within_quota_unix_ms.end()
                   ? 0.0
                   : std::max<int64_t>(0, now_unix_ms - queued->second) / 1000.0);
      tenant_types_[tenant].insert(type);
    }
    for (scheduling::PendingReason r : kReasons) {
      const char* name = scheduling::PendingReasonName(r);
      auto n = t.pending_by_reason.find(name);
      set_->Gauge(m::kTenantPendingJobs, {{m::kLabelTenant, tenant}, {m::kLabelReason, name}})
          .Set(n == t.pending_by_reason.end() ? 0 : n->second);
    }
    set_->Counter(m::kTenantWaitedDeviceSecondsTotal, {{m::kLabelTenant, tenant}})
        .Increment(static_cast<double>(t.pending_devices) * waited_s);
    tenant_types_[tenant];
  }
}

void CoordinatorMetrics::OnPreempted(const std::string& tenant, const std::string& kind) {
  namespace m = metrics;
  absl::MutexLock lock(&mu_);
  set_->Counter(m::kTenantPreemptionsTotal, {{m::kLabelTenant, tenant}, {m::kLabelReason, kind}})
      .Increment();
}

}  // namespace dapple::coordinator
