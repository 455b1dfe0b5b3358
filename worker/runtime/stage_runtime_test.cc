// Parity of the pipeline runtime against the single-device reference, in one process: every
// stage runs on its own thread and stages talk through an in-memory transport (a fake used only
// here; tests/integration runs the same check across real processes over UCX).
#include "worker/runtime/stage_runtime.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/model_info.h"
#include "common/schedule/action.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/model.h"
#include "worker/comm/delay_transport.h"
#include "worker/data/sample_order.h"
#include "worker/runtime/testing/local_transport.h"
#include "worker/runtime/testing/parity_testing.h"

namespace dapple::worker {
namespace {

using parity::LocalTransport;
using parity::Mailbox;
using parity::ParitySpec;
using parity::SpecOptions;
using parity::TestSet;
using parity::TrainSet;

v1::JobSpec SmallSpec(int global_batch, int micro_batch, const std::string& optimizer) {
  SpecOptions o;
  o.global_batch = global_batch;
  o.micro_batch = micro_batch;
  o.optimizer = optimizer;
  return ParitySpec(o);
}

struct Case {
  schedule::ScheduleKind kind;
  int stages;
  int micro_batches;
  std::string optimizer;
};

class StageRuntimeParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(StageRuntimeParityTest, MatchesSingleDevice) {
  const Case c = GetParam();
  const int kGlobalBatch = 64, kSteps = 4;
  v1::JobSpec spec = SmallSpec(kGlobalBatch, kGlobalBatch / c.micro_batches, c.optimizer);
  auto programs = schedule::BuildPrograms(c.kind, c.stages, c.micro_batches).value();
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), c.stages);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    transports[s] = std::make_unique<LocalTransport>(&box, s);
    runtimes[s] = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &TrainSet(),
                                       &TestSet(), transports[s].get())
                      .value();
  }
  parity::PipelineRun run = parity::RunPipeline(runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, runtimes, run);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto kind : {schedule::ScheduleKind::kGPipe, schedule::ScheduleKind::kDapple}) {
    for (int p : {1, 2, 3}) {
      for (int m : {1, 2, 4, 8}) cases.push_back({kind, p, m, "sgd"});
    }
  }
  cases.push_back({schedule::ScheduleKind::kDapple, 3, 4, "adamw"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, StageRuntimeParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(schedule::ScheduleKindName(c.kind)) + "_P" +
                                  std::to_string(c.stages) + "_M" +
                                  std::to_string(c.micro_batches) + "_" + c.optimizer;
                         });

// Robustness (issue 4): a random 0-50 ms delay before every send and every receive (each rank
// its own seeded sequence) reorders when messages arrive; the schedule must still finish and
// train exactly like one device.
struct DelayCase {
  schedule::ScheduleKind kind;
  int stages;
};

class StageRuntimeDelayTest : public ::testing::TestWithParam<DelayCase> {};

