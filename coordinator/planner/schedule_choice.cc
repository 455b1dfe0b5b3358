#include "coordinator/planner/schedule_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/interleaved_partition.h"
#include "coordinator/planner/stage_memory.h"

namespace dapple::coordinator {
namespace {

using schedule::ScheduleKind;

// Steps closer than this (relative) are a tie, which less peak memory and then the earlier
// option (dapple first) win: the simulator's sums differ in the last bits between plans that
// run the same work in another order, and a gain under 1% is inside what the model can tell on
// a real host (measured against predicted steps read 0.9-1.1). A fresh user saw zb-h2 chosen
// over dapple for one replicated stage, "0.0% faster" (29.37 against 29.38 ms: the deferred
// non-finite check saved the barrier's AllGather latency) at a larger peak memory.
constexpr double kTie = 0.01;
// Peak memories this close (relative) read as "the same peak memory" in the reason.
constexpr double kSameMemory = 0.01;

bool Faster(double a, double b) { return a < b * (1 - kTie); }

// a beats b: faster, or as fast with less peak memory (the earlier option wins what remains).
bool Beats(const PlannedJob& a, const PlannedJob& b) {
  if (Faster(a.prediction.step_ms, b.prediction.step_ms)) return true;
  if (Faster(b.prediction.step_ms, a.prediction.step_ms)) return false;
  return MaxPeakMemory(a.prediction) < MaxPeakMemory(b.prediction);
}

std::string Percent(double fraction) { return absl::StrFormat("%.1f%%", 100 * fraction); }

// "at the same peak memory" / "at 0.62x its peak memory".
std::string MemoryWords(const PlannedJob& chosen, const PlannedJob& base) {
  const double a = static_cast<double>(MaxPeakMemory(chosen.prediction));
  const double b = static_cast<double>(MaxPeakMemory(base.prediction));
  if (b <= 0 || std::abs(a - b) <= kSameMemory * b) return "at the same peak memory";
  return absl::StrFormat("at %.2fx its peak memory", a / b);
}

}  // namespace

const std::vector<CandidateSchedule>& CandidateSchedules() {
  static const std::vector<CandidateSchedule>* const kCandidates =
      new std::vector<CandidateSchedule>{
          {ScheduleKind::kDapple, /*splits_backward=*/false},
          {ScheduleKind::kZbH1, /*splits_backward=*/true},
          {ScheduleKind::kZbH2, /*splits_backward=*/true},
          {ScheduleKind::kInterleaved, /*splits_backward=*/false},
          {ScheduleKind::kGPipe, /*splits_backward=*/false},
      };
  return *kCandidates;
}

absl::string_view RecomputeModeName(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kAll:
      return "all";
    case RecomputeMode::kAuto:
      return "auto";
    case RecomputeMode::kNone:
      break;
  }
  return "none";
}

std::string OptionName(const ScheduleOption& option) {
  std::string name(schedule::ScheduleKindName(option.schedule));
  if (option.schedule == ScheduleKind::kInterleaved && option.interleave > 0) {
    absl::StrAppend(&name, " v=", option.interleave);
  }
  if (option.recompute != RecomputeMode::kNone) {
    absl::StrAppend(&name, " with recompute ", RecomputeModeName(option.recompute));
  }
  return name;
}

std::vector<ScheduleOption> ScheduleOptions(const ChoiceLimits& limits) {
  std::vector<RecomputeMode> modes;
  if (limits.recompute == "none") {
    modes = {RecomputeMode::kNone};
  } else if (limits.recompute == "all") {
    modes = {RecomputeMode::kAll};
  } else if (limits.recompute == "auto" || limits.choose_schedule) {
    modes = {RecomputeMode::kNone, RecomputeMode::kAuto};
  } else {
    modes = {RecomputeMode::kNone};
  }
  std::vector<CandidateSchedule> schedules;
  if (limits.choose_schedule) {
    schedules = CandidateSchedules();
  } else {
    CandidateSchedule fixed{limits.schedule, false};
    for (const CandidateSchedule& c : CandidateSchedules()) {
      if (c.kind == limits.schedule) fixed = c;
    }
    schedules = {fixed};
  }
  std::vector<ScheduleOption> options;
  for (const CandidateSchedule& c : schedules) {
    if (c.kind == ScheduleKind::kInterleaved) {
      // Only where the job allows it (limits.interleave: checked by the caller), one option per
      // v; a fixed interleaved schedule is planned with its spec's v (problem.interleave).
      if (limits.choose_schedule) {
        for (int v : limits.interleave) options.push_back({c.kind, RecomputeMode::kNone, v});
        continue;
      }
      options.push_back({c.kind, modes.front(), 0});
      continue;
    }
    for (RecomputeMode mode : modes) {
      if (c.splits_backward && mode != RecomputeMode::kNone) continue;
      options.push_back({c.kind, mode});
    }
  }
  // recompute all with a fixed splitting schedule is refused at submit; keep the spec's own
  // option so that the planner reports on it rather than on nothing.
  if (options.empty()) options.push_back({limits.schedule, modes.front()});
  return options;
}

