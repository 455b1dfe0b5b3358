#include "common/profile/model_profile.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/assert_ok.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dapple::profile {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string SourceRoot() {
  const char* env = std::getenv("DAPPLE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : DAPPLE_SOURCE_ROOT;
}
std::string ProfilePath(const std::string& name) {
  return absl::StrCat(SourceRoot(), "/examples/profiles/", name);
}
std::string TestData(const std::string& name) {
  return absl::StrCat(SourceRoot(), "/common/profile/testdata/", name);
}

std::vector<std::string> Ids(const v1::ModelProfile& profile) {
  std::vector<std::string> ids;
  for (const v1::LayerProfile& layer : profile.layers()) ids.push_back(layer.id());
  return ids;
}

std::vector<std::pair<int, int>> Edges(const v1::ModelProfile& profile) {
  std::vector<std::pair<int, int>> edges;
  for (const v1::ProfileEdge& edge : profile.edges()) edges.emplace_back(edge.src(), edge.dst());
  return edges;
}

// cut_bytes straight from its definition, O(L * E): for each cut, each layer before it with an
// edge to a layer after it, counted once.
std::vector<int64_t> NaiveCutBytes(const v1::ModelProfile& profile) {
  std::vector<int64_t> cuts;
  for (int k = 0; k + 1 < profile.layers_size(); ++k) {
    std::vector<bool> crosses(profile.layers_size(), false);
    for (const v1::ProfileEdge& e : profile.edges()) {
      if (e.src() <= k && e.dst() > k) crosses[e.src()] = true;
    }
    int64_t bytes = 0;
    for (int i = 0; i <= k; ++i) bytes += crosses[i] ? profile.layers(i).activation_bytes() : 0;
    cuts.push_back(bytes);
  }
  return cuts;
}

struct ProfileFile {
  const char* name;
  int layers;     // node lines
  int edges;      // distinct edge lines
  int inputs;     // nodes whose description starts with "Input"
  int64_t batch;  // 0: unknown from the file (GNMT's Input nodes are 0 bytes)
};

// Counted from the files with grep; batch sizes from examples/profiles/README.md.
constexpr ProfileFile kProfileFiles[] = {
    {"dapple/amoeba-18-pbs-8.txt", 26, 47, 1, 8},
    {"dapple/amoeba-36-pbs-1.txt", 44, 83, 1, 1},
    {"dapple/amoeba-6-pbs-8-complicated.txt", 20, 28, 1, 8},
    {"dapple/amoeba-6-pbs-8-simplified.txt", 14, 23, 1, 8},
    {"dapple/bert-24-pbs-6.txt", 29, 52, 0, 6},
    {"dapple/bert-48-pbs-2.txt", 53, 100, 0, 2},
    {"dapple/gnmt-16-pbs-64.txt", 96, 122, 3, 64},
    {"dapple/gnmt-32-pbs-64-simplified.txt", 67, 124, 3, 64},
    {"dapple/gnmt-32-pbs-64.txt", 192, 250, 3, 64},
    {"dapple/vgg-19-pbs-32.txt", 26, 25, 1, 32},
    {"dapple/vgg16.txt", 41, 41, 1, 128},
    {"dapple/xlnet-24-pbs-1.txt", 31, 103, 1, 1},
    {"dapple/xlnet-36-pbs-1.txt", 43, 151, 1, 1},
    {"pipedream/alexnet.txt", 23, 23, 1, 256},
    {"pipedream/densenet121.txt", 429, 487, 1, 64},
    {"pipedream/gnmt.txt", 48, 58, 3, 0},
    {"pipedream/gnmt_large.txt", 96, 122, 3, 0},
    {"pipedream/inception_v3.txt", 326, 362, 1, 128},
    {"pipedream/nasnetalarge.txt", 1251, 1468, 1, 16},
    {"pipedream/nasnetamobile.txt", 921, 1078, 1, 128},
    {"pipedream/resnet101.txt", 347, 380, 1, 64},
    {"pipedream/resnet18.txt", 71, 79, 1, 256},
    {"pipedream/resnet50.txt", 177, 193, 1, 128},
    {"pipedream/resnext101.txt", 347, 380, 1, 64},
    {"pipedream/resnext50.txt", 177, 193, 1, 128},
    {"pipedream/squeezenet1_0.txt", 68, 76, 1, 256},
    {"pipedream/vgg16.txt", 41, 41, 1, 128},
};

