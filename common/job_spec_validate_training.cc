// The rules of the training section of a job spec (ValidateJobSpec, job_spec.h): batch, epochs and
// steps, checkpoints, evaluation, the optimizer, the learning-rate schedule, non-finite steps and
// restarts. Each rule reports the YAML field it is about (Violation).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/spec_text.h"
#include "common/steps.h"

namespace dapple::job_spec_internal {
namespace {

// Upper bounds of the training fields, so that every product the system derives from them fits
// its type: total steps = epochs * floor(60000 / global_batch) <= 6e9 fits int64 and epochs fits
// JobMetrics' int32; samples seen = steps * global_batch < 2^63.
constexpr int64_t kMaxEpochs = 100000;
constexpr int64_t kMaxSteps = 1000000000;
constexpr double kMaxCheckpointEveryMinutes = 7 * 24 * 60;  // a week
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;

Check CheckUnitInterval(const std::string& field, double value) {
  if (!(value >= 0 && value < 1)) {
    return At(field, absl::StrFormat("%s %s must be in [0, 1)", field, FormatDouble(value)));
  }
  return std::nullopt;
}

Check CheckOptimizer(const v1::OptimizerSpec& opt) {
  if (!Contains(kKnownOptimizers, opt.type())) {
    return At("training.optimizer.type",
              absl::StrFormat("training.optimizer.type '%s' is unknown; known: %s", opt.type(),
                              absl::StrJoin(kKnownOptimizers, ", ")));
  }
  if (!(opt.lr() > 0 && std::isfinite(opt.lr()))) {
    return At(
        "training.optimizer.lr",
        absl::StrFormat("training.optimizer.lr %s must be > 0 and finite", FormatDouble(opt.lr())));
  }
  if (Check c = CheckUnitInterval("training.optimizer.momentum", opt.momentum())) return c;
  if (!(opt.weight_decay() >= 0 && std::isfinite(opt.weight_decay()))) {
    return At("training.optimizer.weight_decay",
              absl::StrFormat("training.optimizer.weight_decay %s must be >= 0 and finite",
                              FormatDouble(opt.weight_decay())));
  }
  if (Check c = CheckUnitInterval("training.optimizer.beta1", opt.beta1())) return c;
  if (Check c = CheckUnitInterval("training.optimizer.beta2", opt.beta2())) return c;
  // eps only enters AdamW's update; a hand-built sgd spec may leave it 0.
  const bool eps_ok =
      std::isfinite(opt.eps()) && (opt.type() == "adamw" ? opt.eps() > 0 : opt.eps() >= 0);
  if (!eps_ok) {
    return At("training.optimizer.eps",
              absl::StrFormat("training.optimizer.eps %s must be > 0 and finite",
                              FormatDouble(opt.eps())));
  }
  return std::nullopt;
}

// "the job's 468 steps (training.epochs 2 x 234 steps per epoch)", or "(training.max_steps)"
// when max_steps ends it first: what a setting counting steps is measured against.
std::string JobLength(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  const int64_t total = TotalSteps(spec);
  return t.max_steps() > 0 && t.max_steps() == total
             ? absl::StrFormat("the job's %d steps (training.max_steps)", total)
             : absl::StrFormat("the job's %d steps (training.epochs %d x %d steps per epoch)",
                               total, t.epochs(), StepsPerEpoch(spec));
}

// The settings that count steps, against the job's length when it is known (fashion-mnist at
// parse, a text file once the coordinator read it): one the job ends before reaching does
// nothing, which docs/job_spec.md counts as a mistake. A max_steps beyond the epochs was the
// trap of examples/gpt_kjv.yaml's first draft (1600 steps asked, 996 run); a checkpoint
// interval beyond the job takes no checkpoint, so a restart would resume from step 0.
Check CheckStepCounts(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  const int64_t per_epoch = StepsPerEpoch(spec);
  if (per_epoch <= 0) return Check();
  const int64_t by_epochs = int64_t{t.epochs()} * per_epoch;
  if (t.max_steps() > by_epochs) {
    return At("training.max_steps",
              absl::StrFormat("training.max_steps %d is more than the job's %d steps "
                              "(training.epochs %d x %d steps per epoch): training stops when "
                              "its epochs end; raise training.epochs to %d, or set max_steps to "
                              "at most %d",
                              t.max_steps(), by_epochs, t.epochs(), per_epoch,
                              (t.max_steps() + per_epoch - 1) / per_epoch, by_epochs));
  }
  const int64_t total = TotalSteps(spec);
  const struct {
    const char* key;
    int64_t value;
    const char* beyond;  // what a value past the job's end does
    const char* zero;    // what 0 means
  } intervals[] = {
      {"checkpoint_every_steps", t.checkpoint_every_steps(),
       "no checkpoint would be taken (a restart would resume from step 0)", "only on demand"},
      {"eval_every_steps", t.eval_every_steps(),
       "the job evaluates after its last step anyway, and never before", "after every epoch"},
  };
  for (const auto& every : intervals) {
    if (every.value > total) {
      return At(absl::StrCat("training.", every.key),
                absl::StrFormat("training.%s %d is more than %s: %s; set %s to at most %d (0: %s)",
                                every.key, every.value, JobLength(spec), every.beyond, every.key,
                                total, every.zero));
    }
  }
  return Check();
}

Check CheckLrSchedule(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  if (!t.has_lr_schedule()) return std::nullopt;
  const v1::LrSchedule& l = t.lr_schedule();
  if (l.warmup_steps() < 0) {
    return At(
        "training.lr_schedule.warmup_steps",
        absl::StrFormat("training.lr_schedule.warmup_steps %d must be >= 0", l.warmup_steps()));
  }
  if (Check c = CheckAtMost("training.lr_schedule.warmup_steps", l.warmup_steps(), kMaxSteps)) {
    return c;
  }
  if (!Contains(kLrDecays, l.decay())) {
    return At("training.lr_schedule.decay",
              absl::StrFormat("training.lr_schedule.decay '%s' is unknown; known: %s", l.decay(),
                              absl::StrJoin(kLrDecays, ", ")));
  }
  if (!(l.min_lr() >= 0 && l.min_lr() <= t.optimizer().lr())) {
    return At("training.lr_schedule.min_lr",
              absl::StrFormat("training.lr_schedule.min_lr %s must be in [0, "
                              "training.optimizer.lr %s]: the schedule decays the learning rate "
                              "from lr down to min_lr: set min_lr to at most %s",
                              FormatDouble(l.min_lr()), FormatDouble(t.optimizer().lr()),
                              FormatDouble(t.optimizer().lr())));
  }
  if (l.decay_steps() < 0) {
    return At("training.lr_schedule.decay_steps",
              absl::StrFormat("training.lr_schedule.decay_steps %d must be >= 0 (0 = the job's "
                              "total steps)",
                              l.decay_steps()));
  }
  if (Check c = CheckAtMost("training.lr_schedule.decay_steps", l.decay_steps(), kMaxSteps)) {
    return c;
  }
  // What only the cosine decay reads: set with decay none, it would change nothing.
  if (l.decay() != "cosine") {
    const std::string decay = l.decay().empty() ? "none" : l.decay();
    if (l.min_lr() != 0) {
      return At("training.lr_schedule.min_lr",
                absl::StrFormat("training.lr_schedule.min_lr %s has no effect with "
                                "training.lr_schedule.decay %s: only the cosine decay ends at "
                                "min_lr; add decay: cosine, or remove min_lr",
                                FormatDouble(l.min_lr()), decay));
    }
    if (l.decay_steps() != 0) {
      return At("training.lr_schedule.decay_steps",
                absl::StrFormat("training.lr_schedule.decay_steps %d has no effect with "
                                "training.lr_schedule.decay %s: it is where the cosine decay "
                                "ends; add decay: cosine, or remove decay_steps",
                                l.decay_steps(), decay));
    }
  }
  // Against the job's length (when it is known here: a text file's sample count is resolved
  // at submit): a warm-up or a decay that the job ends before finishing never gives the rate
  // the spec names (a shortened run of examples/gpt_kjv.yaml ended at 0.3 x optimizer.lr).
  // Unresolved text (no steps per epoch yet): training.max_steps still bounds the job.
  const bool bounded_only = StepsPerEpoch(spec) == 0 && t.max_steps() > 0;
  const int64_t total = bounded_only ? t.max_steps() : TotalSteps(spec);
  const std::string length =
      bounded_only ? absl::StrFormat("training.max_steps %d", total) : JobLength(spec);
  if (total > 0 && l.warmup_steps() >= total) {
    return At(
        "training.lr_schedule.warmup_steps",
        absl::StrFormat("training.lr_schedule.warmup_steps %d is not less than %s: the "
                        "learning rate would never reach training.optimizer.lr %s; set "
                        "warmup_steps to at most %d",
                        l.warmup_steps(), length, FormatDouble(t.optimizer().lr()), total - 1));
  }
  if (total > 0 && l.decay_steps() > total) {
    return At("training.lr_schedule.decay_steps",
              absl::StrFormat("training.lr_schedule.decay_steps %d is more than %s: the decay "
                              "would stop short of training.lr_schedule.min_lr %s; set "
                              "decay_steps to at most %d (or 0 for the job's total steps)",
                              l.decay_steps(), length, FormatDouble(l.min_lr()), total));
  }
  if (l.decay_steps() > 0 && l.decay_steps() <= l.warmup_steps()) {
    return At("training.lr_schedule.decay_steps",
              absl::StrFormat("training.lr_schedule.decay_steps %d must be more than "
                              "training.lr_schedule.warmup_steps %d: the decay runs from the end "
                              "of the warm-up to decay_steps: set decay_steps to more than %d "
                              "(or 0 for the job's total steps)",
                              l.decay_steps(), l.warmup_steps(), l.warmup_steps()));
  }
  return std::nullopt;
}

// training.max_consecutive_skipped_steps (docs/job_spec.md, "Non-finite steps"): skipping a
// step everywhere needs one job-wide decision per step before any rank updates, which only the
// synchronous schedules have. PipeDream updates each stage when its own micro-batches are done
// while other stages already run the next step's forwards with the weights of the update in
// question, and Pipe-SGD applies a step's gradient one step later: a skip would leave the ranks'
// weight versions out of step, so there the first non-finite step fails the job.
Check CheckSkippedSteps(const v1::JobSpec& spec) {
  const int64_t k = spec.training().max_consecutive_skipped_steps();
  const std::string& schedule = spec.parallel().schedule();
  if (k < 0) {
    return At("training.max_consecutive_skipped_steps",
              absl::StrFormat("training.max_consecutive_skipped_steps %d must be >= 0 (0 = the "
                              "first step with a non-finite loss or gradient fails the job)",
                              k));
  }
  if (Check c = CheckAtMost("training.max_consecutive_skipped_steps", k, kMaxSteps)) return c;
  if (k > 0 && (schedule == "pipedream" || schedule == "pipesgd")) {
    return At("training.max_consecutive_skipped_steps",
              absl::StrFormat(
                  "training.max_consecutive_skipped_steps %d needs a synchronous "
                  "schedule (gpipe, dapple, interleaved, zb-h1, zb-h2), got parallel.schedule %s: "
                  "its asynchronous updates cannot skip a step on every rank "
                  "together; use 0 (a non-finite step fails the job)",
                  k, schedule));
  }
  return Check();
}

// training.restart (docs/job_spec.md, "Restarts"; coordinator/jobs/restart_policy.h).
Check CheckRestart(const v1::JobSpec& spec) {
  const v1::RestartSpec& r = spec.training().restart();
  if (r.max_restarts() < 0 || r.max_restarts() > kMaxRestarts) {
    return At("training.restart.max_restarts",
              absl::StrFormat("training.restart.max_restarts %d must be in [0, %d] (0 = a "
                              "failure fails the job)",
                              r.max_restarts(), kMaxRestarts));
  }
  if (std::isfinite(r.backoff_seconds()) && std::isfinite(r.max_backoff_seconds()) &&
      r.backoff_seconds() <= kMaxRestartSeconds && r.backoff_seconds() > r.max_backoff_seconds()) {
    // Named by the field the user most likely wrote: max_backoff_seconds is often the default.
    return At("training.restart.backoff_seconds",
              absl::StrFormat("training.restart.backoff_seconds %g is more than "
                              "training.restart.max_backoff_seconds %g (its cap, 30 unless "
                              "given): lower backoff_seconds or raise max_backoff_seconds",
                              r.backoff_seconds(), r.max_backoff_seconds()));
  }
  const struct {
    const char* field;
    double value;
    double min;
  } seconds[] = {
      {"backoff_seconds", r.backoff_seconds(), 0},
      {"max_backoff_seconds", r.max_backoff_seconds(), r.backoff_seconds()},
      // Stored before restarts existed (every field 0): no restarts, nothing to wait for.
      {"wait_for_workers_seconds", r.wait_for_workers_seconds(), r.max_restarts() > 0 ? 1.0 : 0.0},
  };
  for (const auto& f : seconds) {
    if (!std::isfinite(f.value) || f.value < f.min || f.value > kMaxRestartSeconds) {
      return At(absl::StrCat("training.restart.", f.field),
                absl::StrFormat("training.restart.%s %g must be a number of seconds in [%g, %g]%s",
                                f.field, f.value, f.min, kMaxRestartSeconds,
                                std::string(f.field) == "max_backoff_seconds"
                                    ? " (at least training.restart.backoff_seconds: the doubled "
                                      "backoff is capped there)"
                                    : ""));
    }
  }
  return Check();
}

}  // namespace

Check CheckTraining(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  if (t.global_batch() < 1) {
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d must be >= 1", t.global_batch()));
  }
  // The text dataset's size is known once the coordinator read the file (train_samples).
  const int64_t train = spec.data().train_samples();
  if (train > 0 && t.global_batch() > train) {
    const bool text = spec.data().dataset() == kTextDataset;
    return At("training.global_batch",
              absl::StrFormat("training.global_batch %d must be <= %d, the number of training "
                              "samples of %s: a step takes global_batch distinct samples: use a "
                              "global_batch of at most %d%s",
                              t.global_batch(), train,
                              text ? absl::StrFormat("data.path %s with data.seq_len %d",
                                                     spec.data().path(), spec.data().seq_len())
                                   : "data.dataset " + spec.data().dataset(),
                              train, text ? " (or a longer file or a smaller data.seq_len)" : ""));
  }
  if (Check c = CheckAtMost("training.global_batch", t.global_batch(), kMaxGlobalBatch)) return c;
  if (t.micro_batch() < 1) {
    return At("training.micro_batch",
              absl::StrFormat("training.micro_batch %d must be >= 1", t.micro_batch()));
  }
  if (t.micro_batch() > t.global_batch()) {
    return At("training.micro_batch",
              absl::StrFormat("training.micro_batch %d must be <= training.global_batch %d: a "
                              "step splits its global_batch samples into micro-batches: use a "
                              "micro_batch that divides %d (%s)",
                              t.micro_batch(), t.global_batch(), t.global_batch(),
                              DivisorsText(t.global_batch(), t.micro_batch())));
  }
  if (t.global_batch() % t.micro_batch() != 0) {
    return At("training.micro_batch",
              absl::StrFormat("training.global_batch %d is not divisible by training.micro_batch "
                              "%d: use a micro_batch that divides %d (%s)",
                              t.global_batch(), t.micro_batch(), t.global_batch(),
                              DivisorsText(t.global_batch(), t.micro_batch())));
  }
  if (t.epochs() < 1) {
    return At("training.epochs", absl::StrFormat("training.epochs %d must be >= 1", t.epochs()));
  }
  if (Check c = CheckAtMost("training.epochs", t.epochs(), kMaxEpochs)) return c;
  if (t.max_steps() < 0) {
    return At("training.max_steps",
              absl::StrFormat("training.max_steps %d must be >= 0 (0 = no limit)", t.max_steps()));
  }
  if (Check c = CheckAtMost("training.max_steps", t.max_steps(), kMaxSteps)) return c;
  if (t.checkpoint_every_steps() < 0) {
    return At("training.checkpoint_every_steps",
              absl::StrFormat("training.checkpoint_every_steps %d must be >= 0 (0 = only on "
                              "demand)",
                              t.checkpoint_every_steps()));
  }
  if (Check c =
          CheckAtMost("training.checkpoint_every_steps", t.checkpoint_every_steps(), kMaxSteps)) {
    return c;
  }
  if (!(t.checkpoint_every_minutes() >= 0 &&
        t.checkpoint_every_minutes() <= kMaxCheckpointEveryMinutes)) {
    return At("training.checkpoint_every_minutes",
              absl::StrFormat("training.checkpoint_every_minutes %s must be >= 0 and at most %s "
                              "(a week; 0 = no time-based checkpoints)",
                              FormatDouble(t.checkpoint_every_minutes()),
                              FormatDouble(kMaxCheckpointEveryMinutes)));
  }
  if (!(t.max_grad_norm() >= 0 && std::isfinite(t.max_grad_norm()))) {
    return At("training.max_grad_norm",
              absl::StrFormat("training.max_grad_norm %s must be >= 0 and finite (0 = no "
                              "clipping)",
                              FormatDouble(t.max_grad_norm())));
  }
  if (Check c = CheckSkippedSteps(spec)) return c;
  if (Check c = CheckRestart(spec)) return c;
  if (t.eval_every_steps() < 0) {
    return At("training.eval_every_steps",
              absl::StrFormat("training.eval_every_steps %d must be >= 0 (0 = after every epoch)",
                              t.eval_every_steps()));
  }
  if (Check c = CheckAtMost("training.eval_every_steps", t.eval_every_steps(), kMaxSteps)) {
    return c;
  }
  if (Check c = CheckStepCounts(spec)) return c;
  if (Check c = CheckOptimizer(t.optimizer())) return c;
  return CheckLrSchedule(spec);
}

}  // namespace dapple::job_spec_internal
