#include "common/memory_model.h"

#include <gtest/gtest.h>

namespace dapple::memory {
namespace {

using schedule::ScheduleKind;

ReplicaPlace Place(ScheduleKind kind, int stage, int m, std::vector<int> replicas,
                   bool vertical_sync = false) {
  ReplicaPlace p;
  p.schedule = kind;
  p.stage = stage;
  p.micro_batches = m;
  p.replicas = std::move(replicas);
  p.vertical_sync = vertical_sync;
  return p;
}

TEST(MemoryModelTest, OptimizerStateCopies) {
  v1::OptimizerSpec o;
  o.set_type("sgd");
  EXPECT_EQ(OptimizerStateCopies(o), 0);
  o.set_momentum(0.9);
  EXPECT_EQ(OptimizerStateCopies(o), 1);
  o.set_type("adamw");
  EXPECT_EQ(OptimizerStateCopies(o), 2);
  EXPECT_EQ(ParameterStateBytes(100, 0), 200);
  EXPECT_EQ(ParameterStateBytes(100, 2), 400);
}

TEST(MemoryModelTest, InFlightBySchedule) {
  // 4 stages, M = 8: gpipe holds every micro-batch, 1F1B P - s, 1F1B-RR ceil(K_s / D_s).
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kGPipe, s, 8, {1, 1, 1, 1})), 8);
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kDapple, s, 8, {1, 1, 1, 1})), 4 - s);
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kPipeDream, s, 8, {1, 1, 1, 1})), 4 - s);
  }
  EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kDapple, 0, 2, {1, 1, 1, 1})), 2);
  // 1F1B-RR on 2 x 2: K_0 = 4, K_1 = 2, so ceil(4 / 2) = 2 and ceil(2 / 2) = 1.
  EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kPipeDream, 0, 8, {2, 2})), 2);
  EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kPipeDream, 1, 8, {2, 2})), 1);
  EXPECT_EQ(InFlightBound(ScheduleKind::kGPipe, 2, 8), 8);
  EXPECT_EQ(InFlightBound(ScheduleKind::kDapple, 2, 8), 2);
  // Zero bubble: P (ZB-H1) or 2P - 1 (ZB-H2) on every stage, capped at M; the bound without P.
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kZbH1, s, 8, {1, 1, 1, 1})), 4);
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kZbH2, s, 8, {1, 1, 1, 1})), 7);
    EXPECT_EQ(ActivationsInFlight(Place(ScheduleKind::kZbH2, s, 5, {1, 1, 1, 1})), 5);
  }
  EXPECT_EQ(InFlightBound(ScheduleKind::kZbH1, 2, 8), 2);
  EXPECT_EQ(InFlightBound(ScheduleKind::kZbH2, 2, 8), 3);
  // Split-concat holds b / D samples of a micro-batch, 1F1B-RR whole ones.
  EXPECT_EQ(ReplicaRows(Place(ScheduleKind::kDapple, 0, 8, {2, 2}), 32), 16);
  EXPECT_EQ(ReplicaRows(Place(ScheduleKind::kPipeDream, 0, 8, {2, 2}), 32), 32);
}

TEST(MemoryModelTest, WeightVersions) {
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kDapple, 0, 8, {1, 1})), 1);
  EXPECT_EQ(ExtraWeightCopies(Place(ScheduleKind::kDapple, 0, 8, {1, 1})), 0);
  // PipeDream's bound P - s; a stashed version adds the live weights' swap copy.
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1})), 2);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 1, 8, {1, 1})), 1);
  EXPECT_EQ(ExtraWeightCopies(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1})), 2);
  EXPECT_EQ(ExtraWeightCopies(Place(ScheduleKind::kPipeDream, 1, 8, {1, 1})), 0);
  // Vertical sync: 2 + ceil((K_0 - 1) / M) on every stage (3 on 2 stages, M = 8).
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1}, true)), 3);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 1, 8, {1, 1}, true)), 3);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 3, 2, {1, 1, 1, 1}, true)), 4);
  // The versions the micro-batches in flight at an update ran under: PipeDream's bound P - s
  // when every one ran under its own (M = 1), fewer when M is larger.
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 1, {1, 1, 1, 1})), 4);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 2, {1, 1, 1, 1})), 3);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1, 1, 1})), 2);
  // 1F1B-RR: K_0 = 4 but a replica's in-flight micro-batches share one version at M = 8; the
  // bound ceil((K_s - 1) / D_s) + 1 is reached at M = 1.
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 8, {2, 2})), 2);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 1, 8, {2, 2})), 2);
  EXPECT_EQ(WeightVersions(Place(ScheduleKind::kPipeDream, 0, 1, {2, 2})), 3);
  // Stage 1 of 2 x 2 at M = 8: the one micro-batch in flight at an update (index 8t + 8) is
  // always replica 0's, so replica 1 never stashes; the stage's figure is its largest replica's.
  ReplicaPlace r = Place(ScheduleKind::kPipeDream, 1, 8, {2, 2});
  r.replica = 0;
  EXPECT_EQ(WeightVersions(r), 2);
  r.replica = 1;
  EXPECT_EQ(WeightVersions(r), 1);
  EXPECT_EQ(ExtraWeightCopies(r), 0);
}

