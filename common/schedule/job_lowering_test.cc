#include "common/schedule/job_lowering.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/model_info.h"
#include "common/schedule/action.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// embedding -> `blocks` transformer blocks -> layernorm -> lm_head tied to the embedding.
v1::JobSpec GptSpec(int blocks) {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(8);
  m->set_input_type("tokens");
  m->set_loss("softmax_cross_entropy");
  v1::LayerSpec* e = m->add_layers();
  e->set_type("embedding");
  e->mutable_embedding()->set_vocab(16);
  e->mutable_embedding()->set_dim(8);
  for (int b = 0; b < blocks; ++b) {
    v1::LayerSpec* t = m->add_layers();
    t->set_type("transformer_block");
    t->mutable_transformer_block()->set_heads(2);
  }
  m->add_layers()->set_type("layernorm");
  v1::LayerSpec* head = m->add_layers();
  head->set_type("lm_head");
  head->mutable_lm_head()->set_tied(true);
  spec.mutable_training()->set_global_batch(8);
  spec.mutable_training()->set_micro_batch(2);
  spec.mutable_parallel()->set_schedule("dapple");
  return spec;
}

v1::JobSpec MlpSpec() {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(4);
  m->set_loss("softmax_cross_entropy");
  for (int out : {8, 3}) {
    v1::LayerSpec* l = m->add_layers();
    l->set_type("linear");
    l->mutable_linear()->set_out(out);
  }
  spec.mutable_parallel()->set_schedule("dapple");
  return spec;
}

// Stages of the given inclusive layer ranges and replicas.
v1::ParallelPlanSummary Plan(const std::vector<std::pair<int, int>>& ranges,
                             const std::vector<int>& replicas) {
  v1::ParallelPlanSummary plan;
  for (size_t s = 0; s < ranges.size(); ++s) {
    v1::PlanStageSummary* st = plan.add_stages();
    st->set_first_layer(ranges[s].first);
    st->set_last_layer(ranges[s].second);
    st->set_replicas(replicas[s]);
  }
  return plan;
}

TEST(TiedWeightsTest, TheTiedHeadCopiesTheEmbeddingTable) {
  const std::vector<LayerInfo> layers = InferLayers(GptSpec(2).model()).value();
  const std::vector<TiedWeight> tied = TiedWeights(layers);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(tied[0].owner, "layer0.token_embedding");
  EXPECT_EQ(tied[0].owner_layer, 0);
  EXPECT_EQ(tied[0].copy, "layer4.weight");
  EXPECT_EQ(tied[0].copy_layer, 4);
  EXPECT_THAT(tied[0].shape, ElementsAre(16, 8));
  EXPECT_TRUE(TiedWeights(InferLayers(MlpSpec().model()).value()).empty());
}

TEST(TiedWeightsTest, OnlyCopiesOnAnotherStageThanTheirOwnerAreSplit) {
  const std::vector<TiedWeight> tied = TiedWeights(InferLayers(GptSpec(2).model()).value());
  // P = 1: one parameter, nothing to exchange.
  const v1::ParallelPlanSummary one = Plan({{0, 4}}, {2});
  EXPECT_TRUE(SplitTiedWeights(tied, one).empty());
  EXPECT_THAT(TiedStages(SplitTiedWeights(tied, one), one), ElementsAre(false));
  EXPECT_TRUE(TiedGroupRanks(TiedStages(SplitTiedWeights(tied, one), one), one).empty());
  // P = 3, the head on the last stage, the middle stage holds neither side.
  const v1::ParallelPlanSummary three = Plan({{0, 1}, {2, 2}, {3, 4}}, {2, 1, 2});
  EXPECT_EQ(StageOfLayer(three, 0), 0);
  EXPECT_EQ(StageOfLayer(three, 4), 2);
  EXPECT_EQ(StageOfLayer(three, 5), -1);
  ASSERT_EQ(SplitTiedWeights(tied, three).size(), 1u);
  const std::vector<bool> stages = TiedStages(SplitTiedWeights(tied, three), three);
  EXPECT_THAT(stages, ElementsAre(true, false, true));
  // Every replica of both stages: ranks 0, 1 (stage 0) and 3, 4 (stage 2).
  EXPECT_THAT(TiedGroupRanks(stages, three), ElementsAre(0, 1, 3, 4));
}

