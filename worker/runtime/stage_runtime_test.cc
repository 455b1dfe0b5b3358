// Parity of the pipeline runtime against the single-device reference, in one process: every
// stage runs on its own thread and stages talk through an in-memory transport (a fake used only
// here; tests/integration runs the same check across real processes over UCX).
#include "worker/runtime/stage_runtime.h"

#include <cmath>
#include <map>
#include <thread>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "kernels/cpu/model.h"
#include "worker/runtime/reference_trainer.h"

namespace dapple::worker {
namespace {

// Messages are copied at Send, so sends complete at once; Recv waits (with a deadline).
class Mailbox {
 public:
  void Put(int src, int dst, uint64_t tag, const void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto& q = box_[{src, dst, tag}];
    q.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  absl::Status Take(int src, int dst, uint64_t tag, void* data, size_t bytes) {
    absl::MutexLock l(&mu_);
    auto key = std::make_tuple(src, dst, tag);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return box_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), absl::Seconds(30))) {
      return absl::DeadlineExceededError("no message");
    }
    auto& v = box_[key];
    if (v.size() != bytes) return absl::InternalError("size mismatch");
    std::copy(v.begin(), v.end(), static_cast<char*>(data));
    box_.erase(key);
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<std::tuple<int, int, uint64_t>, std::vector<char>> box_ ABSL_GUARDED_BY(mu_);
};

class LocalTransport : public Transport {
 public:
  LocalTransport(Mailbox* box, int rank) : box_(box), rank_(rank) {}
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    box_->Put(rank_, peer, tag, data, bytes);
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return box_->Take(peer, rank_, tag, data, bytes);
  }
  absl::Status WaitSends() override { return absl::OkStatus(); }

 private:
  Mailbox* box_;
  int rank_;
};

const Dataset& TrainSet() {
  static const Dataset* d =
      new Dataset(LoadFashionMnist("/usr/share/datasets/fashion-mnist", Split::kTrain).value());
  return *d;
}
const Dataset& TestSet() {
  static const Dataset* d =
      new Dataset(LoadFashionMnist("/usr/share/datasets/fashion-mnist", Split::kTest).value());
  return *d;
}

v1::JobSpec SmallSpec(int global_batch, int micro_batch, const std::string& optimizer) {
  v1::JobSpec spec;
  spec.set_name("parity");
  auto* model = spec.mutable_model();
  for (int64_t d : {1, 28, 28}) model->add_input_shape(d);
  auto add = [&](const std::string& type, int64_t out) {
    auto* l = model->add_layers();
    l->set_type(type);
    l->set_out(out);
  };
  add("flatten", 0);
  add("linear", 32);
  add("relu", 0);
  add("linear", 16);
  add("gelu", 0);
  add("linear", 10);
  model->set_loss("softmax_cross_entropy");
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_path("/usr/share/datasets/fashion-mnist");
  auto* t = spec.mutable_training();
  t->set_global_batch(global_batch);
  t->set_micro_batch(micro_batch);
  t->set_epochs(1);
  t->set_seed(7);
  t->mutable_optimizer()->set_type(optimizer);
  t->mutable_optimizer()->set_lr(optimizer == "sgd" ? 0.1 : 0.01);
  t->mutable_optimizer()->set_momentum(optimizer == "sgd" ? 0.9 : 0.0);
  return spec;
}

// Relative difference of two tensors: ||a - b|| / ||b|| (L2).
double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
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

  auto ref = ReferenceTrainer::Create(spec, &TrainSet()).value();
  std::vector<double> ref_losses;
  for (int s = 0; s < kSteps; ++s) ref_losses.push_back(ref->Step(s));

  auto programs = schedule::BuildPrograms(c.kind, c.stages, c.micro_batches).value();
  v1::ParallelPlanSummary plan;
  const int layers = spec.model().layers_size();
  for (int s = 0; s < c.stages; ++s) {  // uniform split
    auto* st = plan.add_stages();
    st->set_first_layer(s * layers / c.stages);
    st->set_last_layer((s + 1) * layers / c.stages - 1);
    st->set_replicas(1);
  }
  Mailbox box;
  std::vector<std::vector<double>> losses(c.stages);
  std::vector<std::vector<kernels::Param*>> params(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  std::vector<std::unique_ptr<LocalTransport>> transports(c.stages);
  std::vector<absl::Status> status(c.stages);
  std::vector<double> eval_acc(c.stages, -1);
  std::vector<std::thread> threads;
  for (int s = 0; s < c.stages; ++s) {
    v1::StageAssignment a;
    a.set_job_id("job-test");
    *a.mutable_spec() = spec;
    *a.mutable_plan() = plan;
    a.set_stage(s);
    a.set_num_stages(c.stages);
    *a.mutable_program() = programs[s];
    transports[s] = std::make_unique<LocalTransport>(&box, s);
    runtimes[s] = StageRuntime::Create(a, &TrainSet(), &TestSet(), transports[s].get()).value();
  }
  for (int s = 0; s < c.stages; ++s) {
    threads.emplace_back([&, s] {
      for (int step = 0; step < kSteps; ++step) {
        auto r = runtimes[s]->RunStep(step);
        if (!r.ok()) {
          status[s] = r.status();
          return;
        }
        if (r->has_loss) losses[s].push_back(r->loss);
      }
      auto e = runtimes[s]->Evaluate(1);
      if (!e.ok()) {
        status[s] = e.status();
        return;
      }
      if (e->has_metrics) eval_acc[s] = e->accuracy;
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < c.stages; ++s) ASSERT_TRUE(status[s].ok()) << status[s];

  const auto& got = losses[c.stages - 1];
  ASSERT_EQ(got.size(), ref_losses.size());
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got[s], ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s + 1;
  }
  std::map<std::string, std::vector<float>> ref_params;
  for (auto* p : ref->Params()) ref_params[p->name] = p->value.data;
  size_t seen = 0;
  for (int s = 0; s < c.stages; ++s) {
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
  EXPECT_NEAR(eval_acc[c.stages - 1], ref_acc, 1e-3);
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

}  // namespace
}  // namespace dapple::worker
