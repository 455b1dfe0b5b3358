// The planner's memory model against the runtime's accounting, across components: a small GPT
// planned on 2 stages (coordinator/planner MakePlan), then run for one step by the worker's
// StageRuntime on each stage (CPU kernels, in-memory transport; the tied head's stage and the
// embedding's sum the table's gradient over an in-process collective). Every stage's predicted peak
// (common/memory_model.h: weights, gradients, AdamW's moments, in-flight micro-batches of the stage
// input, the layers' outputs and what they save for the backward, attention probabilities
// included, the send and receive buffers, the backward's workspace) must be the runtime's own
// prediction for it, and the stage's measured figures (what its CPU buffers hold) must hold the
// predicted weights exactly and at least the predicted rest: the transformer blocks also keep, per
// micro-batch slot, the gradients BackwardInput leaves for BackwardWeight, which the model does
// not count yet (docs/planner.md, "Memory model").
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/memory_model.h"
#include "common/model_info.h"
#include "coordinator/planner/planner.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"
#include "worker/data/dataset.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/local_transport.h"

namespace dapple {
namespace {

constexpr int64_t kSeqLen = 32;
constexpr int64_t kSamples = 64;

// examples/gpt_kjv.yaml's layers, narrower and shorter, with the sample count the coordinator
// resolves from the text file at submit.
v1::JobSpec GptSpec(const std::string& schedule) {
  const std::string yaml = absl::StrFormat(R"yaml(
name: gpt-memory
model:
  layers:
    - {type: embedding, vocab: 256, dim: 32}
    - {type: transformer_block, heads: 4}
    - {type: transformer_block, heads: 4}
    - {type: transformer_block, heads: 4}
    - {type: transformer_block, heads: 4}
    - {type: layernorm}
    - {type: lm_head, tied: true}
  loss: softmax_cross_entropy
data: {dataset: text, path: /nonexistent/kjv.txt, seq_len: %d}
training:
  global_batch: 16
  micro_batch: 4
  epochs: 1
  optimizer: {type: adamw, lr: 1.0e-3}
parallel: {schedule: %s, planner: balanced, devices: 2}
)yaml",
                                           kSeqLen, schedule);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "gpt.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec out = spec.ok() ? *spec : v1::JobSpec();
  out.mutable_data()->set_train_samples(kSamples);
  return out;
}

// kSamples sequences of kSeqLen token ids, each target the next byte of a repeating text,
// through the runtime's Dataset interface (worker/data/dataset.h), as a text file gives them.
class Sequences final : public worker::Dataset {
 public:
  int64_t size() const override { return kSamples; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return kSeqLen; }
  int64_t num_classes() const override { return 256; }
  bool token_inputs() const override { return true; }
  void Gather(const int64_t* indices, int64_t count, float* inputs,
              int32_t* targets) const override {
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t k = 0; k < kSeqLen; ++k) {
        const int64_t at = indices[b] * kSeqLen + k;
        if (inputs != nullptr) inputs[b * kSeqLen + k] = static_cast<float>(Byte(at));
        if (targets != nullptr) targets[b * kSeqLen + k] = Byte(at + 1);
      }
    }
  }

 private:
  static int32_t Byte(int64_t at) { return "In the beginning\n"[at % 17]; }
  std::vector<int64_t> shape_{kSeqLen};
};

