#include "dapplectl/views.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/eval_metrics.h"
#include "common/utf8.h"
#include "dapplectl/checkpoint_views.h"
#include "dapplectl/format.h"
#include "dapplectl/progress.h"
#include "dapplectl/text_table.h"

namespace dapple::ctl {
namespace {

// What `get` and `plan` say about a job on emulated devices (parallel.device_type emulated).
constexpr char kEmulatedDevices[] =
    "emulated: each layer's compute is a wait of its profiled time; real-size activations "
    "travel; losses are not real";

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

std::string Ms(double ms) { return absl::StrFormat("%.2f", ms); }

std::string StepLine(const v1::ParallelPlanSummary& plan) {
  return absl::StrCat(Ms(plan.predicted_step_ms()), " ms/step, ",
                      FormatRate(plan.predicted_samples_per_second()), " samples/s");
}

}  // namespace

std::string PendingReasonText(const v1::Job& job) {
  if (job.state() != v1::JOB_STATE_PENDING) return "";
  const std::string& reason = job.pending_reason();
  const std::string& message = job.message();
  if (reason.empty()) return message;
  if (message.empty() || absl::StartsWith(message, reason)) {
    return message.empty() ? reason : message;
  }
  return absl::StrCat(reason, ": ", message);
}

std::string OwnerText(const v1::Job& job) {
  if (job.owner().empty()) return "";
  if (job.tenant().empty()) return job.owner();
  return absl::StrCat(job.owner(), "/", job.tenant());
}

std::string RenderJobScheduling(const v1::Job& job) {
  std::string out;
  AddField(&out, "OWNER", OrDash(job.owner()));
  AddField(&out, "TENANT",
           job.tenant().empty() && !job.owner().empty() ? "- (an admin's job: outside every quota)"
                                                        : OrDash(job.tenant()));
  AddField(&out, "PRIORITY", absl::StrCat(job.spec().priority()));
  AddField(&out, "PREEMPTIONS",
           job.last_preemption().empty()
               ? absl::StrCat(job.preemptions())
               : absl::StrCat(job.preemptions(), " (last: ", job.last_preemption(), ")"));
  return out;
}

std::string RenderRankMemory(const v1::Job& job) {
  if (job.stage_metrics().empty()) return "";
  std::string out;
  AddField(&out, "MEMORY", "measured per rank at its newest step");
  TextTable table({"STAGE", "REPLICA", "WORKER", "STEP", "IN FLIGHT", "ACTIVATIONS", "WEIGHTS",
                   "VERSIONS", "VERSION BYTES", "PEAK"});
  for (const v1::StageMetrics& sm : job.stage_metrics()) {
    const v1::StageStepStats& s = sm.last();
    // A worker that predates weight-version accounting reports 0 versions: unknown, not none.
    const bool versions = s.weight_versions() > 0;
    table.AddRow({absl::StrCat(sm.stage()), absl::StrCat(sm.replica()), OrDash(sm.worker_id()),
                  absl::StrCat(s.step()), absl::StrCat(s.peak_in_flight()),
                  FormatBytes(s.peak_activation_bytes()), FormatBytes(s.weight_bytes()),
                  versions ? absl::StrCat(s.weight_versions()) : "-",
                  versions ? FormatBytes(s.weight_version_bytes()) : "-",
                  FormatBytes(s.peak_memory_bytes())});
  }
  out += table.Render("  ");
  return out;
}

std::string CompactDevices(const google::protobuf::RepeatedPtrField<std::string>& devices) {
  std::vector<std::string> parts;
  std::string prefix;  // "<node>/" of the open run, empty when none is open
  int64_t first = 0;
  int64_t last = 0;
  auto close_run = [&] {
    if (prefix.empty()) return;
    parts.push_back(first == last ? absl::StrCat(prefix, first)
                                  : absl::StrCat(prefix, first, "-", last));
    prefix.clear();
  };
  for (const std::string& d : devices) {
    const size_t slash = d.rfind('/');
    int64_t index = 0;
    if (slash == std::string::npos || !absl::SimpleAtoi(d.substr(slash + 1), &index)) {
      close_run();
      parts.push_back(d);
      continue;
    }
    const std::string node = d.substr(0, slash + 1);
    if (node == prefix && index == last + 1) {
      last = index;
      continue;
    }
    close_run();
    prefix = node;
    first = last = index;
  }
  close_run();
  return absl::StrJoin(parts, ",");
}

namespace {

// A stage's layers: "0-2", or an interleaved stage's chunks in chunk order, "0-1,4-5" (chunk c
// is virtual stage c * P + s, PlanStageSummary.chunks).
std::string StageLayers(const v1::PlanStageSummary& s) {
  if (s.chunks_size() <= 1) return absl::StrCat(s.first_layer(), "-", s.last_layer());
  std::vector<std::string> parts;
  for (const v1::StageRange& c : s.chunks()) {
    parts.push_back(absl::StrCat(c.first_layer(), "-", c.last_layer()));
  }
  return absl::StrJoin(parts, ",");
}

// Activation recomputation gets a column in the stage tables of `plan` and `get` when a stage
// recomputes (training.recompute).
bool AnyStageRecomputes(const v1::ParallelPlanSummary& plan) {
  for (const v1::PlanStageSummary& s : plan.stages()) {
    if (s.recompute()) return true;
  }
  return false;
}

}  // namespace

std::string RenderPlan(const v1::ParallelPlanSummary& plan, const v1::ClusterTopology& cluster) {
  std::string out;
  const bool recompute = AnyStageRecomputes(plan);
  std::vector<std::string> headers = {"STAGE",      "LAYERS",      "REPLICAS", "DEVICES",
                                      "COMPUTE MS", "PEAK MEMORY", "BUBBLE"};
  if (recompute) headers.push_back("RECOMPUTE");
  TextTable stages(headers);
  for (int i = 0; i < plan.stages_size(); ++i) {
    const v1::PlanStageSummary& s = plan.stages(i);
    std::vector<std::string> row = {absl::StrCat(i),
                                    StageLayers(s),
                                    absl::StrCat(s.replicas()),
                                    OrDash(CompactDevices(s.placement())),
                                    Ms(s.compute_ms()),
                                    FormatBytes(s.peak_memory_bytes()),
                                    FormatPercent(s.bubble_fraction())};
    if (recompute) row.push_back(s.recompute() ? "yes" : "no");
    stages.AddRow(row);
  }
  out += stages.Render();
  AddField(&out, "STEP", absl::StrCat(Ms(plan.predicted_step_ms()), " ms (predicted)"));
  AddField(&out, "SAMPLES/S", FormatRate(plan.predicted_samples_per_second()));
  AddField(&out, "PLANNER",
           plan.placement_policy().empty()
               ? OrDash(plan.planner())
               : absl::StrCat(plan.planner(), " (placement ", plan.placement_policy(), ")"));
  AddField(&out, "SCHEDULE", OrDash(plan.schedule()));
  AddField(
      &out, "M",
      absl::StrCat(plan.micro_batches(),
                   plan.micro_batches() == 1 ? " micro-batch of " : " micro-batches of ",
                   plan.micro_batch_size(), plan.micro_batch_size() == 1 ? " sample" : " samples"));
  AddField(&out, "BUBBLE", FormatPercent(plan.bubble_fraction()));
  AddField(&out, "PROFILE", OrDash(plan.profile_source()));
  if (plan.emulated()) AddField(&out, "DEVICES", kEmulatedDevices);
  int devices = 0;
  for (const v1::ClusterNode& node : cluster.nodes()) devices += node.devices();
  AddField(&out, "CLUSTER",
           absl::StrCat(OrDash(plan.cluster_source()), " (", plan.num_devices(), " of ", devices,
                        devices == 1 ? " device used)" : " devices used)"));
  for (const std::string& note : plan.notes()) AddField(&out, "NOTE", note);
  out += RenderPlanAlternatives(plan);
  return out;
}

namespace {

// An alternative's recomputation: its setting, and for auto what the planner made of it (the
// layout marks a recomputing stage with "r": "4x2r"), so that an auto row equal to the none row
// says why.
std::string RecomputeText(const v1::PlanAlternative& a) {
  if (a.recompute() != "auto" || !a.fits() || a.layout().empty()) return a.recompute();
  const std::vector<std::string> stages = absl::StrSplit(a.layout(), ' ', absl::SkipEmpty());
  const auto recomputing = std::count_if(
      stages.begin(), stages.end(), [](const std::string& s) { return absl::EndsWith(s, "r"); });
  if (recomputing == 0) return "auto: none";
  return absl::StrCat("auto: ", recomputing, " of ", stages.size());
}

}  // namespace

std::string RenderPlanAlternatives(const v1::ParallelPlanSummary& plan) {
  if (plan.alternatives().empty()) return "";
  std::string out = "\nALTERNATIVES (each planned and simulated on its own)\n";
  TextTable table(
      {"", "SCHEDULE", "RECOMPUTE", "P", "LAYOUT", "M", "STEP MS", "BUBBLE", "PEAK MEMORY"});
  std::vector<std::string> refused;
  for (const v1::PlanAlternative& a : plan.alternatives()) {
    // Interleaved 1F1B once per v: "interleaved v=2".
    const std::string schedule =
        a.interleave() > 0 ? absl::StrCat(a.schedule(), " v=", a.interleave()) : a.schedule();
    if (!a.fits()) {
      table.AddRow({a.chosen() ? "*" : "", schedule, a.recompute(), "-", "-", "-", "-", "-",
                    "no plan fits"});
      refused.push_back(absl::StrCat(schedule, " (recompute ", a.recompute(), "): ", a.refused()));
      continue;
    }
    const std::vector<int64_t> memory(a.peak_memory_bytes().begin(), a.peak_memory_bytes().end());
    table.AddRow({a.chosen() ? "*" : "", schedule, RecomputeText(a),
                  absl::StrCat(a.peak_memory_bytes_size()), OrDash(a.layout()),
                  absl::StrCat(a.micro_batches()), Ms(a.predicted_step_ms()),
                  FormatPercent(a.bubble_fraction()), FormatByteList(memory)});
  }
  out += table.Render();
  AddField(&out, "CHOSEN", OrDash(plan.choice_reason()));
  for (const std::string& line : refused) AddField(&out, "REFUSED", line);
  return out;
}

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
  // A pending job's message is why it waits: shown with its stable reason name.
  if (job.state() == v1::JOB_STATE_PENDING && !job.pending_reason().empty()) {
    AddField(&out, "REASON", PendingReasonText(job));
  } else {
    AddField(&out, "MESSAGE", OrDash(job.message()));
  }
  AddField(&out, "AGE", AgeSince(job.created_unix_ms(), now_unix_ms));