TEST_P(StageRuntimeDelayTest, MatchesSingleDeviceUnderRandomDelays) {
  const DelayCase c = GetParam();
  const int kGlobalBatch = 64, M = 8, kSteps = 2;
  v1::JobSpec spec = SmallSpec(kGlobalBatch, kGlobalBatch / M, "sgd");
  auto programs = schedule::BuildPrograms(c.kind, c.stages, M).value();
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), c.stages);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> local(c.stages);
  std::vector<std::unique_ptr<DelayTransport>> delayed(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    local[s] = std::make_unique<LocalTransport>(&box, s);
    DelayTransport::Options o;
    o.max_delay = absl::Milliseconds(50);
    o.seed = DelayTransport::RankSeed(spec.training().seed(), s);
    delayed[s] = DelayTransport::Create(local[s].get(), o).value();
    runtimes[s] = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &TrainSet(),
                                       &TestSet(), delayed[s].get())
                      .value();
  }
  parity::PipelineRun run = parity::RunPipeline(runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, runtimes, run);
  for (int s = 0; s < c.stages; ++s) {
    // Every stage sends and receives at least once per micro-batch and step, each delayed.
    EXPECT_GE(delayed[s]->delays(), 2 * M * kSteps) << "stage " << s;
    EXPECT_GT(delayed[s]->total_delay(), absl::ZeroDuration()) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(All, StageRuntimeDelayTest,
                         ::testing::Values(DelayCase{schedule::ScheduleKind::kGPipe, 2},
                                           DelayCase{schedule::ScheduleKind::kDapple, 2},
                                           DelayCase{schedule::ScheduleKind::kGPipe, 4},
                                           DelayCase{schedule::ScheduleKind::kDapple, 4}),
                         [](const auto& info) {
                           return std::string(schedule::ScheduleKindName(info.param.kind)) + "_P" +
                                  std::to_string(info.param.stages) + "_M8";
                         });

TEST(StageRuntimeTest, PeakInFlightFollowsTheSchedule) {
  // 6 layers on P = 3, M = 8: dapple stashes min(P - i, M) micro-batches on stage i, gpipe M.
  for (auto kind : {schedule::ScheduleKind::kGPipe, schedule::ScheduleKind::kDapple}) {
    const int P = 3, M = 8;
    v1::JobSpec spec = SmallSpec(64, 8, "sgd");
    auto programs = schedule::BuildPrograms(kind, P, M).value();
    v1::ParallelPlanSummary plan;
    for (int s = 0; s < P; ++s) {
      auto* st = plan.add_stages();
      st->set_first_layer(2 * s);
      st->set_last_layer(2 * s + 1);
    }
    Mailbox box;
    std::vector<int> peak(P);
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<LocalTransport>> transports;
    for (int s = 0; s < P; ++s) transports.push_back(std::make_unique<LocalTransport>(&box, s));
    for (int s = 0; s < P; ++s) {
      threads.emplace_back([&, s] {
        v1::StageAssignment a;
        *a.mutable_spec() = spec;
        *a.mutable_plan() = plan;
        a.set_stage(s);
        a.set_num_stages(P);
        *a.mutable_program() = programs[s];
        auto rt = StageRuntime::Create(a, &TrainSet(), &TestSet(), transports[s].get()).value();
        peak[s] = rt->RunStep(0).value().peak_in_flight;
      });
    }
    for (auto& t : threads) t.join();
    for (int s = 0; s < P; ++s) {
      EXPECT_EQ(peak[s], kind == schedule::ScheduleKind::kDapple ? std::min(P - s, M) : M)
          << schedule::ScheduleKindName(kind) << " stage " << s;
    }
  }
}

// Runs `steps` steps of `spec` on a P-stage pipeline of `kind` with M micro-batches, one thread
// per stage (no transport when P = 1, as the worker daemon); returns results[stage][step].
// Stage s covers layers UniformPlan(P).
std::vector<std::vector<StepResult>> RunTimedPipeline(const v1::JobSpec& spec,
                                                      schedule::ScheduleKind kind, int P, int M,
                                                      int steps, bool trace) {
  auto programs = schedule::BuildPrograms(kind, P, M).value();
  v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), P);
  Mailbox box;
  std::vector<std::unique_ptr<LocalTransport>> transports;
  for (int s = 0; s < P; ++s) transports.push_back(std::make_unique<LocalTransport>(&box, s));
  std::vector<std::vector<StepResult>> results(P);
  std::vector<absl::Status> status(P);
  std::vector<std::thread> threads;
  for (int s = 0; s < P; ++s) {
    threads.emplace_back([&, s] {
      auto rt = StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &TrainSet(),
                                     &TestSet(), P > 1 ? transports[s].get() : nullptr);
      if (!rt.ok()) {
        status[s] = rt.status();
        return;
      }
      for (int step = 0; step < steps; ++step) {
        auto r = (*rt)->RunStep(step, trace);
        if (!r.ok()) {
          status[s] = r.status();
          return;
        }
        results[s].push_back(std::move(*r));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < P; ++s) EXPECT_TRUE(status[s].ok()) << "stage " << s << ": " << status[s];
  return results;
}

double PartsSum(const v1::StageStepStats& st) {
  return st.forward_seconds() + st.backward_seconds() + st.comm_seconds() + st.idle_seconds() +
         st.allreduce_seconds() + st.optimizer_seconds();
}

TEST(StageRuntimeStatsTest, TimesAddUpAndAPipelineStageIdles) {
  const int P = 2, M = 4, kSteps = 3;
  v1::JobSpec spec = SmallSpec(64, 16, "sgd");
  auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, P, M, kSteps, false);
  ASSERT_EQ(results.size(), P);
  for (int s = 0; s < P; ++s) {
    ASSERT_EQ(results[s].size(), kSteps) << "stage " << s;
    for (int step = 0; step < kSteps; ++step) {
      const StepResult& r = results[s][step];
      const v1::StageStepStats& st = r.stats;
      SCOPED_TRACE(testing::Message() << "stage " << s << " step " << step);
      EXPECT_EQ(st.step(), step + 1);
      EXPECT_GT(st.step_seconds(), 0);
      EXPECT_DOUBLE_EQ(st.step_seconds(), r.seconds);
      EXPECT_NEAR(PartsSum(st), st.step_seconds(), 1e-9 * st.step_seconds());
      EXPECT_GT(st.forward_seconds(), 0);
      EXPECT_GT(st.backward_seconds(), 0);
      EXPECT_GT(st.optimizer_seconds(), 0);
      EXPECT_GE(st.comm_seconds(), 0);
      EXPECT_GE(st.idle_seconds(), 0);
      EXPECT_EQ(st.allreduce_seconds(), 0);  // one replica per stage
      EXPECT_GT(st.comm_seconds(), 0);       // every stage of P = 2 sends
      EXPECT_EQ(st.samples(), 64);
      EXPECT_DOUBLE_EQ(st.learning_rate(), spec.training().optimizer().lr());
      EXPECT_FALSE(st.skipped());
      EXPECT_FALSE(r.traced);
      EXPECT_EQ(r.trace.events_size(), 0);
    }
  }
  // Each stage waits for the other: stage 1 for its first activation, stage 0 for its first
  // gradient. The bubble is real waiting, far above clock noise.
  for (int s = 0; s < P; ++s) {
    EXPECT_GT(results[s][kSteps - 1].stats.idle_seconds(), 0) << "stage " << s;
  }
}

