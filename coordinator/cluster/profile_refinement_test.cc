#include "coordinator/cluster/profile_refinement.h"

#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::StageRange Range(int first, int last) {
  v1::StageRange r;
  r.set_first_layer(first);
  r.set_last_layer(last);
  return r;
}

StageMeasurement Stage(std::vector<v1::StageRange> layers, double predicted, double overhead,
                       double measured, double contention = 0) {
  return StageMeasurement{std::move(layers), predicted, overhead, contention, measured, 0};
}

v1::ModelProfile Profile(int layers) {
  v1::ModelProfile p;
  p.set_source("measured on cpu by worker w-1");
  p.set_input_ms_per_sample(0.01);
  for (int l = 0; l < layers; ++l) {
    v1::LayerProfile* layer = p.add_layers();
    layer->set_forward_ms(1.0 + l);
    layer->set_backward_ms(2.0 + l);
    layer->set_optimizer_ms(0.5);
    layer->set_half_batch_forward_ms(0.6 + l);
    layer->set_half_batch_backward_ms(1.1 + l);
    layer->set_activation_bytes(1000);
  }
  return p;
}

TEST(ProfileRefinementTest, UnobservedIsTheRawProfile) {
  ProfileRefinement r(3);
  EXPECT_EQ(r.Factors(), std::vector<double>(3, 1.0));
  EXPECT_EQ(r.jobs(), 0);
  const v1::ModelProfile raw = Profile(3);
  EXPECT_EQ(r.Apply(raw).SerializeAsString(), raw.SerializeAsString());
}

TEST(ProfileRefinementTest, AStagesRatioOfLayerTimeScalesItsLayersAndNotTheOverhead) {
  ProfileRefinement r(4);
  // Stage 0 (layers 0-1): predicted 12 ms of which 2 overhead, measured 14: (14-2)/(12-2) = 1.2.
  // Stage 1 (layers 2-3): predicted 21, overhead 1, measured 17: 0.8.
  absl::StatusOr<int> taken =
      r.Observe(std::vector<double>(4, 1.0),
                {Stage({Range(0, 1)}, 12, 2, 14), Stage({Range(2, 3)}, 21, 1, 17)});
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2);
  EXPECT_EQ(r.jobs(), 1);
  const std::vector<double> f = r.Factors();
  EXPECT_NEAR(f[0], 1.2, 1e-12);
  EXPECT_NEAR(f[1], 1.2, 1e-12);
  EXPECT_NEAR(f[2], 0.8, 1e-12);
  EXPECT_NEAR(f[3], 0.8, 1e-12);

  const v1::ModelProfile refined = r.Apply(Profile(4));
  EXPECT_NEAR(refined.layers(1).forward_ms(), 2.0 * 1.2, 1e-12);
  EXPECT_NEAR(refined.layers(1).backward_ms(), 3.0 * 1.2, 1e-12);
  EXPECT_NEAR(refined.layers(1).optimizer_ms(), 0.5 * 1.2, 1e-12);
  EXPECT_NEAR(refined.layers(1).half_batch_forward_ms(), 1.6 * 1.2, 1e-12);
  EXPECT_NEAR(refined.layers(3).half_batch_backward_ms(), 4.1 * 0.8, 1e-12);
  // What is not layer time stays measured as it was.
  EXPECT_EQ(refined.input_ms_per_sample(), 0.01);
  EXPECT_EQ(refined.layers(3).activation_bytes(), 1000);
  EXPECT_EQ(refined.source(),
            "measured on cpu by worker w-1; layer times refined by the measured steps of 1 job "
            "(x0.80 to x1.20)");
}

TEST(ProfileRefinementTest, PredictedContentionIsNotLayerTimeAndTooMuchOfItIsNotTaken) {
  ProfileRefinement r(2);
  // Layers 8 ms, overhead 1, contention 1 (12.5 % of the layers): measured 12 = 1 + 1 + 10,
  // so the layers took 10 / 8 = 1.25x.
  ASSERT_EQ(*r.Observe({1.0, 1.0}, {Stage({Range(0, 0)}, 10, 1, 12, /*contention=*/1)}), 1);
  EXPECT_NEAR(r.Factors()[0], 1.25, 1e-12);
  // Contention of 3 ms on 6 ms of layers (50 %): the measurement is the host's sharing as much
  // as the layers'.
  ASSERT_EQ(*r.Observe({1.25, 1.0}, {Stage({Range(1, 1)}, 10, 1, 12, /*contention=*/3)}), 0);
  EXPECT_EQ(r.Factors()[1], 1.0);
}

