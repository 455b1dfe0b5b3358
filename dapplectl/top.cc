#include "dapplectl/top.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/compute_throughput.h"
#include "common/status.h"
#include "dapplectl/format.h"
#include "dapplectl/json_output.h"
#include "dapplectl/progress.h"
#include "dapplectl/text_table.h"
#include "dapplectl/trace_json.h"

namespace dapple::ctl {
namespace {

std::string MsOfSeconds(double seconds) { return absl::StrFormat("%.1f", seconds * 1e3); }

double Fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

// The rank's mean step over the coordinator's window of its last steps
// (StageMetrics.samples_per_second, stage_metrics_tracker.h): its samples per step over its
// samples per second. The newest step alone (STEP) swings by 10-30% on a shared host, and a
// job's last steps run longer than its steady ones. "-" before the window has a time.
std::string MeanStepMs(const v1::StageMetrics& m) {
  if (!(m.samples_per_second() > 0) || m.last().samples() <= 0) return "-";
  return MsOfSeconds(static_cast<double>(m.last().samples()) / m.samples_per_second());
}

double Bubble(const v1::StageStepStats& s) { return Fraction(s.idle_seconds(), s.step_seconds()); }

double Utilization(const v1::StageStepStats& s) {
  return Fraction(s.forward_seconds() + s.backward_seconds() + s.optimizer_seconds(),
                  s.step_seconds());
}

std::string Percent(double fraction) { return absl::StrFormat("%.1f", fraction * 100.0); }

// Achieved TFLOP/s (common/compute_throughput.h): 3 significant digits, from a CPU's 0.0912 to
// a GPU's 412.
std::string Tflops(const v1::StageStepStats& s) {
  return absl::StrFormat("%.3g", s.achieved_tflops());
}

std::string JobHeader(const v1::Job& job) {
  std::string line =
      absl::StrCat(job.id(), " (", job.name(), ")  ", JobStateName(job.state()), "  step ",
                   FormatSteps(job.metrics().step(), job.metrics().total_steps()));
  if (job.metrics().samples_per_second() > 0) {
    absl::StrAppend(&line, "  ", FormatRate(job.metrics().samples_per_second()), " samples/s");
  }
  if (job.metrics().has_validation_loss()) {
    absl::StrAppend(&line, "  ", ValidationSummary(job.metrics()));
  }
  return line;
}

}  // namespace

std::string RenderTop(const std::vector<v1::Job>& jobs) {
  if (jobs.empty()) return "no running jobs\n";
  std::vector<std::string> blocks;
  for (const v1::Job& job : jobs) {
    std::string block = JobHeader(job);
    // Emulated devices wait instead of computing: FWD/BWD are profiled waits, not compute.
    if (job.plan().emulated()) block += " (emulated: FWD/BWD are waits of profiled times)";
    block += "\n";
    if (job.stage_metrics().empty()) {
      block += "  no step reported yet\n";
    } else {
      TextTable table({"STAGE", "REPLICA", "WORKER", "STEP", "STEP(ms)", "MEAN(ms)", "FWD", "BWD",
                       "COMM", "IDLE", "BUBBLE%", "UTIL%", "TFLOP/S", "MFU", "PEAK-MEM"});
      for (const v1::StageMetrics& m : job.stage_metrics()) {
        const v1::StageStepStats& s = m.last();
        table.AddRow({absl::StrCat(m.stage()), absl::StrCat(m.replica()), m.worker_id(),
                      absl::StrCat(s.step()), MsOfSeconds(s.step_seconds()), MeanStepMs(m),
                      MsOfSeconds(s.forward_seconds()), MsOfSeconds(s.backward_seconds()),
                      MsOfSeconds(s.comm_seconds()), MsOfSeconds(s.idle_seconds()),
                      Percent(Bubble(s)), Percent(Utilization(s)), Tflops(s), FormatMfu(s),
                      FormatBytes(s.peak_memory_bytes())});
      }
      block += table.Render("  ");
      // The ranks the coordinator judged stragglers (StageMetrics.straggler), named below.
      for (const v1::StageMetrics& m : job.stage_metrics()) {
        if (!m.straggler()) continue;
        absl::StrAppend(&block,
                        absl::StrFormat("  STRAGGLER stage %d replica %d (%s): %.2fx the compute "
                                        "per step of its stage's other replicas\n",
                                        m.stage(), m.replica(), m.worker_id(), m.compute_ratio()));
      }
    }
    blocks.push_back(std::move(block));
  }
  return absl::StrJoin(blocks, "\n");
}

absl::StatusOr<std::string> TopToJson(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> items;
  for (const v1::Job& job : jobs) {
    std::vector<std::string> stages;
    for (const v1::StageMetrics& m : job.stage_metrics()) {
      DAPPLE_ASSIGN_OR_RETURN(std::string text, MessageToJson(m, /*pretty=*/false));
      // Splice the derived fractions into the message's object.
      if (text.size() < 2 || text.back() != '}') return absl::InternalError("bad JSON object");
      text.pop_back();
      absl::StrAppend(&text, text.size() > 1 ? "," : "",
                      "\"bubble_fraction\":", absl::StrFormat("%.6g", Bubble(m.last())),
                      ",\"utilization\":", absl::StrFormat("%.6g", Utilization(m.last())), "}");
      stages.push_back(std::move(text));
    }
    const v1::JobMetrics& m = job.metrics();
    // A text dataset's headline metric, once evaluated (left out otherwise, as -o json does).
    std::string validation;
    if (m.has_validation_loss()) {
      validation = absl::StrCat(
          ",\"validation_loss\":", absl::StrFormat("%.6g", m.validation_loss()),
          ",\"validation_bits_per_byte\":", absl::StrFormat("%.6g", m.validation_bits_per_byte()));
    }
    items.push_back(absl::StrCat(
        "{\"id\":", JsonString(job.id()), ",\"name\":", JsonString(job.name()),
        ",\"state\":", JsonString(JobStateName(job.state())),
        // int64 as strings, as the protobuf JSON of get -o json
        // and of the stages here.
        ",\"step\":\"", m.step(), "\",\"total_steps\":\"", m.total_steps(), "\"", validation,
        // The header's job-level rate (0 before the first steps).
        ",\"samples_per_second\":", absl::StrFormat("%.6g", m.samples_per_second()),
        ",\"stages\":[", absl::StrJoin(stages, ","), "]}"));
  }
  return absl::StrCat("{\"jobs\":[", absl::StrJoin(items, ","), "]}");
}

absl::Status RunTop(CoordinatorClient& client, const TopOptions& options, std::ostream* out) {
  while (true) {
    std::vector<v1::Job> jobs;
    bool ended = false;
    if (!options.job_id.empty()) {
      DAPPLE_ASSIGN_OR_RETURN(v1::Job job, client.Get(options.job_id));
      ended = IsTerminal(job.state());
      jobs.push_back(std::move(job));
    } else {
      DAPPLE_ASSIGN_OR_RETURN(v1::ListJobsResponse list, client.List());
      // Oldest first, as the ids count up.
      for (auto it = list.jobs().rbegin(); it != list.jobs().rend(); ++it) {
        if (it->state() == v1::JOB_STATE_RUNNING) jobs.push_back(*it);
      }
    }
    if (options.json) {
      DAPPLE_ASSIGN_OR_RETURN(std::string line, TopToJson(jobs));
      *out << line << "\n" << std::flush;
    } else {
      // Home and clear, so the table redraws in place.
      if (options.terminal) *out << "\x1b[H\x1b[2J";
      *out << RenderTop(jobs) << std::flush;
    }
    if (options.once || ended) return absl::OkStatus();
    if (!options.terminal && !options.json) *out << "\n";
    options.sleep(options.interval);
  }
}

}  // namespace dapple::ctl