TEST(StageRuntimeStatsTest, ASingleStageHasNoCommunication) {
  v1::JobSpec spec = SmallSpec(64, 32, "sgd");
  auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, 1, 2, 2, false);
  ASSERT_EQ(results[0].size(), 2);
  const v1::StageStepStats& st = results[0][1].stats;
  EXPECT_EQ(st.comm_seconds(), 0);
  EXPECT_NEAR(PartsSum(st), st.step_seconds(), 1e-9 * st.step_seconds());
  EXPECT_EQ(st.peak_in_flight(), 1);  // dapple on P = 1: min(P - 0, M) = 1
}

TEST(StageRuntimeStatsTest, MemoryMatchesAHandCount) {
  // ParitySpec's model: flatten (784), linear 32, relu, linear 16, gelu, linear 10, on an input
  // of [1, 28, 28]. UniformPlan(6 layers, 2 stages): stage 0 = layers 0-2, stage 1 = 3-5.
  const int P = 2, M = 4;
  const int64_t rows = 16;
  for (const std::string optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    v1::JobSpec spec = SmallSpec(64, rows, optimizer);
    auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, P, M, 1, false);
    ASSERT_EQ(results[0].size(), 1);
    ASSERT_EQ(results[1].size(), 1);
    // What the CPU backend's buffers hold after the step (measured, StageBackend::Held), by
    // hand: weights, gradients and the optimizer's arrays (sgd with momentum: the velocity;
    // adamw: both moments).
    const int copies = optimizer == "adamw" ? 2 : 1;
    // Stage 0: input 784 + flatten 784 + linear 32 + relu 32 floats per sample; dapple holds
    // min(P - 0, M) = 2 micro-batches. Per micro-batch id (M = 4) the activation it sends and
    // the gradient it receives (32 + 32); the backward's buffer for the gradient between its
    // layers (relu's input 32; it stops at the linear, the first layer with parameters).
    // Weights: linear 784x32 + 32.
    const v1::StageStepStats& s0 = results[0][0].stats;
    EXPECT_EQ(s0.peak_in_flight(), 2);
    EXPECT_EQ(s0.peak_activation_bytes(),
              rows * (2 * (784 + 784 + 32 + 32) + M * (32 + 32) + 32) * 4);
    EXPECT_EQ(s0.weight_bytes(), (784 * 32 + 32) * 4 * (2 + copies));
    EXPECT_EQ(s0.peak_memory_bytes(), s0.weight_bytes() + s0.peak_activation_bytes());
    // Stage 1: input 32 + linear 16 + gelu 16 + linear 10 and the loss's dL/dlogits 10; 1
    // micro-batch in flight; per id the input gradient it sends back (32); the backward's
    // buffers (gelu's input 16, linear 10's input 16). Weights: 32x16 + 16 and 16x10 + 10.
    const v1::StageStepStats& s1 = results[1][0].stats;
    EXPECT_EQ(s1.peak_in_flight(), 1);
    EXPECT_EQ(s1.peak_activation_bytes(),
              rows * (1 * (32 + 16 + 16 + 10 + 10) + M * 32 + 16 + 16) * 4);
    EXPECT_EQ(s1.weight_bytes(), (32 * 16 + 16 + 16 * 10 + 10) * 4 * (2 + copies));
    EXPECT_EQ(s1.peak_memory_bytes(), s1.weight_bytes() + s1.peak_activation_bytes());
  }
}

