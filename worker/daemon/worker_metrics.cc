#include "worker/daemon/worker_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/metric_list.h"

namespace dapple::worker {
namespace {

namespace m = ::dapple::metrics;

constexpr const char* kKinds[] = {"forward", "backward", "comm", "allreduce", "optimizer", "idle"};
constexpr const char* kOutcomes[] = {"done", "failed", "aborted"};

}  // namespace

int64_t MetricsWallClockUnixMs() { return absl::ToUnixMillis(absl::Now()); }

WorkerMetrics::WorkerMetrics(std::function<int64_t()> now_unix_ms)
    : now_unix_ms_(std::move(now_unix_ms)),
      set_(std::make_shared<m::MetricSet>(m::Binary::kWorker)) {
  // Everything but the labelled identity exists from the start at 0.
  set_->Gauge(m::kWorkerBusy).Set(0);
  set_->Gauge(m::kWorkerEmulated).Set(0);
  set_->Counter(m::kWorkerStepsTotal);
  for (const char* kind : kKinds)
    set_->Counter(m::kWorkerActionSecondsTotal, {{m::kLabelKind, kind}});
  for (const char* outcome : kOutcomes) {
    set_->Counter(m::kWorkerJobsTotal, {{m::kLabelState, outcome}});
  }
  set_->Counter(m::kWorkerCheckpointSavesTotal);
  set_->Counter(m::kWorkerCheckpointStallSecondsTotal);
  for (const char* source : {"memory", "disk"}) {
    set_->Counter(m::kWorkerCheckpointShardLoadsTotal, {{m::kLabelSource, source}});
  }
}

void WorkerMetrics::OnCheckpointStall(double stall_seconds, double step_seconds) {
  absl::MutexLock lock(&mu_);
  set_->Counter(m::kWorkerCheckpointSavesTotal).Increment();
  if (stall_seconds > 0)
    set_->Counter(m::kWorkerCheckpointStallSecondsTotal).Increment(stall_seconds);
  if (step_seconds > 0) {
    set_->Gauge(m::kWorkerCheckpointLastStallRatio).Set(stall_seconds / step_seconds);
  }
}

void WorkerMetrics::OnCheckpointLoad(int from_memory, int from_disk) {
  absl::MutexLock lock(&mu_);
  if (from_memory > 0) {
    set_->Counter(m::kWorkerCheckpointShardLoadsTotal, {{m::kLabelSource, "memory"}})
        .Increment(from_memory);
  }
  if (from_disk > 0) {
    set_->Counter(m::kWorkerCheckpointShardLoadsTotal, {{m::kLabelSource, "disk"}})
        .Increment(from_disk);
  }
}

void WorkerMetrics::OnRegistered(const std::string& worker_id, const std::string& hostname) {
  absl::MutexLock lock(&mu_);
  prometheus::Labels info = {{m::kLabelWorker, worker_id}, {m::kLabelHostname, hostname}};
  if (info == info_) return;
  if (!info_.empty()) set_->Remove(m::kWorkerInfo, info_);
  info_ = std::move(info);
  set_->Gauge(m::kWorkerInfo, info_).Set(1);
}

void WorkerMetrics::OnRankStarted(const v1::StageAssignment& assignment) {
  absl::MutexLock lock(&mu_);
  EndRankLocked();
  rank_ = {{m::kLabelJobId, assignment.job_id()},
           {m::kLabelStage, absl::StrCat(assignment.stage())},
           {m::kLabelReplica, absl::StrCat(assignment.replica())}};
  set_->Gauge(m::kWorkerRank, rank_).Set(1);
  set_->Gauge(m::kWorkerBusy).Set(1);
  set_->Gauge(m::kWorkerEmulated).Set(assignment.has_emulated_profile() ? 1 : 0);
}

void WorkerMetrics::EndRankLocked() {
  if (!rank_.empty()) set_->Remove(m::kWorkerRank, rank_);
  rank_.clear();
  set_->Gauge(m::kWorkerBusy).Set(0);
  set_->Gauge(m::kWorkerEmulated).Set(0);
}

void WorkerMetrics::OnReport(const v1::ProgressReport& report) {
  absl::MutexLock lock(&mu_);
  switch (report.kind()) {
    case v1::PROGRESS_STEP: {
      const v1::StageStepStats& st = report.stats();
      set_->Counter(m::kWorkerStepsTotal).Increment();
      const std::pair<const char*, double> seconds[] = {
          {"forward", st.forward_seconds()},     {"backward", st.backward_seconds()},
          {"comm", st.comm_seconds()},           {"allreduce", st.allreduce_seconds()},
          {"optimizer", st.optimizer_seconds()}, {"idle", st.idle_seconds()}};
      for (const auto& [kind, value] : seconds) {
        // A counter only grows; a negative time would be a measuring bug, not progress.
        if (value > 0)
          set_->Counter(m::kWorkerActionSecondsTotal, {{m::kLabelKind, kind}}).Increment(value);
      }
      if (report.has_stats()) {
        set_->Gauge(m::kWorkerPeakMemoryBytes).Set(static_cast<double>(st.peak_memory_bytes()));
        set_->Gauge(m::kWorkerPeakActivationBytes)
            .Set(static_cast<double>(st.peak_activation_bytes()));
        set_->Gauge(m::kWorkerAchievedTflops).Set(st.achieved_tflops());
        if (st.has_mfu()) {
          set_->Gauge(m::kWorkerMfu).Set(st.mfu());
        } else {
          set_->Remove(m::kWorkerMfu, {});
        }
      }
      set_->Gauge(m::kWorkerLastStepTimestamp).Set(static_cast<double>(now_unix_ms_()) / 1000.0);
      break;
    }
    case v1::PROGRESS_DONE:
      set_->Counter(m::kWorkerJobsTotal, {{m::kLabelState, "done"}}).Increment();
      EndRankLocked();
      break;
    case v1::PROGRESS_FAILED:
      set_->Counter(m::kWorkerJobsTotal, {{m::kLabelState, "failed"}}).Increment();
      EndRankLocked();
      break;
    case v1::PROGRESS_ABORTED:
      set_->Counter(m::kWorkerJobsTotal, {{m::kLabelState, "aborted"}}).Increment();
      EndRankLocked();
      break;
    case v1::PROGRESS_EVAL:
    case v1::PROGRESS_CHECKPOINT:
    case v1::PROGRESS_SAMPLE:
    case v1::PROGRESS_KIND_UNSPECIFIED:
    case v1::ProgressKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ProgressKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
}

}  // namespace dapple::worker
