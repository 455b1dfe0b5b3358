#include "worker/runtime/testing/parity_testing.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "worker/data/fashion_mnist.h"
#include "worker/runtime/reference_trainer.h"

namespace dapple::worker::parity {

std::string DataDir() {
  const char* dir = std::getenv("DAPPLE_DATA_DIR");
  return dir != nullptr && *dir != 0 ? dir : "/usr/share/datasets/fashion-mnist";
}

const Dataset& TrainSet() {
  static const Dataset* d = new FashionMnist(LoadFashionMnist(DataDir(), Split::kTrain).value());
  return *d;
}

const Dataset& TestSet() {
  static const Dataset* d = new FashionMnist(LoadFashionMnist(DataDir(), Split::kTest).value());
  return *d;
}

v1::JobSpec ParitySpec(const SpecOptions& o) {
  v1::JobSpec spec;
  spec.set_name("parity");
  auto* model = spec.mutable_model();
  for (int64_t d : {1, 28, 28}) model->add_input_shape(d);
  auto add = [&](const std::string& type, int64_t out) {
    auto* l = model->add_layers();
    l->set_type(type);
    if (type == "linear") l->mutable_linear()->set_out(out);
  };
  add("flatten", 0);
  add("linear", o.hidden1);
  add("relu", 0);
  add("linear", o.hidden2);
  add("gelu", 0);
  for (int i = 0; i < o.extra_blocks; ++i) {
    add("linear", o.hidden2);
    add("relu", 0);
  }
  add("linear", 10);
  model->set_loss("softmax_cross_entropy");
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_path(DataDir());
  auto* t = spec.mutable_training();
  t->set_global_batch(o.global_batch);
  t->set_micro_batch(o.micro_batch);
  t->set_epochs(1);
  t->set_seed(o.seed);
  const bool sgd = o.optimizer == "sgd";
  t->mutable_optimizer()->set_type(o.optimizer);
  t->mutable_optimizer()->set_lr(sgd ? 0.1 : 0.01);
  t->mutable_optimizer()->set_momentum(sgd ? 0.9 : 0.0);
  t->mutable_optimizer()->set_weight_decay(o.weight_decay);
  return spec;
}

v1::ParallelPlanSummary UniformPlan(int layers, int stages) {
  v1::ParallelPlanSummary plan;
  for (int s = 0; s < stages; ++s) {
    auto* st = plan.add_stages();
    st->set_first_layer(s * layers / stages);
    st->set_last_layer((s + 1) * layers / stages - 1);
    st->set_replicas(1);
  }
  return plan;
}

v1::ParallelPlanSummary InterleavedPlan(int layers, int stages, int chunks, int replicas) {
  const int virtual_stages = stages * chunks;
  v1::ParallelPlanSummary plan;
  plan.set_schedule("interleaved");
  for (int r = 0; r < stages; ++r) {
    v1::PlanStageSummary* st = plan.add_stages();
    st->set_replicas(replicas);
    for (int ch = 0; ch < chunks; ++ch) {
      const int k = ch * stages + r;
      v1::StageRange* range = st->add_chunks();
      range->set_first_layer(k * layers / virtual_stages);
      range->set_last_layer((k + 1) * layers / virtual_stages - 1);
    }
    st->set_first_layer(st->chunks(0).first_layer());
    st->set_last_layer(st->chunks(0).last_layer());
  }
  return plan;
}

v1::StageAssignment Assignment(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan,
                               int stage, const v1::RankProgram& program) {
  v1::StageAssignment a;
  a.set_job_id("job-test");
  *a.mutable_spec() = spec;
  *a.mutable_plan() = plan;
  a.set_stage(stage);
  a.set_num_stages(plan.stages_size());
  *a.mutable_program() = program;
  return a;
}

double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::pair<int64_t, int64_t> UncomparedSlice(const v1::JobSpec& spec, const std::string& name,
                                            int64_t elements) {
  constexpr absl::string_view kKeyBias = ".attn.qkv.bias";
  if (spec.training().optimizer().type() != "adamw") return {0, 0};
  absl::string_view rest = name;
  int layer = -1;
  if (!absl::ConsumePrefix(&rest, "layer") || !absl::ConsumeSuffix(&rest, kKeyBias) ||
      !absl::SimpleAtoi(rest, &layer) || layer < 0 || layer >= spec.model().layers_size() ||
      spec.model().layers(layer).type() != "transformer_block") {
    return {0, 0};
  }
  return {elements / 3, 2 * elements / 3};
}

namespace {

// `v` without its elements [begin, end).
std::vector<float> WithoutSlice(const std::vector<float>& v, int64_t begin, int64_t end) {
  std::vector<float> out(v.begin(), v.begin() + begin);
  out.insert(out.end(), v.begin() + end, v.end());
  return out;
}

}  // namespace

PipelineRun RunPipeline(const std::vector<std::unique_ptr<StageRuntime>>& runtimes, int steps) {
  const int stages = static_cast<int>(runtimes.size());
  PipelineRun run;
  run.status.assign(stages, absl::OkStatus());
  std::vector<std::vector<double>> losses(stages);
  std::vector<double> accuracy(stages, -1);
  std::vector<double> eval_loss(stages, -1);
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] {
      for (int step = 0; step < steps; ++step) {
        auto r = runtimes[s]->RunStep(step);
        if (!r.ok()) {
          run.status[s] = r.status();
          return;
        }
        if (r->has_loss) losses[s].push_back(r->loss);
      }
      auto e = runtimes[s]->Evaluate(1);
      if (!e.ok()) {
        run.status[s] = e.status();
        return;
      }
      if (e->has_metrics) {
        accuracy[s] = e->accuracy;
        eval_loss[s] = e->loss;
      }
    });
  }
  for (auto& t : threads) t.join();
  run.losses = losses[stages - 1];
  run.eval_accuracy = accuracy[stages - 1];
  run.eval_loss = eval_loss[stages - 1];
  return run;
}

