#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint_files.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/lowering.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "common/steps.h"
#include "coordinator/auth/access.h"
#include "coordinator/jobs/job_lifecycle.h"
#include "coordinator/planner/planner.h"
#include "coordinator/planner/planners.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/emulation.h"
#include "coordinator/service/job_data.h"
#include "coordinator/service/plan_request_check.h"
#include "coordinator/service/worker_topology.h"

namespace dapple::coordinator {
namespace {

constexpr char kDefaultSource[] = "<spec>";

// A planner's kResourceExhausted (no plan fits device memory) is the user's to fix, like any
// other bad input; gRPC clients read RESOURCE_EXHAUSTED as a limit of the channel.
absl::Status AsInputError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    return absl::InvalidArgumentError(status.message());
  }
  return status;
}

// SubmitJob's check that the workers have a kernel for every layer of `spec` (common/model_info.h
// CheckKernels), located at the layer in `text`: "job.yaml:6:7: model.layers[0] (conv2d): no CPU
// kernel in this build; ...". Without it every rank would fail at start with the same error.
absl::Status CheckJobKernels(const v1::JobSpec& spec, const SpecText& text) {
  int layer = -1;
  const absl::Status s =
      CheckKernels(spec.model(), spec.parallel().device_type(), UsesBf16(spec.training()), &layer);
  if (s.ok()) return s;
  return JobSpecFieldError(text.yaml, text.source, absl::StrCat("model.layers[", layer, "]"),
                           s.message());
}

// SubmitJob's check of resume_from's checkpoint `source` (coordinator.proto; the caller may
// resume from it: CheckpointManager::OpenResume): its spec may be continued by `spec`
// (common/checkpoint_files.h CheckResumable), it leaves steps to run and was not written by an
// emulated job unless `spec` is emulated too. kInvalidArgument naming the path and the rule.
absl::Status CheckResumeFrom(const CheckpointManager::ResumeSource& source,
                             const v1::JobSpec& spec) {
  const std::string& dir = source.dir;
  const v1::CheckpointManifest* manifest = &source.manifest;
  // An emulated job waits instead of computing, so its shards hold weights that were never
  // trained: a real job resuming from them would carry on at step N from untrained weights
  // without a word. The manifest records the source job's spec and plan (checkpoint_publisher
  // copies both from the job); either saying emulated is enough. The other way round (an
  // emulated job from a real checkpoint) is harmless: it only measures time.
  if ((IsEmulated(manifest->spec()) || manifest->plan().emulated()) && !IsEmulated(spec)) {
    const std::string& type = spec.parallel().device_type();
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume from '", dir, "': it was written by an emulated job (",
        manifest->job_id().empty() ? std::string() : absl::StrCat(manifest->job_id(), ", "),
        "parallel.device_type emulated: its weights are not trained) and this job has "
        "parallel.device_type ",
        type.empty() ? "any" : type, "; resume it only into an emulated job"));
  }
  if (absl::Status s = CheckResumable(manifest->spec(), spec); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume from '", dir, "': ", s.message()));
  }
  const int64_t total = TotalSteps(spec);
  if (manifest->step() >= total) {
    const int64_t max_steps = spec.training().max_steps();
    const int64_t step = manifest->step();
    const int64_t per_epoch = StepsPerEpoch(spec);
    // Only the limits that end the job by that step need raising.
    std::vector<std::string> raise;
    if (spec.training().epochs() * per_epoch <= step && per_epoch > 0) {
      raise.push_back(absl::StrCat("training.epochs to at least ", step / per_epoch + 1));
    }
    if (max_steps > 0 && max_steps <= step) {
      raise.push_back(absl::StrCat("training.max_steps to more than ", step));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resume from '", dir, "': it was taken after step ", step, " and the job runs ",
        total, " steps (training.epochs ", spec.training().epochs(), " x ", per_epoch,
        " steps per epoch",
        max_steps > 0 ? absl::StrCat(", at most training.max_steps ", max_steps) : "",
        "): nothing left to run", raise.empty() ? "" : ": raise ", absl::StrJoin(raise, " and ")));
  }
  return absl::OkStatus();
}