TEST(ProfileRefinementTest, AnObservationIsRelativeToTheFactorsTheJobWasPlannedOn) {
  ProfileRefinement r(2);
  ASSERT_TRUE(r.Observe({1.0, 1.0}, {Stage({Range(0, 1)}, 10, 0, 12)}).ok());
  EXPECT_NEAR(r.Factors()[0], 1.2, 1e-12);
  // A job planned on 1.2 that measured what it predicted confirms 1.2; one planned before
  // the first refinement (factors 1) that measured 10 % over says 1.1.
  ASSERT_TRUE(r.Observe({1.2, 1.2}, {Stage({Range(0, 1)}, 12, 0, 12)}).ok());
  ASSERT_TRUE(r.Observe({1.0, 1.0}, {Stage({Range(0, 1)}, 10, 0, 11)}).ok());
  EXPECT_NEAR(r.Factors()[0], 1.2, 1e-12);  // median of 1.2, 1.2, 1.1
  EXPECT_EQ(r.jobs(), 3);
}

TEST(ProfileRefinementTest, TheFactorIsTheMedianOfTheLastObservationsSoOneOutlierMovesLittle) {
  ProfileRefinement r(1);
  for (double measured : {11.0, 11.0, 19.0}) {
    ASSERT_TRUE(r.Observe({1.0}, {Stage({Range(0, 0)}, 10, 0, measured)}).ok());
  }
  EXPECT_NEAR(r.Factors()[0], 1.1, 1e-12);
  // Only the last kHistory observations count.
  for (int i = 0; i < ProfileRefinement::kHistory; ++i) {
    ASSERT_TRUE(r.Observe({1.0}, {Stage({Range(0, 0)}, 10, 0, 9)}).ok());
  }
  EXPECT_NEAR(r.Factors()[0], 0.9, 1e-12);
}

TEST(ProfileRefinementTest, InterleavedChunksOfARankShareItsRatio) {
  ProfileRefinement r(6);
  ASSERT_TRUE(
      r.Observe(std::vector<double>(6, 1.0), {Stage({Range(0, 1), Range(4, 5)}, 10, 0, 15)}).ok());
  EXPECT_EQ(r.Factors(), (std::vector<double>{1.5, 1.5, 1.0, 1.0, 1.5, 1.5}));
}

TEST(ProfileRefinementTest, EachStageNotTakenSaysWhy) {
  ProfileRefinement r(3);
  std::vector<std::string> why;
  StageMeasurement contended = Stage({Range(0, 0)}, 10, 0, 12, /*contention=*/4);
  StageMeasurement slow = Stage({Range(1, 1)}, 10, 0, 25);
  slow.stage = 1;
  StageMeasurement unpredicted = Stage({Range(2, 2)}, 1, 1, 5);
  unpredicted.stage = 2;
  ASSERT_EQ(*r.Observe({1.0, 1.0, 1.0}, {contended, slow, unpredicted}, &why), 0);
  EXPECT_THAT(why, ::testing::ElementsAre(
                       "stage 0 not taken: its predicted contention 4.0 ms is 67% of its layer "
                       "time 6.0 ms, over 25%",
                       "stage 1 not taken: measured 2.50x its predicted layer time, outside "
                       "[0.5, 2.0]",
                       "stage 2 not taken: no layer time to compare (predicted 0.0 ms, measured "
                       "5.0)"));
}