  const v1::ParallelPlanSummary& plan = job.plan();
  if (plan.stages().empty()) {
    AddField(&out, "PLAN", "- (not planned yet)");
  } else {
    AddField(
        &out, "PLAN",
        absl::StrCat("planner ", OrDash(plan.planner()), ", schedule ", OrDash(plan.schedule()),
                     ", ", plan.stages_size(), plan.stages_size() == 1 ? " stage" : " stages",
                     plan.emulated() ? " (emulated)" : ""));
    if (plan.emulated()) AddField(&out, "DEVICES", kEmulatedDevices);
    AddField(&out, "M", absl::StrCat(plan.micro_batches()));
    AddField(&out, "MICRO-BATCH", absl::StrCat(plan.micro_batch_size()));
    AddField(&out, "BUBBLE", FormatPercent(plan.bubble_fraction()));
    // parallel.schedule auto: why this schedule (`plan` shows the alternatives).
    if (!plan.choice_reason().empty()) AddField(&out, "CHOSEN", plan.choice_reason());
    const bool predicted = plan.predicted_step_ms() > 0;
    if (predicted) {
      AddField(&out, "PREDICTED", StepLine(plan));
      AddField(&out, "PROFILE", OrDash(plan.profile_source()));
    }
    std::vector<std::string> headers = {"STAGE", "LAYERS", "REPLICAS", "WORKERS", "DEVICES"};
    if (predicted) {
      for (const char* h : {"COMPUTE MS", "PEAK MEMORY", "BUBBLE"}) headers.push_back(h);
    }
    const bool recompute = AnyStageRecomputes(plan);
    if (recompute) headers.push_back("RECOMPUTE");
    TextTable stages(std::move(headers));
    for (int i = 0; i < plan.stages_size(); ++i) {
      const v1::PlanStageSummary& s = plan.stages(i);
      std::vector<std::string> row = {absl::StrCat(i), StageLayers(s), absl::StrCat(s.replicas()),
                                      OrDash(absl::StrJoin(s.worker_ids(), ",")),
                                      OrDash(absl::StrJoin(s.devices(), ","))};
      if (predicted) {
        row.push_back(Ms(s.compute_ms()));
        row.push_back(FormatBytes(s.peak_memory_bytes()));
        row.push_back(FormatPercent(s.bubble_fraction()));
      }
      if (recompute) row.push_back(s.recompute() ? "yes" : "no");
      stages.AddRow(std::move(row));
    }
    out += stages.Render("  ");
    for (const std::string& note : plan.notes()) AddField(&out, "NOTE", note);
  }

