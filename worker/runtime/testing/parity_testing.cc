#include "worker/runtime/testing/parity_testing.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

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
  for (size_t s = 0; s < run.status.size(); ++s) {
    ASSERT_TRUE(run.status[s].ok()) << "stage " << s << ": " << run.status[s];
  }
  auto ref = ReferenceTrainer::Create(spec, &TrainSet()).value();
  std::vector<double> ref_losses;
  for (int s = 0; s < steps; ++s) ref_losses.push_back(ref->Step(s));
  ASSERT_EQ(run.losses.size(), ref_losses.size());
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(run.losses[s], ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s + 1;
  }
  std::map<std::string, std::vector<float>> ref_params;
  for (auto* p : ref->Params()) ref_params[p->name] = p->value.data;
  size_t seen = 0;
  for (size_t s = 0; s < runtimes.size(); ++s) {
    auto params = runtimes[s]->Params();
    ASSERT_TRUE(params.ok()) << params.status();
    for (auto* p : *params) {
      ASSERT_TRUE(ref_params.count(p->name)) << p->name;
      EXPECT_LE(RelativeL2(p->value.data, ref_params[p->name]), 1e-5) << p->name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, ref_params.size());
  double ref_loss, ref_acc;
  ref->Evaluate(TestSet(), &ref_loss, &ref_acc);
  EXPECT_NEAR(run.eval_accuracy, ref_acc, 1e-3);
}

}  // namespace dapple::worker::parity
