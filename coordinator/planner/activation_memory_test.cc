#include "coordinator/planner/activation_memory.h"

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

// Four layers at batch 32: outputs 1000..4000 bytes, saved 10, 0, 30, 0; a chain (each cut is
// the output before it) with a model input of 500 bytes.
profile::ChainProfile FourLayers() {
  profile::ChainProfile p;
  p.source = "hand-made";
  p.batch_size = 32;
  p.names = {"l0", "l1", "l2", "l3"};
  p.forward_ms = {1, 2, 3, 4};
  p.backward_ms = {2, 4, 6, 8};
  p.parameter_bytes = {100, 200, 300, 400};
  p.activation_bytes = {1000, 2000, 3000, 4000};
  p.saved_bytes = {10, 0, 30, 0};
  p.cut_bytes = {1000, 2000, 3000};
  p.input_bytes = 500;
  return p;
}

TEST(ActivationMemoryTest, StageInputPlusOutputsPlusSavedBytes) {
  const ActivationMemory m(FourLayers());
  // Stage 0 holds the model input; a later stage the cut before it.
  EXPECT_DOUBLE_EQ(m.AtProfileBatch(0, 1), 500 + 1000 + 10 + 2000);
  EXPECT_DOUBLE_EQ(m.AtProfileBatch(2, 2), 2000 + 3000 + 30);
  EXPECT_DOUBLE_EQ(m.AtProfileBatch(1, 3), 1000 + 2000 + 3000 + 30 + 4000);
  EXPECT_DOUBLE_EQ(m.AtProfileBatch(0, 3), 500 + 10000 + 40);
}

TEST(ActivationMemoryTest, ScalesLinearlyWithTheMicroBatch) {
  const ActivationMemory m(FourLayers());
  EXPECT_DOUBLE_EQ(m.PerMicroBatch(0, 1, 32), 3510);
  EXPECT_DOUBLE_EQ(m.PerMicroBatch(0, 1, 8), 3510.0 / 4);
  EXPECT_DOUBLE_EQ(m.PerMicroBatch(3, 3, 64), 2 * (3000 + 4000));
  // A micro-batch split over 3 replicas: a fractional share.
  EXPECT_DOUBLE_EQ(m.PerMicroBatch(2, 2, 32.0 / 3), 5030.0 / 3);
}

TEST(ActivationMemoryTest, LayerBytesLeaveTheInputOut) {
  const ActivationMemory m(FourLayers());
  EXPECT_DOUBLE_EQ(m.LayerBytes(0), 1010);
  EXPECT_DOUBLE_EQ(m.LayerBytes(1), 2000);
  EXPECT_DOUBLE_EQ(m.LayerBytes(2), 3030);
}

TEST(ActivationMemoryTest, ADagStageHoldsEverythingCrossingIntoIt) {
  // Layer 0 feeds layers 1 and 2 (a skip connection): the cut after layer 1 carries both
  // outputs, and a stage starting at layer 2 holds them as its input.
  profile::ChainProfile p = FourLayers();
  p.cut_bytes = {1000, 3000, 3000};
  const ActivationMemory m(p);
  EXPECT_DOUBLE_EQ(m.AtProfileBatch(2, 3), 3000 + 3000 + 30 + 4000);
}

}  // namespace
}  // namespace dapple::coordinator