TEST(ReadProfileFileTest, EveryExampleParsesWithItsBatchSizeAndShape) {
  for (const ProfileFile& file : kProfileFiles) {
    SCOPED_TRACE(file.name);
    const std::string path = ProfilePath(file.name);
    absl::StatusOr<v1::ModelProfile> profile = ReadProfileFile(path);
    if (file.batch == 0) {
      ASSERT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument);
      const std::string stem =
          std::string(file.name).substr(10, std::string(file.name).size() - 14);
      EXPECT_THAT(std::string(profile.status().message()),
                  StartsWith(absl::StrCat(path, ": profile batch size unknown: name the file ",
                                          stem, "-pbs-<N>.txt or give it")));
      profile = ReadProfileFile(path, 64);
    }
    ASSERT_OK(profile.status());
    EXPECT_EQ(profile->batch_size(), file.batch == 0 ? 64 : file.batch);
    EXPECT_EQ(profile->source(), path);
    EXPECT_EQ(profile->layers_size(), file.layers);
    EXPECT_EQ(profile->edges_size(), file.edges);
    int inputs = 0;
    for (const v1::LayerProfile& layer : profile->layers()) inputs += layer.input() ? 1 : 0;
    EXPECT_EQ(inputs, file.inputs);
    for (const v1::ProfileEdge& edge : profile->edges()) {
      ASSERT_LT(edge.src(), edge.dst()) << "edges must go forward in a topological order";
    }
    absl::StatusOr<ChainProfile> chain = ToChain(*profile);
    ASSERT_OK(chain.status());
    EXPECT_EQ(chain->num_layers(), file.layers);
    EXPECT_EQ(chain->cut_bytes, NaiveCutBytes(*profile));
  }
}

TEST(ReadProfileFileTest, ExplicitBatchSizeWinsOverTheFileName) {
  absl::StatusOr<v1::ModelProfile> profile =
      ReadProfileFile(ProfilePath("dapple/bert-24-pbs-6.txt"), 12);
  ASSERT_OK(profile.status());
  EXPECT_EQ(profile->batch_size(), 12);
}

TEST(ReadProfileFileTest, FileProblemsNameThePath) {
  const std::string missing = TestData("no_such_file.txt");
  absl::StatusOr<v1::ModelProfile> profile = ReadProfileFile(missing);
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(profile.status().message()), StartsWith(missing + ": "));
  profile = ReadProfileFile(TestData(""));
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReadProfileFileTest, RefusesDevicesAndFilesOverTheCap) {
  for (const char* device : {"/dev/zero", "/dev/urandom"}) {
    const absl::Status status = ReadProfileFile(device, 1).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat(device, ": not a regular file"));
  }
  const std::string big = absl::StrCat(::testing::TempDir(), "/big-pbs-1.txt");
  {
    std::ofstream out(big, std::ios::binary);
    out << std::string(kMaxProfileFileBytes + 1, '\n');
  }
  const absl::Status status = ReadProfileFile(big).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            absl::StrCat(big, ": 16777217 bytes is more than the 16.0 MiB limit (16777216 bytes)"));
  std::remove(big.c_str());
}

TEST(ParseGraphTxtTest, CapsTheLayersNamingTheSource) {
  std::string text;
  for (int i = 0; i <= kMaxProfileLayers; ++i) {
    absl::StrAppend(&text, "n", i, " -- ReLU -- forward_compute_time=1, backward_compute_time=1, ",
                    "activation_size=4, parameter_size=0\n");
  }
  absl::Status status = ParseGraphTxt(text, "huge.txt", 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "huge.txt:100001:1: node: more than 100000 nodes; a profile may have at most 100000 "
            "layers");
  // Without a source the messages still say what they are about.
  status = ParseGraphTxt("x", "", 1).status();
  EXPECT_THAT(std::string(status.message()), StartsWith("<profile>:1:1: node: "));
  EXPECT_THAT(std::string(ParseGraphTxt("x", "", 0).status().message()),
              StartsWith("<profile>: profile batch size 0"));
}

TEST(ReadProfileFileTest, ZeroBatchSizeInTheFileNameIsRejected) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/tiny-pbs-0.txt");
  {
    std::ofstream out(path);
    out << "node1 -- Linear -- forward_compute_time=1, backward_compute_time=2, "
           "activation_size=4, parameter_size=8\n";
  }
  const absl::StatusOr<v1::ModelProfile> profile = ReadProfileFile(path);
  std::remove(path.c_str());
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(profile.status().message()), HasSubstr("profile batch size 0"));
}

