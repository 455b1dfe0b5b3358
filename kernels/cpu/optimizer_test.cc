#include "kernels/cpu/optimizer.h"

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace dapple::kernels {
namespace {

// The gradients fed at steps 1..3 to a parameter starting at w0 = [1, -2].
const std::vector<std::vector<float>> kGrads = {{0.5f, -1.0f}, {0.25f, 0.5f}, {-0.5f, 1.0f}};

Param TwoElementParam() {
  Param p;
  p.name = "layer0.weight";
  p.value.shape = {2};
  p.value.data = {1.0f, -2.0f};
  p.grad = Tensor::Zeros({2});
  return p;
}

// The inputs are exact in float; the update does ~10 float operations per step on values of
// order 1, so 3 steps stay within a few float ulps (1.2e-7 each) of the double reference.
constexpr double kTol = 1e-6;

void RunAndExpect(const v1::OptimizerSpec& spec, const std::vector<std::vector<double>>& expected) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  Param p = TwoElementParam();
  std::vector<Param*> params = {&p};
  for (size_t t = 0; t < kGrads.size(); ++t) {
    p.grad.data = kGrads[t];
    (*opt)->Step(params, spec.lr());
    EXPECT_EQ(p.grad.data, kGrads[t]) << "Step must leave the gradient unchanged";
    EXPECT_NEAR(p.value.data[0], expected[t][0], kTol) << "step " << t + 1;
    EXPECT_NEAR(p.value.data[1], expected[t][1], kTol) << "step " << t + 1;
  }
}

TEST(SgdTest, MomentumAndWeightDecayOverThreeSteps) {
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(0.1);
  spec.set_momentum(0.9);
  spec.set_weight_decay(0.01);
  // g' = g + 0.01 w; v = g' (step 1), then 0.9 v + g'; w -= 0.1 v:
  // 1: g' = [0.51, -1.02]           v = [0.51, -1.02]              w = [0.949, -1.898]
  // 2: g' = [0.25949, 0.48102]      v = [0.71849, -0.43698]        w = [0.877151, -1.854302]
  // 3: g' = [-0.49122849, 0.98145698] v = [0.15541251, 0.58817498] w = [0.861609749, -1.913119498]
  RunAndExpect(spec, {{0.949, -1.898}, {0.877151, -1.854302}, {0.861609749, -1.913119498}});
}

TEST(SgdTest, PlainSgdWithoutMomentum) {
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(0.5);
  // w -= 0.5 g: [0.75, -1.5], [0.625, -1.75], [0.875, -2.25].
  RunAndExpect(spec, {{0.75, -1.5}, {0.625, -1.75}, {0.875, -2.25}});
}

// What the memory model counts (common/memory_model.h OptimizerStateCopies): sgd without
// momentum keeps no velocity (as torch.optim.SGD keeps no buffer), with momentum one copy of the
// parameters, adamw two; none before the first step.
TEST(OptimizerTest, StateBytesAreWhatTheMemoryModelCounts) {
  for (const auto& [type, momentum, copies] :
       {std::tuple{"sgd", 0.0, 0}, std::tuple{"sgd", 0.9, 1}, std::tuple{"adamw", 0.0, 2}}) {
    SCOPED_TRACE(std::string(type) + " momentum " + std::to_string(momentum));
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.1);
    spec.set_momentum(momentum);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    Param p = TwoElementParam();
    std::vector<Param*> params = {&p};
    EXPECT_EQ((*opt)->StateBytes(), 0);
    p.grad.data = kGrads[0];
    (*opt)->Step(params, spec.lr());
    EXPECT_EQ((*opt)->StateBytes(), copies * 2 * static_cast<int64_t>(sizeof(float)));
    EXPECT_EQ((*opt)->State().size(), static_cast<size_t>(copies));
  }
}

