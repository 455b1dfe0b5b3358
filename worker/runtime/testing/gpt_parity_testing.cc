#include "worker/runtime/testing/gpt_parity_testing.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model_info.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/splitmix64.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker::parity {
namespace {

// A per-(seed, step, sample) random stream.
uint64_t SampleKey(uint64_t seed, int64_t step, int64_t sample) {
  uint64_t k = kernels::SplitMix64Mix(seed ^ 0x4750545041524954ULL);  // "GPTPARIT"
  k = kernels::SplitMix64Mix(k ^ (static_cast<uint64_t>(step) + kernels::kGoldenGamma));
  return kernels::SplitMix64Mix(k ^ (static_cast<uint64_t>(sample) + 2 * kernels::kGoldenGamma));
}

struct ParamView {
  std::string name;
  std::string tied_to;
  int64_t offset = 0;  // in the stage's flat gradient vector
  int64_t count = 0;
};

absl::StatusOr<std::vector<ParamView>> Views(StageBackend& stage) {
  DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, stage.HostParams());
  std::vector<ParamView> views;
  int64_t offset = 0;
  for (const kernels::Param* p : params) {
    const int64_t count = static_cast<int64_t>(p->value.data.size());
    views.push_back({p->name, p->tied_to, offset, count});
    offset += count;
  }
  return views;
}

// The tied weights' AllReduce in one process: a copy on one stage and its owner on another
// both get owner + copy.
absl::Status SumTiedGradients(Pipeline& p) {
  const int stages = static_cast<int>(p.stages.size());
  std::vector<std::vector<ParamView>> views(stages);
  std::vector<std::vector<float>> grads(stages);
  for (int s = 0; s < stages; ++s) {
    DAPPLE_ASSIGN_OR_RETURN(views[s], Views(*p.stages[s]));
    grads[s].resize(p.stages[s]->GradientFloats());
    DAPPLE_RETURN_IF_ERROR(p.stages[s]->ReadGradients(grads[s].data()));
  }
  bool changed = false;
  for (int s = 0; s < stages; ++s) {
    for (const ParamView& copy : views[s]) {
      if (copy.tied_to.empty()) continue;
      for (int o = 0; o < stages; ++o) {
        if (o == s) continue;
        for (const ParamView& owner : views[o]) {
          if (owner.name != copy.tied_to) continue;
          if (owner.count != copy.count) return absl::InternalError("tied sizes differ");
          float* a = grads[o].data() + owner.offset;
          float* b = grads[s].data() + copy.offset;
          for (int64_t i = 0; i < owner.count; ++i) a[i] = b[i] = a[i] + b[i];
          changed = true;
        }
      }
    }
  }
  if (!changed) return absl::OkStatus();
  for (int s = 0; s < stages; ++s) {
    DAPPLE_RETURN_IF_ERROR(p.stages[s]->WriteGradients(grads[s].data()));
  }
  return absl::OkStatus();
}

kernels::ForwardContext Context(const v1::JobSpec& spec, bool training, int64_t step,
                                int64_t first_sample) {
  kernels::ForwardContext ctx;
  ctx.training = training;
  ctx.seed = spec.training().seed();
  ctx.step = step;
  ctx.first_sample = first_sample;
  return ctx;
}

// Bytes of one sample at the output of each stage.
absl::StatusOr<std::vector<size_t>> OutputBytes(const v1::JobSpec& spec, const Pipeline& p) {
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(spec.model()));
  std::vector<size_t> bytes;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const int last =
        s + 1 < p.stages.size() ? p.first_layers[s + 1] - 1 : static_cast<int>(infos.size()) - 1;
    bytes.push_back(static_cast<size_t>(NumElements(infos[last].output_shape)) * sizeof(float));
  }
  return bytes;
}