TEST(ParseGraphTxtTest, ChainListedOutOfOrderComesOutInOrder) {
  // PipeDream's vgg16 lists node11 first; Input node1 is on line 35.
  absl::StatusOr<v1::ModelProfile> profile = ReadProfileFile(ProfilePath("pipedream/vgg16.txt"));
  ASSERT_OK(profile.status());
  for (int i = 0; i < profile->layers_size(); ++i) {
    EXPECT_EQ(profile->layers(i).id(), absl::StrCat("node", i + 1));
  }
  const v1::LayerProfile& input = profile->layers(0);
  EXPECT_TRUE(input.input());
  EXPECT_EQ(input.name(), "Input");
  EXPECT_DOUBLE_EQ(input.forward_ms(), 17.972);
  EXPECT_EQ(input.activation_bytes(), 77070336);
  // node32 feeds node33 and node34: after node32 (index 31) its output crosses once; after
  // node33 both node32's and node33's outputs cross.
  absl::StatusOr<ChainProfile> chain = ToChain(*profile);
  ASSERT_OK(chain.status());
  EXPECT_EQ(chain->forward_ms[0], 0.0);  // Input: no compute
  EXPECT_EQ(chain->names[0], "node1 Input");
  EXPECT_EQ(chain->cut_bytes[31], profile->layers(31).activation_bytes());
  EXPECT_EQ(chain->cut_bytes[32],
            profile->layers(31).activation_bytes() + profile->layers(32).activation_bytes());
}

TEST(ParseGraphTxtTest, AcceptsTheOdditiesOfThePublishedFiles) {
  // Trailing blank after parameter_size=0, integer numbers, backward 0, edges indented by spaces.
  absl::StatusOr<v1::ModelProfile> bert = ReadProfileFile(ProfilePath("dapple/bert-24-pbs-6.txt"));
  ASSERT_OK(bert.status());
  EXPECT_EQ(bert->layers(1).id(), "node2");
  EXPECT_EQ(bert->layers(1).activation_bytes(), 3538944);
  EXPECT_EQ(bert->layers(1).parameter_bytes(), 0);
  EXPECT_DOUBLE_EQ(bert->layers(1).forward_ms(), 0.011);
  EXPECT_EQ(bert->layers(2).backward_ms(), 0.0);
  // A list of activations is summed; " \t" before an edge.
  absl::StatusOr<v1::ModelProfile> amoeba =
      ReadProfileFile(ProfilePath("dapple/amoeba-36-pbs-1.txt"));
  ASSERT_OK(amoeba.status());
  EXPECT_EQ(amoeba->layers(0).activation_bytes(), 602112 + 4004);
  // Decimal byte counts become integers.
  absl::StatusOr<v1::ModelProfile> vgg19 = ReadProfileFile(ProfilePath("dapple/vgg-19-pbs-32.txt"));
  ASSERT_OK(vgg19.status());
  EXPECT_EQ(vgg19->layers(1).parameter_bytes(), 6835);
  EXPECT_DOUBLE_EQ(vgg19->layers(1).forward_ms(), 3.4);
}

TEST(ParseGraphTxtTest, StageIdTrailerCrlfBlankLinesAndAnyMetricOrder) {
  const std::string text =
      "a -- Input -- forward_compute_time=1, backward_compute_time=0, activation_size=8, "
      "parameter_size=0 -- stage_id=0\r\n"
      "\r\n"
      "b -- Linear(2, 2) -- parameter_size=24, activation_size=[4; 4.0], "
      "backward_compute_time=2e-1, forward_compute_time=.5 -- stage_id=1\r\n"
      "\ta -- b\r\n"
      "\ta -- b\r\n";
  absl::StatusOr<v1::ModelProfile> profile = ParseGraphTxt(text, "inline", 4);
  ASSERT_OK(profile.status());
  EXPECT_EQ(profile->batch_size(), 4);
  EXPECT_THAT(Ids(*profile), ElementsAre("a", "b"));
  EXPECT_THAT(Edges(*profile), ElementsAre(std::make_pair(0, 1)));  // the repeat is dropped
  const v1::LayerProfile& b = profile->layers(1);
  EXPECT_EQ(b.name(), "Linear(2, 2)");
  EXPECT_FALSE(b.input());
  EXPECT_DOUBLE_EQ(b.forward_ms(), 0.5);
  EXPECT_DOUBLE_EQ(b.backward_ms(), 0.2);
  EXPECT_EQ(b.activation_bytes(), 8);
  EXPECT_EQ(b.parameter_bytes(), 24);
}

// A diamond a -> {b, c} -> d listed as a, d, c, b: Kahn's order breaks the b/c tie by file order.
constexpr char kDiamond[] =
    "a -- Input -- forward_compute_time=5, backward_compute_time=0, activation_size=100, "
    "parameter_size=0\n"
    "d -- join -- forward_compute_time=4, backward_compute_time=8, activation_size=4, "
    "parameter_size=40\n"
    "c -- right -- forward_compute_time=3, backward_compute_time=6, activation_size=30, "
    "parameter_size=30\n"
    "b -- left -- forward_compute_time=2, backward_compute_time=4, activation_size=20, "
    "parameter_size=20\n"
    "\ta -- b\n"
    "\ta -- c\n"
    "\tb -- d\n"
    "\tc -- d\n";