// Achieved TFLOP/s per stage (common/compute_throughput.h) on CPU stages: the step's model FLOPs
// by hand from common/model's per-layer counts, over the forward and backward seconds; no MFU
// on a CPU (no stated peak).
TEST(StageRuntimeStatsTest, AchievedTflopsFromTheLayersFlops) {
  const int P = 2, M = 4;
  v1::JobSpec spec = SmallSpec(64, 16, "sgd");
  auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, P, M, 2, false);
  const std::vector<LayerInfo> infos = InferLayers(spec.model()).value();
  // UniformPlan(6 layers, 2 stages): layers 0-2 and 3-5.
  const int first[] = {0, 3};
  for (int s = 0; s < P; ++s) {
    SCOPED_TRACE(testing::Message() << "stage " << s);
    ASSERT_EQ(results[s].size(), 2);
    const v1::StageStepStats& st = results[s][1].stats;
    // What the stage runs: stage 0's backward stops at its first linear (layer 1), which
    // computes the weight gradients only; its flatten (layer 0) runs no backward.
    double per_sample = 0;
    for (int l = first[s]; l < first[s] + 3; ++l) {
      per_sample += infos[l].forward_flops;
      if (s > 0 || l > 1) per_sample += infos[l].backward_flops;
      if (s == 0 && l == 1) per_sample += infos[l].backward_weight_flops;
    }
    EXPECT_GT(per_sample, 0);
    EXPECT_DOUBLE_EQ(st.flops(), per_sample * 64);
    EXPECT_DOUBLE_EQ(st.compute_seconds(), st.forward_seconds() + st.backward_seconds());
    EXPECT_DOUBLE_EQ(st.achieved_tflops(), st.flops() / st.compute_seconds() / 1e12);
    EXPECT_EQ(st.device_name(), "cpu");
    EXPECT_FALSE(st.has_mfu());
  }
}

// 8 layers of two kinds, two per stage on P = 4 (UniformPlan): flatten, linear 32, relu,
// linear 32, relu, linear 32, relu, linear 10.
v1::JobSpec EightLayerSpec(int64_t global_batch, int64_t micro_batch) {
  v1::JobSpec spec = SmallSpec(global_batch, micro_batch, "sgd");
  auto* model = spec.mutable_model();
  model->clear_layers();
  auto add = [&](const std::string& type, int64_t out) {
    auto* l = model->add_layers();
    l->set_type(type);
    if (type == "linear") l->mutable_linear()->set_out(out);
  };
  add("flatten", 0);
  add("linear", 32);
  for (int64_t out : {32, 32, 10}) {
    add("relu", 0);
    add("linear", out);
  }
  return spec;
}