  const v1::JobMetrics& m = job.metrics();
  AddField(&out, "STEP", FormatSteps(m.step(), m.total_steps()));
  AddField(&out, "EPOCH",
           m.epochs() > 0 ? absl::StrCat(m.epoch(), "/", m.epochs()) : absl::StrCat(m.epoch()));
  AddField(&out, "LOSS",
           m.step() > 0
               ? absl::StrCat(FormatLoss(m.loss()), plan.emulated() ? " (emulated, not real)" : "")
               : "-");
  AddField(&out, "SAMPLES/S",
           m.samples_per_second() > 0 ? FormatRate(m.samples_per_second()) : "-");
  // Every rank skips a non-finite step together, so the most any rank counted is the job's.
  int64_t skipped = 0;
  for (const v1::StageMetrics& sm : job.stage_metrics()) {
    skipped = std::max(skipped, sm.skipped_steps());
  }
  if (skipped > 0) {
    AddField(&out, "SKIPPED STEPS",
             absl::StrCat(skipped, " (a non-finite loss or gradient; at most ",
                          job.spec().training().max_consecutive_skipped_steps(), " in a row)"));
  }
  if (EvaluatesValidationSplit(job.spec())) {
    AddField(&out, "VAL LOSS",
             m.has_validation_loss()
                 ? absl::StrCat(FormatLoss(m.validation_loss()), " (step ", m.eval_step(), ")")
                 : "-");
    AddField(&out, "BITS/BYTE",
             m.has_validation_bits_per_byte() ? FormatLoss(m.validation_bits_per_byte()) : "-");
    AddField(&out, "VAL ACCURACY",
             m.has_validation_accuracy() ? FormatPercent(m.validation_accuracy()) : "-");
  } else {
    AddField(&out, "TEST ACCURACY", m.has_test_accuracy() ? FormatPercent(m.test_accuracy()) : "-");
    AddField(&out, "TEST LOSS", m.has_test_loss() ? FormatLoss(m.test_loss()) : "-");
  }
  AddField(&out, "ELAPSED", FormatClock(m.elapsed_seconds()));
  if (!IsTerminal(job.state())) AddField(&out, "ETA", FormatClock(EstimateEtaSeconds(m)));
  out += RenderRankMemory(job);
  out += RenderCheckpoints(job, now_unix_ms);
  out += RenderSample(job);
  return out;
}