// Forward of `rows` samples from `first_sample` through every stage into slot `slot`; returns
// the last stage's loss sum (with its gradient kept when training).
absl::StatusOr<double> ForwardAndLoss(const v1::JobSpec& spec, Pipeline& p,
                                      const std::vector<size_t>& out_bytes, const CopyFn& copy,
                                      int slot, int64_t step, int64_t first_sample, int64_t rows,
                                      bool training) {
  const TokenBatch batch = GptBatch(spec, step, first_sample, rows);
  const kernels::ForwardContext ctx = Context(spec, training, step, first_sample);
  const int stages = static_cast<int>(p.stages.size());
  DAPPLE_RETURN_IF_ERROR(p.stages[0]->LoadInput(slot, batch.tokens.data(), rows));
  for (int s = 0; s < stages; ++s) {
    if (s > 0) {
      DAPPLE_ASSIGN_OR_RETURN(const void* src, p.stages[s - 1]->OutputForSend(slot, slot, rows));
      DAPPLE_RETURN_IF_ERROR(p.stages[s - 1]->Synchronize());
      DAPPLE_ASSIGN_OR_RETURN(void* dst, p.stages[s]->Input(slot, rows));
      DAPPLE_RETURN_IF_ERROR(copy(dst, src, rows * out_bytes[s - 1]));
    }
    DAPPLE_RETURN_IF_ERROR(p.stages[s]->Forward(slot, rows, ctx));
  }
  // The mean over every target of the global batch (one per token).
  const float grad_scale =
      training
          ? 1.0f / static_cast<float>(spec.training().global_batch() * spec.model().input_shape(0))
          : 0.0f;
  return p.stages[stages - 1]->Loss(slot, batch.labels.data(), rows, grad_scale, training, nullptr);
}

// `split`: only the input-gradient part (BackwardInput); the caller runs BackwardWeight later.
absl::Status Backward(Pipeline& p, const std::vector<size_t>& out_bytes, const CopyFn& copy,
                      int slot, int64_t rows, bool split) {
  const int stages = static_cast<int>(p.stages.size());
  for (int s = stages - 1; s >= 0; --s) {
    if (s < stages - 1) {
      const void* src = p.stages[s + 1]->GradForSend(slot);
      DAPPLE_RETURN_IF_ERROR(p.stages[s + 1]->Synchronize());
      DAPPLE_ASSIGN_OR_RETURN(void* dst, p.stages[s]->GradInput(slot, rows));
      DAPPLE_RETURN_IF_ERROR(copy(dst, src, rows * out_bytes[s]));
    }
    const bool last = s == stages - 1;
    DAPPLE_RETURN_IF_ERROR(split ? p.stages[s]->BackwardInput(slot, slot, rows, last, s > 0)
                                 : p.stages[s]->Backward(slot, slot, rows, last, s > 0));
  }
  return absl::OkStatus();
}

}  // namespace

v1::JobSpec GptSpec(const GptOptions& o) {
  v1::JobSpec spec;
  spec.set_name("gpt-parity");
  v1::ModelSpec* m = spec.mutable_model();
  m->add_input_shape(o.seq);
  m->set_input_type("tokens");
  m->set_loss("softmax_cross_entropy");
  v1::LayerSpec* e = m->add_layers();
  e->set_type("embedding");
  e->mutable_embedding()->set_vocab(o.vocab);
  e->mutable_embedding()->set_dim(o.width);
  e->mutable_embedding()->set_dropout(o.dropout);
  for (int i = 0; i < o.blocks; ++i) {
    v1::LayerSpec* b = m->add_layers();
    b->set_type("transformer_block");
    b->mutable_transformer_block()->set_heads(o.heads);
    b->mutable_transformer_block()->set_dropout(o.dropout);
  }
  m->add_layers()->set_type("layernorm");
  v1::LayerSpec* head = m->add_layers();
  head->set_type("lm_head");
  if (o.tied) {
    head->mutable_lm_head()->set_tied(true);
  } else {
    head->mutable_lm_head()->set_vocab(o.vocab);
  }
  spec.mutable_data()->set_dataset("text");
  spec.mutable_data()->set_seq_len(o.seq);
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_global_batch(o.global_batch);
  t->set_micro_batch(o.global_batch);
  t->set_epochs(1);
  t->set_seed(o.seed);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_lr(0.05);
  t->mutable_optimizer()->set_momentum(0.9);
  return spec;
}

TokenBatch GptBatch(const v1::JobSpec& spec, int64_t step, int64_t first_sample, int64_t rows) {
  const int64_t seq = spec.model().input_shape(0);
  const auto vocab = static_cast<uint64_t>(spec.model().layers(0).embedding().vocab());
  const uint64_t seed = spec.training().seed();
  // The permutation the walk mostly follows: v -> (5 v + 3) mod vocab, a bijection when vocab
  // is not a multiple of 5.
  TokenBatch b;
  b.tokens.resize(rows * seq);
  b.labels.resize(rows * seq);
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t key = SampleKey(seed, step, first_sample + r);
    uint64_t v = kernels::SplitMix64At(key, 0) % vocab;
    for (int64_t t = 0; t <= seq; ++t) {
      if (t < seq) b.tokens[r * seq + t] = static_cast<float>(v);
      if (t > 0) b.labels[r * seq + t - 1] = static_cast<int32_t>(v);
      const uint64_t bits = kernels::SplitMix64At(key, static_cast<uint64_t>(t) + 1);
      v = bits % 4 == 0 ? (bits >> 8) % vocab : (5 * v + 3) % vocab;
    }
  }
  return b;
}