TEST(ParseGraphTxtTest, DiamondOrderAndCutBytes) {
  absl::StatusOr<v1::ModelProfile> profile = ParseGraphTxt(kDiamond, "diamond.txt", 2);
  ASSERT_OK(profile.status());
  EXPECT_THAT(Ids(*profile), ElementsAre("a", "c", "b", "d"));
  EXPECT_THAT(Edges(*profile), ElementsAre(std::make_pair(0, 1), std::make_pair(0, 2),
                                           std::make_pair(1, 3), std::make_pair(2, 3)));
  absl::StatusOr<ChainProfile> chain = ToChain(*profile);
  ASSERT_OK(chain.status());
  EXPECT_EQ(chain->source, "diamond.txt");
  EXPECT_EQ(chain->batch_size, 2);
  EXPECT_THAT(chain->names, ElementsAre("a Input", "c right", "b left", "d join"));
  EXPECT_THAT(chain->forward_ms, ElementsAre(0.0, 3.0, 2.0, 4.0));  // Input forced to 0
  EXPECT_THAT(chain->backward_ms, ElementsAre(0.0, 6.0, 4.0, 8.0));
  EXPECT_THAT(chain->parameter_bytes, ElementsAre(0, 30, 20, 40));
  EXPECT_THAT(chain->activation_bytes, ElementsAre(100, 30, 20, 4));
  // After a: a's output once (two consumers beyond). After c: a (for b) + c (for d). After b:
  // c + b, a's last consumer b is now inside.
  EXPECT_THAT(chain->cut_bytes, ElementsAre(100, 130, 50));
  EXPECT_EQ(profile->layers(0).forward_ms(), 5.0);  // the profile itself keeps the time
}

TEST(ToChainTest, ChainWithoutEdgesCutsAtEachActivation) {
  v1::ModelProfile profile;
  profile.set_source("chain");
  profile.set_batch_size(1);
  for (int bytes : {10, 20, 30}) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_activation_bytes(bytes);
    layer->set_forward_ms(1);
  }
  absl::StatusOr<ChainProfile> chain = ToChain(profile);
  ASSERT_OK(chain.status());
  EXPECT_THAT(chain->cut_bytes, ElementsAre(10, 20));
}

// Times at the batch and at half of it give each layer a fixed part: t(s) = a + c s through
// both points, a clamped to [0, t] (noise can put the half batch above the whole, or below its
// share); a profile without half-batch times scales linearly (no fixed parts).
TEST(ToChainTest, HalfBatchTimesGiveEachLayerAFixedPart) {
  v1::ModelProfile profile;
  profile.set_source("measured");
  profile.set_batch_size(32);
  for (const auto& [t, t_half] :
       {std::pair{4.0, 3.0}, std::pair{4.0, 5.0}, std::pair{4.0, 1.0}, std::pair{4.0, 0.0}}) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_activation_bytes(10);
    layer->set_forward_ms(t);
    layer->set_backward_ms(2 * t);
    layer->set_half_batch_forward_ms(t_half);
    layer->set_half_batch_backward_ms(2 * t_half);
  }
  absl::StatusOr<ChainProfile> chain = ToChain(profile);
  ASSERT_OK(chain.status());
  // 4 at 32 and 3 at 16: c = 1/16 ms per sample, a = 4 - 2 = 2. Then all fixed, none fixed,
  // and a layer without a half-batch time is linear.
  EXPECT_THAT(chain->forward_fixed_ms, ElementsAre(2.0, 4.0, 0.0, 0.0));
  EXPECT_THAT(chain->backward_fixed_ms, ElementsAre(4.0, 8.0, 0.0, 0.0));
  for (v1::LayerProfile& layer : *profile.mutable_layers()) {
    layer.clear_half_batch_forward_ms();
    layer.clear_half_batch_backward_ms();
  }
  chain = ToChain(profile);
  ASSERT_OK(chain.status());
  EXPECT_TRUE(chain->forward_fixed_ms.empty());
  EXPECT_TRUE(chain->backward_fixed_ms.empty());
}

TEST(ToChainTest, RejectsEmptyZeroBatchAndBackwardEdges) {
  v1::ModelProfile profile;
  profile.set_source("p");
  profile.set_batch_size(1);
  EXPECT_THAT(std::string(ToChain(profile).status().message()),
              HasSubstr("profile p has no layers"));
  profile.add_layers()->set_id("x");
  profile.add_layers()->set_id("y");
  profile.set_batch_size(0);
  EXPECT_THAT(std::string(ToChain(profile).status().message()),
              HasSubstr("batch_size 0 must be > 0"));
  profile.set_batch_size(1);
  v1::ProfileEdge* edge = profile.add_edges();
  edge->set_src(1);
  edge->set_dst(0);
  absl::Status status = ToChain(profile).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("edges[0] (1 -> 0) does not go forward"));
  edge->set_dst(7);
  EXPECT_THAT(std::string(ToChain(profile).status().message()), HasSubstr("outside [0, 2)"));
}