// The prompt between double quotes as C would write it ("\n", "\"") but in UTF-8: a prompt of
// "é😀" read "\303\251\360\237\230\200" through absl::CEscape.
std::string QuotedPrompt(const std::string& prompt) {
  return QuotableText(absl::StrReplaceAll(
      prompt, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}, {"\t", "\\t"}, {"\r", "\\r"}}));
}

std::string RenderSample(const v1::Job& job) {
  if (job.sample_text().empty()) return "";
  const v1::SampleSpec& sample = job.spec().sample();
  std::string out;
  AddField(&out, "SAMPLE",
           absl::StrFormat("%d bytes generated after sample.prompt \"%s\", temperature %s",
                           sample.tokens(), QuotedPrompt(sample.prompt()),
                           absl::StrCat(sample.temperature())));
  for (absl::string_view line : absl::StrSplit(job.sample_text(), '\n')) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  return out;
}

std::string RenderJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                          int64_t now_unix_ms) {
  if (jobs.empty()) return "no jobs\n";
  // Language models' headline metric gets a column when the list holds one.
  bool validation = false;
  // OWNER when a job has one (coordinators with authentication), REASON when one waits.
  bool owners = false;
  bool reasons = false;
  for (const v1::Job& job : jobs) {
    validation |= EvaluatesValidationSplit(job.spec());
    owners |= !job.owner().empty();
    reasons |= !PendingReasonText(job).empty();
  }
  std::vector<std::string> headers = {"ID", "NAME"};
  if (owners) headers.push_back("OWNER");
  for (const char* h : {"STATE", "STEP", "LOSS", "TEST ACC"}) headers.push_back(h);
  if (validation) headers.push_back("VAL LOSS");
  headers.push_back("AGE");
  // Last: the reason is a sentence that would push every other column apart.
  if (reasons) headers.push_back("REASON");
  TextTable table(std::move(headers));
  for (const v1::Job& job : jobs) {
    const v1::JobMetrics& m = job.metrics();
    const bool started = m.step() > 0 || m.total_steps() > 0;
    std::vector<std::string> row = {job.id(), OrDash(job.name())};
    if (owners) row.push_back(OrDash(OwnerText(job)));
    row.push_back(JobStateName(job.state()));
    row.push_back(started ? FormatSteps(m.step(), m.total_steps()) : "-");
    row.push_back(m.step() > 0 ? FormatLoss(m.loss()) : "-");
    row.push_back(m.has_test_accuracy() ? FormatPercent(m.test_accuracy()) : "-");
    if (validation) {
      row.push_back(m.has_validation_loss() ? FormatLoss(m.validation_loss()) : "-");
    }
    row.push_back(AgeSince(job.created_unix_ms(), now_unix_ms));
    if (reasons) row.push_back(OrDash(PendingReasonText(job)));
    table.AddRow(std::move(row));
  }
  return table.Render();
}

