// CoordinatorService's scheduling (docs/scheduling.md): each pass builds the policy's snapshot
// of the queued and admitted jobs and the idle workers, asks the SchedulingManager
// (coordinator/scheduling/scheduling_manager.h) what to admit and preempt and why each other
// job waits, and applies it: preemption checkpoints first, then stops the job and queues it
// again (it resumes from that checkpoint when admitted again); admission starts the job on idle
// workers (StartJobLocked). Also the admin handlers for quotas (admin.proto SetTenantQuota,
// SetCohort, ListTenants' usage). Same class, same lock rules (coordinator_service.h).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec_internal.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/jobs/event_recorder.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {
namespace {

using scheduling::PendingReason;
using scheduling::PendingReasonName;

absl::Status CheckAdmin(const auth::Identity& caller) {
  if (caller.role != auth::Role::kAdmin) return absl::PermissionDeniedError("admin only");
  return absl::OkStatus();
}

// admin.proto Tenant.name: 1-63 of [a-z0-9-], starting with a letter.
absl::Status CheckTenantName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 63 && absl::ascii_islower(name[0]) &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tenant '", name.substr(0, 80),
                   "' is not a tenant name: 1-63 of a-z, 0-9 and '-', starting with a letter"));
}

}  // namespace

const scheduling::SchedulingManager& CoordinatorService::ManagerLocked() {
  if (manager_ == nullptr) {
    absl::StatusOr<scheduling::SchedulingManager> m =
        scheduling::SchedulingManager::Create(quotas_->Config(options_.starvation_after_ms));
    if (!m.ok()) {
      // Stored quotas were validated when set; only a database edited by hand gets here.
      DAPPLE_LOG_ERROR("tenants' quotas are invalid, scheduling without them: {}",
                       m.status().message());
      scheduling::SchedulingConfig none;
      none.starvation_after_ms = options_.starvation_after_ms;
      m = scheduling::SchedulingManager::Create(none);
    }
    manager_ = std::make_unique<scheduling::SchedulingManager>(*std::move(m));
  }
  return *manager_;
}

std::map<std::string, int> CoordinatorService::StoppingRanksLocked(int64_t now) {
  std::map<std::string, int> busy;
  for (const v1::WorkerInfo& w : workers_.List()) {
    if (w.state() == v1::WORKER_STATE_BUSY &&
        now - w.last_heartbeat_unix_ms() < kStoppingHeartbeats * options_.heartbeat_interval_ms) {
      ++busy[w.job_id()];
    }
  }
  return busy;
}

scheduling::ClusterState CoordinatorService::ClusterStateLocked(int64_t now) {
  scheduling::ClusterState state;
  state.now_unix_ms = now;
  const std::map<std::string, int> busy = StoppingRanksLocked(now);
  std::set<std::string> types;
  auto add = [&](const v1::Job& job) -> scheduling::Workload& {
    scheduling::Workload& w = state.workloads.emplace_back();
    w.id = job.id();
    w.tenant = job.tenant();
    w.priority = job.spec().priority();
    const std::string type = scheduling::DeviceTypeKey(job.spec().parallel().device_type());
    w.devices[type] = WorkersNeeded(job);
    types.insert(type);
    auto requeued = requeued_at_.find(job.id());
    w.queued_unix_ms = requeued != requeued_at_.end() ? requeued->second : job.created_unix_ms();
    return w;
  };
  for (const std::string& id : jobs_->PendingIds()) {
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok()) continue;
    scheduling::Workload& w = add(*job);
    if (busy.contains(id)) {
      // Preempted, its ranks still stopping: it holds their devices until they are gone.
      w.admitted = true;
      w.stopping = true;
      continue;
    }
    auto measuring = measuring_.find(id);
    w.measuring =
        measuring != measuring_.end() &&
        options_.profile_cache->StateOf(measuring->second.key) == ProfileCache::State::kPending;
  }
  for (const auto& [id, run] : running_) {
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok() || job->state() != v1::JOB_STATE_RUNNING) continue;
    scheduling::Workload& w = add(*job);
    w.admitted = true;
    w.admitted_unix_ms = run.admitted_unix_ms;
    w.stopping = preempting_.contains(id);
  }
  // A restarting job takes idle workers again in the restart pass: its quota stays its own.
  for (const auto& [id, wait] : restarting_) {
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok() || job->state() != v1::JOB_STATE_RESTARTING) continue;
    scheduling::Workload& w = add(*job);
    w.admitted = true;
    w.admitted_unix_ms = now;
  }
  // Every type a quota can name, also with no job of it: what an idle cluster has (the
  // tenants' listing compares the nominal quotas against it).
  for (absl::string_view type : job_spec_internal::kQuotaDeviceTypes) types.emplace(type);
  const std::vector<WorkerRecord*> idle = workers_.Schedulable();
  for (const std::string& type : types) {
    int64_t n = 0;
    for (const WorkerRecord* worker : idle) {
      if (WorkerFitsDeviceType(type == "any" ? "" : type, worker->info)) ++n;
    }
    state.free_devices[type] = n;
  }
  return state;
}