TEST(StageRuntimeStatsTest, PeakInFlightOnFourStagesIsIndependentOfM) {
  // Issue 4, "Memory": 8 layers on P = 4. dapple's early backward holds min(P - i, M) = 4, 3, 2,
  // 1 micro-batches on stage i whatever M is; gpipe holds all M.
  const int P = 4;
  const int64_t rows = 4;
  // Floats per sample a slot holds (stage input + every layer output, the last stage's
  // dL/dlogits), by hand:
  const int64_t floats[P] = {
      784 + 784 + 32,     // input [1, 28, 28], flatten 784, linear 32
      32 + 32 + 32,       // input 32, relu 32, linear 32
      32 + 32 + 32,       // input 32, relu 32, linear 32
      32 + 32 + 10 + 10,  // input 32, relu 32, linear 10, dL/dlogits 10
  };
  // Per micro-batch id: the output sent and its gradient received (not the last stage), the
  // input gradient sent back (not the first).
  const int64_t per_id[P] = {32 + 32, 32 + 32 + 32, 32 + 32 + 32, 32};
  // The backward's buffer for the one gradient between the stage's two layers (none on stage 0:
  // its backward stops at the linear, its first layer with parameters).
  const int64_t workspace[P] = {0, 32, 32, 32};
  for (auto kind : {schedule::ScheduleKind::kDapple, schedule::ScheduleKind::kGPipe}) {
    for (int M : {4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << schedule::ScheduleKindName(kind) << " M=" << M);
      v1::JobSpec spec = EightLayerSpec(rows * M, rows);
      ASSERT_EQ(spec.model().layers_size(), 8);
      auto results = RunTimedPipeline(spec, kind, P, M, 1, false);
      for (int s = 0; s < P; ++s) {
        ASSERT_EQ(results[s].size(), 1) << "stage " << s;
        const StepResult& r = results[s][0];
        const int expected = kind == schedule::ScheduleKind::kDapple ? P - s : M;
        EXPECT_EQ(r.peak_in_flight, expected) << "stage " << s;
        EXPECT_EQ(r.stats.peak_in_flight(), expected) << "stage " << s;
        EXPECT_EQ(r.stats.peak_activation_bytes(),
                  rows * (expected * floats[s] + M * per_id[s] + workspace[s]) * 4)
            << "stage " << s;
        EXPECT_EQ(r.stats.peak_memory_bytes(),
                  r.stats.weight_bytes() + r.stats.peak_activation_bytes())
            << "stage " << s;
      }
    }
  }
}

// The gradient of step 0 on the whole global batch, computed as the reference trainer does
// (one forward and backward of the whole model, no micro-batches).
double ReferenceGradientSquaredNorm(const v1::JobSpec& spec) {
  auto layers =
      kernels::BuildLayers(spec.model(), 0, spec.model().layers_size() - 1, spec.training().seed())
          .value();
  std::vector<kernels::Param*> params = kernels::CollectParams(layers);
  const int64_t b = spec.training().global_batch();
  std::vector<int64_t> order = EpochOrder(TrainSet().size(), spec.training().seed(), 0);
  std::vector<kernels::Tensor> acts(layers.size() + 1);
  acts[0].Resize({b, 1, 28, 28});
  std::vector<int32_t> labels(b);
  TrainSet().Gather(order.data(), b, acts[0].data.data(), labels.data());
  std::vector<kernels::LayerCache> caches(layers.size());
  for (size_t k = 0; k < layers.size(); ++k) {
    layers[k]->Forward(acts[k], &acts[k + 1], &caches[k], kernels::ForwardContext{});
  }
  kernels::Tensor dy, dx;
  kernels::SoftmaxCrossEntropy(acts.back(), labels.data(), 1.0f / static_cast<float>(b), &dy,
                               nullptr);
  for (int k = static_cast<int>(layers.size()) - 1; k >= 0; --k) {
    layers[k]->Backward(acts[k], acts[k + 1], dy, k > 0 ? &dx : nullptr, &caches[k]);
    std::swap(dy, dx);
  }
  double sum = 0;
  for (const kernels::Param* p : params) {
    for (float g : p->grad.data) sum += static_cast<double>(g) * g;
  }
  return sum;
}

TEST(StageRuntimeStatsTest, GradientNormMatchesTheReference) {
  const int P = 2, M = 4;
  v1::JobSpec spec = SmallSpec(64, 16, "sgd");
  auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, P, M, 1, false);
  ASSERT_EQ(results[0].size(), 1);
  ASSERT_EQ(results[1].size(), 1);
  const double expected = ReferenceGradientSquaredNorm(spec);
  ASSERT_GT(expected, 0);
  double got = 0;
  for (int s = 0; s < P; ++s) {
    EXPECT_GT(results[s][0].stats.gradient_sq_norm(), 0) << "stage " << s;
    got += results[s][0].stats.gradient_sq_norm();
  }
  // Only the accumulation over micro-batches differs from the reference (fp32).
  EXPECT_NEAR(got, expected, 1e-5 * expected);
}

