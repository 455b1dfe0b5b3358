#include "worker/runtime/stage_state.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

kernels::Param MakeParam(const std::string& name, const std::string& tied_to) {
  kernels::Param p;
  p.name = name;
  p.tied_to = tied_to;
  p.value.shape = {2, 2};
  p.value.data.assign(4, 0.0f);
  return p;
}

NamedTensor Tensor(const std::string& name, float v) { return {name, {2, 2}, {v, v, v, v}}; }

TEST(StageStateTest, ATiedCopyIsCheckpointedUnderItsOwnersName) {
  const kernels::Param own = MakeParam("layer3.bias", "");
  const kernels::Param copy = MakeParam("layer4.weight", "layer0.token_embedding");
  EXPECT_EQ(CheckpointName(own), "layer3.bias");
  EXPECT_EQ(CheckpointName(copy), "layer0.token_embedding");
}

// A stage holding the tied head (its copy of the embedding table) takes the owner's tensors.
TEST(StageStateTest, MatchFindsATiedCopyByItsOwnersName) {
  kernels::Param own = MakeParam("layer3.weight", "");
  kernels::Param copy = MakeParam("layer4.weight", "layer0.token_embedding");
  const std::vector<kernels::Param*> params = {&own, &copy};
  StageState state;
  state.params = {Tensor("layer0.token_embedding", 2), Tensor("layer3.weight", 1)};
  state.optimizer_state = {Tensor("layer3.weight.momentum", 3),
                           Tensor("layer0.token_embedding.momentum", 4)};
  state.optimizer_steps = 5;
  absl::StatusOr<MatchedStageState> m = MatchStageState(state, params, {}, {"momentum"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->params[0]->name, "layer3.weight");
  EXPECT_EQ(m->params[1]->name, "layer0.token_embedding");
  EXPECT_EQ(m->optimizer_state[0][1]->name, "layer0.token_embedding.momentum");

  // The copy's own name is not a checkpoint tensor: checkpoints hold the table once.
  state.params[0] = Tensor("layer4.weight", 2);
  m = MatchStageState(state, params, {}, {"momentum"});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("checkpoint has no tensor layer0.token_embedding"));
}

// Buffers (batch norm's running statistics) are matched by their own names, have no optimizer
// state, and an import takes exactly the stage's.
TEST(StageStateTest, MatchTakesExactlyTheStagesBuffers) {
  kernels::Param weight = MakeParam("layer2.weight", "");
  kernels::Param mean = MakeParam("layer2.running_mean", "");
  kernels::Param var = MakeParam("layer2.running_var", "");
  StageState state;
  state.params = {Tensor("layer2.weight", 1)};
  state.buffers = {Tensor("layer2.running_var", 3), Tensor("layer2.running_mean", 2)};
  state.optimizer_state = {Tensor("layer2.weight.momentum", 4)};
  absl::StatusOr<MatchedStageState> m =
      MatchStageState(state, {&weight}, {&mean, &var}, {"momentum"});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->buffers.size(), 2u);
  EXPECT_EQ(m->buffers[0]->name, "layer2.running_mean");
  EXPECT_EQ(m->buffers[1]->name, "layer2.running_var");

  state.buffers.pop_back();  // running_mean missing
  m = MatchStageState(state, {&weight}, {&mean, &var}, {"momentum"});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("checkpoint has no tensor layer2.running_mean"));

  state.buffers = {Tensor("layer2.running_mean", 2), Tensor("layer2.running_var", 3),
                   Tensor("layer7.running_var", 3)};
  m = MatchStageState(state, {&weight}, {&mean, &var}, {"momentum"});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(),
              HasSubstr("checkpoint tensor layer7.running_var is not a tensor of this stage"));
}

}  // namespace
}  // namespace dapple::worker
