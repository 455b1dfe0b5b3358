// The sizes a profile of a dapple model carries (SetLayerSizes: outputs, saved bytes, parameters)
// and the profile cache's key for the GPT layers' parameters.
#include <set>
#include <string>
#include <vector>

#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "common/testing/assert_ok.h"
#include "gtest/gtest.h"

namespace dapple::profile {
namespace {

constexpr int64_t T = 16, C = 8, kVocab = 32, kHeads = 2;

// embedding 32 x 8 on 16 tokens, one transformer block of 2 heads (MLP 4C = 32), layernorm,
// lm_head tied to the embedding.
v1::ModelSpec Gpt() {
  v1::ModelSpec model;
  model.add_input_shape(T);
  model.set_input_type("tokens");
  v1::LayerSpec* l = model.add_layers();
  l->set_type("embedding");
  l->mutable_embedding()->set_vocab(kVocab);
  l->mutable_embedding()->set_dim(C);
  l = model.add_layers();
  l->set_type("transformer_block");
  l->mutable_transformer_block()->set_heads(kHeads);
  model.add_layers()->set_type("layernorm");
  l = model.add_layers();
  l->set_type("lm_head");
  l->mutable_lm_head()->set_tied(true);
  model.set_loss("softmax_cross_entropy");
  return model;
}

TEST(ModelSizesTest, EstimatedGptProfileCarriesOutputsAndSavedBytes) {
  const int64_t batch = 8;
  absl::StatusOr<v1::ModelProfile> profile = EstimateProfile(Gpt(), batch, 1e9);
  ASSERT_OK(profile.status());
  ASSERT_EQ(profile->layers_size(), 4);
  const int64_t f = 4 * batch;  // fp32 bytes x samples
  // Outputs: [T, C] three times, then [T, vocab] logits.
  EXPECT_EQ(profile->layers(0).activation_bytes(), T * C * f);
  EXPECT_EQ(profile->layers(1).activation_bytes(), T * C * f);
  EXPECT_EQ(profile->layers(2).activation_bytes(), T * C * f);
  EXPECT_EQ(profile->layers(3).activation_bytes(), T * kVocab * f);
  // The block keeps 7TC + 2TH + hT^2 + 4T floats per sample (H = 4C) from its forward, its
  // attention probabilities growing with heads x T^2, and 7TC + TH gradients from BackwardInput
  // for BackwardWeight. A layernorm keeps a mean and 1/std per row; the
  // embedding and the head keep nothing beyond their input and output.
  EXPECT_EQ(profile->layers(0).saved_bytes(), 0);
  EXPECT_EQ(profile->layers(1).saved_bytes(),
            (7 * T * C + 2 * T * 4 * C + kHeads * T * T + 4 * T + 7 * T * C + T * 4 * C) * f);
  EXPECT_EQ(profile->layers(2).saved_bytes(), 2 * T * f);
  EXPECT_EQ(profile->layers(3).saved_bytes(), 0);
  // The tied head holds its own copy of the table.
  EXPECT_EQ(profile->layers(0).parameter_bytes(), (kVocab + T) * C * 4);
  EXPECT_EQ(profile->layers(3).parameter_bytes(), kVocab * C * 4);
  // Exactly what the model declares, per layer: the runtime accounts the same bytes.
  const std::vector<LayerInfo> infos = InferLayers(Gpt()).value();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(profile->layers(i).activation_bytes(), infos[i].output_bytes * batch) << i;
    EXPECT_EQ(profile->layers(i).saved_bytes(), infos[i].saved_bytes * batch) << i;
  }
  // The planner's chain view keeps them apart: outputs cross cuts, saved bytes stay.
  absl::StatusOr<ChainProfile> chain = ToChain(*profile);
  ASSERT_OK(chain.status());
  EXPECT_EQ(chain->saved_bytes[1], profile->layers(1).saved_bytes());
  EXPECT_EQ(chain->cut_bytes[1], T * C * f);
  EXPECT_EQ(chain->input_bytes, 0);  // the job planner adds the model input
  EXPECT_TRUE(chain->ties.empty());
}

TEST(ModelSizesTest, PublishedProfilesHaveNoSavedBytes) {
  absl::StatusOr<v1::ModelProfile> profile = ParseGraphTxt(
      "node1 -- Linear(4, 4) -- forward_compute_time=1.0, backward_compute_time=2.0, "
      "activation_size=64.0, parameter_size=80.000\n",
      "one.txt", 4);
  ASSERT_OK(profile.status());
  EXPECT_EQ(profile->layers(0).saved_bytes(), 0);
  absl::StatusOr<ChainProfile> chain = ToChain(*profile);
  ASSERT_OK(chain.status());
  EXPECT_EQ(chain->saved_bytes, std::vector<int64_t>{0});
}

TEST(ModelSizesTest, FingerprintCoversEveryGptLayerParameter) {
  std::vector<v1::ModelSpec> variants(10, Gpt());
  variants[1].mutable_layers(0)->mutable_embedding()->set_vocab(64);
  variants[2].mutable_layers(0)->mutable_embedding()->set_dim(16);
  variants[3].mutable_layers(0)->mutable_embedding()->set_positions(32);
  variants[4].mutable_layers(0)->mutable_embedding()->set_dropout(0.1);
  variants[5].mutable_layers(1)->mutable_transformer_block()->set_heads(4);
  variants[6].mutable_layers(1)->mutable_transformer_block()->set_mlp_hidden(16);
  variants[7].mutable_layers(1)->mutable_transformer_block()->set_dropout(0.1);
  variants[8].mutable_layers(2)->mutable_layernorm()->set_eps(1e-6);
  variants[9].mutable_layers(3)->mutable_lm_head()->set_tied(false);
  variants[9].mutable_layers(3)->mutable_lm_head()->set_vocab(kVocab);
  std::set<std::string> keys;
  for (const v1::ModelSpec& m : variants) {
    ASSERT_OK(InferLayers(m).status());
    keys.insert(ModelFingerprint(m));
  }
  EXPECT_EQ(keys.size(), variants.size());
  EXPECT_EQ(ModelFingerprint(Gpt()),
            "in=16;embedding{vocab=32,dim=8};transformer_block{heads=2};layernorm;"
            "lm_head{tied=true}");
  // A longer sequence is another model (the input shape is in the key).
  v1::ModelSpec longer = Gpt();
  longer.set_input_shape(0, 2 * T);
  EXPECT_NE(ModelFingerprint(longer), ModelFingerprint(Gpt()));
}

}  // namespace
}  // namespace dapple::profile
