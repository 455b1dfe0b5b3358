#include "common/schedule/pipedream_steps.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/schedule/action.h"
#include "common/schedule/generators.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

std::string ToString(const Op& op) { return ActionToString(ToAction(0, op)); }

// Global micro-batch indices of a whole run: the steps' programs of one rank, concatenated.
OpProgram RankRun(const PipeDreamLayout& layout, int stage, int replica) {
  OpProgram run;
  for (int64_t t = 0; t < layout.num_steps; ++t) {
    for (Op op : GeneratePipeDreamStepOps(layout, stage, replica, t)) {
      if (op.kind != v1::OPTIMIZER_STEP) {
        op.micro_batch += static_cast<int>(t * layout.num_micro_batches);
      }
      run.push_back(op);
    }
  }
  return run;
}

// Executes the ranks' runs of a 1F1B-RR layout in one process, as the runtime would: sends
// never block, a FORWARD on stage s > 0 waits for that micro-batch's FORWARD on stage s - 1,
// a BACKWARD on s < P - 1 for its BACKWARD on s + 1, and an OPTIMIZER_STEP waits until every
// replica of its stage reached it (their AllReduce), or with `job_wide_updates` until every
// rank of the job reached its own (GLOBAL_NORM's barrier, which also covers TIED_ALLREDUCE's
// among some stages: a run that completes under the strongest barrier completes under weaker
// ones). Returns "" or why it got stuck, and per rank the most micro-batches it held in flight.
struct Execution {
  std::string stuck;
  std::vector<std::vector<int64_t>> peak_in_flight;  // [stage][replica]
  // Weight versions held: the current one and those of the micro-batches in flight.
  std::vector<std::vector<int64_t>> peak_versions;  // [stage][replica]
};

Execution Execute(const PipeDreamLayout& layout, bool job_wide_updates = false) {
  const int p = static_cast<int>(layout.replicas.size());
  std::vector<std::vector<OpProgram>> runs(p);
  std::vector<std::vector<size_t>> pc(p);
  std::vector<std::vector<int64_t>> live(p);
  std::vector<std::vector<std::map<int, int64_t>>> version_of(p);  // in flight: g -> version
  std::vector<std::vector<int64_t>> updates(p);
  Execution out;
  out.peak_in_flight.resize(p);
  out.peak_versions.resize(p);
  auto note_versions = [&](int s, int r) {
    std::set<int64_t> held = {updates[s][r]};
    for (const auto& [g, v] : version_of[s][r]) held.insert(v);
    out.peak_versions[s][r] = std::max(out.peak_versions[s][r], static_cast<int64_t>(held.size()));
  };
  for (int s = 0; s < p; ++s) {
    for (int r = 0; r < layout.replicas[s]; ++r) runs[s].push_back(RankRun(layout, s, r));
    pc[s].assign(layout.replicas[s], 0);
    live[s].assign(layout.replicas[s], 0);
    out.peak_in_flight[s].assign(layout.replicas[s], 0);
    out.peak_versions[s].assign(layout.replicas[s], 0);
    version_of[s].resize(layout.replicas[s]);
    updates[s].assign(layout.replicas[s], 0);
  }
  const int64_t total = layout.num_steps * layout.num_micro_batches;
  // done[kind][stage][g]
  std::map<int, std::vector<std::vector<bool>>> done;
  for (int kind : {v1::FORWARD, v1::BACKWARD}) {
    done[kind].assign(p, std::vector<bool>(static_cast<size_t>(total), false));
  }
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const int d = layout.replicas[s];
      for (int r = 0; r < d; ++r) {
        while (pc[s][r] < runs[s][r].size()) {
          const Op op = runs[s][r][pc[s][r]];
          if (op.kind == v1::OPTIMIZER_STEP) break;
          const int g = op.micro_batch;
          const bool ready = op.kind == v1::FORWARD ? (s == 0 || done[v1::FORWARD][s - 1][g])
                                                    : (s == p - 1 || done[v1::BACKWARD][s + 1][g]);
          if (!ready) break;
          done[op.kind][s][g] = true;
          live[s][r] += op.kind == v1::FORWARD ? 1 : -1;
          if (op.kind == v1::FORWARD) {
            version_of[s][r][g] = updates[s][r];
          } else {
            version_of[s][r].erase(g);
          }
          note_versions(s, r);
          out.peak_in_flight[s][r] = std::max(out.peak_in_flight[s][r], live[s][r]);
          ++pc[s][r];
          progress = true;
        }
      }
      if (job_wide_updates) continue;
      bool all_at_update = true;
      for (int r = 0; r < d; ++r) {
        all_at_update = all_at_update && pc[s][r] < runs[s][r].size() &&
                        runs[s][r][pc[s][r]].kind == v1::OPTIMIZER_STEP;
      }
      if (all_at_update) {
        for (int r = 0; r < d; ++r) {
          ++pc[s][r];
          ++updates[s][r];
          note_versions(s, r);
        }
        progress = true;
      }
    }
    if (!job_wide_updates) continue;
    bool all_at_update = true;
    for (int s = 0; s < p; ++s) {
      for (int r = 0; r < layout.replicas[s]; ++r) {
        all_at_update = all_at_update && pc[s][r] < runs[s][r].size() &&
                        runs[s][r][pc[s][r]].kind == v1::OPTIMIZER_STEP;
      }
    }
    if (!all_at_update) continue;
    for (int s = 0; s < p; ++s) {
      for (int r = 0; r < layout.replicas[s]; ++r) {
        ++pc[s][r];
        ++updates[s][r];
        note_versions(s, r);
      }
    }
    progress = true;
  }
  std::vector<std::string> waits;
  for (int s = 0; s < p; ++s) {
    for (int r = 0; r < layout.replicas[s]; ++r) {
      if (pc[s][r] < runs[s][r].size()) {
        const Op op = runs[s][r][pc[s][r]];
        waits.push_back(absl::StrCat("stage ", s, " replica ", r, " at ", ToString(op)));
      }
    }
  }
  out.stuck = absl::StrJoin(waits, "; ");
  return out;
}