absl::StatusOr<Run> TrainPipeline(const v1::JobSpec& spec, Pipeline& p, int steps,
                                  int micro_batches, const CopyFn& copy, bool split_backward) {
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<size_t> out_bytes, OutputBytes(spec, p));
  const int64_t global_batch = spec.training().global_batch();
  const int64_t rows = global_batch / micro_batches;
  const double targets = static_cast<double>(global_batch * spec.model().input_shape(0));
  Run run;
  for (int64_t step = 0; step < steps; ++step) {
    double sum = 0;
    // GPipe's order: every forward, then every backward; one slot per micro-batch.
    for (int m = 0; m < micro_batches; ++m) {
      DAPPLE_ASSIGN_OR_RETURN(const double loss, ForwardAndLoss(spec, p, out_bytes, copy, m, step,
                                                                m * rows, rows, true));
      sum += loss;
    }
    for (int m = 0; m < micro_batches; ++m) {
      DAPPLE_RETURN_IF_ERROR(Backward(p, out_bytes, copy, m, rows, split_backward));
    }
    // Every weight part after every input part: the latest a zero-bubble schedule defers them.
    for (int m = 0; split_backward && m < micro_batches; ++m) {
      for (int s = static_cast<int>(p.stages.size()) - 1; s >= 0; --s) {
        DAPPLE_RETURN_IF_ERROR(p.stages[s]->BackwardWeight(
            m, m, rows, /*last_stage=*/s == static_cast<int>(p.stages.size()) - 1));
      }
    }
    DAPPLE_RETURN_IF_ERROR(SumTiedGradients(p));
    for (auto& stage : p.stages) DAPPLE_RETURN_IF_ERROR(stage->OptimizerStep());
    run.losses.push_back(sum / targets);
  }
  DAPPLE_ASSIGN_OR_RETURN(const double eval, ForwardAndLoss(spec, p, out_bytes, copy, 0, steps, 0,
                                                            global_batch, false));
  run.eval_loss = eval / targets;
  for (auto& stage : p.stages) {
    DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, stage->HostParams());
    for (const kernels::Param* param : params)
      run.params.push_back({param->name, param->value.data});
  }
  return run;
}

absl::StatusOr<Run> TrainReference(const v1::JobSpec& spec, int steps) {
  Pipeline p;
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<StageBackend> whole,
                          MakeCpuStageBackend(spec, 0, spec.model().layers_size() - 1));
  p.stages.push_back(std::move(whole));
  p.first_layers = {0};
  return TrainPipeline(spec, p, steps, 1, [](void*, const void*, size_t) {
    return absl::InternalError("one stage copies nothing");
  });
}

void ExpectGptMatchesReference(const v1::JobSpec& spec, const Run& got, const Run& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << "step " << s + 1;
  }
  EXPECT_NEAR(got.eval_loss, want.eval_loss, 1e-5 * std::abs(want.eval_loss)) << "evaluation";
  std::map<std::string, const std::vector<float>*> reference;
  for (const auto& [name, values] : want.params) reference[name] = &values;
  // A tied copy's name -> its owner's.
  std::map<std::string, std::string> owner;
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  for (const LayerInfo& info : infos) {
    for (const ParamInfo& p : info.params) {
      if (!p.tied_to.empty()) owner[ParamName(info.index, p.name)] = p.tied_to;
    }
  }
  std::map<std::string, int> seen;
  for (const auto& [name, values] : got.params) {
    const auto it = owner.find(name);
    const std::string& ref_name = it != owner.end() ? it->second : name;
    ASSERT_TRUE(reference.count(ref_name)) << name;
    EXPECT_LE(RelativeL2(values, *reference[ref_name]), 1e-5) << name;
    ++seen[ref_name];
  }
  for (const auto& [name, values] : want.params) {
    EXPECT_GE(seen[name], 1) << name << " missing";
  }
}

}  // namespace dapple::worker::parity