// PlanJob's --planner and --schedule in place of the spec's (both first, then one validation:
// each alone may not fit the spec's other field). kInvalidArgument "with --planner X and ...:
// <the validation's message>". `*overrides` gets what was changed, for the plan's NOTE.
absl::Status ApplyPlanOverrides(const v1::PlanJobRequest& request, v1::JobSpec* spec,
                                std::vector<std::string>* overrides_out) {
  // (--planner pipedream-code needs schedule pipedream, which --schedule may be giving.)
  std::vector<std::string> overrides;
  v1::ParallelSpec* parallel = spec->mutable_parallel();
  if (!request.planner().empty() && request.planner() != parallel->planner()) {
    parallel->set_planner(request.planner());
    if (request.planner() != "manual" && parallel->stage_ranges_size() > 0) {
      parallel->clear_stage_ranges();
      parallel->set_stages(0);
    }
    overrides.push_back(
        absl::StrCat("--planner ", request.planner(), " in place of the spec's parallel.planner"));
  }
  if (!request.schedule().empty() && request.schedule() != parallel->schedule()) {
    parallel->set_schedule(request.schedule());
    overrides.push_back(absl::StrCat("--schedule ", request.schedule(),
                                     " in place of the spec's parallel.schedule"));
    // parallel.interleave belongs to schedule interleaved alone: 2 model chunks per stage
    // where the spec has none (Megatron's smallest), dropped under another schedule.
    if (request.schedule() == "interleaved" && parallel->interleave() == 0) {
      parallel->set_interleave(2);
      overrides.push_back("parallel.interleave 2 (unset in the spec)");
    } else if (request.schedule() != "interleaved" && parallel->interleave() != 0) {
      overrides.push_back(absl::StrCat("without the spec's parallel.interleave ",
                                       parallel->interleave(),
                                       " (it applies to schedule interleaved only)"));
      parallel->set_interleave(0);
    }
  }
  if (!overrides.empty()) {
    if (absl::Status s = ValidateJobSpec(*spec); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("with ", absl::StrJoin(overrides, " and "), ": ", s.message()));
    }
  }
  *overrides_out = std::move(overrides);
  return absl::OkStatus();
}

}  // namespace

// --- Coordinator ---

absl::Status CoordinatorService::SubmitJob(const auth::Identity& caller,
                                           const v1::SubmitJobRequest& request,
                                           v1::SubmitJobResponse* response) {
  const std::string& source =
      request.source_name().empty() ? std::string(kDefaultSource) : request.source_name();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(request.spec_yaml(), source);
  if (!spec.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, spec.status().message());
    return absl::InvalidArgumentError(spec.status().message());
  }
  const SpecText text{request.spec_yaml(), source};
  // A tenant at its limit of queued jobs is refused before any work (CheckSubmit below checks
  // again with the plan's devices, under the lock).
  if (!caller.tenant.empty()) {
    absl::MutexLock lock(&mu_);
    // A job for any device is charged to a type the tenant has quota for and runs there; the
    // stored spec names it, before planning, so that the plan is made on those workers.
    const std::string charged =
        ManagerLocked().ChargedDeviceType(caller.tenant, spec->parallel().device_type());
    if (charged != "any") spec->mutable_parallel()->set_device_type(charged);
    scheduling::Workload probe;
    probe.tenant = caller.tenant;
    if (absl::Status s = ManagerLocked().CheckSubmit(probe, jobs_->PendingOfTenant(caller.tenant));
        s.code() == absl::StatusCode::kResourceExhausted) {
      DAPPLE_LOG_INFO("refused job {} of tenant {}: {}", source, caller.tenant, s.message());
      return s;
    }
  }
  // Outside the lock: reads the data file. Before the resume check, whose step count needs the
  // resolved samples.
  if (absl::Status s = ResolveJobData(&*spec, data_roots_, &text); !s.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, s.message());
    return s;
  }
  if (absl::Status s = CheckJobKernels(*spec, text); !s.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, s.message());
    return s;
  }
  std::string resumed_from;
  if (!request.resume_from().empty()) {
    // Whose checkpoint it is first, before any file is read (docs/security.md, "Isolation").
    absl::StatusOr<CheckpointManager::ResumeSource> checkpoint = checkpoints_.OpenResume(
        caller, request.resume_from(), [&](const std::string& id) { return jobs_->Get(id); });
    absl::Status s = checkpoint.status();
    if (s.ok()) s = CheckResumeFrom(*checkpoint, *spec);
    if (!s.ok()) {
      DAPPLE_LOG_INFO("rejected resume of {}: {}", source, s.message());
      return s;
    }
    resumed_from = checkpoint->dir;
  }
  // Planned outside the lock: a big model's search should not hold up heartbeats; a caller
  // computes at most PlanningSlots::kPerCaller plans at once.
  DAPPLE_ASSIGN_OR_RETURN(PlanningSlots::Slot slot, planning_slots_.Acquire(caller.user));
  std::optional<ProfileUse> profile;
  absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(
      *spec, SubmissionPlanInputs(*spec, caller.tenant, WorkerSnapshot(), &profile), &text);
  if (!plan.ok()) {
    DAPPLE_LOG_INFO("rejected job spec {}: {}", source, plan.status().message());
    return AsInputError(plan.status());
  }
  // Checked and stored under the lock, so that concurrent submits count each other.
  absl::MutexLock lock(&mu_);
  v1::Job planned;
  *planned.mutable_spec() = *spec;
  *planned.mutable_plan() = plan->summary();
  if (absl::Status s = CheckTenantQuotaLocked(caller, planned); !s.ok()) {
    DAPPLE_LOG_INFO("refused job {} of tenant {}: {}", source, caller.tenant, s.message());
    return s;
  }
  DAPPLE_ASSIGN_OR_RETURN(
      *response->mutable_job(),
      jobs_->Create(*spec, request.spec_yaml(), plan->summary(), [&](v1::Job* j) {
        j->set_resumed_from(resumed_from);
        j->set_owner(caller.user);
        j->set_tenant(caller.tenant);
      }));
  if (profile.has_value()) submitted_profiles_[response->job().id()] = *profile;
  WakeLocked();
  return absl::OkStatus();
}