TEST(ToChainTest, RejectsAProfileWithoutCompute) {
  v1::ModelProfile profile;
  profile.set_source("p.txt");
  profile.set_batch_size(1);
  // Only Input nodes: their times count as 0 whatever the file says.
  v1::LayerProfile* input = profile.add_layers();
  input->set_id("node1");
  input->set_name("Input0");
  input->set_input(true);
  input->set_forward_ms(3);
  const std::string message =
      "profile p.txt has no compute: every layer's forward and backward "
      "time is 0";
  EXPECT_EQ(ToChain(profile).status().message(), message);
  profile.add_layers()->set_id("node2");  // all zeros
  EXPECT_EQ(ToChain(profile).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToChain(profile).status().message(), message);
  profile.mutable_layers(1)->set_backward_ms(1e-9);
  ASSERT_OK(ToChain(profile).status());
}

TEST(ToChainTest, CapsTheLayers) {
  v1::ModelProfile profile;
  profile.set_source("big.txt");
  profile.set_batch_size(1);
  for (int i = 0; i <= kMaxProfileLayers; ++i) profile.add_layers()->set_forward_ms(1);
  EXPECT_EQ(ToChain(profile).status().message(),
            "profile big.txt has 100001 layers; at most 100000 are allowed");
  profile.mutable_layers()->RemoveLast();
  ASSERT_OK(ToChain(profile).status());
}

void ExpectRoundTrip(const v1::ModelProfile& profile) {
  const std::string text = WriteGraphTxt(profile);
  absl::StatusOr<v1::ModelProfile> back =
      ParseGraphTxt(text, profile.source(), profile.batch_size());
  ASSERT_OK(back.status());
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(profile, *back)) << diff;
}

TEST(WriteGraphTxtTest, RoundTripsFilesAndTheDiamond) {
  for (const char* name : {"pipedream/resnet50.txt", "dapple/bert-24-pbs-6.txt",
                           "dapple/amoeba-18-pbs-8.txt", "pipedream/inception_v3.txt"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<v1::ModelProfile> profile = ReadProfileFile(ProfilePath(name), 16);
    ASSERT_OK(profile.status());
    ExpectRoundTrip(*profile);
  }
  absl::StatusOr<v1::ModelProfile> diamond = ParseGraphTxt(kDiamond, "diamond.txt", 2);
  ASSERT_OK(diamond.status());
  ExpectRoundTrip(*diamond);
}

TEST(WriteGraphTxtTest, ChainGetsExplicitEdgesAndExactTimes) {
  v1::ModelProfile profile;
  profile.set_source("chain");
  profile.set_batch_size(3);
  for (int i = 0; i < 3; ++i) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_id(absl::StrCat("layers[", i, "]"));
    layer->set_name("linear");
    layer->set_forward_ms(0.1 + 0.2 * i);  // not short decimals: must still read back exactly
    layer->set_backward_ms(1e-7 / (i + 3));
    layer->set_activation_bytes(1000 + i);
    layer->set_parameter_bytes(i);
  }
  absl::StatusOr<v1::ModelProfile> back = ParseGraphTxt(WriteGraphTxt(profile), "chain", 3);
  ASSERT_OK(back.status());
  EXPECT_THAT(Edges(*back), ElementsAre(std::make_pair(0, 1), std::make_pair(1, 2)));
  back->clear_edges();
  EXPECT_TRUE(MessageDifferencer::Equals(profile, *back));
}

TEST(WriteGraphTxtTest, KeepsOddNamesOnOneParseableLine) {
  v1::ModelProfile profile;
  profile.set_source("odd");
  profile.set_batch_size(1);
  v1::LayerProfile* layer = profile.add_layers();
  layer->set_id("my layer");
  layer->set_name("a -- b\nc");
  profile.add_layers();  // empty id and name
  absl::StatusOr<v1::ModelProfile> back = ParseGraphTxt(WriteGraphTxt(profile), "odd", 1);
  ASSERT_OK(back.status());
  EXPECT_THAT(Ids(*back), ElementsAre("my_layer", "layer1"));
  EXPECT_EQ(back->layers(0).name(), "a - b c");
  EXPECT_EQ(back->layers(1).name(), "unnamed");
}

v1::ModelSpec Mlp() {
  v1::ModelSpec model;
  for (int64_t d : {1, 28, 28}) model.add_input_shape(d);
  const std::pair<const char*, int64_t> layers[] = {
      {"flatten", 0}, {"linear", 1024}, {"relu", 0}, {"linear", 1024}, {"relu", 0}, {"linear", 10}};
  for (const auto& [type, out] : layers) {
    v1::LayerSpec* layer = model.add_layers();
    layer->set_type(type);
    if (std::string_view(type) == "linear") layer->mutable_linear()->set_out(out);
  }
  model.set_loss("softmax_cross_entropy");
  return model;
}

