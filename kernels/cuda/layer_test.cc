// Every CUDA layer (layer_factory.h) against its CPU twin (kernels/cpu, built by MakeCpuLayer
// from the same declaration), in fp32 and bf16: the forward, dL/dx and every parameter gradient,
// through Zero Bubble's split (BackwardInput of micro-batches A then B, then BackwardWeight of
// B then A, against the CPU's plain Backward of B then A: the order the gradients add in, so an
// exact layer's gradient sums are the same bits), with live dropout masks whose
// ForwardContexts differ per micro-batch. Then the whole GPU sequence again: bitwise the same.
//
// Tolerances (per tensor, |got - want| <= rtol * max |want| for every element, NaN failing):
// - exact (0): relu, flatten, dropout and embedding in fp32 are the CPU's operations one by one
//   (the same mask bits, one rounding per add and multiply; the embedding's scatter adds in the
//   CPU's order), so bitwise equal; in bf16 they are the CPU's fp32 result rounded once, so
//   bitwise RoundToBf16(CPU).
// - 1e-5 in fp32 for linear, lm_head, gelu and layernorm: one GEMM or one row reduction, where
//   two correct fp32 evaluations differ by a few ulps of the largest terms (testing.h).
// - 1e-4 in fp32 for transformer_block: about ten such steps in series (two LayerNorms, five
//   GEMMs, the softmax), each adding a few ulps; a wrong index, mask or missing term is off by
//   O(1) of the tensor's scale.
// - bf16: the CPU runs on the bf16-rounded inputs and parameters, the GPU stores every
//   activation in bf16 (2^-9 relative per rounding): 1e-2 for a layer that rounds once or
//   twice, 5e-2 for transformer_block (about ten roundings in series); the bf16 path shares its
//   code with fp32 (templates), which the fp32 bound checks tightly.
// Parameters are random at unit scale (not GPT-2's 0.02, under which a block is nearly the
// identity and its branches would hide under the tolerance), LayerNorm gains around 1.
#include "kernels/cuda/layer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/layer_registry.h"
#include "common/model_info.h"
#include "gtest/gtest.h"
#include "kernels/cpu/grad_check_testing.h"
#include "kernels/cpu/layer_factory.h"
#include "kernels/cuda/layer_factory.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/testing.h"