std::vector<v1::WorkerInfo> CoordinatorService::WorkerSnapshot() {
  absl::MutexLock lock(&mu_);
  return workers_.List();
}

absl::StatusOr<v1::ClusterTopology> CoordinatorService::TopologyOfWorkers(
    const std::vector<v1::WorkerInfo>& workers, const std::string& device_type,
    bool emulated) const {
  absl::StatusOr<v1::ClusterTopology> topology =
      TopologyFromWorkers(workers, device_type, options_.plan_defaults);
  if (!topology.ok()) return topology;
  if (const int jobs = collectives_.jobs(); jobs > 0 && !emulated) {
    topology->set_collective_overhead_ms(collectives_.OverheadMs());
    topology->set_source(absl::StrFormat(
        "%s; collectives +%.2f ms each (measured by the steps of %d job%s)", topology->source(),
        topology->collective_overhead_ms(), jobs, jobs == 1 ? "" : "s"));
  }
  return topology;
}

PlanInputs CoordinatorService::SubmissionPlanInputs(const v1::JobSpec& spec,
                                                    const std::string& tenant,
                                                    const std::vector<v1::WorkerInfo>& workers,
                                                    std::optional<ProfileUse>* use) const {
  PlanInputs inputs;
  inputs.defaults = options_.plan_defaults;
  // dapple, pipedream and dp replicate stages up to the job's devices; the others make
  // parallel.devices / stages replicas of each stage (planner.h).
  inputs.max_replicas = std::max(1, spec.parallel().devices());
  // PipeDream's 1F1B-RR sends whole micro-batches round-robin to a stage's replicas: each
  // needs at least one per step, so at most M = global_batch / micro_batch replicas (MakePlan
  // refuses a plan with more; the spec's validation refuses devices / stages > M).
  // (PipeDream's code limits replicas only to 1 or to all devices: planner pipedream-code checks
  // M >= D itself, planner.h.)
  if (spec.parallel().schedule() == "pipedream" &&
      spec.parallel().planner() != kPipeDreamCodePlanner && spec.training().micro_batch() > 0) {
    const int64_t micro_batches = spec.training().global_batch() / spec.training().micro_batch();
    inputs.max_replicas = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(inputs.max_replicas, micro_batches)));
  }
  const std::string& type = spec.parallel().device_type();
  inputs.device_kind = JobDeviceKind(type, workers);
  const ProfileCache::Key key{
      ProfileCache::ScopedFingerprint(profile::ModelFingerprint(spec.model()), tenant),
      inputs.device_kind};
  int64_t generation = 0;
  inputs.profile = options_.profile_cache->Lookup(key, &generation);
  if (static_cast<int>(LiveFittingWorkers(workers, type).size()) >= spec.parallel().devices()) {
    absl::StatusOr<v1::ClusterTopology> topology =
        TopologyOfWorkers(workers, type, IsEmulated(spec));
    if (topology.ok()) inputs.topology = *std::move(topology);
  }
  if (use != nullptr) {
    *use = std::nullopt;
    if (inputs.profile.has_value()) {
      *use = ProfileUse{key, generation,
                        inputs.topology ? inputs.topology->collective_overhead_ms() : 0.0};
    }
  }
  return inputs;
}

absl::Status CoordinatorService::CheckTenantQuotaLocked(const auth::Identity& caller,
                                                        const v1::Job& planned) {
  // Submit stored the charged type in the spec already; a plan's spec may still say "any".
  const scheduling::SchedulingManager& manager = ManagerLocked();
  scheduling::Workload workload;
  workload.tenant = caller.tenant;
  workload.devices[scheduling::DeviceTypeKey(manager.ChargedDeviceType(
      caller.tenant, planned.spec().parallel().device_type()))] = WorkersNeeded(planned);
  return manager.CheckSubmit(workload, jobs_->PendingOfTenant(caller.tenant));
}