TEST(LowerOptionsForTest, DecidesEveryCollectiveOfTheJob) {
  v1::JobSpec spec = GptSpec(1);
  const v1::ParallelPlanSummary plan = Plan({{0, 0}, {1, 1}, {2, 3}}, {1, 2, 1});
  LowerOptions o = LowerOptionsFor(spec, plan).value();
  EXPECT_THAT(o.allreduce_stages, ElementsAre(false, true, false));
  EXPECT_THAT(o.tied_stages, ElementsAre(true, false, true));
  // Every synchronous schedule takes the step's job-wide non-finite decision, clipping or not.
  EXPECT_TRUE(o.global_norm);
  EXPECT_FALSE(o.clipping);
  for (const char* sync : {"gpipe", "dapple", "zb-h1", "zb-h2"}) {
    spec.mutable_parallel()->set_schedule(sync);
    EXPECT_TRUE(LowerOptionsFor(spec, plan)->global_norm) << sync;
  }
  // PipeDream only for clipping.
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_FALSE(LowerOptionsFor(spec, plan)->global_norm);

  spec.mutable_training()->set_max_grad_norm(1.0);
  EXPECT_TRUE(LowerOptionsFor(spec, plan)->global_norm);
  EXPECT_TRUE(LowerOptionsFor(spec, plan)->clipping);
  spec.mutable_parallel()->set_schedule("dapple");
  EXPECT_TRUE(LowerOptionsFor(spec, plan)->clipping);
  // Pipe-SGD clips in its updater, locally.
  spec.mutable_parallel()->set_schedule("pipesgd");
  EXPECT_FALSE(LowerOptionsFor(spec, Plan({{0, 3}}, {2}))->global_norm);
  EXPECT_FALSE(LowerOptionsFor(spec, Plan({{0, 3}}, {2}))->clipping);

  // Per stage and step: the tied sum, the replicas' AllReduce, the norm.
  spec.mutable_training()->set_max_grad_norm(0);
  spec.mutable_parallel()->set_schedule("dapple");
  o = LowerOptionsFor(spec, plan).value();
  EXPECT_EQ(CollectivesPerStep(o, 0), 2);
  EXPECT_EQ(CollectivesPerStep(o, 1), 2);
  EXPECT_EQ(CollectivesPerStep(o, 2), 2);
  spec.mutable_parallel()->set_schedule("pipedream");
  EXPECT_EQ(CollectivesPerStep(LowerOptionsFor(spec, plan).value(), 0), 1);  // no norm
  EXPECT_EQ(CollectivesPerStep(o, 3), 1);  // beyond the stages: the norm alone

  const LowerOptions mlp = LowerOptionsFor(MlpSpec(), Plan({{0, 0}, {1, 1}}, {1, 1})).value();
  EXPECT_EQ(CollectivesPerStep(mlp, 1), 1);
  EXPECT_THAT(mlp.tied_stages, ElementsAre(false, false));
  EXPECT_THAT(mlp.allreduce_stages, ElementsAre(false, false));
  EXPECT_EQ(mlp.chunks, 1);
  // parallel.interleave only under schedule interleaved.
  v1::JobSpec interleaved = MlpSpec();
  interleaved.mutable_parallel()->set_interleave(2);
  EXPECT_EQ(LowerOptionsFor(interleaved, Plan({{0, 0}, {1, 1}}, {1, 1}))->chunks, 1);
  interleaved.mutable_parallel()->set_schedule("interleaved");
  EXPECT_EQ(LowerOptionsFor(interleaved, Plan({{0, 0}, {1, 1}}, {1, 1}))->chunks, 2);
  // Interleaved is synchronous: the job-wide decision in every program.
  EXPECT_TRUE(LowerOptionsFor(interleaved, Plan({{0, 0}, {1, 1}}, {1, 1}))->global_norm);
  // Its plan's chunks are checked against the model like any layer range.
  v1::ParallelPlanSummary chunked = Plan({{0, 0}, {1, 1}}, {1, 1});
  v1::StageRange* outside = chunked.mutable_stages(1)->add_chunks();
  outside->set_first_layer(1);
  outside->set_last_layer(9);
  EXPECT_EQ(LowerOptionsFor(interleaved, chunked).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Under parallel.schedule auto the plan names the schedule that runs, and the lowering follows
// it (not the spec's "auto"); a plan without one falls back to the spec's, then to dapple.
TEST(LowerOptionsForTest, FollowsThePlansSchedule) {
  v1::JobSpec spec = MlpSpec();
  spec.mutable_parallel()->set_schedule("auto");
  v1::ParallelPlanSummary plan = Plan({{0, 0}, {1, 1}}, {1, 1});
  plan.set_schedule("zb-h1");
  EXPECT_EQ(RunningSchedule(spec, plan), "zb-h1");
  EXPECT_TRUE(LowerOptionsFor(spec, plan)->global_norm);
  plan.set_schedule("pipedream");
  spec.mutable_parallel()->set_schedule("dapple");
  EXPECT_FALSE(LowerOptionsFor(spec, plan)->global_norm);
  plan.clear_schedule();
  EXPECT_EQ(RunningSchedule(spec, plan), "dapple");
  EXPECT_TRUE(LowerOptionsFor(spec, plan)->global_norm);
  spec.mutable_parallel()->clear_schedule();
  EXPECT_EQ(RunningSchedule(spec, plan), "dapple");
}

// zb-h2 without clipping and without skipped steps: the decision can only fail the job, so it
// is deferred (GLOBAL_NORM_ASYNC, no barrier); with either, or under any other schedule, the
// barrier stays. A program must carry the form its options say.
TEST(LowerOptionsForTest, DefersTheCheckOnlyWhereItCannotChangeTheUpdate) {
  v1::JobSpec spec = MlpSpec();
  const v1::ParallelPlanSummary plan = Plan({{0, 0}, {1, 1}}, {1, 1});
  spec.mutable_parallel()->set_schedule("zb-h2");
  LowerOptions o = LowerOptionsFor(spec, plan).value();
  EXPECT_TRUE(o.global_norm);
  EXPECT_TRUE(o.deferred_check);
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kZbH2, 2, 4, o);
  ASSERT_TRUE(programs.ok()) << programs.status();
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(CountActions((*programs)[s], v1::GLOBAL_NORM), 0);
    EXPECT_EQ(CountActions((*programs)[s], v1::GLOBAL_NORM_ASYNC), 1);
    EXPECT_TRUE(absl::EndsWith(ProgramToString((*programs)[s]),
                               absl::StrCat(s, "GLOBAL_NORM_ASYNC ", s, "STEP")));
    EXPECT_TRUE(CheckProgramCollectives((*programs)[s], s, o).ok());
  }
  // The same program where the decision may change the update is refused.
  v1::JobSpec clipped = spec;
  clipped.mutable_training()->set_max_grad_norm(1.0);
  const LowerOptions co = LowerOptionsFor(clipped, plan).value();
  EXPECT_FALSE(co.deferred_check);
  const absl::Status refused = CheckProgramCollectives((*programs)[0], 0, co);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("GLOBAL_NORM_ASYNC, but the job's decision may "
                                           "change the update"));
  v1::JobSpec skipping = spec;
  skipping.mutable_training()->set_max_consecutive_skipped_steps(1);
  EXPECT_FALSE(LowerOptionsFor(skipping, plan)->deferred_check);
  for (const char* other : {"gpipe", "dapple", "zb-h1", "interleaved"}) {
    spec.mutable_parallel()->set_schedule(other);
    EXPECT_FALSE(LowerOptionsFor(spec, plan)->deferred_check) << other;
  }
}