TEST(AdamWTest, DecoupledDecayOverThreeSteps) {
  v1::OptimizerSpec spec;
  spec.set_type("adamw");
  spec.set_lr(0.1);
  spec.set_weight_decay(0.01);  // beta1, beta2, eps left 0: defaults 0.9, 0.999, 1e-8
  // w *= 1 - 0.1 * 0.01; m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2;
  // w -= 0.1 * (m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.999^t)) + 1e-8):
  // 1: w = [0.999, -1.998]; m = [0.05, -0.1]; v = [2.5e-4, 1e-3]; m^ = [0.5, -1], sqrt(v^) = [0.5,
  // 1]
  //    w = [0.999 - 0.1 * 0.99999998, -1.998 + 0.1 * 0.99999999] = [0.899000002, -1.898000001]
  // 2: m = [0.07, -0.04]; v = [3.1225e-4, 1.249e-3]; m^ = m / 0.19; v^ = v / 0.001999
  //    w = [0.8048830404754623, -1.869468297369903]
  // 3: m = [0.013, 0.064]; v = [5.6193775e-4, 2.247751e-3]; m^ = m / 0.271; v^ = v / 0.002997001
  //    w = [0.7929998505586188, -1.8948685078523224]
  RunAndExpect(spec, {{0.899000002, -1.898000001},
                      {0.8048830404754623, -1.869468297369903},
                      {0.7929998505586188, -1.8948685078523224}});
}

TEST(OptimizerTest, StateIsPerParameter) {
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(1);
  spec.set_momentum(0.5);
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(spec);
  ASSERT_TRUE(opt.ok());
  Param a = TwoElementParam();
  Param b = TwoElementParam();
  a.grad.data = {1, 0};
  b.grad.data = {0, 1};
  std::vector<Param*> params = {&a, &b};
  (*opt)->Step(params, spec.lr());  // v_a = [1, 0], v_b = [0, 1]
  (*opt)->Step(params, spec.lr());  // v_a = [1.5, 0], v_b = [0, 1.5]
  EXPECT_EQ(a.value.data, (std::vector<float>{-1.5f, -2.0f}));
  EXPECT_EQ(b.value.data, (std::vector<float>{1.0f, -4.5f}));
}

// The rate of each update is the caller's (the learning-rate schedule), not the spec's.
TEST(OptimizerTest, EachUpdateUsesTheRateItIsGiven) {
  for (const char* type : {"sgd", "adamw"}) {
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.1);
    std::unique_ptr<Optimizer> scheduled = *MakeOptimizer(spec);
    v1::OptimizerSpec half = spec;
    half.set_lr(0.05);
    std::unique_ptr<Optimizer> constant = *MakeOptimizer(half);
    Param a = TwoElementParam();
    Param b = TwoElementParam();
    a.grad.data = b.grad.data = kGrads[0];
    std::vector<Param*> pa = {&a}, pb = {&b};
    scheduled->Step(pa, 0.05);
    constant->Step(pb, half.lr());
    EXPECT_EQ(a.value.data, b.value.data) << type;
  }
  // Plain SGD, hand-computed: w -= lr g with lr 0.5 then 0.25.
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(1);
  std::unique_ptr<Optimizer> sgd = *MakeOptimizer(spec);
  Param p = TwoElementParam();
  std::vector<Param*> params = {&p};
  p.grad.data = {1.0f, 2.0f};
  sgd->Step(params, 0.5);
  EXPECT_EQ(p.value.data, (std::vector<float>{0.5f, -3.0f}));
  sgd->Step(params, 0.25);
  EXPECT_EQ(p.value.data, (std::vector<float>{0.25f, -3.5f}));
}