TEST(MemoryModelTest, CommunicationBufferIds) {
  EXPECT_EQ(CommunicationBufferIds(Place(ScheduleKind::kGPipe, 0, 8, {1, 1})), 8);
  // PipeDream: ids modulo M + K_s, a replica every D_s-th one.
  EXPECT_EQ(CommunicationBufferIds(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1})), 10);
  EXPECT_EQ(CommunicationBufferIds(Place(ScheduleKind::kPipeDream, 0, 8, {2, 2})), 6);
  EXPECT_EQ(CommunicationBufferIds(Place(ScheduleKind::kPipeDream, 1, 8, {2, 2})), 5);
  EXPECT_EQ(CommunicationBufferIds(Place(ScheduleKind::kPipeDream, 1, 8, {2, 3})), 11);
}

TEST(MemoryModelTest, PredictReplicaMemoryAddsEveryTerm) {
  StageSizes sizes;
  sizes.parameter_bytes = 1000;
  sizes.optimizer_state_copies = 1;
  sizes.activation_bytes = 300;
  sizes.input_bytes = 10;
  sizes.output_bytes = 20;
  // Three layers: the backward's buffers take the gradients of the outputs at distance 0 (40)
  // and 1 (70) from the last layer.
  sizes.inner_output_bytes = {70, 40};
  // Stage 0 of 2 under pipedream: 2 in flight, 2 versions (1 stashed + the swap copy), 10 ids
  // of an output sent and its gradient received.
  const ReplicaMemory m =
      PredictReplicaMemory(Place(ScheduleKind::kPipeDream, 0, 8, {1, 1}), sizes);
  EXPECT_EQ(m.weights, 1000);
  EXPECT_EQ(m.gradients, 1000);
  EXPECT_EQ(m.optimizer_state, 1000);
  EXPECT_EQ(m.gradient_buffers, 0);
  EXPECT_EQ(m.stashed_weights, 2000);
  EXPECT_EQ(m.in_flight, 2);
  EXPECT_EQ(m.activations, 600);
  EXPECT_EQ(m.communication, 10 * 2 * 20);
  EXPECT_EQ(m.workspace, 70 + 40);
  EXPECT_EQ(m.WeightBytes(), 5000);
  EXPECT_EQ(m.PeakBytes(), 5000 + 600 + 400 + 110);
  // Four layers: 50 and 70 at even distance, 40 at odd.
  sizes.inner_output_bytes = {50, 40, 70};
  EXPECT_EQ(PredictReplicaMemory(Place(ScheduleKind::kDapple, 0, 4, {1, 1}), sizes).workspace,
            70 + 40);
  // The last stage of 2 under dapple sends input gradients back only, and keeps its micro-batch's
  // dL/dlogits (the size of its output) with its activations.
  const ReplicaMemory last =
      PredictReplicaMemory(Place(ScheduleKind::kDapple, 1, 4, {1, 1}), sizes);
  EXPECT_EQ(last.communication, 4 * 10);
  EXPECT_EQ(last.activations, 300 + 20);
  // Pipe-SGD (P = 1): two flat gradient buffers, nothing sent.
  const ReplicaMemory pipesgd =
      PredictReplicaMemory(Place(ScheduleKind::kPipeSgd, 0, 4, {2}), sizes);
  EXPECT_EQ(pipesgd.gradient_buffers, 2000);
  EXPECT_EQ(pipesgd.communication, 0);
  // The zero-bubble split: each micro-batch in flight keeps its inner gradients (50 + 40 + 70)
  // with its activations, and no shared workspace. Stage 1 of 2 under zb-h1 holds P = 2.
  const ReplicaMemory zb = PredictReplicaMemory(Place(ScheduleKind::kZbH1, 1, 4, {1, 1}), sizes);
  EXPECT_EQ(zb.in_flight, 2);
  EXPECT_EQ(zb.activations, 2 * (300 + 20 + 160));
  EXPECT_EQ(zb.workspace, 0);
}