TEST(CheckProfileMatchesModelTest, AcceptsTheModelsOwnProfileEvenWithAnInputNode) {
  absl::StatusOr<v1::ModelProfile> profile = EstimateProfile(Mlp(), 32, 1e11);
  ASSERT_OK(profile.status());
  ASSERT_OK(CheckProfileMatchesModel(*profile, Mlp()));
  v1::LayerProfile input;
  input.set_id("node0");
  input.set_name("Input");
  input.set_input(true);
  profile->mutable_layers()->Add(std::move(input));
  std::rotate(profile->mutable_layers()->begin(), profile->mutable_layers()->end() - 1,
              profile->mutable_layers()->end());
  ASSERT_OK(CheckProfileMatchesModel(*profile, Mlp()));
}

TEST(CheckProfileMatchesModelTest, NamesTheFirstMismatch) {
  absl::StatusOr<v1::ModelProfile> profile = EstimateProfile(Mlp(), 32, 1e11);
  ASSERT_OK(profile.status());
  profile->set_source("mlp.txt");
  profile->mutable_layers(3)->set_name("relu");
  profile->mutable_layers(4)->set_name("gelu");
  const absl::Status status = CheckProfileMatchesModel(*profile, Mlp());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "profile mlp.txt does not match the job's model: its layer 3 (layers[3] 'relu') is "
            "not model.layers[3] (linear) (a layer matches when its description starts with the "
            "layer type, any case)");

  absl::StatusOr<v1::ModelProfile> vgg = ReadProfileFile(ProfilePath("pipedream/vgg16.txt"));
  ASSERT_OK(vgg.status());
  EXPECT_THAT(std::string(CheckProfileMatchesModel(*vgg, Mlp()).message()),
              HasSubstr("does not match the job's model: its layer 0 (node2 'Conv2d(3, 64, "));
}

// PipeDream's graph.txt describes a layer by its module's repr.
v1::ModelProfile PipeDreamStyleMlp() {
  v1::ModelProfile profile;
  profile.set_source("mlp.txt");
  profile.set_batch_size(32);
  const std::pair<const char*, int64_t> layers[] = {
      {"Input0", 0},
      {"Flatten", 0},
      {"Linear(784, 1024)", 0},
      {"ReLU", 0},
      {"relu", 0},
      {"Linear(in_features=1024, out_features=10, bias=True)", 41000}};
  for (int i = 0; i < 6; ++i) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_id(absl::StrCat("node", i + 1));
    layer->set_name(layers[i].first);
    layer->set_input(i == 0);
    layer->set_parameter_bytes(layers[i].second);
  }
  return profile;
}

v1::ModelSpec SmallMlp(const char* activation) {
  v1::ModelSpec model;
  for (int64_t d : {1, 28, 28}) model.add_input_shape(d);
  const std::pair<const char*, int64_t> layers[] = {
      {"flatten", 0}, {"linear", 1024}, {"relu", 0}, {activation, 0}, {"linear", 10}};
  for (const auto& [type, out] : layers) {
    v1::LayerSpec* layer = model.add_layers();
    layer->set_type(type);
    if (std::string_view(type) == "linear") layer->mutable_linear()->set_out(out);
  }
  return model;
}

TEST(CheckProfileMatchesModelTest, MatchesDescriptionsByTheirLeadingWordAnyCase) {
  ASSERT_OK(CheckProfileMatchesModel(PipeDreamStyleMlp(), SmallMlp("relu")));
  v1::ModelProfile profile = PipeDreamStyleMlp();
  profile.mutable_layers(4)->set_name("GELU");
  ASSERT_OK(CheckProfileMatchesModel(profile, SmallMlp("gelu")));
  // The type must be the whole leading word.
  profile.mutable_layers(4)->set_name("GELUish()");
  EXPECT_EQ(CheckProfileMatchesModel(profile, SmallMlp("gelu")).message(),
            "profile mlp.txt does not match the job's model: its layer 3 (node5 'GELUish()') is "
            "not model.layers[3] (gelu) (a layer matches when its description starts with the "
            "layer type, any case)");
}