std::string Describe(const PipeDreamLayout& layout) {
  return absl::StrCat("D={", absl::StrJoin(layout.replicas, ","), "} M=", layout.num_micro_batches,
                      " steps=", layout.num_steps, " first=", layout.first_micro_batch);
}

std::vector<std::vector<int>> ReplicaLayouts() {
  return {{1},    {2},    {3},       {1, 1},    {2, 1},       {1, 2},      {2, 2},
          {3, 1}, {1, 3}, {2, 3, 1}, {1, 1, 2}, {3, 2, 1, 2}, {1, 2, 1, 1}};
}

// The steps, concatenated with global micro-batch indices, are the continuous run.
TEST(PipeDreamStepsTest, StepsConcatenateToTheContinuousRun) {
  for (int p : {1, 2, 3, 4, 5}) {
    for (int m : {1, 2, 3, 4, 8}) {
      for (int64_t steps : {1, 2, 3, 5}) {
        for (int s = 0; s < p; ++s) {
          const OpProgram run =
              GeneratePipeDreamOps(p, static_cast<int>(steps * m), s, /*per_update=*/m);
          OpProgram joined;
          for (int64_t t = 0; t < steps; ++t) {
            for (Op op : GeneratePipeDreamStepOps(p, m, s, t, steps)) {
              if (op.kind != v1::OPTIMIZER_STEP) {
                EXPECT_GE(op.micro_batch, 0);
                EXPECT_LT(op.micro_batch, m + PipeDreamWarmUp(p, m, s, steps) - 1);
                op.micro_batch += static_cast<int>(t * m);
              }
              joined.push_back(op);
            }
          }
          ASSERT_EQ(joined.size(), run.size()) << "P=" << p << " M=" << m << " steps=" << steps;
          for (size_t i = 0; i < run.size(); ++i) {
            EXPECT_EQ(joined[i].kind, run[i].kind) << i;
            EXPECT_EQ(joined[i].micro_batch, run[i].micro_batch) << i;
          }
        }
      }
    }
  }
}

TEST(PipeDreamStepsTest, EveryStepEndsWithItsOwnUpdateAfterItsLastBackward) {
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    for (int64_t t = 0; t < 3; ++t) {
      const OpProgram ops = GeneratePipeDreamStepOps(p, m, s, t, 3);
      ASSERT_GE(ops.size(), 2u);
      EXPECT_EQ(ops.back().kind, v1::OPTIMIZER_STEP);
      EXPECT_EQ(ops[ops.size() - 2].kind, v1::BACKWARD);
      EXPECT_EQ(ops[ops.size() - 2].micro_batch, m - 1);
      int backwards = 0;
      for (const Op& op : ops) backwards += op.kind == v1::BACKWARD;
      EXPECT_EQ(backwards, m) << "every step trains on its own M micro-batches";
    }
  }
}