std::string CoordinatorService::IdleWorkersMessageLocked(const v1::Job& job) {
  const int needed = WorkersNeeded(job);
  const size_t fitting = Fitting(job, workers_.Schedulable()).size();
  if (static_cast<int>(fitting) >= needed) return "";
  const std::string typed = DeviceTypeClause(job);
  std::string counts =
      absl::StrCat(workers_.CountLive(), " registered, ", workers_.Schedulable().size(), " idle");
  if (!typed.empty()) absl::StrAppend(&counts, ", ", fitting, " idle", typed);
  return absl::StrCat("waiting for ", needed, needed == 1 ? " idle worker" : " idle workers", typed,
                      ": ", counts);
}

void CoordinatorService::ScheduleLocked(int64_t now) {
  options_.profile_cache->Expire(/*dead_worker_id=*/"", now);
  AdvancePreemptionsLocked(now);
  const scheduling::ClusterState state = ClusterStateLocked(now);
  const scheduling::SchedulingDecision decision = ManagerLocked().Decide(state);
  for (const scheduling::Preemption& p : decision.preempt)
    BeginPreemptionLocked(p.id, p.reason, now);
  // Why each queued job waits: the policy's answer, or what stopped an admitted one here.
  std::map<std::string, std::pair<PendingReason, std::string>> why;
  for (const scheduling::Pending& p : decision.pending) why[p.id] = {p.reason, p.message};
  for (const std::string& id : decision.admit) {
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok() || job->state() != v1::JOB_STATE_PENDING) continue;
    // All or nothing: a worker counted for two device types may be gone by now.
    const std::vector<WorkerRecord*> free = Fitting(*job, workers_.Schedulable());
    if (static_cast<int>(free.size()) < WorkersNeeded(*job)) {
      why[id] = {PendingReason::kWaitingForDevices, IdleWorkersMessageLocked(*job)};
      continue;
    }
    if (!ProfileReadyLocked(*job, free, now)) {
      why[id] = {PendingReason::kBeingMeasured, measuring_.at(id).message};
      continue;
    }
    // False: it could not even leave PENDING (a database write failed); tried again next pass.
    if (!StartJobLocked(*job, free, now)) continue;
    requeued_at_.erase(id);
  }
  const std::map<std::string, int> busy = StoppingRanksLocked(now);
  std::set<std::string> pending;
  std::map<std::string, std::string> reasons;  // queued job -> its pending reason
  for (const std::string& id : jobs_->PendingIds()) {
    pending.insert(id);
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok()) continue;
    std::string reason;
    std::string message;
    if (auto b = busy.find(id); b != busy.end()) {
      reason = PendingReasonName(PendingReason::kWaitingForPreemption);
      message = absl::StrCat("preempted (", job->last_preemption(), "): its ", b->second,
                             b->second == 1 ? " rank is" : " ranks are",
                             " stopping, then it is queued again");
    } else if (auto w = why.find(id); w != why.end()) {
      reason = PendingReasonName(w->second.first);
      message = w->second.second;
      if (w->second.first == PendingReason::kBeingMeasured && measuring_.contains(id)) {
        message = measuring_.at(id).message;
      }
      // The operator's jobs read as before quotas existed while idle workers are short.
      if (job->tenant().empty() && w->second.first == PendingReason::kWaitingForDevices) {
        if (std::string idle = IdleWorkersMessageLocked(*job); !idle.empty()) message = idle;
      }
    } else {
      continue;  // started in this pass, or admitted and not yet told (next pass)
    }
    if (absl::Status s = jobs_->SetPendingMessage(id, message, reason); !s.ok()) {
      DAPPLE_LOG_WARN("job {}: {}", id, s.message());
    }
    reasons[id] = reason;
  }
  if (options_.scheduling_observer != nullptr) {
    ObserveLocked(state, reasons, now);
  }
  // Forget what no queued job needs any more (started, cancelled, ended).
  absl::erase_if(requeued_at_, [&](const auto& e) { return !pending.contains(e.first); });
  absl::erase_if(measuring_, [&](const auto& e) { return !pending.contains(e.first); });
}