TEST(CheckProfileMatchesModelTest, ComparesParameterBytesWhenTheProfileGivesThem) {
  v1::ModelProfile profile = PipeDreamStyleMlp();
  profile.mutable_layers(2)->set_parameter_bytes(3215360);  // (784 * 1024 + 1024) * 4
  ASSERT_OK(CheckProfileMatchesModel(profile, SmallMlp("relu")));
  profile.mutable_layers(2)->set_parameter_bytes(999999999);
  absl::Status status = CheckProfileMatchesModel(profile, SmallMlp("relu"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "profile mlp.txt does not match the job's model: its layer 1 (node3 "
            "'Linear(784, 1024)') has 999999999 parameter bytes, model.layers[1] (linear "
            "784->1024) has 3215360");
  // A layer without weights must say 0 (or nothing) too.
  profile.mutable_layers(2)->set_parameter_bytes(0);
  profile.mutable_layers(3)->set_parameter_bytes(4);
  EXPECT_EQ(CheckProfileMatchesModel(profile, SmallMlp("relu")).message(),
            "profile mlp.txt does not match the job's model: its layer 2 (node4 'ReLU') has 4 "
            "parameter bytes, model.layers[2] (relu) has 0");
}

TEST(CheckProfileMatchesModelTest, NamesACountMismatch) {
  v1::ModelSpec shorter = Mlp();
  shorter.mutable_layers()->RemoveLast();
  absl::StatusOr<v1::ModelProfile> profile = EstimateProfile(Mlp(), 32, 1e11);
  ASSERT_OK(profile.status());
  profile->set_source("mlp.txt");
  EXPECT_EQ(CheckProfileMatchesModel(*profile, shorter).message(),
            "profile mlp.txt does not match the job's model: it has 6 layers (Input nodes not "
            "counted), the model 5");
}

TEST(EstimateProfileTest, TinyMlpFromItsFlops) {
  v1::ModelSpec model;
  model.add_input_shape(2);
  model.add_input_shape(2);
  model.add_layers()->set_type("flatten");
  v1::LayerSpec* hidden = model.add_layers();
  hidden->set_type("linear");
  hidden->mutable_linear()->set_out(3);
  model.add_layers()->set_type("relu");
  v1::LayerSpec* out = model.add_layers();
  out->set_type("linear");
  out->mutable_linear()->set_out(2);

  absl::StatusOr<v1::ModelProfile> profile = EstimateProfile(model, 10, 1e9);
  ASSERT_OK(profile.status());
  EXPECT_EQ(profile->source(), "estimated from FLOPs at 1 GFLOP/s");
  EXPECT_EQ(profile->batch_size(), 10);
  EXPECT_EQ(profile->edges_size(), 0);
  EXPECT_EQ(profile->model_fingerprint(), "in=2x2;flatten;linear:3;relu;linear:2");
  ASSERT_EQ(profile->layers_size(), 4);
  EXPECT_THAT(Ids(*profile), ElementsAre("layers[0]", "layers[1]", "layers[2]", "layers[3]"));
  // Per sample: linear 4->3 does 2*4*3 = 24 forward and 48 backward FLOPs, relu 3 and 3,
  // linear 3->2 12 and 24; ms = FLOPs * 10 samples / 1e9 FLOP/s * 1000.
  const double forward[] = {0, 2.4e-4, 3e-5, 1.2e-4};
  const double backward[] = {0, 4.8e-4, 3e-5, 2.4e-4};
  const int64_t activation[] = {160, 120, 120, 80};  // output floats * 4 bytes * 10 samples
  const int64_t parameters[] = {0, 60, 0, 32};       // (4*3 + 3) and (3*2 + 2) floats * 4
  const char* names[] = {"flatten", "linear", "relu", "linear"};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const v1::LayerProfile& layer = profile->layers(i);
    EXPECT_EQ(layer.name(), names[i]);
    EXPECT_FALSE(layer.input());
    EXPECT_DOUBLE_EQ(layer.forward_ms(), forward[i]);
    EXPECT_DOUBLE_EQ(layer.backward_ms(), backward[i]);
    EXPECT_EQ(layer.activation_bytes(), activation[i]);
    EXPECT_EQ(layer.parameter_bytes(), parameters[i]);
  }
}

TEST(EstimateProfileTest, RejectsBadArguments) {
  EXPECT_THAT(std::string(EstimateProfile(Mlp(), 0, 1e9).status().message()),
              HasSubstr("batch size 0 must be > 0"));
  EXPECT_THAT(std::string(EstimateProfile(Mlp(), 8, 0).status().message()),
              HasSubstr("flops_per_second 0 must be finite and > 0"));
  v1::ModelSpec bad = Mlp();
  bad.mutable_layers(2)->set_type("conv9");
  EXPECT_THAT(std::string(EstimateProfile(bad, 8, 1e9).status().message()),
              HasSubstr("model.layers[2]: unknown layer type 'conv9'"));
}

TEST(ModelFingerprintTest, CanonicalAndSensitiveToShapeAndLayers) {
  EXPECT_EQ(ModelFingerprint(Mlp()),
            "in=1x28x28;flatten;linear:1024;relu;linear:1024;relu;linear:10");
  v1::ModelSpec other = Mlp();
  other.mutable_layers(5)->mutable_linear()->set_out(11);
  EXPECT_NE(ModelFingerprint(other), ModelFingerprint(Mlp()));
  other = Mlp();
  other.set_input_shape(0, 3);
  EXPECT_NE(ModelFingerprint(other), ModelFingerprint(Mlp()));
  other = Mlp();
  other.set_loss("mse");  // not part of the key
  EXPECT_EQ(ModelFingerprint(other), ModelFingerprint(Mlp()));
}