namespace dapple::kernels::cuda {
namespace {

using testing::CheckCuda;
using testing::Context;
using testing::DeviceArray;
using testing::RoundToBf16;
using testing::Sync;

struct Case {
  std::string name;
  v1::ModelSpec model;
  int layer = 0;     // the layer of `model` under test
  int64_t rows = 2;  // samples per micro-batch
  bool exact = false;
  double fp32_rtol = 0;
  double bf16_rtol = 0;
  bool training = true;  // false: evaluation contexts (dropout off)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

v1::ModelSpec FloatModel(std::vector<int64_t> input_shape) {
  v1::ModelSpec m;
  for (int64_t d : input_shape) m.add_input_shape(d);
  m.set_input_type("float");
  m.set_loss("softmax_cross_entropy");
  return m;
}

v1::ModelSpec TokenModel(int64_t seq) {
  v1::ModelSpec m;
  m.add_input_shape(seq);
  m.set_input_type("tokens");
  m.set_loss("softmax_cross_entropy");
  return m;
}

v1::LayerSpec* Add(v1::ModelSpec* m, const std::string& type) {
  v1::LayerSpec* l = m->add_layers();
  l->set_type(type);
  return l;
}

v1::ModelSpec Embedding(int64_t vocab, int64_t dim, int64_t seq, int64_t positions, double p) {
  v1::ModelSpec m = TokenModel(seq);
  v1::EmbeddingParams* e = Add(&m, "embedding")->mutable_embedding();
  e->set_vocab(vocab);
  e->set_dim(dim);
  e->set_positions(positions);
  e->set_dropout(p);
  return m;
}

v1::ModelSpec Block(int64_t seq, int64_t width, int64_t heads, int64_t hidden, double p) {
  v1::ModelSpec m = FloatModel({seq, width});
  v1::TransformerBlockParams* b = Add(&m, "transformer_block")->mutable_transformer_block();
  b->set_heads(heads);
  if (hidden > 0) b->set_mlp_hidden(hidden);
  b->set_dropout(p);
  return m;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  {
    v1::ModelSpec m = FloatModel({37});
    Add(&m, "linear")->mutable_linear()->set_out(29);
    cases.push_back({"Linear", m, 0, 5, false, 1e-5, 1e-2});
  }
  {
    v1::ModelSpec m = FloatModel({3, 7});
    Add(&m, "relu");
    cases.push_back({"Relu", m, 0, 4, true});
  }
  {
    v1::ModelSpec m = FloatModel({100});
    Add(&m, "gelu");
    cases.push_back({"Gelu", m, 0, 3, false, 1e-5, 1e-2});
  }
  {
    v1::ModelSpec m = FloatModel({2, 3, 4});
    Add(&m, "flatten");
    cases.push_back({"Flatten", m, 0, 3, true});
  }
  {
    v1::ModelSpec m = FloatModel({10, 5});
    Add(&m, "dropout")->mutable_dropout()->set_p(0.3);
    cases.push_back({"Dropout", m, 0, 4, true});
    Case eval{"DropoutEvaluation", m, 0, 4, true};
    eval.training = false;
    cases.push_back(eval);
  }
  cases.push_back({"Embedding", Embedding(50, 24, 16, 20, 0.1), 0, 5, true});
  cases.push_back({"EmbeddingNoDropout", Embedding(7, 33, 9, 9, 0.0), 0, 3, true});
  {
    v1::ModelSpec m = FloatModel({6, 40});
    Add(&m, "layernorm");
    cases.push_back({"LayerNorm", m, 0, 3, false, 1e-5, 1e-2});
  }
  cases.push_back({"TransformerBlock", Block(8, 16, 2, 0, 0.1), 0, 2, false, 1e-4, 5e-2});
  // Odd sizes everywhere: T 33, C 48, 3 heads of 16, hidden 80, 3 samples.
  cases.push_back({"TransformerBlockOdd", Block(33, 48, 3, 80, 0.0), 0, 3, false, 1e-4, 5e-2});
  {
    v1::ModelSpec m = FloatModel({8, 16});
    Add(&m, "lm_head")->mutable_lm_head()->set_vocab(40);
    cases.push_back({"LmHead", m, 0, 3, false, 1e-5, 1e-2});
  }
  {
    // A tied head on its own: its copy of the embedding's table (Param::tied_to).
    v1::ModelSpec m = Embedding(40, 16, 8, 8, 0.0);
    Add(&m, "lm_head")->mutable_lm_head()->set_tied(true);
    cases.push_back({"LmHeadTiedCopy", m, 1, 3, false, 1e-5, 1e-2});
  }
  return cases;
}

// ---- host values of either element type ----

std::vector<unsigned char> ToBytes(const std::vector<float>& v, Dtype dtype) {
  std::vector<unsigned char> out(v.size() * DtypeBytes(dtype));
  if (dtype == Dtype::kFp32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    const std::vector<bf16> h = testing::ToBf16(v);
    std::memcpy(out.data(), h.data(), out.size());
  }
  return out;
}

std::vector<float> FromBytes(const std::vector<unsigned char>& b, Dtype dtype) {
  if (dtype == Dtype::kFp32) {
    std::vector<float> out(b.size() / sizeof(float));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
  std::vector<bf16> h(b.size() / sizeof(bf16));
  std::memcpy(h.data(), b.data(), b.size());
  return testing::ToFloat(h);
}

// ---- comparisons ----

// Bit patterns equal (NaN == NaN of the same payload; -0 != +0).
void ExpectBitwise(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t misses = 0;
  std::string report;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (++misses <= 10) {
      absl::StrAppend(&report, "\n  ", what, "[", i, "]: got ", got[i], ", expected ", want[i]);
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size()
                       << " elements differ bitwise" << report;
}

// |got - want| <= rtol * max |want| element by element.
void ExpectNear(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  const double bound = rtol * scale;
  int64_t misses = 0;
  double worst = 0;
  std::string report;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (diff <= bound) {  // false for NaN
      worst = std::max(worst, diff);
      continue;
    }
    if (++misses <= 10) {
      absl::StrAppend(&report, "\n  ", what, "[", i, "]: got ", got[i], ", expected ", want[i],
                      ", |diff| ", diff, " > ", bound);
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size()
                       << " elements outside rtol " << rtol << " x max|want| " << scale << report;
  std::cout << "    " << what << ": max |diff| / max |want| = " << (scale > 0 ? worst / scale : 0)
            << " (rtol " << rtol << ")\n";
}

// ---- one run on each side ----

struct Inputs {
  std::vector<float> xa, xb, dya, dyb;
  ForwardContext ctx_a, ctx_b;
};

struct Results {
  std::vector<float> ya, yb, dxa, dxb;
  std::vector<std::vector<float>> grads;
};

// Unit-scale random parameters (see the header comment); bf16-rounded for bf16 runs.
void RandomiseParams(Layer* layer, uint64_t stream, bool bf16) {
  for (Param* p : layer->Params()) {
    const std::vector<int64_t>& shape = p->value.shape;
    Tensor t;
    if (shape.size() == 1) {
      const bool gain = p->name.size() >= 6 && p->name.substr(p->name.size() - 6) == "weight";
      t = kernels::testing::RandomTensor(shape, stream++, gain ? 0.5f : -0.5f, gain ? 1.5f : 0.5f);
    } else {
      const float a = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.back())));
      t = kernels::testing::RandomTensor(shape, stream++, -a, a);
    }
    p->value.data = bf16 ? RoundToBf16(t.data) : t.data;
  }
}

Results RunCpu(Layer* layer, const LayerInfo& info, const Case& c, const Inputs& in) {
  auto tensor = [&](const std::vector<float>& data, const std::vector<int64_t>& per_sample) {
    Tensor t;
    t.shape = {c.rows};
    t.shape.insert(t.shape.end(), per_sample.begin(), per_sample.end());
    t.data = data;
    return t;
  };
  const Tensor xa = tensor(in.xa, info.input_shape), xb = tensor(in.xb, info.input_shape);
  const Tensor dya = tensor(in.dya, info.output_shape), dyb = tensor(in.dyb, info.output_shape);
  LayerCache ca, cb;
  Tensor ya, yb, dxa, dxb;
  layer->Forward(xa, &ya, &ca, in.ctx_a);
  layer->Forward(xb, &yb, &cb, in.ctx_b);
  // B first, as the GPU's BackwardWeights add: a gradient element several rows add into (the
  // embedding's tables) is a float sum whose bits depend on the order of its terms.
  layer->Backward(xb, yb, dyb, &dxb, &cb);
  layer->Backward(xa, ya, dya, &dxa, &ca);
  Results r{ya.data, yb.data, dxa.data, dxb.data, {}};
  for (Param* p : layer->Params()) r.grads.push_back(p->grad.data);
  return r;
}

// Device memory for one micro-batch's cache.
struct DeviceCacheMemory {
  std::vector<std::unique_ptr<DeviceArray<unsigned char>>> buffers;
  DeviceCache cache;
  explicit DeviceCacheMemory(const LayerBuffers& b) {
    for (size_t bytes : b.saved) {
      buffers.push_back(std::make_unique<DeviceArray<unsigned char>>(std::max<size_t>(bytes, 1)));
      cache.saved.push_back(buffers.back()->get());
    }
    for (size_t bytes : b.grads) {
      buffers.push_back(std::make_unique<DeviceArray<unsigned char>>(std::max<size_t>(bytes, 1)));
      cache.grads.push_back(buffers.back()->get());
    }
  }
};

// The split sequence on the GPU; `grads_after_b` gets the gradients after both BackwardInputs
// (must still be zero).
Results RunGpu(const LayerInfo& info, const v1::LayerSpec& spec, Dtype dtype,
               const std::vector<Param*>& params, const Case& c, const Inputs& in,
               std::vector<std::vector<float>>* grads_after_b) {
  Results r;
  absl::StatusOr<std::unique_ptr<DeviceLayer>> made = MakeCudaLayer(info, spec, dtype);
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return r;
  DeviceLayer& layer = **made;
  const KernelContext& ctx = Context();

  std::vector<std::unique_ptr<DeviceArray<float>>> values, grads;
  std::vector<std::unique_ptr<DeviceArray<bf16>>> copies;
  std::vector<DeviceParam> views;
  for (Param* p : params) {
    values.push_back(std::make_unique<DeviceArray<float>>(p->value.data));
    grads.push_back(
        std::make_unique<DeviceArray<float>>(std::vector<float>(p->value.data.size(), 0.0f)));
    copies.push_back(std::make_unique<DeviceArray<bf16>>(p->value.data.size()));
    const int64_t count = static_cast<int64_t>(p->value.data.size());
    EXPECT_TRUE(CastToBf16(ctx, values.back()->get(), copies.back()->get(), count).ok());
    views.push_back({values.back()->get(), grads.back()->get(),
                     dtype == Dtype::kBf16 ? copies.back()->get() : nullptr, count});
  }
  const absl::Status bound = layer.BindParams(views);
  EXPECT_TRUE(bound.ok()) << bound;

  absl::StatusOr<LayerBuffers> buffers = layer.Buffers(c.rows);
  EXPECT_TRUE(buffers.ok()) << buffers.status();
  if (!buffers.ok()) return r;
  DeviceCacheMemory ca(*buffers), cb(*buffers);
  DeviceArray<unsigned char> scratch(std::max<size_t>(buffers->scratch, 1));
  const Scratch s{scratch.get(), buffers->scratch};

  const Dtype x_type = info.token_input ? Dtype::kFp32 : dtype;
  DeviceArray<unsigned char> xa(ToBytes(in.xa, x_type)), xb(ToBytes(in.xb, x_type));
  DeviceArray<unsigned char> dya(ToBytes(in.dya, dtype)), dyb(ToBytes(in.dyb, dtype));
  const size_t y_bytes = in.dya.size() * DtypeBytes(dtype);
  const size_t x_bytes = in.xa.size() * DtypeBytes(x_type);
  DeviceArray<unsigned char> ya(y_bytes), yb(y_bytes), dxa(x_bytes), dxb(x_bytes);

  EXPECT_TRUE(layer.Forward(ctx, xa.get(), ya.get(), c.rows, &ca.cache, in.ctx_a, s).ok());
  EXPECT_TRUE(layer.Forward(ctx, xb.get(), yb.get(), c.rows, &cb.cache, in.ctx_b, s).ok());
  EXPECT_TRUE(
      layer.BackwardInput(ctx, xa.get(), ya.get(), dya.get(), dxa.get(), c.rows, &ca.cache, s)
          .ok());
  EXPECT_TRUE(
      layer.BackwardInput(ctx, xb.get(), yb.get(), dyb.get(), dxb.get(), c.rows, &cb.cache, s)
          .ok());
  for (const auto& g : grads) grads_after_b->push_back(g->Download());
  EXPECT_TRUE(layer.BackwardWeight(ctx, xb.get(), yb.get(), dyb.get(), c.rows, &cb.cache, s).ok());
  EXPECT_TRUE(layer.BackwardWeight(ctx, xa.get(), ya.get(), dya.get(), c.rows, &ca.cache, s).ok());
  CheckCuda(cudaStreamSynchronize(ctx.stream), "layer kernels");
  r.ya = FromBytes(ya.Download(), dtype);
  r.yb = FromBytes(yb.Download(), dtype);
  r.dxa = FromBytes(dxa.Download(), x_type);
  r.dxb = FromBytes(dxb.Download(), x_type);
  for (const auto& g : grads) r.grads.push_back(g->Download());
  return r;
}

class CudaLayerTest : public ::testing::TestWithParam<std::tuple<Case, Dtype>> {};

TEST_P(CudaLayerTest, MatchesCpuLayerThroughTheSplitBackward) {
  DAPPLE_SKIP_WITHOUT_GPU();
  const Case& c = std::get<0>(GetParam());
  const Dtype dtype = std::get<1>(GetParam());
  const bool bf16 = dtype == Dtype::kBf16;
  absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(c.model);
  ASSERT_TRUE(infos.ok()) << infos.status();
  const LayerInfo& info = (*infos)[c.layer];
  const v1::LayerSpec& spec = c.model.layers(c.layer);
  absl::StatusOr<std::unique_ptr<Layer>> cpu = MakeCpuLayer(info, spec, 42);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  RandomiseParams(cpu->get(), 100, bf16);
  const std::vector<Param*> params = (*cpu)->Params();

  Inputs in;
  const int64_t x_count = c.rows * NumElements(info.input_shape);
  const int64_t y_count = c.rows * NumElements(info.output_shape);
  auto random = [&](int64_t count, uint64_t stream) {
    std::vector<float> v = kernels::testing::RandomTensor({count}, stream, -1, 1).data;
    return bf16 ? RoundToBf16(v) : v;
  };
  if (info.token_input) {
    const int64_t vocab = info.params[0].shape[0];
    for (uint64_t stream : {1, 2}) {
      std::vector<float>& x = stream == 1 ? in.xa : in.xb;
      x.resize(x_count);
      for (int64_t i = 0; i < x_count; ++i) {
        x[i] = static_cast<float>(SplitMix64At(stream, i) % static_cast<uint64_t>(vocab));
      }
    }
  } else {
    in.xa = random(x_count, 1);
    in.xb = random(x_count, 2);
  }
  in.dya = random(y_count, 3);
  in.dyb = random(y_count, 4);
  in.ctx_a.training = in.ctx_b.training = c.training;
  in.ctx_a.seed = in.ctx_b.seed = 1234;
  in.ctx_a.step = in.ctx_b.step = 3;
  in.ctx_a.first_sample = 0;
  in.ctx_b.first_sample = c.rows;  // B follows A in the step's global batch

  const Results want = RunCpu(cpu->get(), info, c, in);
  std::vector<std::vector<float>> after_b;
  const Results got = RunGpu(info, spec, dtype, params, c, in, &after_b);
  ASSERT_EQ(got.grads.size(), want.grads.size());

  auto check = [&](const std::string& what, const std::vector<float>& g,
                   const std::vector<float>& w, bool rounded_output) {
    if (c.exact) {
      // bf16 outputs are the CPU's fp32 result rounded once; fp32 gradients of a bf16 run are
      // the CPU's on the rounded inputs.
      ExpectBitwise(what, g, bf16 && rounded_output ? RoundToBf16(w) : w);
    } else {
      ExpectNear(what, g, w, bf16 ? c.bf16_rtol : c.fp32_rtol);
    }
  };
  check("y (A)", got.ya, want.ya, true);
  check("y (B)", got.yb, want.yb, true);
  check("dx (A)", got.dxa, want.dxa, !info.token_input);
  check("dx (B)", got.dxb, want.dxb, !info.token_input);
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectBitwise(params[i]->name + " gradient after BackwardInput", after_b[i],
                  std::vector<float>(after_b[i].size(), 0.0f));
    check(params[i]->name + " gradient", got.grads[i], want.grads[i], false);
  }