absl::Status CoordinatorService::PlanJob(const auth::Identity& caller,
                                         const v1::PlanJobRequest& request,
                                         v1::PlanJobResponse* response) {
  const std::string& source =
      request.source_name().empty() ? std::string(kDefaultSource) : request.source_name();
  if (request.has_profile()) DAPPLE_RETURN_IF_ERROR(CheckProfile(request.profile()));
  if (request.has_cluster()) DAPPLE_RETURN_IF_ERROR(CheckTopology(request.cluster()));
  if (request.global_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch ", request.global_batch(), " must be >= 0 (0: the default)"));
  }
  DAPPLE_ASSIGN_OR_RETURN(PlanningSlots::Slot slot, planning_slots_.Acquire(caller.user));
  const std::vector<v1::WorkerInfo> workers = WorkerSnapshot();
  v1::ParallelPlanSummary summary;
  v1::ClusterTopology topology;
  if (request.spec_yaml().empty()) {
    if (!request.has_profile()) {
      return absl::InvalidArgumentError(
          "a plan without a job spec needs a profile (dapplectl plan --profile FILE)");
    }
    if (request.has_cluster()) {
      topology = request.cluster();
    } else {
      DAPPLE_ASSIGN_OR_RETURN(topology, TopologyOfWorkers(workers, "any"));
    }
    absl::StatusOr<v1::ParallelPlanSummary> planned = PlanProfile(
        request.profile(), topology, request.planner(), request.global_batch(), request.schedule());
    if (!planned.ok()) return AsInputError(planned.status());
    summary = *std::move(planned);
  } else {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(request.spec_yaml(), source);
    if (!spec.ok()) return absl::InvalidArgumentError(spec.status().message());
    std::vector<std::string> overrides;
    DAPPLE_RETURN_IF_ERROR(ApplyPlanOverrides(request, &*spec, &overrides));
    // As submit does: the plan of a spec whose data submit would refuse is refused too.
    const SpecText text{request.spec_yaml(), source};
    DAPPLE_RETURN_IF_ERROR(ResolveJobData(&*spec, data_roots_, &text));
    PlanInputs inputs = SubmissionPlanInputs(*spec, caller.tenant, workers);
    if (request.has_profile()) inputs.profile = request.profile();
    // Without a cluster file the topology is submit's: the registered workers when there are
    // parallel.devices of them, else the hypothetical node MakePlan assumes then.
    const bool hypothetical = !request.has_cluster() && !inputs.topology.has_value();
    if (request.has_cluster()) {
      inputs.topology = request.cluster();
    } else if (hypothetical) {
      inputs.topology = SingleNodeTopology(spec->parallel().devices(), options_.plan_defaults);
    }
    topology = *inputs.topology;
    absl::StatusOr<v1::ParallelPlan> plan = MakeJobPlan(*spec, inputs, &text);
    if (!plan.ok()) return AsInputError(plan.status());
    summary = std::move(*plan->mutable_summary());
    // What the plan's spec is not (a submit of the file runs the spec as written).
    if (!overrides.empty()) {
      summary.add_notes(absl::StrCat("planned with ", absl::StrJoin(overrides, " and "),
                                     "; a submit of the file runs its own"));
    }
    // A plan does not depend on the kernels; a job that submit would refuse for want of one
    // says so.
    if (absl::Status s = CheckJobKernels(*spec, text); !s.ok()) {
      summary.add_notes(absl::StrCat("submit would refuse this job: ", s.message()));
    }
    // A user's plan is checked against the tenant's quota as submit checks it, so that a plan
    // that fits the cluster but never the tenant says so before the submit.
    if (!caller.tenant.empty()) {
      v1::Job planned;
      *planned.mutable_spec() = *spec;
      *planned.mutable_plan() = summary;
      absl::MutexLock lock(&mu_);
      if (absl::Status s = CheckTenantQuotaLocked(caller, planned); !s.ok()) {
        summary.add_notes(absl::StrCat("submit would refuse this job: ", s.message()));
      }
    }
    if (hypothetical) {
      const std::string& type = spec->parallel().device_type();
      const size_t fitting = LiveFittingWorkers(workers, type).size();
      const int wanted = summary.num_devices();
      summary.add_notes(absl::StrCat(
          fitting, fitting == 1 ? " registered worker" : " registered workers",
          type.empty() || type == "any" ? "" : absl::StrCat(" (", type, ")"),
          " for parallel.devices ", spec->parallel().devices(),
          ": planned as submit plans it, on a hypothetical node (coordinator defaults); the job "
          "would wait for ",
          wanted, wanted == 1 ? " worker" : " workers"));
    }
  }
  // Nothing runs, so the devices a user wants to see are the topology's.
  for (v1::PlanStageSummary& stage : *summary.mutable_stages()) {
    *stage.mutable_devices() = stage.placement();
  }
  *response->mutable_plan() = std::move(summary);
  *response->mutable_cluster() = std::move(topology);
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
