#include "common/schedule/pipedream_program.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/schedule/action.h"
#include "common/schedule/op.h"
#include "common/schedule/simulator.h"

namespace dapple::schedule {
namespace {

bool SameStep(const v1::StepActions& a, const v1::StepActions& b) {
  if (a.actions_size() != b.actions_size()) return false;
  for (int i = 0; i < a.actions_size(); ++i) {
    const v1::Action& x = a.actions(i);
    const v1::Action& y = b.actions(i);
    if (x.kind() != y.kind() || x.micro_batch() != y.micro_batch() ||
        x.weight_version() != y.weight_version()) {
      return false;
    }
  }
  return true;
}

// Replays one replica's run the way its weight stash will run it, and writes each step's
// actions with the stash actions the replay shows are needed (versions are absolute here and
// relative to the step in the actions).
class StepWriter {
 public:
  StepWriter(const PipeDreamProgramOptions& o, int stage, int replica)
      : o_(o),
        stage_(stage),
        replica_(replica),
        m_(o.layout.num_micro_batches),
        k0_(PipeDreamWarmUp(o.layout, 0)) {}

  // The actions of step `index` of the run (global step first_step + index); steps in order.
  v1::StepActions Step(int64_t index) {
    const int64_t t = o_.first_step + index;
    current_ = t;
    const OpProgram lowered =
        LowerOps(GeneratePipeDreamStepOps(o_.layout, stage_, replica_, index),
                 static_cast<int>(o_.layout.replicas.size()), stage_, o_.lower);
    v1::StepActions out;
    for (const Op& op : lowered) {
      const int64_t g = t * m_ + op.micro_batch;
      switch (op.kind) {
        case v1::FORWARD: {
          const int64_t v = ForwardVersion(g);
          in_flight_[g] = v;
          AddWithVersion(op, v, t, &out);
          break;
        }
        case v1::BACKWARD: {
          const int64_t v = in_flight_[g];
          in_flight_.erase(g);
          AddWithVersion(op, v, t, &out);
          // The stash forgets what neither a micro-batch in flight nor a later forward needs.
          int64_t oldest = o_.vertical_sync ? ForwardVersion(t * m_) : t;
          for (const auto& [mb, version] : in_flight_) oldest = std::min(oldest, version);
          if (!stashed_.empty() && *stashed_.begin() < oldest) {
            Add(MakeWeightAction(v1::DROP_WEIGHTS, oldest - t), &out);
            stashed_.erase(stashed_.begin(), stashed_.lower_bound(oldest));
          }
          break;
        }
        case v1::OPTIMIZER_STEP: {
          // The live version t is replaced: keep it while someone still needs it.
          bool keep = o_.vertical_sync && ForwardVersion(t * m_) <= t;
          for (const auto& [mb, version] : in_flight_) keep = keep || version == t;
          if (keep) {
            Add(MakeWeightAction(v1::STASH_WEIGHTS, 0), &out);
            stashed_.insert(t);
          }
          Add(ToAction(stage_, op), &out);
          break;
        }
        default:
          Add(ToAction(stage_, op), &out);
          break;
      }
    }
    return out;
  }

 private:
  // The version the forward of global micro-batch g uses: the live one, or under vertical
  // sync stage 0's (its updates before that forward in the run).
  int64_t ForwardVersion(int64_t g) const {
    if (!o_.vertical_sync) return current_;
    const int64_t run_g = g - o_.first_step * m_;
    return o_.first_step + (run_g < k0_ ? 0 : (run_g - k0_ + 1) / m_);
  }

  v1::Action MakeWeightAction(v1::ActionKind kind, int64_t relative) const {
    v1::Action a = MakeAction(stage_, kind, -1);
    a.set_weight_version(static_cast<int32_t>(relative));
    return a;
  }

  void Add(v1::Action a, v1::StepActions* out) { *out->add_actions() = std::move(a); }

  // `op` computing with version v at step t: swapped in around it unless it is the live one.
  void AddWithVersion(const Op& op, int64_t v, int64_t t, v1::StepActions* out) {
    if (v != t) Add(MakeWeightAction(v1::USE_WEIGHTS, v - t), out);
    Add(ToAction(stage_, op), out);
    if (v != t) Add(MakeWeightAction(v1::RESTORE_WEIGHTS, 0), out);
  }

