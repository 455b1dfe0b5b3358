#include "dapplectl/views.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dapplectl/format.h"
#include "dapplectl/progress.h"
#include "dapplectl/text_table.h"

namespace dapple::ctl {
namespace {

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string AgeSince(int64_t then_unix_ms, int64_t now_unix_ms) {
  if (then_unix_ms <= 0) return "-";
  return FormatAge(static_cast<double>(now_unix_ms - then_unix_ms) / 1000.0);
}

// "KEY" padded so values line up in one column.
void AddField(std::string* out, const std::string& key, const std::string& value) {
  constexpr int kKeyWidth = 14;
  std::string line = key;
  line.append(key.size() < kKeyWidth ? kKeyWidth - key.size() : 1, ' ');
  absl::StrAppend(out, line, value, "\n");
}

}  // namespace

std::string RenderSubmitted(const v1::Job& job) {
  if (job.name().empty()) return absl::StrCat("submitted ", job.id(), "\n");
  return absl::StrCat("submitted ", job.id(), " (", job.name(), ")\n");
}

std::string RenderCancelled(const v1::Job& job) {
  return absl::StrCat("cancelled ", job.id(), "\n");
}

std::string RenderJobDetails(const v1::Job& job, int64_t now_unix_ms) {
  std::string out;
  AddField(&out, "ID", job.id());
  AddField(&out, "NAME", OrDash(job.name()));
  AddField(&out, "STATE", JobStateName(job.state()));
  AddField(&out, "MESSAGE", OrDash(job.message()));
  AddField(&out, "AGE", AgeSince(job.created_unix_ms(), now_unix_ms));

  const v1::ParallelPlanSummary& plan = job.plan();
  if (plan.stages().empty()) {
    AddField(&out, "PLAN", "- (not planned yet)");
  } else {
    AddField(&out, "PLAN",
             absl::StrCat("planner ", OrDash(plan.planner()), ", schedule ",
                          OrDash(plan.schedule()), ", ", plan.stages_size(), " stages"));
    AddField(&out, "M", absl::StrCat(plan.micro_batches()));
    AddField(&out, "MICRO-BATCH", absl::StrCat(plan.micro_batch_size()));
    AddField(&out, "BUBBLE", FormatPercent(plan.bubble_fraction()));
    TextTable stages({"STAGE", "LAYERS", "REPLICAS", "WORKERS", "DEVICES"});
    for (int i = 0; i < plan.stages_size(); ++i) {
      const v1::PlanStageSummary& s = plan.stages(i);
      stages.AddRow({absl::StrCat(i), absl::StrCat(s.first_layer(), "-", s.last_layer()),
                     absl::StrCat(s.replicas()), OrDash(absl::StrJoin(s.worker_ids(), ",")),
                     OrDash(absl::StrJoin(s.devices(), ","))});
    }
    out += stages.Render("  ");
  }

  const v1::JobMetrics& m = job.metrics();
  AddField(&out, "STEP", FormatSteps(m.step(), m.total_steps()));
  AddField(&out, "EPOCH",
           m.epochs() > 0 ? absl::StrCat(m.epoch(), "/", m.epochs()) : absl::StrCat(m.epoch()));
  AddField(&out, "LOSS", m.step() > 0 ? FormatLoss(m.loss()) : "-");
  AddField(&out, "SAMPLES/S",
           m.samples_per_second() > 0 ? FormatRate(m.samples_per_second()) : "-");
  AddField(&out, "TEST ACCURACY", m.has_test_accuracy() ? FormatPercent(m.test_accuracy()) : "-");
  AddField(&out, "TEST LOSS", m.has_test_loss() ? FormatLoss(m.test_loss()) : "-");
  AddField(&out, "ELAPSED", FormatClock(m.elapsed_seconds()));
  if (!IsTerminal(job.state())) AddField(&out, "ETA", FormatClock(EstimateEtaSeconds(m)));
  return out;
}

std::string RenderJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                          int64_t now_unix_ms) {
  if (jobs.empty()) return "no jobs\n";
  TextTable table({"ID", "NAME", "STATE", "STEP", "LOSS", "TEST ACC", "AGE"});
  for (const v1::Job& job : jobs) {
    const v1::JobMetrics& m = job.metrics();
    const bool started = m.step() > 0 || m.total_steps() > 0;
    table.AddRow({job.id(), OrDash(job.name()), JobStateName(job.state()),
                  started ? FormatSteps(m.step(), m.total_steps()) : "-",
                  m.step() > 0 ? FormatLoss(m.loss()) : "-",
                  m.has_test_accuracy() ? FormatPercent(m.test_accuracy()) : "-",
                  AgeSince(job.created_unix_ms(), now_unix_ms)});
  }
  return table.Render();
}

std::string RenderWorkerList(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& workers,
                             int64_t now_unix_ms) {
  if (workers.empty()) return "no workers\n";
  TextTable table({"ID", "HOSTNAME", "PID", "DEVICES", "STATE", "JOB", "STAGE", "HEARTBEAT"});
  for (const v1::WorkerInfo& w : workers) {
    const bool busy = w.state() == v1::WORKER_STATE_BUSY;
    const std::string heartbeat = AgeSince(w.last_heartbeat_unix_ms(), now_unix_ms);
    table.AddRow({w.id(), OrDash(w.hostname()), absl::StrCat(w.pid()),
                  OrDash(absl::StrJoin(w.devices(), ",")), WorkerStateName(w.state()),
                  busy ? OrDash(w.job_id()) : "-", busy ? absl::StrCat(w.stage()) : "-",
                  heartbeat == "-" ? heartbeat : absl::StrCat(heartbeat, " ago")});
  }
  return table.Render();
}

}  // namespace dapple::ctl