void CoordinatorService::ObserveLocked(const scheduling::ClusterState& state,
                                       const std::map<std::string, std::string>& reasons,
                                       int64_t now) {
  std::map<std::string, scheduling::TenantSchedulingState> tenants;
  auto label = [](const std::string& tenant) {
    return tenant.empty() ? std::string(scheduling::kAdminTenantLabel) : tenant;
  };
  const auto usage = ManagerLocked().Usage(state);
  for (const auto& [tenant, devices] : usage) tenants[tenant].devices = devices;
  for (auto& [tenant, oldest] : scheduling::SchedulingManager::OldestWithinQuota(state, usage)) {
    tenants[tenant].oldest_within_quota_unix_ms = std::move(oldest);
  }
  for (const scheduling::Workload& w : state.workloads) {
    scheduling::TenantSchedulingState& t = tenants[label(w.tenant)];
    if (w.tenant.empty() && w.admitted) {
      for (const auto& [type, n] : w.devices) t.devices[type].in_use += n;
    }
    if (w.admitted) continue;
    for (const auto& [type, n] : w.devices) t.pending_devices += n;
    if (auto r = reasons.find(w.id); r != reasons.end()) ++t.pending_by_reason[r->second];
  }
  options_.scheduling_observer->OnSchedulingPass(tenants, now);
}

void CoordinatorService::BeginPreemptionLocked(const std::string& id, const std::string& reason,
                                               int64_t now) {
  if (preempting_.contains(id)) return;
  absl::StatusOr<v1::Job> job = jobs_->Get(id);
  // A RESTARTING job is the restart pass's: it is not preempted.
  if (!job.ok() || job->state() != v1::JOB_STATE_RUNNING || !running_.contains(id)) return;
  // Right after a coordinator restart the job's row lags its ranks (they trained on, and their
  // reports, a checkpoint among them, are still replaying): a checkpoint step chosen from it is
  // one the ranks are past, and the checkpoints they took meanwhile are not known yet. A
  // preemption then asked for step 24 of a job at step 54 and resumed it from scratch. The
  // next scheduling pass preempts it once it caught up.
  const RunState& run = running_.at(id);
  if (run.reattaching || job->metrics().step() < run.reattached_step) return;
  if (options_.scheduling_observer != nullptr) {
    options_.scheduling_observer->OnPreempted(
        job->tenant().empty() ? std::string(scheduling::kAdminTenantLabel) : job->tenant(),
        absl::StartsWith(reason, "reclaimed") ? "reclaim" : "priority");
  }
  absl::StatusOr<int64_t> step = checkpoints_.RequestOnDemand(id, TotalSteps(job->spec()));
  if (!step.ok()) {
    const std::string from = job->checkpoints().empty()
                                 ? std::string("from scratch")
                                 : absl::StrCat("after step ", job->checkpoints().rbegin()->step(),
                                                " (its newest checkpoint)");
    StopPreemptedLocked(
        id,
        absl::StrCat(reason, ": no checkpoint can be taken now (", step.status().message(),
                     "): stopped at once; it resumes ", from),
        now);
    return;
  }
  preempting_[id] = Preempting{reason, *step, now + options_.preemption_checkpoint_timeout_ms};
  (void)jobs_->RecordEvent(
      id, JobEventReason::kPreempted,
      absl::StrFormat("%s: saving a checkpoint after step %d first (waiting at most %.0f s)",
                      reason, *step, options_.preemption_checkpoint_timeout_ms / 1000.0));
  DAPPLE_LOG_INFO("job {}: preempting ({}): checkpoint after step {} first", id, reason, *step);
}

void CoordinatorService::AdvancePreemptionsLocked(int64_t now) {
  std::vector<std::string> ids;
  for (const auto& [id, p] : preempting_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const std::string& id : ids) {
    const Preempting p = preempting_.at(id);
    absl::StatusOr<v1::Job> job = jobs_->Get(id);
    if (!job.ok() || job->state() != v1::JOB_STATE_RUNNING || !running_.contains(id)) {
      preempting_.erase(id);  // ended, failed or restarting meanwhile
      continue;
    }
    const bool saved =
        !job->checkpoints().empty() && job->checkpoints().rbegin()->step() >= p.checkpoint_step;
    if (saved) {
      StopPreemptedLocked(
          id,
          absl::StrCat(p.reason, ": stopped after its checkpoint at step ",
                       job->checkpoints().rbegin()->step(), ", from which it resumes"),
          now);
    } else if (now >= p.deadline_ms || checkpoints_.RequestedStep(id) == 0) {
      // No checkpoint in time (or it was abandoned): stopped anyway.
      const std::string from =
          job->checkpoints().empty()
              ? std::string("from scratch")
              : absl::StrCat("after step ", job->checkpoints().rbegin()->step());
      const std::string why_not =
          now >= p.deadline_ms ? absl::StrFormat("was not saved within %.0f s",
                                                 options_.preemption_checkpoint_timeout_ms / 1000.0)
                               : std::string("was abandoned (a rank could not save its part)");
      StopPreemptedLocked(id,
                          absl::StrFormat("%s: its checkpoint after step %d %s: stopped anyway; "
                                          "it resumes %s",
                                          p.reason, p.checkpoint_step, why_not, from),
                          now);
    }
  }
}