TEST(PipeDreamStepsTest, WarmUpIsPMinusStage) {
  EXPECT_EQ(PipeDreamWarmUp(4, 8, 0, 10), 4);
  EXPECT_EQ(PipeDreamWarmUp(4, 8, 3, 10), 1);
  EXPECT_EQ(PipeDreamWarmUp(4, 1, 0, 2), 2);  // fewer micro-batches in the whole run than P
}

// 1F1B-RR: every rank's runs complete together (no deadlock, every AllReduce meets all of its
// replicas), every micro-batch runs forward and backward exactly once per stage on replica
// g % D_s, and no replica holds more than ceil(K_s / D_s) micro-batches (reached in long runs).
TEST(PipeDreamReplicasTest, ReplicatedRunsCompleteWithRoundRobinAndBoundedInFlight) {
  for (const std::vector<int>& replicas : ReplicaLayouts()) {
    int max_d = 0;
    for (int d : replicas) max_d = std::max(max_d, d);
    for (int m : {1, 2, 3, 4, 8}) {
      if (m < max_d) continue;  // the runtime's rule: every replica gets a micro-batch per step
      for (int64_t steps : {1, 2, 5}) {
        for (int64_t first : {int64_t{0}, int64_t{3 * m}}) {
          PipeDreamLayout layout;
          layout.replicas = replicas;
          layout.num_micro_batches = m;
          layout.num_steps = steps;
          layout.first_micro_batch = first;
          const std::string what = Describe(layout);
          const Execution e = Execute(layout);
          ASSERT_EQ(e.stuck, "") << what;
          const int64_t total = steps * m;
          for (int s = 0; s < static_cast<int>(replicas.size()); ++s) {
            std::vector<int> forwards(static_cast<size_t>(total), 0);
            std::vector<int> backwards(static_cast<size_t>(total), 0);
            for (int r = 0; r < replicas[s]; ++r) {
              int updates = 0;
              for (const Op& op : RankRun(layout, s, r)) {
                if (op.kind == v1::OPTIMIZER_STEP) {
                  ++updates;
                  continue;
                }
                EXPECT_EQ(PipeDreamReplicaOf(first + op.micro_batch, replicas[s]), r)
                    << what << " stage " << s << " " << ToString(op);
                (op.kind == v1::FORWARD ? forwards : backwards)[op.micro_batch]++;
              }
              EXPECT_EQ(updates, steps) << what << " stage " << s << " replica " << r;
              EXPECT_LE(e.peak_in_flight[s][r], PipeDreamReplicaInFlight(layout, s))
                  << what << " stage " << s << " replica " << r;
              EXPECT_LE(e.peak_versions[s][r], PipeDreamReplicaVersions(layout, s))
                  << what << " stage " << s << " replica " << r;
            }
            for (int64_t g = 0; g < total; ++g) {
              EXPECT_EQ(forwards[g], 1) << what << " stage " << s << " g " << g;
              EXPECT_EQ(backwards[g], 1) << what << " stage " << s << " g " << g;
            }
          }
        }
      }
    }
  }
}

// Gradient clipping puts a barrier of every rank of the job (GLOBAL_NORM) before every update,
// tied weights one of the tied stages' ranks (TIED_ALLREDUCE): 1F1B-RR runs still complete.
TEST(PipeDreamReplicasTest, ReplicatedRunsCompleteWithJobWideBarriersAtUpdates) {
  for (const std::vector<int>& replicas : ReplicaLayouts()) {
    const int max_d = *std::max_element(replicas.begin(), replicas.end());
    for (int m : {1, 2, 3, 4, 8}) {
      if (m < max_d) continue;
      for (int64_t steps : {1, 2, 5}) {
        PipeDreamLayout layout;
        layout.replicas = replicas;
        layout.num_micro_batches = m;
        layout.num_steps = steps;
        layout.first_micro_batch = 2 * m;
        EXPECT_EQ(Execute(layout, /*job_wide_updates=*/true).stuck, "") << Describe(layout);
      }
    }
  }
}

// The executor above does find deadlocks: a later stage that wants more micro-batches before
// its first backward than the earlier stage sends before waiting for one.
TEST(PipeDreamReplicasTest, ExecutorDetectsIncreasingWarmUps) {
  PipeDreamLayout layout;
  layout.replicas = {1, 1};
  layout.num_micro_batches = 4;
  layout.num_steps = 2;
  layout.warm_ups = {1, 2};
  EXPECT_EQ(Execute(layout).stuck, "stage 0 replica 0 at 0B0; stage 1 replica 0 at 0F1");
}