  const PipeDreamProgramOptions& o_;
  const int stage_;
  const int replica_;
  const int64_t m_;
  const int64_t k0_;
  int64_t current_ = 0;                   // the live version: the step's
  std::map<int64_t, int64_t> in_flight_;  // global micro-batch -> its forward's version
  std::set<int64_t> stashed_;             // versions the stash keeps besides the live one
};

}  // namespace

v1::RankProgram BuildPipeDreamProgram(const PipeDreamProgramOptions& options, int stage,
                                      int replica) {
  const PipeDreamLayout& layout = options.layout;
  v1::RankProgram program;
  program.set_stage(stage);
  program.set_replica(replica);
  program.set_micro_batch_ids(
      static_cast<int32_t>(layout.num_micro_batches + PipeDreamWarmUp(layout, stage)));
  program.set_whole_micro_batches(true);
  // A replica's share of a step repeats every D / gcd(M, D) steps.
  const int d = layout.replicas[stage];
  const int period = d / std::gcd(d, layout.num_micro_batches);
  StepWriter writer(options, stage, replica);
  v1::ProgramPhase* phase = nullptr;
  for (int64_t i = 0; i < layout.num_steps; ++i) {
    v1::StepActions step = writer.Step(i);
    if (phase != nullptr && phase->cycle_size() < period && phase->steps() == phase->cycle_size()) {
      *phase->add_cycle() = std::move(step);  // still filling the phase's cycle
    } else if (phase != nullptr && phase->cycle_size() == period &&
               SameStep(step, phase->cycle(static_cast<int>(phase->steps() % period)))) {
      // the steady state: nothing new
    } else {
      phase = program.add_phases();
      *phase->add_cycle() = std::move(step);
    }
    phase->set_steps(phase->steps() + 1);
  }
  return program;
}

v1::RankProgram ExpandRun(const v1::RankProgram& program, int num_micro_batches) {
  v1::RankProgram out;
  out.set_stage(program.stage());
  out.set_replica(program.replica());
  auto add = [&](const v1::Action& a, int64_t index) {
    v1::Action* b = out.add_actions();
    *b = a;
    if (KindHasMicroBatch(a.kind())) {
      b->set_micro_batch(static_cast<int32_t>(index * num_micro_batches + a.micro_batch()));
    }
  };
  if (program.phases().empty()) {
    for (const v1::Action& a : program.actions()) add(a, 0);
    return out;
  }
  int64_t index = 0;
  for (const v1::ProgramPhase& phase : program.phases()) {
    for (int64_t i = 0; i < phase.steps(); ++i, ++index) {
      const v1::StepActions& step = phase.cycle(static_cast<int>(i % phase.cycle_size()));
      for (const v1::Action& a : step.actions()) add(a, index);
    }
  }
  return out;
}

absl::Status CheckPipeDreamRun(const PipeDreamProgramOptions& options) {
  // The stage as a whole is one unreplicated stage with the replicated warm-up K_s; each
  // replica's program is that order filtered to its micro-batches (pipedream_steps.h).
  PipeDreamProgramOptions whole = options;
  const int num_stages = static_cast<int>(options.layout.replicas.size());
  whole.layout.replicas.assign(static_cast<size_t>(num_stages), 1);
  whole.layout.first_micro_batch = 0;
  whole.layout.warm_ups.clear();
  for (int s = 0; s < num_stages; ++s) {
    whole.layout.warm_ups.push_back(PipeDreamWarmUp(options.layout, s));
  }
  // Ops, not protobuf actions: a run holds steps * M micro-batches per stage.
  const int m = options.layout.num_micro_batches;
  std::vector<OpProgram> programs;
  for (int s = 0; s < num_stages; ++s) {
    const v1::RankProgram program = BuildPipeDreamProgram(whole, s, 0);
    OpProgram& run = programs.emplace_back();
    int64_t index = 0;
    for (const v1::ProgramPhase& phase : program.phases()) {
      for (int64_t i = 0; i < phase.steps(); ++i, ++index) {
        const v1::StepActions& step = phase.cycle(static_cast<int>(i % phase.cycle_size()));
        for (const v1::Action& a : step.actions()) {
          const bool named = KindHasMicroBatch(a.kind());
          run.push_back({a.kind(), named ? static_cast<int>(index * m + a.micro_batch()) : -1});
        }
      }
    }
  }
  SimulateOptions sim;
  sim.render_grid = false;
  const absl::StatusOr<SimulationResult> result = SimulateOps(programs, ActionCosts{}, sim);
  if (!result.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("schedule pipedream: ", result.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace dapple::schedule
