#include "dapplectl/trace_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/schedule/action.h"

namespace dapple::ctl {
namespace {

// JSON has no NaN or infinity.
std::string Number(double v) { return std::isfinite(v) ? absl::StrFormat("%.9g", v) : "null"; }

std::string StatsArgs(const v1::StageStepStats& s) {
  return absl::StrCat(
      "\"step_seconds\": ", Number(s.step_seconds()),
      ", \"forward_seconds\": ", Number(s.forward_seconds()),
      ", \"backward_seconds\": ", Number(s.backward_seconds()),
      ", \"comm_seconds\": ", Number(s.comm_seconds()),
      ", \"idle_seconds\": ", Number(s.idle_seconds()),
      ", \"allreduce_seconds\": ", Number(s.allreduce_seconds()),
      ", \"optimizer_seconds\": ", Number(s.optimizer_seconds()),
      ", \"peak_in_flight\": ", s.peak_in_flight(),
      ", \"peak_activation_bytes\": ", s.peak_activation_bytes(),
      ", \"weight_bytes\": ", s.weight_bytes(), ", \"peak_memory_bytes\": ", s.peak_memory_bytes(),
      ", \"gradient_sq_norm\": ", Number(s.gradient_sq_norm()),
      ", \"learning_rate\": ", Number(s.learning_rate()), ", \"samples\": ", s.samples(),
      ", \"skipped\": ", s.skipped() ? "true" : "false");
}

}  // namespace

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string TraceEventCategory(v1::ActionKind kind) {
  switch (kind) {
    case v1::FORWARD:
      return "forward";
    case v1::BACKWARD:
    case v1::BACKWARD_INPUT:
    case v1::BACKWARD_WEIGHT:
      return "backward";
    case v1::SEND_ACT:
    case v1::SEND_GRAD:
      return "send";
    case v1::RECV_ACT:
    case v1::RECV_GRAD:
      return "recv";
    case v1::ALLREDUCE:
    case v1::TIED_ALLREDUCE:
    case v1::GLOBAL_NORM:
    case v1::GLOBAL_NORM_ASYNC:
    case v1::ALLREDUCE_ASYNC:
      return "allreduce";
    case v1::OPTIMIZER_STEP:
    case v1::STALE_OPTIMIZER_STEP:
    case v1::USE_WEIGHTS:
    case v1::RESTORE_WEIGHTS:
    case v1::STASH_WEIGHTS:
    case v1::DROP_WEIGHTS:
      return "optimizer";
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return "unknown";
}

std::string TraceEventName(const v1::TraceEvent& event) {
  const int m = event.micro_batch();
  switch (event.kind()) {
    case v1::FORWARD:
      return absl::StrCat("F", m);
    case v1::BACKWARD:
    case v1::BACKWARD_INPUT:
      return absl::StrCat("B", m);
    case v1::BACKWARD_WEIGHT:
      return absl::StrCat("W", m);
    case v1::SEND_ACT:
    case v1::RECV_ACT:
    case v1::SEND_GRAD:
    case v1::RECV_GRAD:
      return absl::StrCat(v1::ActionKind_Name(event.kind()), " ", m);
    case v1::ALLREDUCE:
    case v1::TIED_ALLREDUCE:
    case v1::GLOBAL_NORM:
    case v1::OPTIMIZER_STEP:
    case v1::USE_WEIGHTS:
    case v1::RESTORE_WEIGHTS:
    case v1::STASH_WEIGHTS:
    case v1::DROP_WEIGHTS:
    case v1::ALLREDUCE_ASYNC:
    case v1::STALE_OPTIMIZER_STEP:
    case v1::GLOBAL_NORM_ASYNC:
      return v1::ActionKind_Name(event.kind());
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::StrCat("action ", static_cast<int>(event.kind()));
}

TraceCounts CountTrace(const v1::JobTrace& trace) {
  std::set<int64_t> steps;
  std::set<std::pair<int, int>> ranks;
  for (const v1::StepTrace& s : trace.steps()) {
    steps.insert(s.step());
    ranks.insert({s.stage(), s.replica()});
  }
  return {static_cast<int>(steps.size()), static_cast<int>(ranks.size())};
}

std::string TraceToChromeJson(const v1::JobTrace& trace) {
  std::vector<const v1::StepTrace*> steps;
  for (const v1::StepTrace& s : trace.steps()) steps.push_back(&s);
  std::stable_sort(steps.begin(), steps.end(), [](const v1::StepTrace* a, const v1::StepTrace* b) {
    return std::make_tuple(a->stage(), a->replica(), a->step()) <
           std::make_tuple(b->stage(), b->replica(), b->step());
  });
  int64_t origin = 0;
  bool have_origin = false;
  for (const v1::StepTrace* s : steps) {
    int64_t first = s->start_us();
    for (const v1::TraceEvent& e : s->events()) first = std::min(first, e.start_us());
    if (!have_origin || first < origin) origin = first;
    have_origin = true;
  }
  std::vector<std::string> events;
  // Metadata: names and order of stages (processes) and replicas (threads); a rank's thread
  // is named after its newest traced step.
  std::map<int, bool> stages;
  std::map<std::pair<int, int>, const v1::StepTrace*> newest;
  for (const v1::StepTrace* s : steps) {
    stages[s->stage()] = true;
    newest[{s->stage(), s->replica()}] = s;  // sorted by step within the rank
  }
  for (const auto& [stage, unused] : stages) {
    const int pid = stage + 1;
    events.push_back(absl::StrFormat(
        R"({"ph": "M", "name": "process_name", "pid": %d, "tid": 0, "args": {"name": "stage %d"}})",
        pid, stage));
    events.push_back(absl::StrFormat(
        R"({"ph": "M", "name": "process_sort_index", "pid": %d, "tid": 0, "args": {"sort_index": %d}})",
        pid, stage));
  }
  for (const auto& [rank, s] : newest) {
    const int pid = rank.first + 1, tid = rank.second + 1;
    const std::string name =
        absl::StrCat("replica ", rank.second, " (", s->worker_id(), ", ", s->device(), ")");
    events.push_back(absl::StrFormat(
        R"({"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": %s}})", pid,
        tid, JsonString(name)));
    events.push_back(absl::StrFormat(
        R"({"ph": "M", "name": "thread_sort_index", "pid": %d, "tid": %d, "args": {"sort_index": %d}})",
        pid, tid, rank.second));
  }
  auto complete = [&](const std::string& name, const std::string& cat, int pid, int tid,
                      int64_t start_us, int64_t end_us, const std::string& args) {
    events.push_back(absl::StrFormat(
        R"({"ph": "X", "name": %s, "cat": "%s", "pid": %d, "tid": %d, "ts": %d, "dur": %d, "args": {%s}})",
        JsonString(name), cat, pid, tid, start_us - origin, std::max<int64_t>(0, end_us - start_us),
        args));
  };
  for (const v1::StepTrace* s : steps) {
    const int pid = s->stage() + 1, tid = s->replica() + 1;
    const std::string step_arg = absl::StrCat("\"step\": ", s->step());
    complete(absl::StrCat("step ", s->step()), "step", pid, tid, s->start_us(), s->end_us(),
             absl::StrCat(step_arg, ", ", StatsArgs(s->stats())));
    // Idle: from the step's start (or the previous busy action's end) to the next busy action.
    std::vector<std::pair<int64_t, int64_t>> idle;
    int64_t idle_from = s->start_us();
    for (const v1::TraceEvent& e : s->events()) {
      // A waiting action that computed first (GLOBAL_NORM's squared norm) is busy that long.
      const int64_t busy_end = schedule::KindIsWait(e.kind())
                                   ? std::min(e.end_us(), e.start_us() + e.busy_us())
                                   : e.end_us();
      if (busy_end <= e.start_us()) continue;
      if (e.start_us() > idle_from) idle.emplace_back(idle_from, e.start_us());
      idle_from = std::max(idle_from, busy_end);
    }
    if (s->end_us() > idle_from) idle.emplace_back(idle_from, s->end_us());
    // Each idle event goes before the actions it contains or precedes (nesting order).
    size_t next_idle = 0;
    auto idle_up_to = [&](int64_t t) {
      for (; next_idle < idle.size() && idle[next_idle].first <= t; ++next_idle) {
        complete("idle", "idle", pid, tid, idle[next_idle].first, idle[next_idle].second, step_arg);
      }
    };
    for (const v1::TraceEvent& e : s->events()) {
      idle_up_to(e.start_us());
      complete(TraceEventName(e), TraceEventCategory(e.kind()), pid, tid, e.start_us(), e.end_us(),
               absl::StrCat(step_arg, ", \"micro_batch\": ", e.micro_batch()));
    }
    idle_up_to(s->end_us());
  }
  std::set<int64_t> step_numbers;
  for (const v1::StepTrace* s : steps) step_numbers.insert(s->step());
  std::vector<std::string> step_list;
  for (int64_t n : step_numbers) step_list.push_back(absl::StrCat(n));
  const TraceCounts counts = CountTrace(trace);
  // Ranks on the emulated device (device_type emulated) report device "emulated": their
  // forward and backward spans are waits of profiled times, not compute.
  bool emulated = false;
  for (const v1::StepTrace* s : steps) emulated = emulated || s->device() == "emulated";
  std::string out = "{\"traceEvents\": [\n";
  out += absl::StrJoin(events, ",\n");
  out += absl::StrFormat(
      "\n], \"displayTimeUnit\": \"ms\", \"metadata\": {\"job_id\": %s, \"num_stages\": %d, "
      "\"traced_steps\": [%s], \"ranks\": %d, \"origin_unix_us\": %d, \"emulated\": %s, "
      "\"source\": \"dapplectl trace\"}}\n",
      JsonString(trace.job_id()), trace.num_stages(), absl::StrJoin(step_list, ", "), counts.ranks,
      origin, emulated ? "true" : "false");
  return out;
}

}  // namespace dapple::ctl