absl::StatusOr<ScheduleChoice> ChooseSchedule(
    const PlanningProblem& problem, const std::vector<ScheduleOption>& options,
    const std::function<absl::StatusOr<PlannedJob>(const PlanningProblem&)>& plan) {
  if (options.empty()) {
    return absl::InvalidArgumentError("no schedule to plan for (the option list is empty)");
  }
  ScheduleChoice choice;
  for (const ScheduleOption& option : options) {
    PlanningProblem with = problem;
    with.schedule = option.schedule;
    with.recompute = option.recompute;
    // 0: a fixed interleaved schedule keeps the problem's v (the spec's).
    if (option.interleave > 0) with.interleave = option.interleave;
    Alternative alternative;
    alternative.option = option;
    absl::StatusOr<PlannedJob> planned = plan(with);
    if (planned.ok()) {
      // The stages that recompute, fixed in the plan itself: its layout says so and the
      // summary, built under any recompute mode, agrees.
      if (option.recompute != RecomputeMode::kNone) {
        planned->plan = WithRecompute(with, std::move(planned->plan), option.schedule);
      }
      alternative.planned = *std::move(planned);
      if (choice.chosen < 0 ||
          Beats(alternative.planned, choice.alternatives[choice.chosen].planned)) {
        choice.chosen = static_cast<int>(choice.alternatives.size());
      }
    } else {
      alternative.status = planned.status();
    }
    choice.alternatives.push_back(std::move(alternative));
  }
  return choice;
}

int64_t MaxPeakMemory(const Prediction& prediction) {
  int64_t peak = 0;
  for (const StagePrediction& s : prediction.stages) peak = std::max(peak, s.peak_memory_bytes);
  return peak;
}

std::string LayoutText(const HybridPlan& plan) {
  std::string out;
  for (const StagePlan& stage : plan.stages) {
    int layers = stage.last_layer - stage.first_layer + 1;
    if (!stage.chunks.empty()) {
      layers = 0;
      for (const v1::StageRange& r : stage.chunks) layers += r.last_layer() - r.first_layer() + 1;
    }
    absl::StrAppend(&out, out.empty() ? "" : " ", layers, "x", stage.devices.size(),
                    stage.recompute ? "r" : "");
  }
  return out;
}

// Whether `a` is a recompute option whose plan recomputes no stage while the same schedule
// without recomputation fits too: the very plan under another name, no runner-up of its own (a
// reason once read "dapple: within 1% of dapple with recompute auto's step").
bool RecomputesNothingNew(const Alternative& a, const ScheduleChoice& choice) {
  if (a.option.recompute == RecomputeMode::kNone || !a.status.ok()) return false;
  for (const StagePlan& stage : a.planned.plan.stages) {
    if (stage.recompute) return false;
  }
  for (const Alternative& b : choice.alternatives) {
    if (b.option.recompute == RecomputeMode::kNone && b.option.schedule == a.option.schedule &&
        b.option.interleave == a.option.interleave && b.status.ok()) {
      return true;
    }
  }
  return false;
}