TEST(LowerOptionsForTest, RefusesAStageOutsideTheModel) {
  absl::StatusOr<LowerOptions> o = LowerOptionsFor(MlpSpec(), Plan({{0, 0}, {1, 5}}, {1, 1}));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(),
              HasSubstr("plan stage 1 covers layers [1, 5] but the model has 2 layers"));
}

// The options lower into programs the simulator proves deadlock-free: the tied stages sum the
// tied weights first, then the replicas their gradients, then every stage meets for the norm.
TEST(LowerOptionsForTest, ProgramsCarryTheCollectivesInOrder) {
  v1::JobSpec spec = GptSpec(1);
  spec.mutable_training()->set_max_grad_norm(0.5);
  const v1::ParallelPlanSummary plan = Plan({{0, 0}, {1, 1}, {2, 3}}, {2, 1, 1});
  const LowerOptions o = LowerOptionsFor(spec, plan).value();
  absl::StatusOr<std::vector<v1::RankProgram>> programs =
      BuildPrograms(ScheduleKind::kDapple, 3, 4, o);
  ASSERT_TRUE(programs.ok()) << programs.status();
  auto tail = [&](int s) {
    const std::vector<std::string> words = absl::StrSplit(ProgramToString((*programs)[s]), ' ');
    std::string out;
    for (size_t i = words.size() >= 4 ? words.size() - 4 : 0; i < words.size(); ++i) {
      out += (out.empty() ? "" : " ") + words[i];
    }
    return out;
  };
  EXPECT_EQ(tail(0), "0TIED_ALLREDUCE 0ALLREDUCE 0GLOBAL_NORM 0STEP");
  EXPECT_EQ(tail(1), "1B3 1SEND_GRAD3 1GLOBAL_NORM 1STEP");
  EXPECT_EQ(tail(2), "2SEND_GRAD3 2TIED_ALLREDUCE 2GLOBAL_NORM 2STEP");
}

}  // namespace
}  // namespace dapple::schedule