void ExpectMatchesReference(const v1::JobSpec& spec, int steps,
                            const std::vector<std::unique_ptr<StageRuntime>>& runtimes,
                            const PipelineRun& run) {
  ExpectMatchesReference(spec, steps, runtimes, run, TrainSet(), TestSet());
}

void ExpectMatchesReference(const v1::JobSpec& spec, int steps,
                            const std::vector<std::unique_ptr<StageRuntime>>& runtimes,
                            const PipelineRun& run, const Dataset& train, const Dataset& eval) {
  for (size_t s = 0; s < run.status.size(); ++s) {
    ASSERT_TRUE(run.status[s].ok()) << "stage " << s << ": " << run.status[s];
  }
  auto ref = ReferenceTrainer::Create(spec, &train).value();
  std::vector<double> ref_losses;
  for (int s = 0; s < steps; ++s) {
    ReferenceTrainer::StepTrace trace;
    ref_losses.push_back(ref->Step(s, &trace));
    // What justifies not comparing a slice: the reference's gradient there is ~0.
    const std::vector<kernels::Param*> params = ref->Params();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float>& g = trace.gradients[i];
      const auto [begin, end] = UncomparedSlice(spec, params[i]->name, std::ssize(g));
      if (begin == end) continue;
      double slice = 0, all = 0;
      for (int64_t k = 0; k < std::ssize(g); ++k) {
        all += double(g[k]) * g[k];
        if (k >= begin && k < end) slice += double(g[k]) * g[k];
      }
      EXPECT_LE(std::sqrt(slice), 1e-5 * std::sqrt(all))
          << params[i]->name << "[" << begin << ", " << end << ") step " << s + 1;
    }
  }
  ASSERT_EQ(run.losses.size(), ref_losses.size());
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(run.losses[s], ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s + 1;
  }
  std::map<std::string, std::vector<float>> ref_params;
  for (auto* p : ref->Params()) ref_params[p->name] = p->value.data;
  std::set<std::string> seen;
  for (size_t s = 0; s < runtimes.size(); ++s) {
    auto params = runtimes[s]->Params();
    ASSERT_TRUE(params.ok()) << params.status();
    for (auto* p : *params) {
      // The reference holds a tied weight once, as its owner.
      const std::string& name = p->tied_to.empty() ? p->name : p->tied_to;
      ASSERT_TRUE(ref_params.count(name)) << p->name;
      const std::vector<float>& want = ref_params[name];
      ASSERT_EQ(p->value.data.size(), want.size()) << p->name;
      const auto [begin, end] = UncomparedSlice(spec, name, std::ssize(want));
      EXPECT_LE(RelativeL2(WithoutSlice(p->value.data, begin, end), WithoutSlice(want, begin, end)),
                1e-5)
          << p->name;
      if (p->tied_to.empty()) {
        EXPECT_TRUE(seen.insert(name).second) << name << " twice";
      }
    }
  }
  EXPECT_EQ(seen.size(), ref_params.size());
  double ref_loss, ref_acc;
  ref->Evaluate(eval, &ref_loss, &ref_acc);
  EXPECT_NEAR(run.eval_accuracy, ref_acc, 1e-3);
}

}  // namespace dapple::worker::parity