std::string RenderWorkerList(const google::protobuf::RepeatedPtrField<v1::WorkerInfo>& workers,
                             int64_t now_unix_ms) {
  if (workers.empty()) return "no workers\n";
  TextTable table({"ID", "HOSTNAME", "PID", "DEVICES", "STATE", "JOB", "STAGE", "HEARTBEAT",
                   "MEMORY", "CAPACITY", "LINK"});
  for (const v1::WorkerInfo& w : workers) {
    const bool busy = w.state() == v1::WORKER_STATE_BUSY;
    // Another tenant's work comes without job id and stage (the coordinator clears both): its
    // stage is unknown, not stage 0.
    const bool known_job = busy && !w.job_id().empty();
    const std::string heartbeat = AgeSince(w.last_heartbeat_unix_ms(), now_unix_ms);
    table.AddRow(
        {w.id(), OrDash(w.hostname()), absl::StrCat(w.pid()),
         // The GPU's UUID prefix tells workers that share one GPU (docs/planner.md).
         OrDash(absl::StrCat(absl::StrJoin(w.devices(), ","),
                             w.physical_device().empty()
                                 ? ""
                                 : absl::StrCat(" (", w.physical_device().substr(0, 12), ")"))),
         WorkerStateName(w.state()), known_job ? w.job_id() : "-",
         known_job ? absl::StrCat(w.stage()) : "-",
         heartbeat == "-" ? heartbeat : absl::StrCat(heartbeat, " ago"),
         // What the planner knows of the worker's host (docs/planner.md): its device's
         // memory (a cpu worker's host RAM, which its host's cpu workers share), the
         // host's compute capacity and loopback link as the worker measured them.
         w.device_memory_bytes() > 0 ? absl::StrCat(FormatBytes(w.device_memory_bytes()),
                                                    w.device_memory_shared() ? " shared" : "")
                                     : "-",
         w.host_compute_capacity() > 0 ? absl::StrFormat("%.2f", w.host_compute_capacity()) : "-",
         w.has_loopback_link()
             ? absl::StrFormat("%.0f MB/s %.2f ms", w.loopback_link().bandwidth_bytes_per_s() / 1e6,
                               w.loopback_link().latency_ms())
             : "-"});
  }
  return table.Render();
}

}  // namespace dapple::ctl