// Checkpoints: the state (and update count) of one optimizer, handed to a fresh one, continues
// exactly as the original.
TEST(OptimizerTest, StateRoundTripContinuesExactly) {
  for (const char* type : {"sgd", "adamw"}) {
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.1);
    spec.set_momentum(std::string(type) == "sgd" ? 0.9 : 0);
    spec.set_weight_decay(0.01);
    std::unique_ptr<Optimizer> a = *MakeOptimizer(spec);
    std::unique_ptr<Optimizer> b = *MakeOptimizer(spec);
    EXPECT_EQ(a->StateNames(), std::string(type) == "sgd"
                                   ? std::vector<std::string>{"momentum"}
                                   : (std::vector<std::string>{"adam_m", "adam_v"}));
    EXPECT_TRUE(a->State().empty());
    EXPECT_EQ(a->steps(), 0);
    Param pa = TwoElementParam();
    std::vector<Param*> params = {&pa};
    for (int t = 0; t < 2; ++t) {
      pa.grad.data = kGrads[t];
      a->Step(params, spec.lr());
    }
    EXPECT_EQ(a->steps(), 2);
    ASSERT_EQ(a->State().size(), a->StateNames().size());
    Param pb = pa;
    b->SetState(a->State(), a->steps());
    std::vector<Param*> other = {&pb};
    pa.grad.data = pb.grad.data = kGrads[2];
    a->Step(params, spec.lr());
    b->Step(other, spec.lr());
    EXPECT_EQ(pb.value.data, pa.value.data) << type;
    EXPECT_EQ(b->steps(), 3);
  }
}

struct BadSpecCase {
  std::string type;
  double lr, momentum, weight_decay, beta1, beta2, eps;
  std::string message;
};

TEST(MakeOptimizerTest, RejectsBadSpecs) {
  const std::vector<BadSpecCase> cases = {
      {"adam", 0.1, 0, 0, 0, 0, 0, "training.optimizer.type 'adam' is unknown; known: sgd, adamw"},
      {"", 0.1, 0, 0, 0, 0, 0, "training.optimizer.type '' is unknown; known: sgd, adamw"},
      {"sgd", 0, 0, 0, 0, 0, 0, "training.optimizer.lr 0 must be > 0 and finite"},
      {"adamw", -0.5, 0, 0, 0, 0, 0, "training.optimizer.lr -0.5 must be > 0 and finite"},
      {"sgd", 0.1, 1, 0, 0, 0, 0, "training.optimizer.momentum 1 must be in [0, 1)"},
      {"sgd", 0.1, -0.1, 0, 0, 0, 0, "training.optimizer.momentum -0.1 must be in [0, 1)"},
      {"sgd", 0.1, 0.9, -1, 0, 0, 0, "training.optimizer.weight_decay -1 must be >= 0 and finite"},
      {"adamw", 0.1, 0, 0, 1, 0, 0, "training.optimizer.beta1 1 must be in [0, 1)"},
      {"adamw", 0.1, 0, 0, 0.9, 1.5, 0, "training.optimizer.beta2 1.5 must be in [0, 1)"},
      {"adamw", 0.1, 0, 0, 0, -0.2, 0, "training.optimizer.beta2 -0.2 must be in [0, 1)"},
      {"adamw", 0.1, 0, 0, 0, 0, -1e-8, "training.optimizer.eps -1e-08 must be > 0 and finite"},
  };
  for (const BadSpecCase& c : cases) {
    v1::OptimizerSpec spec;
    spec.set_type(c.type);
    spec.set_lr(c.lr);
    spec.set_momentum(c.momentum);
    spec.set_weight_decay(c.weight_decay);
    spec.set_beta1(c.beta1);
    spec.set_beta2(c.beta2);
    spec.set_eps(c.eps);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(spec);
    ASSERT_FALSE(opt.ok()) << c.message;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(opt.status().message(), c.message);
  }
}

TEST(MakeOptimizerTest, AcceptsValidSpecs) {
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_lr(0.05);
  sgd.set_momentum(0.9);
  EXPECT_TRUE(MakeOptimizer(sgd).ok());
  v1::OptimizerSpec adamw;
  adamw.set_type("adamw");
  adamw.set_lr(1e-3);
  adamw.set_beta1(0.8);
  adamw.set_beta2(0.99);
  adamw.set_eps(1e-6);
  adamw.set_weight_decay(0.1);
  EXPECT_TRUE(MakeOptimizer(adamw).ok());
}

}  // namespace
}  // namespace dapple::kernels