// Replica 0's in-flight reaches ceil(K_s / D_s) once the run is long enough, and the warm-up
// of a stage counts the workers of it and every later stage (PipeDream's NOAM).
TEST(PipeDreamReplicasTest, WarmUpIsTheWorkersFromTheStageOn) {
  PipeDreamLayout layout;
  layout.replicas = {2, 3, 1};
  layout.num_micro_batches = 6;
  layout.num_steps = 4;
  EXPECT_EQ(PipeDreamWarmUp(layout, 0), 6);
  EXPECT_EQ(PipeDreamWarmUp(layout, 1), 4);
  EXPECT_EQ(PipeDreamWarmUp(layout, 2), 1);
  EXPECT_EQ(PipeDreamReplicaInFlight(layout, 0), 3);
  EXPECT_EQ(PipeDreamReplicaInFlight(layout, 1), 2);
  EXPECT_EQ(PipeDreamReplicaInFlight(layout, 2), 1);
  const Execution e = Execute(layout);
  ASSERT_EQ(e.stuck, "");
  EXPECT_EQ(e.peak_in_flight[0][0], 3);
  EXPECT_EQ(e.peak_in_flight[1][0], 2);
  EXPECT_EQ(e.peak_in_flight[2][0], 1);
  EXPECT_EQ(PipeDreamReplicaVersions(layout, 0), 4);
  EXPECT_EQ(PipeDreamReplicaVersions(layout, 1), 2);
  EXPECT_EQ(PipeDreamReplicaVersions(layout, 2), 1);
  // The version bound ceil((K_s - 1) / D_s) + 1 is reached when the micro-batches in flight at
  // an update ran their forwards under different versions (few micro-batches per update).
  PipeDreamLayout few;
  few.replicas = {2, 1, 1};
  few.num_micro_batches = 2;
  few.num_steps = 6;
  const Execution f = Execute(few);
  ASSERT_EQ(f.stuck, "");
  EXPECT_EQ(PipeDreamReplicaVersions(few, 0), 3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(f.peak_versions[s][0], PipeDreamReplicaVersions(few, s)) << "stage " << s;
  }
  few.replicas = {1, 1, 1, 1};
  EXPECT_EQ(PipeDreamReplicaVersions(few, 0), 4) << "P - stage";
  EXPECT_EQ(PipeDreamReplicaVersions(few, 3), 1);
  layout.num_steps = 1;
  layout.num_micro_batches = 2;
  EXPECT_EQ(PipeDreamWarmUp(layout, 0), 2) << "capped at the run's micro-batches";
}

// Each replica's run is the stage's unreplicated run (warm-up K_s) filtered to its own
// micro-batches: the same forwards and backwards between the same updates, i.e. the same weight
// versions as an unreplicated pipeline with those warm-ups.
TEST(PipeDreamReplicasTest, ReplicaRunsFilterTheStagesUnreplicatedRun) {
  for (const std::vector<int>& replicas : ReplicaLayouts()) {
    for (int m : {3, 4, 8}) {
      PipeDreamLayout layout;
      layout.replicas = replicas;
      layout.num_micro_batches = m;
      layout.num_steps = 4;
      layout.first_micro_batch = 5 * m;
      const int p = static_cast<int>(replicas.size());
      for (int s = 0; s < p; ++s) {
        PipeDreamLayout flat = layout;
        flat.replicas.assign(p, 1);
        for (int t = 0; t < p; ++t) flat.warm_ups.push_back(PipeDreamWarmUp(layout, t));
        const OpProgram whole = RankRun(flat, s, 0);
        const OpProgram direct = GeneratePipeDreamOpsWithWarmUp(
            static_cast<int>(layout.num_steps * m), m, static_cast<int>(flat.warm_ups[s]));
        ASSERT_EQ(whole.size(), direct.size()) << Describe(layout) << " stage " << s;
        for (size_t i = 0; i < whole.size(); ++i) {
          EXPECT_EQ(ToString(whole[i]), ToString(direct[i])) << Describe(layout) << " " << i;
        }
        for (int r = 0; r < replicas[s]; ++r) {
          OpProgram filtered;
          for (const Op& op : whole) {
            if (op.kind == v1::OPTIMIZER_STEP ||
                PipeDreamReplicaOf(layout.first_micro_batch + op.micro_batch, replicas[s]) == r) {
              filtered.push_back(op);
            }
          }
          const OpProgram run = RankRun(layout, s, r);
          ASSERT_EQ(run.size(), filtered.size()) << Describe(layout) << " stage " << s;
          for (size_t i = 0; i < run.size(); ++i) {
            EXPECT_EQ(ToString(run[i]), ToString(filtered[i]))
                << Describe(layout) << " stage " << s << " replica " << r << " " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dapple::schedule
