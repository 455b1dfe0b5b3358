#include "worker/runtime/testing/local_job.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/schedule/generators.h"
#include "common/schedule/job_lowering.h"
#include "common/schedule/job_programs.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker::parity {

v1::ParallelPlanSummary WithReplicas(v1::ParallelPlanSummary plan,
                                     const std::vector<int>& replicas) {
  for (int s = 0; s < plan.stages_size() && s < static_cast<int>(replicas.size()); ++s) {
    plan.mutable_stages(s)->set_replicas(replicas[s]);
  }
  return plan;
}

absl::StatusOr<std::unique_ptr<LocalJob>> LocalJob::Create(const v1::JobSpec& spec,
                                                           const v1::ParallelPlanSummary& plan,
                                                           const Dataset* train,
                                                           const Dataset* test,
                                                           absl::Duration recv_timeout) {
  auto job = std::unique_ptr<LocalJob>(new LocalJob());
  job->spec_ = spec;
  job->plan_ = plan;
  job->box_ = std::make_unique<Mailbox>(recv_timeout);
  const int stages = plan.stages_size();
  const int ranks = schedule::NumRanks(plan);
  DAPPLE_ASSIGN_OR_RETURN(const schedule::LowerOptions lower,
                          schedule::LowerOptionsFor(spec, plan));
  // The assignments' first step is 0.
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<v1::RankProgram> programs,
                          schedule::JobPrograms(spec, plan, /*first_step=*/0));

  std::vector<StageCollectives> collectives(ranks);
  // A group of `members` (global ranks, in member order) whose Collective goes to `slot`.
  auto make_group = [&](const std::vector<int>& members, Collective* StageCollectives::*slot) {
    job->groups_.push_back(
        std::make_unique<testing::LocalCollectiveGroup>(static_cast<int>(members.size())));
    for (size_t i = 0; i < members.size(); ++i) {
      job->collectives_.push_back(std::make_unique<testing::LocalCollective>(
          job->groups_.back().get(), static_cast<int>(i)));
      collectives[members[i]].*slot = job->collectives_.back().get();
    }
  };
  for (int s = 0; s < stages; ++s) {
    const int d = schedule::StageReplicas(plan, s);
    if (d == 1) continue;
    std::vector<int> members;
    for (int r = 0; r < d; ++r) members.push_back(schedule::RankIndex(plan, s, r));
    make_group(members, &StageCollectives::replicas);
  }
  const std::vector<int> tied = schedule::TiedGroupRanks(lower.tied_stages, plan);
  if (!tied.empty()) make_group(tied, &StageCollectives::tied);
  if (lower.global_norm && ranks > 1) {
    std::vector<int> all(ranks);
    for (int r = 0; r < ranks; ++r) all[r] = r;
    make_group(all, &StageCollectives::job);
  }

  for (int s = 0; s < stages; ++s) {
    for (int r = 0; r < schedule::StageReplicas(plan, s); ++r) {
      const int rank = schedule::RankIndex(plan, s, r);
      job->transports_.push_back(std::make_unique<LocalTransport>(job->box_.get(), rank));
      v1::StageAssignment a = Assignment(spec, plan, s, programs[rank]);
      a.set_replica(r);
      absl::StatusOr<std::unique_ptr<StageRuntime>> rt = StageRuntime::Create(
          a, train, test, job->transports_.back().get(), nullptr, collectives[rank]);
      if (!rt.ok()) {
        return absl::Status(rt.status().code(),
                            absl::StrCat("stage ", s, " replica ", r, ": ", rt.status().message()));
      }
      job->runtimes_.push_back(*std::move(rt));
    }
  }
  return job;
}

std::vector<LocalJob::RankRun> LocalJob::Run(int64_t first_step, int steps, bool evaluate) {
  std::vector<RankRun> runs(runtimes_.size());
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < runtimes_.size(); ++rank) {
    threads.emplace_back([&, rank] {
      StageRuntime& rt = *runtimes_[rank];
      RankRun& run = runs[rank];
      for (int64_t step = first_step; step < first_step + steps; ++step) {
        absl::StatusOr<StepResult> r = rt.RunStep(step);
        if (!r.ok()) {
          run.status = r.status();
          return;
        }
        run.steps.push_back(*std::move(r));
        absl::StatusOr<std::vector<kernels::Param*>> params = rt.Params();
        if (!params.ok()) {
          run.status = params.status();
          return;
        }
        std::vector<kernels::Param> copy;
        for (const kernels::Param* p : *params) {
          copy.push_back(*p);
          copy.back().grad = kernels::Tensor();
        }
        run.params_after_step.push_back(std::move(copy));
      }
      if (!evaluate) return;
      absl::StatusOr<EvalResult> e = rt.Evaluate(1);
      if (!e.ok()) {
        run.status = e.status();
        return;
      }
      run.eval = *e;
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

}  // namespace dapple::worker::parity