TEST(StageRuntimeStatsTest, TraceHasOneEventPerActionInProgramOrder) {
  const int P = 2, M = 4;
  v1::JobSpec spec = SmallSpec(64, 16, "sgd");
  auto programs = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, P, M).value();
  auto results = RunTimedPipeline(spec, schedule::ScheduleKind::kDapple, P, M, 2, true);
  for (int s = 0; s < P; ++s) {
    ASSERT_EQ(results[s].size(), 2);
    int64_t previous_end = 0;
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(testing::Message() << "stage " << s << " step " << step);
      const StepResult& r = results[s][step];
      ASSERT_TRUE(r.traced);
      const v1::StepTrace& t = r.trace;
      EXPECT_EQ(t.stage(), s);
      EXPECT_EQ(t.replica(), 0);
      EXPECT_EQ(t.step(), step + 1);
      EXPECT_EQ(t.stats().step(), step + 1);
      EXPECT_DOUBLE_EQ(t.stats().idle_seconds(), r.stats.idle_seconds());
      const auto& actions = programs[s].actions();
      ASSERT_EQ(t.events_size(), actions.size());
      // A plausible wall-clock time (after 2020-01-01), in microseconds.
      EXPECT_GT(t.start_us(), int64_t{1577836800} * 1000000);
      EXPECT_GE(t.start_us(), previous_end);
      EXPECT_EQ(t.start_us(), t.events(0).start_us());
      EXPECT_EQ(t.end_us(), t.events(t.events_size() - 1).end_us());
      int64_t last = t.start_us();
      int64_t recv_us = 0, busy_us = 0;
      for (int i = 0; i < t.events_size(); ++i) {
        const v1::TraceEvent& e = t.events(i);
        EXPECT_EQ(e.kind(), actions[i].kind()) << "event " << i;
        const bool per_mb = e.kind() != v1::OPTIMIZER_STEP && e.kind() != v1::ALLREDUCE;
        EXPECT_EQ(e.micro_batch(), per_mb ? actions[i].micro_batch() : -1) << "event " << i;
        EXPECT_GE(e.start_us(), last) << "event " << i;
        EXPECT_GE(e.end_us(), e.start_us()) << "event " << i;
        last = e.end_us();
        if (schedule::KindIsWait(e.kind())) {
          recv_us += e.end_us() - e.start_us();
        } else {
          busy_us += e.end_us() - e.start_us();
        }
      }
      previous_end = t.end_us();
      // The trace's idle (the span minus the busy events) is the stats' idle up to the
      // microsecond rounding of each event's two ends.
      const double trace_idle = static_cast<double>(t.end_us() - t.start_us() - busy_us) * 1e-6;
      EXPECT_NEAR(trace_idle, r.stats.idle_seconds(), 2e-6 * (t.events_size() + 1));
      EXPECT_GE(trace_idle * 1e6 + 1, static_cast<double>(recv_us));
    }
  }
}

TEST(StageRuntimeStatsTest, TracedStepsAreTheFirstAndEveryNth) {
  EXPECT_TRUE(IsTracedStep(0, 50));
  EXPECT_FALSE(IsTracedStep(1, 50));
  EXPECT_FALSE(IsTracedStep(48, 50));
  EXPECT_TRUE(IsTracedStep(49, 50));  // step 50, 1-based
  EXPECT_TRUE(IsTracedStep(99, 50));
  EXPECT_TRUE(IsTracedStep(0, 1));
  EXPECT_TRUE(IsTracedStep(5, 1));
  EXPECT_TRUE(IsTracedStep(2, 3));
  EXPECT_FALSE(IsTracedStep(0, 0));
  EXPECT_FALSE(IsTracedStep(49, 0));
  // A run resumed at step 120 (0-based) traces its first step, then every 50th as before.
  EXPECT_TRUE(IsTracedStep(120, 50, 120));
  EXPECT_FALSE(IsTracedStep(121, 50, 120));
  EXPECT_TRUE(IsTracedStep(149, 50, 120));
  EXPECT_FALSE(IsTracedStep(120, 0, 120));
  EXPECT_FALSE(IsTracedStep(0, -1));
}