// One step of `plan` for `spec` by a StageRuntime per stage, each on its own thread; the
// runtime's own memory prediction of each stage in *predicted.
std::vector<absl::StatusOr<worker::StepResult>> RunOneStep(
    const v1::JobSpec& spec, const v1::ParallelPlan& plan,
    std::vector<memory::ReplicaMemory>* predicted) {
  const v1::ParallelPlanSummary& summary = plan.summary();
  const int stages = summary.stages_size();
  const Sequences data;
  worker::parity::Mailbox box;
  std::vector<std::unique_ptr<worker::parity::LocalTransport>> transports;
  for (int s = 0; s < stages; ++s) {
    transports.push_back(std::make_unique<worker::parity::LocalTransport>(&box, s));
  }
  // The head is tied to the embedding on the other stage: both stages are the tied group.
  worker::testing::LocalCollectiveGroup tied(stages);
  // Every rank: the step's job-wide decision (GLOBAL_NORM, in every synchronous program).
  worker::testing::LocalCollectiveGroup job(stages);
  std::vector<absl::StatusOr<worker::StepResult>> results(stages, absl::UnknownError("not run"));
  predicted->assign(stages, memory::ReplicaMemory());
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] {
      v1::StageAssignment a;
      *a.mutable_spec() = spec;
      *a.mutable_plan() = summary;
      a.set_stage(s);
      a.set_num_stages(stages);
      *a.mutable_program() = plan.programs(s);
      worker::testing::LocalCollective member(&tied, s);
      worker::testing::LocalCollective job_member(&job, s);
      worker::StageCollectives collectives;
      collectives.tied = &member;
      collectives.job = &job_member;
      absl::StatusOr<std::unique_ptr<worker::StageRuntime>> rt =
          worker::StageRuntime::Create(a, &data, &data, transports[s].get(), nullptr, collectives);
      if (!rt.ok()) {
        results[s] = rt.status();
        return;
      }
      (*predicted)[s] = (*rt)->predicted_memory();
      results[s] = (*rt)->RunStep(0);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(PlannerRuntimeMemoryTest, GptStagesReportThePredictedMemory) {
  for (const std::string schedule : {"dapple", "gpipe"}) {
    SCOPED_TRACE(schedule);
    const v1::JobSpec spec = GptSpec(schedule);
    absl::StatusOr<v1::ParallelPlan> plan = coordinator::MakePlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const v1::ParallelPlanSummary& summary = plan->summary();
    ASSERT_EQ(summary.stages_size(), 2);
    ASSERT_EQ(summary.stages(0).last_layer(), 2);  // embedding + 2 blocks | 2 blocks + head
    std::vector<memory::ReplicaMemory> runtime_predicted;
    const std::vector<absl::StatusOr<worker::StepResult>> results =
        RunOneStep(spec, *plan, &runtime_predicted);
    const std::vector<LayerInfo> layers = InferLayers(spec.model()).value();
    for (int s = 0; s < 2; ++s) {
      SCOPED_TRACE(absl::StrFormat("stage %d", s));
      ASSERT_TRUE(results[s].ok()) << results[s].status();
      const v1::StageStepStats& measured = results[s]->stats;
      const v1::PlanStageSummary& predicted = summary.stages(s);
      EXPECT_EQ(measured.peak_in_flight(), predicted.peak_in_flight());
      // The planner (from the profile) and the runtime (from the model) ask the one function.
      const memory::ReplicaMemory& model = runtime_predicted[s];
      EXPECT_EQ(model.PeakBytes(), predicted.peak_memory_bytes());
      EXPECT_EQ(model.in_flight, predicted.peak_in_flight());
      // Per micro-batch in flight: the stage input, every output and the saved bytes (with
      // 4 heads x T^2 attention probabilities per block) of its 4 samples, and on the last stage
      // its dL/dlogits.
      const int last = predicted.last_layer();
      const int64_t per_micro_batch =
          4 * (StageActivationBytesPerSample(layers, predicted.first_layer(), last) +
               (s == 1 ? layers[last].output_bytes : 0));
      EXPECT_EQ(model.activations, predicted.peak_in_flight() * per_micro_batch);
      // Measured: the weights, gradients and moments exactly; the rest at least as predicted.
      EXPECT_EQ(measured.weight_bytes(), model.WeightBytes());
      EXPECT_GE(measured.peak_activation_bytes(),
                model.activations + model.communication + model.workspace);
      EXPECT_EQ(measured.peak_memory_bytes(),
                measured.weight_bytes() + measured.peak_activation_bytes());
    }
  }
}

// Activation recomputation under a device memory limit that binds (training.recompute auto):
// the planner turns it on for exactly the stages that do not fit without it, the plan fits, and
// the runtime runs it holding what the model predicts: per micro-batch in flight only the stage
// input and output (and the last stage's dL/dlogits), plus one micro-batch's activations.
TEST(PlannerRuntimeMemoryTest, AMemoryCapThatOnlyRecomputationMeetsIsPlannedAndRuns) {
  v1::JobSpec spec = GptSpec("gpipe");  // all 4 micro-batches in flight on both stages
  spec.mutable_training()->set_global_batch(32);
  spec.mutable_training()->set_micro_batch(8);
  // The peaks without and with recomputation everywhere, under the default memory (both fit).
  absl::StatusOr<v1::ParallelPlan> keep = coordinator::MakePlan(spec);
  ASSERT_TRUE(keep.ok()) << keep.status();
  spec.mutable_training()->set_recompute("all");
  absl::StatusOr<v1::ParallelPlan> all = coordinator::MakePlan(spec);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(keep->summary().stages_size(), 2);
  int64_t keep_min = std::numeric_limits<int64_t>::max(), keep_max = 0, all_max = 0;
  for (int s = 0; s < 2; ++s) {
    const int64_t k = keep->summary().stages(s).peak_memory_bytes();
    const int64_t r = all->summary().stages(s).peak_memory_bytes();
    EXPECT_FALSE(keep->summary().stages(s).recompute());
    EXPECT_TRUE(all->summary().stages(s).recompute());
    EXPECT_LT(r, k) << "stage " << s;
    keep_min = std::min(keep_min, k);
    keep_max = std::max(keep_max, k);
    all_max = std::max(all_max, r);
  }
  // A cap every recomputing stage fits and at least one stage without recomputation does not.
  coordinator::PlanInputs capped;
  capped.defaults.device_memory_bytes = std::max(all_max, keep_min);
  ASSERT_LT(capped.defaults.device_memory_bytes, keep_max);
  spec.mutable_training()->set_recompute("none");
  absl::StatusOr<v1::ParallelPlan> refused = coordinator::MakePlan(spec, capped);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();

  spec.mutable_training()->set_recompute("auto");
  absl::StatusOr<v1::ParallelPlan> plan = coordinator::MakePlan(spec, capped);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::ParallelPlanSummary& summary = plan->summary();
  for (int s = 0; s < 2; ++s) {
    const v1::PlanStageSummary& stage = summary.stages(s);
    EXPECT_EQ(stage.recompute(),
              keep->summary().stages(s).peak_memory_bytes() > capped.defaults.device_memory_bytes)
        << "stage " << s;
    EXPECT_LE(stage.peak_memory_bytes(), capped.defaults.device_memory_bytes) << "stage " << s;
  }
  // Recomputing adds a forward before each backward to the predicted step.
  EXPECT_GT(summary.predicted_step_ms(), keep->summary().predicted_step_ms());

  std::vector<memory::ReplicaMemory> keep_model, model;
  const std::vector<absl::StatusOr<worker::StepResult>> keep_results =
      RunOneStep(spec, *keep, &keep_model);
  const std::vector<absl::StatusOr<worker::StepResult>> results = RunOneStep(spec, *plan, &model);
  const std::vector<LayerInfo> layers = InferLayers(spec.model()).value();
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE(absl::StrFormat("stage %d", s));
    ASSERT_TRUE(keep_results[s].ok()) << keep_results[s].status();
    ASSERT_TRUE(results[s].ok()) << results[s].status();
    const v1::PlanStageSummary& predicted = summary.stages(s);
    EXPECT_EQ(model[s].PeakBytes(), predicted.peak_memory_bytes());
    const v1::StageStepStats& measured = results[s]->stats;
    // The same step: the same loss on the last stage.
    if (s == 1) {
      EXPECT_EQ(results[s]->loss, keep_results[s]->loss);
    }
    if (!predicted.recompute()) continue;
    const int first = predicted.first_layer(), last = predicted.last_layer();
    const int64_t rows = spec.training().micro_batch();
    const int64_t input = InputBytes(layers[first]) * rows;
    const int64_t output = layers[last].output_bytes * rows;
    const int64_t all_bytes = StageActivationBytesPerSample(layers, first, last) * rows;
    EXPECT_EQ(
        model[s].activations,
        predicted.peak_in_flight() * (input + output + (s == 1 ? output : 0)) + all_bytes - input);
    EXPECT_GE(measured.peak_activation_bytes(),
              model[s].activations + model[s].communication + model[s].workspace);
    // The measured drop: what the stage's buffers held without recomputation, less.
    EXPECT_LT(measured.peak_activation_bytes(), keep_results[s]->stats.peak_activation_bytes());
    EXPECT_EQ(measured.peak_in_flight(), predicted.peak_in_flight());
  }
}

}  // namespace
}  // namespace dapple