void CoordinatorService::StopPreemptedLocked(const std::string& id, const std::string& why,
                                             int64_t now) {
  auto p = preempting_.find(id);
  const std::string reason = p != preempting_.end() ? p->second.reason : why;
  auto run = running_.find(id);
  absl::Status moved = jobs_
                           ->Transition(id, v1::JOB_STATE_PENDING, why,
                                        [&](v1::Job* j) {
                                          if (run != running_.end()) {
                                            j->mutable_metrics()->set_elapsed_seconds(
                                                run->second.tracker.ElapsedSeconds(now));
                                          }
                                          j->set_preemptions(j->preemptions() + 1);
                                          j->set_last_preemption(reason);
                                        })
                           .status();
  preempting_.erase(id);
  if (!moved.ok()) {
    DAPPLE_LOG_ERROR("job {}: cannot preempt: {}", id, moved.message());
    return;
  }
  DAPPLE_LOG_WARN("job {}: preempted: {}", id, why);
  StopRunLocked(id);
  requeued_at_[id] = now;
  WakeLocked();
}

// --- Admin: quotas ---

absl::Status CoordinatorService::SetTenantQuota(const auth::Identity& caller,
                                                const v1::SetTenantQuotaRequest& request,
                                                v1::Tenant* response) {
  DAPPLE_RETURN_IF_ERROR(CheckAdmin(caller));
  DAPPLE_RETURN_IF_ERROR(CheckTenantName(request.tenant()));
  if (options_.tenant_exists) DAPPLE_RETURN_IF_ERROR(options_.tenant_exists(request.tenant()));
  DAPPLE_RETURN_IF_ERROR(quotas_->SetTenantQuota(request.tenant(), request.quota()));
  {
    absl::MutexLock lock(&mu_);
    manager_.reset();
    WakeLocked();
  }
  v1::ListTenantsResponse tenants;
  tenants.add_tenants()->set_name(request.tenant());
  DAPPLE_RETURN_IF_ERROR(DescribeTenants(caller, &tenants));
  *response = tenants.tenants(0);
  return absl::OkStatus();
}

absl::Status CoordinatorService::SetCohort(const auth::Identity& caller,
                                           const v1::SetCohortRequest& request,
                                           v1::Cohort* response) {
  DAPPLE_RETURN_IF_ERROR(CheckAdmin(caller));
  DAPPLE_RETURN_IF_ERROR(quotas_->SetCohort(request.cohort()));
  absl::MutexLock lock(&mu_);
  manager_.reset();
  WakeLocked();
  *response = request.cohort();
  return absl::OkStatus();
}

absl::Status CoordinatorService::DescribeTenants(const auth::Identity& caller,
                                                 v1::ListTenantsResponse* response) {
  DAPPLE_RETURN_IF_ERROR(CheckAdmin(caller));
  const std::map<std::string, v1::TenantQuota> quotas = quotas_->Quotas();
  absl::MutexLock lock(&mu_);
  const scheduling::ClusterState state = ClusterStateLocked(options_.now_unix_ms());
  const auto usage = ManagerLocked().Usage(state);
  for (v1::Tenant& tenant : *response->mutable_tenants()) {
    if (auto q = quotas.find(tenant.name()); q != quotas.end()) {
      *tenant.mutable_quota() = scheduling::WithDefaults(q->second);
    }
    tenant.clear_usage();
    if (auto u = usage.find(tenant.name()); u != usage.end()) {
      for (const auto& [type, t] : u->second) {
        v1::DeviceUsage* d = tenant.add_usage();
        d->set_device_type(type);
        d->set_in_use(t.in_use);
        d->set_borrowed(t.borrowed);
        d->set_lent(t.lent);
      }
    }
    int queued = 0;
    int admitted = 0;
    for (const scheduling::Workload& w : state.workloads) {
      if (w.tenant != tenant.name()) continue;
      (w.admitted ? admitted : queued) += 1;
    }
    tenant.set_queued_jobs(queued);
    tenant.set_admitted_jobs(admitted);
  }
  for (const auto& [name, cohort] : quotas_->Cohorts()) *response->add_cohorts() = cohort;
  for (std::string& note : ManagerLocked().NominalBeyondDevices(state)) {
    response->add_notes(std::move(note));
  }
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