// Under pipedream an evaluation between steps sends from ids of its own (the next step's
// training sends are still out): kEvalSendsInFlight pieces' outputs on replica 0 of a stage that
// sends; nothing under a flushed schedule, on the last stage or on another replica.
TEST(MemoryModelTest, PipeDreamEvaluationBetweenStepsKeepsTwoPiecesOutputs) {
  StageSizes sizes;
  sizes.input_bytes = 10;
  sizes.output_bytes = 20;
  sizes.eval_piece_output_bytes = 15;
  ReplicaPlace place = Place(ScheduleKind::kPipeDream, 0, 8, {1, 1});
  const int64_t training = PredictReplicaMemory(place, sizes).communication;
  EXPECT_EQ(training, 10 * 2 * 20);
  place.evaluates_between_steps = true;
  EXPECT_EQ(PredictReplicaMemory(place, sizes).communication, training + kEvalSendsInFlight * 15);
  place.replica = 1;
  EXPECT_EQ(PredictReplicaMemory(place, sizes).communication, training);
  ReplicaPlace last = Place(ScheduleKind::kPipeDream, 1, 8, {1, 1});
  last.evaluates_between_steps = true;
  const int64_t last_training = PredictReplicaMemory(last, sizes).communication;
  last.evaluates_between_steps = false;
  EXPECT_EQ(PredictReplicaMemory(last, sizes).communication, last_training);
  ReplicaPlace dapple = Place(ScheduleKind::kDapple, 0, 8, {1, 1});
  dapple.evaluates_between_steps = true;
  EXPECT_EQ(PredictReplicaMemory(dapple, sizes).communication, 8 * 2 * 20);
  // Pieces of training.micro_batch samples, at most 1000, fewer for a wide model.
  EXPECT_EQ(EvalPieceRows(64, 784), 64);
  EXPECT_EQ(EvalPieceRows(4096, 784), kMaxEvalPieceRows);
  EXPECT_EQ(EvalPieceRows(512, kMaxEvalActivationFloats / 8), 8);
  EXPECT_EQ(EvalPieceRows(512, 2 * kMaxEvalActivationFloats), 1);
}

TEST(MemoryModelTest, RecomputationKeepsInputsAndOutputsInFlightAndOneScratchSet) {
  StageSizes sizes;
  sizes.parameter_bytes = 1000;
  sizes.activation_bytes = 300;
  sizes.input_bytes = 10;
  sizes.output_bytes = 20;
  // Stage 0 of 4 under gpipe, M = 8: 8 micro-batches in flight.
  ReplicaPlace place = Place(ScheduleKind::kGPipe, 0, 8, {1, 1, 1, 1});
  EXPECT_EQ(PredictReplicaMemory(place, sizes).activations, 8 * 300);
  place.recompute = true;
  // Inputs and outputs of the 8, and the scratch set: every output and saved byte (300 - 10).
  const ReplicaMemory m = PredictReplicaMemory(place, sizes);
  EXPECT_EQ(m.in_flight, 8);
  EXPECT_EQ(m.activations, 8 * (10 + 20) + 290);
  EXPECT_EQ(ActivationBytes(place, sizes, 3), 3 * (10 + 20) + 290);
  // The rest of the replica is unchanged.
  place.recompute = false;
  EXPECT_EQ(m.WeightBytes(), PredictReplicaMemory(place, sizes).WeightBytes());
  // The last stage also keeps each one's dL/dlogits (the size of its output).
  ReplicaPlace last = Place(ScheduleKind::kDapple, 3, 8, {1, 1, 1, 1});
  last.recompute = true;
  EXPECT_EQ(PredictReplicaMemory(last, sizes).activations, 1 * (10 + 20 + 20) + 290);
}

}  // namespace
}  // namespace dapple::memory