// A dataset that has only a shape: Fashion-MNIST's 60000 samples, each of `shape` with
// `targets` targets (Gather writes zeros).
class ShapeOnlyDataset final : public Dataset {
 public:
  ShapeOnlyDataset(std::vector<int64_t> shape, int64_t targets)
      : shape_(std::move(shape)), targets_(targets) {}
  int64_t size() const override { return 60000; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return targets_; }
  int64_t num_classes() const override { return 10; }
  bool token_inputs() const override { return false; }
  void Gather(const int64_t* indices, int64_t count, float* inputs,
              int32_t* targets) const override {
    if (inputs != nullptr) std::fill(inputs, inputs + count * sample_elements(), 0.0f);
    if (targets != nullptr) std::fill(targets, targets + count * targets_, 0);
  }

 private:
  std::vector<int64_t> shape_;
  int64_t targets_;
};

// Stage 0 reads the dataset's inputs and the last stage its targets: a dataset of another
// sample size (a text sample of 16 tokens for an image model) is refused where it would be read.
TEST(StageRuntimeDataTest, RefusesADatasetThatDoesNotFitTheModel) {
  const v1::JobSpec spec = SmallSpec(64, 64, "sgd");
  auto programs = schedule::BuildPrograms(schedule::ScheduleKind::kDapple, 2, 1).value();
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
  Mailbox box;
  LocalTransport t0(&box, 0), t1(&box, 1);
  const ShapeOnlyDataset text({16}, 16);
  absl::StatusOr<std::unique_ptr<StageRuntime>> first =
      StageRuntime::Create(parity::Assignment(spec, plan, 0, programs[0]), &text, &text, &t0);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first.status().message(),
            "the dataset's samples have 16 input elements but model.input_shape has 784");
  absl::StatusOr<std::unique_ptr<StageRuntime>> last =
      StageRuntime::Create(parity::Assignment(spec, plan, 1, programs[1]), &text, &text, &t1);
  EXPECT_EQ(last.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(last.status().message(),
            "the dataset has 16 targets per sample but the model's output has 1");
  // The same sizes as Fashion-MNIST's fit.
  const ShapeOnlyDataset images({784}, 1);
  EXPECT_TRUE(
      StageRuntime::Create(parity::Assignment(spec, plan, 0, programs[0]), &images, &images, &t0)
          .ok());
  EXPECT_TRUE(
      StageRuntime::Create(parity::Assignment(spec, plan, 1, programs[1]), &images, &images, &t1)
          .ok());
  // The spec's sample count (what the steps per epoch come from) must not exceed the dataset's.
  v1::JobSpec more = spec;
  more.mutable_data()->set_train_samples(60001);
  absl::StatusOr<std::unique_ptr<StageRuntime>> past =
      StageRuntime::Create(parity::Assignment(more, plan, 0, programs[0]), &images, &images, &t0);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(past.status().message(),
            "the job counts 60001 training samples (data.train_samples) but the dataset has 60000");
}

// Interleaved 1F1B's programs name virtual stages; a rank whose plan gives it one layer range
// refuses them instead of running them on the wrong layers.
TEST(StageRuntimeDataTest, RefusesVirtualStagesWithoutTheirLayerRanges) {
  const v1::JobSpec spec = SmallSpec(64, 64, "sgd");
  schedule::LowerOptions chunks;
  chunks.chunks = 2;
  auto programs =
      schedule::BuildPrograms(schedule::ScheduleKind::kInterleaved, 2, 1, chunks).value();
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), 2);
  Mailbox box;
  LocalTransport t0(&box, 0);
  const ShapeOnlyDataset images({784}, 1);
  absl::StatusOr<std::unique_ptr<StageRuntime>> rt =
      StageRuntime::Create(parity::Assignment(spec, plan, 0, programs[0]), &images, &images, &t0);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.status().message(),
            "stage 0's program has an action of stage 2 (RECV_ACT): a rank of 2 stages with 1 "
            "layer ranges runs virtual stages 0 + c * 2 only");
}

}  // namespace
}  // namespace dapple::worker