  // Deterministic: the same sequence again gives bitwise the same results.
  std::vector<std::vector<float>> ignored;
  const Results again = RunGpu(info, spec, dtype, params, c, in, &ignored);
  ExpectBitwise("y (A), second run", again.ya, got.ya);
  ExpectBitwise("dx (A), second run", again.dxa, got.dxa);
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectBitwise(params[i]->name + " gradient, second run", again.grads[i], got.grads[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaLayerTest,
                         ::testing::Combine(::testing::ValuesIn(Cases()),
                                            ::testing::Values(Dtype::kFp32, Dtype::kBf16)),
                         [](const ::testing::TestParamInfo<std::tuple<Case, Dtype>>& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_",
                                               DtypeName(std::get<1>(info.param)));
                         });

// ---- what holds without a GPU ----

TEST(CudaLayerFactoryTest, EveryTypeOfTheRegistryHasAKernelAndUnknownTypesAreRefused) {
  for (const Case& c : Cases()) {
    absl::StatusOr<std::vector<LayerInfo>> infos = InferLayers(c.model);
    ASSERT_TRUE(infos.ok()) << c.name << ": " << infos.status();
    const LayerInfo& info = (*infos)[c.layer];
    for (Dtype dtype : {Dtype::kFp32, Dtype::kBf16}) {
      absl::StatusOr<std::unique_ptr<DeviceLayer>> layer =
          MakeCudaLayer(info, c.model.layers(c.layer), dtype);
      ASSERT_TRUE(layer.ok()) << c.name << ": " << layer.status();
      EXPECT_EQ((*layer)->Type(), info.type);
      EXPECT_EQ((*layer)->dtype(), dtype);
    }
  }
  LayerInfo unknown;
  unknown.index = 3;
  unknown.type = "no_such_type";
  absl::StatusOr<std::unique_ptr<DeviceLayer>> none =
      MakeCudaLayer(unknown, v1::LayerSpec(), Dtype::kFp32);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(), "model.layers[3]: type 'no_such_type' has no CUDA kernel");
}

// The registry's bf16 column (common/model/layer_registry.h kCudaBf16, what the coordinator
// checks a bf16 job against at submit) is what this factory builds in bf16.
TEST(CudaLayerFactoryTest, Bf16KernelsAreTheRegistrysBf16Column) {
  std::vector<std::string> with_case;
  for (const Case& c : Cases()) with_case.push_back(c.model.layers(c.layer).type());
  for (const std::string& type : TypesWithKernel(KernelBackend::kCuda)) {
    SCOPED_TRACE(type);
    if (HasKernel(type, KernelBackend::kCudaBf16)) {
      // Built in bf16 by EveryTypeOfTheRegistryHasAKernelAndUnknownTypesAreRefused.
      EXPECT_NE(std::find(with_case.begin(), with_case.end(), type), with_case.end());
      continue;
    }
    LayerInfo info;
    info.index = 2;
    info.type = type;
    absl::StatusOr<std::unique_ptr<DeviceLayer>> layer =
        MakeCudaLayer(info, v1::LayerSpec(), Dtype::kBf16);
    EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(layer.status().message(), absl::StrCat("model.layers[2]: type '", type,
                                                     "' has no bf16 CUDA kernel (fp32 only)"));
  }
}

// In fp32 a layer keeps what common/model declares (the planner's memory model).
TEST(CudaLayerFactoryTest, SavedBuffersAreTheDeclaredSavedBytes) {
  for (const Case& c : Cases()) {
    if (c.model.layers(c.layer).type() == "embedding") continue;  // its Buffers() asks the GPU
    const LayerInfo info = InferLayers(c.model).value()[c.layer];
    std::unique_ptr<DeviceLayer> layer =
        MakeCudaLayer(info, c.model.layers(c.layer), Dtype::kFp32).value();
    // saved_bytes counts what a micro-batch's cache keeps per sample: the forward's saved
    // buffers and the gradients BackwardInput keeps for BackwardWeight. Per-channel gradients
    // (a norm's dgamma, dbeta) do not grow with the rows and are left out of it.
    size_t kept[2] = {0, 0};
    for (int64_t rows : {1, 3}) {
      const LayerBuffers b = layer->Buffers(rows).value();
      size_t& k = kept[rows == 3];
      for (size_t bytes : b.saved) k += bytes;
      for (size_t bytes : b.grads) k += bytes;
    }
    EXPECT_EQ(kept[1] - kept[0], static_cast<size_t>(info.saved_bytes * 2)) << c.name;
    EXPECT_GE(kept[0], static_cast<size_t>(info.saved_bytes)) << c.name;
    EXPECT_LE(kept[0] - static_cast<size_t>(info.saved_bytes), size_t{64} << 10) << c.name;
  }
}

TEST(CudaLayerFactoryTest, BindParamsChecksCountsAndBf16Copies) {
  v1::ModelSpec m = FloatModel({4});
  Add(&m, "linear")->mutable_linear()->set_out(3);
  const LayerInfo info = InferLayers(m).value()[0];
  float f = 0;
  bf16 h;
  std::unique_ptr<DeviceLayer> layer = MakeCudaLayer(info, m.layers(0), Dtype::kFp32).value();
  EXPECT_EQ(layer->BindParams({{&f, &f, nullptr, 12}}).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(layer->BindParams({{&f, &f, nullptr, 12}, {&f, &f, nullptr, 4}}).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(layer->BindParams({{&f, &f, nullptr, 12}, {&f, &f, nullptr, 3}}).ok());
  std::unique_ptr<DeviceLayer> half = MakeCudaLayer(info, m.layers(0), Dtype::kBf16).value();
  EXPECT_EQ(half->BindParams({{&f, &f, nullptr, 12}, {&f, &f, nullptr, 3}}).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(half->BindParams({{&f, &f, &h, 12}, {&f, &f, &h, 3}}).ok());
}

}  // namespace
}  // namespace dapple::kernels::cuda