std::string ChoiceReason(const ScheduleChoice& choice) {
  if (choice.chosen < 0) return "";
  const Alternative& chosen = choice.alternatives[static_cast<size_t>(choice.chosen)];
  const Alternative& base = choice.alternatives.front();
  const std::string name = OptionName(chosen.option);
  const std::string base_name = OptionName(base.option);
  if (choice.chosen == 0) {
    // The runner-up: the fastest of the others that fit.
    const Alternative* next = nullptr;
    for (size_t i = 1; i < choice.alternatives.size(); ++i) {
      const Alternative& a = choice.alternatives[i];
      if (!a.status.ok() || RecomputesNothingNew(a, choice)) continue;
      if (next == nullptr || Beats(a.planned, next->planned)) next = &a;
    }
    if (next == nullptr) return absl::StrCat(name, ": the only alternative that fits");
    const double slower = next->planned.prediction.step_ms / chosen.planned.prediction.step_ms - 1;
    if (!Faster(chosen.planned.prediction.step_ms, next->planned.prediction.step_ms)) {
      return absl::StrCat(name, ": within 1% of ", OptionName(next->option),
                          "'s step and listed first (the simpler schedule, or less peak memory)");
    }
    return absl::StrCat(name, ": no alternative is faster (next: ", OptionName(next->option), ", ",
                        Percent(slower), " slower)");
  }
  if (!base.status.ok()) {
    return absl::StrCat(name, ": the fastest that fits; ", base_name,
                        " fits no plan in device memory");
  }
  const double faster = 1 - chosen.planned.prediction.step_ms / base.planned.prediction.step_ms;
  if (!Faster(chosen.planned.prediction.step_ms, base.planned.prediction.step_ms)) {
    return absl::StrCat(name, ": within 1% of ", base_name, "'s step with less peak memory (",
                        MemoryWords(chosen.planned, base.planned), ")");
  }
  return absl::StrCat(name, ": ", Percent(faster), " faster than ", base_name, " ",
                      MemoryWords(chosen.planned, base.planned));
}

std::vector<std::string> LeftOutNotes(const ChoiceLimits& limits) {
  if (!limits.choose_schedule) return {};
  std::vector<std::string> notes;
  if (limits.interleave.empty() && !limits.interleave_left_out.empty()) {
    notes.push_back(absl::StrCat("parallel.schedule auto: interleaved 1F1B was not considered (",
                                 limits.interleave_left_out, ")"));
  }
  std::vector<std::string> split;
  for (const CandidateSchedule& c : CandidateSchedules()) {
    if (c.splits_backward) split.emplace_back(schedule::ScheduleKindName(c.kind));
  }
  const std::string names = absl::StrJoin(split, " and ");
  if (limits.recompute == "all") {
    notes.push_back(absl::StrCat("parallel.schedule auto with training.recompute all: ", names,
                                 " were not considered (a recomputed forward does not outlive "
                                 "their split backward; set recompute auto or none to include "
                                 "them)"));
  }
  return notes;
}

std::string NoneFitsNote(const ScheduleChoice& choice, const Alternative& reported) {
  if (choice.chosen >= 0 || choice.alternatives.size() < 2) return "";
  std::vector<std::string> names;
  bool one_schedule = true;  // only recompute auto made the alternatives
  for (const Alternative& a : choice.alternatives) {
    names.push_back(OptionName(a.option));
    one_schedule = one_schedule && a.option.schedule == reported.option.schedule &&
                   a.option.interleave == reported.option.interleave;
  }
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(" (", one_schedule ? "training.recompute" : "parallel.schedule",
                      " auto planned ", absl::StrJoin(names, ", "), " and ", last,
                      ": none fits; the need above is ", OptionName(reported.option), "'s)");
}

void AddAlternatives(const ScheduleChoice& choice, v1::ParallelPlanSummary* summary) {
  if (choice.alternatives.size() < 2) return;
  for (size_t i = 0; i < choice.alternatives.size(); ++i) {
    const Alternative& a = choice.alternatives[i];
    v1::PlanAlternative* out = summary->add_alternatives();
    out->set_schedule(std::string(schedule::ScheduleKindName(a.option.schedule)));
    out->set_recompute(std::string(RecomputeModeName(a.option.recompute)));
    if (a.option.schedule == ScheduleKind::kInterleaved) {
      out->set_interleave(a.status.ok() ? ChunksOf(a.planned.plan) : a.option.interleave);
    }
    out->set_chosen(static_cast<int>(i) == choice.chosen);
    out->set_fits(a.status.ok());
    if (!a.status.ok()) {
      out->set_refused(std::string(a.status.message()));
      continue;
    }
    const PlannedJob& p = a.planned;
    out->set_layout(LayoutText(p.plan));
    out->set_micro_batches(p.plan.micro_batches);
    out->set_predicted_step_ms(p.prediction.step_ms);
    out->set_bubble_fraction(p.prediction.bubble_fraction);
    for (const StagePrediction& s : p.prediction.stages) {
      out->add_peak_memory_bytes(s.peak_memory_bytes);
    }
  }
  summary->set_choice_reason(ChoiceReason(choice));
}

}  // namespace dapple::coordinator