TEST(ProfileRefinementTest, ImplausibleOrUnpredictedStagesAreNotTaken) {
  ProfileRefinement r(3);
  absl::StatusOr<int> taken =
      r.Observe({1.0, 1.0, 1.0}, {Stage({Range(0, 0)}, 10, 0, 25),   // 2.5x: a straggling host
                                  Stage({Range(1, 1)}, 10, 0, 4),    // 0.4x
                                  Stage({Range(2, 2)}, 2, 2, 3),     // no layer time predicted
                                  Stage({Range(2, 2)}, 10, 0, 0)});  // not measured
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, 0);
  EXPECT_EQ(r.jobs(), 0);
  EXPECT_EQ(r.Factors(), std::vector<double>(3, 1.0));
}

TEST(ProfileRefinementTest, LayersOutsideTheProfileOrAnotherSizeAreRefusedChangingNothing) {
  ProfileRefinement r(3);
  EXPECT_EQ(r.Observe({1.0, 1.0}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      r.Observe({1.0, 1.0, 1.0}, {Stage({Range(0, 0)}, 10, 0, 12), Stage({Range(1, 3)}, 10, 0, 12)})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Observe({1.0, 1.0, 1.0}, {Stage({Range(2, 1)}, 10, 0, 12)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Factors(), std::vector<double>(3, 1.0));
  // A profile of another layer count than the refinement's is returned as it is.
  ASSERT_TRUE(r.Observe({1.0, 1.0, 1.0}, {Stage({Range(0, 2)}, 10, 0, 12)}).ok());
  const v1::ModelProfile four = Profile(4);
  EXPECT_EQ(r.Apply(four).SerializeAsString(), four.SerializeAsString());
}

TEST(ProfileRefinementTest, ItsStateRestoresTheSameFactorsAndHistory) {
  ProfileRefinement r(3);
  for (double measured : {12.0, 11.0, 13.0}) {
    ASSERT_TRUE(r.Observe(r.Factors(), {Stage({Range(0, 1)}, 10, 0, measured)}).ok());
  }
  const v1::ProfileRefinementState state = r.State();
  ASSERT_EQ(state.layers_size(), 3);
  EXPECT_EQ(state.layers(0).observations_size(), 3);
  EXPECT_EQ(state.layers(2).observations_size(), 0);
  EXPECT_EQ(state.jobs(), 3);
  absl::StatusOr<ProfileRefinement> restored = ProfileRefinement::FromState(3, state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Factors(), r.Factors());
  EXPECT_EQ(restored->jobs(), 3);
  const v1::ModelProfile raw = Profile(3);
  EXPECT_EQ(restored->Apply(raw).SerializeAsString(), r.Apply(raw).SerializeAsString());
  // The history goes on where it stopped: the next observations push out the oldest alike.
  for (int i = 0; i < ProfileRefinement::kHistory; ++i) {
    ASSERT_TRUE(r.Observe(r.Factors(), {Stage({Range(0, 0)}, 10, 0, 15)}).ok());
    ASSERT_TRUE(restored->Observe(restored->Factors(), {Stage({Range(0, 0)}, 10, 0, 15)}).ok());
  }
  EXPECT_EQ(restored->State().SerializeAsString(), r.State().SerializeAsString());
}

TEST(ProfileRefinementTest, AStateItCouldNotHaveWrittenIsRefusedNamingTheValue) {
  v1::ProfileRefinementState state = ProfileRefinement(2).State();
  EXPECT_EQ(ProfileRefinement::FromState(3, state).status().message(),
            "the refinement has 2 layers, the profile 3");
  v1::ProfileRefinementState bad = state;
  bad.mutable_layers(1)->add_observations(0);
  EXPECT_EQ(ProfileRefinement::FromState(2, bad).status().message(),
            "layer 1 of the refinement has factor 0: a factor must be a positive finite number");
  bad = state;
  bad.mutable_layers(0)->add_observations(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(ProfileRefinement::FromState(2, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = state;
  for (int i = 0; i <= ProfileRefinement::kHistory; ++i) bad.mutable_layers(0)->add_observations(1);
  EXPECT_EQ(ProfileRefinement::FromState(2, bad).status().message(),
            "layer 0 of the refinement has 6 observations, at most 5");
  bad = state;
  bad.set_jobs(-1);
  EXPECT_EQ(ProfileRefinement::FromState(2, bad).status().message(),
            "the refinement's job count must be at least 0, got -1");
}

}  // namespace
}  // namespace dapple::coordinator