// One malformed file per kind of error; each message names file:line:column and the field.
absl::Status ReadBad(const std::string& name) { return ReadProfileFile(TestData(name)).status(); }

TEST(MalformedProfileTest, BadNumber) {
  const absl::Status status = ReadBad("bad_number.txt");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(TestData("bad_number.txt"),
                         ":2:49: forward_compute_time: must be a finite number >= 0, got '1.5x'"));
}

TEST(MalformedProfileTest, MissingKey) {
  EXPECT_THAT(
      std::string(ReadBad("missing_key.txt").message()),
      StartsWith(absl::StrCat(TestData("missing_key.txt"), ":2:28: parameter_size: missing key")));
}

TEST(MalformedProfileTest, UnknownEdgeNode) {
  EXPECT_EQ(ReadBad("unknown_edge_node.txt").message(),
            absl::StrCat(TestData("unknown_edge_node.txt"),
                         ":4:11: edge: unknown node 'node9': no node line has that id"));
}

TEST(MalformedProfileTest, Cycle) {
  EXPECT_EQ(ReadBad("cycle.txt").message(),
            absl::StrCat(TestData("cycle.txt"),
                         ":8:1: edge: the graph has a cycle node2 -> node3 -> node4 -> node2; a "
                         "profile must be a DAG"));
}

TEST(MalformedProfileTest, RepeatedId) {
  EXPECT_EQ(ReadBad("repeated_id.txt").message(),
            absl::StrCat(TestData("repeated_id.txt"),
                         ":3:1: id: repeated node id 'node2' (first at line 2)"));
}

TEST(MalformedProfileTest, EmptyFile) {
  EXPECT_THAT(
      std::string(ReadBad("empty.txt").message()),
      StartsWith(absl::StrCat(TestData("empty.txt"), ":1:1: node: the file has no node lines")));
}

struct InlineCase {
  const char* text;
  const char* message;  // the expected start of the message
};

constexpr char kGood[] =
    "forward_compute_time=1, backward_compute_time=2, activation_size=3, parameter_size=4";

TEST(MalformedProfileTest, InlineCases) {
  const std::string good = kGood;
  const InlineCase cases[] = {
      {"just some words", "t:1:1: node: expected '<id> -- <description> -- "},
      {"n1 -- Linear -- forward_compute_time=-1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:38: forward_compute_time: must be a finite number >= 0, got '-1'"},
      {"n1 -- Linear -- forward_compute_time=1e999, backward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:38: forward_compute_time: must be a finite number >= 0, got '1e999'"},
      {"n1 -- Linear -- forward_compute_time=nan, backward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:38: forward_compute_time: must be a finite number >= 0, got 'nan'"},
      // Finite yet summing to infinity over layers (a user's 1e308 planned "STEP inf ms").
      {"n1 -- Linear -- forward_compute_time=1e308, backward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:38: forward_compute_time: must be at most 1e+09 (ms), got '1e308'"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=1e17",
       "t:1:100: parameter_size: must be at most 9.0072e+15 (bytes), got '1e17'"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=[3; x], "
       "parameter_size=4",
       "t:1:86: activation_size: must be a finite number >= 0, got 'x'"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=[], "
       "parameter_size=4",
       "t:1:82: activation_size: empty list []"},
      {"n1 -- Linear -- forward_compute_time=1, forward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:41: forward_compute_time: repeated key"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4, flops=5",
       "t:1:103: flops: unknown metric 'flops=5'"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4 -- stage=1",
       "t:1:105: stage_id: after the metrics only ' -- stage_id=<integer >= 0>' may follow"},
      {"n 1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4",
       "t:1:1: id: node id 'n 1' has a blank in it"},
      {"n1 -- Linear -- forward=1", "t:1:7: node: no ' -- forward_compute_time=...' metrics"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4\n\tn1 n1",
       "t:2:2: edge: expected '<TAB><src id> -- <dst id>', got 'n1 n1'"},
      {"n1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=3, "
       "parameter_size=4\n\tn1 -- n1",
       "t:2:1: edge: the graph has a cycle n1 -> n1; a profile must be a DAG"},
      {"\n\n", "t:1:1: node: the file has no node lines"},
  };
  for (const InlineCase& c : cases) {
    SCOPED_TRACE(c.text);
    const absl::Status status = ParseGraphTxt(c.text, "t", 1).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith(c.message));
  }
  EXPECT_THAT(
      std::string(ParseGraphTxt(absl::StrCat("n1 -- Linear -- ", good), "t", 0).status().message()),
      HasSubstr("t: profile batch size 0 must be > 0"));
}

}  // namespace
}  // namespace dapple::profile
