// Synchronous parity of the GPU stage against the CPU single-device reference, in one process:
// the pipeline runtime on the CUDA backend (P = 1, and P = 2 with both stages on cuda:0 on two
// threads, exchanging through an in-memory test transport) must give the reference's per-step
// loss and final weights within 1e-5 relative (fp32 GEMMs without TF32; only summation order
// differs). Skipped without a GPU.
#include "worker/runtime/cuda/cuda_stage_backend.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/schedule/lowering.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"
#include "worker/runtime/reference_trainer.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker {
namespace {

// Device-pointer transport for tests: Send copies the device buffer to a host mailbox after the
// sender's compute stream is idle; Recv copies it into the receiver's device buffer and waits.
class DeviceMailbox {
 public:
  void Put(int src, int dst, uint64_t tag, std::vector<char> bytes) {
    absl::MutexLock l(&mu_);
    box_[{src, dst, tag}] = std::move(bytes);
  }
  absl::StatusOr<std::vector<char>> Take(int src, int dst, uint64_t tag) {
    absl::MutexLock l(&mu_);
    auto key = std::make_tuple(src, dst, tag);
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return box_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), absl::Seconds(60))) {
      return absl::DeadlineExceededError("no message");
    }
    std::vector<char> v = std::move(box_[key]);
    box_.erase(key);
    return v;
  }

 private:
  absl::Mutex mu_;
  std::map<std::tuple<int, int, uint64_t>, std::vector<char>> box_ ABSL_GUARDED_BY(mu_);
};

class DeviceTestTransport : public Transport {
 public:
  DeviceTestTransport(DeviceMailbox* box, int rank, CudaDevice* dev)
      : box_(box), rank_(rank), dev_(dev) {}
  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (cudaStreamSynchronize(dev_->compute_stream()) != cudaSuccess) {
      return absl::InternalError("sync");
    }
    std::vector<char> host(bytes);
    if (cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return absl::InternalError("d2h");
    }
    box_->Put(rank_, peer, tag, std::move(host));
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    auto v = box_->Take(peer, rank_, tag);
    if (!v.ok()) return v.status();
    if (v->size() != bytes) return absl::InternalError("size mismatch");
    if (cudaMemcpy(data, v->data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return absl::InternalError("h2d");
    }
    return absl::OkStatus();
  }
  absl::Status WaitSends() override { return absl::OkStatus(); }

 private:
  DeviceMailbox* box_;
  int rank_;
  CudaDevice* dev_;
};

// Debian's dataset, or DAPPLE_DATA_DIR (the GPU bundle carries its own copy: tests/gpu/run.sh).
std::string DataDir() {
  const char* dir = std::getenv("DAPPLE_DATA_DIR");
  return dir != nullptr && *dir != 0 ? dir : "/usr/share/datasets/fashion-mnist";
}
const Dataset& TrainSet() {
  static const Dataset* d = new Dataset(LoadFashionMnist(DataDir(), Split::kTrain).value());
  return *d;
}
const Dataset& TestSet() {
  static const Dataset* d = new Dataset(LoadFashionMnist(DataDir(), Split::kTest).value());
  return *d;
}

v1::JobSpec SmallSpec(int global_batch, int micro_batch, const std::string& optimizer) {
  v1::JobSpec spec;
  spec.set_name("gpu-parity");
  auto* model = spec.mutable_model();
  for (int64_t d : {1, 28, 28}) model->add_input_shape(d);
  auto add = [&](const std::string& type, int64_t out) {
    auto* l = model->add_layers();
    l->set_type(type);
    l->set_out(out);
  };
  add("flatten", 0);
  add("linear", 128);
  add("relu", 0);
  add("linear", 64);
  add("gelu", 0);
  add("linear", 10);
  model->set_loss("softmax_cross_entropy");
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_path(DataDir());
  auto* t = spec.mutable_training();
  t->set_global_batch(global_batch);
  t->set_micro_batch(micro_batch);
  t->set_epochs(1);
  t->set_seed(11);
  t->mutable_optimizer()->set_type(optimizer);
  t->mutable_optimizer()->set_lr(optimizer == "sgd" ? 0.1 : 0.01);
  t->mutable_optimizer()->set_momentum(optimizer == "sgd" ? 0.9 : 0.0);
  t->mutable_optimizer()->set_weight_decay(optimizer == "sgd" ? 1e-4 : 0.01);
  return spec;
}

double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Case {
  int stages;
  int micro_batches;
  std::string optimizer;
};

class CudaParityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  }
};

TEST_P(CudaParityTest, MatchesCpuReference) {
  const Case c = GetParam();
  const int kGlobalBatch = 128, kSteps = 5;
  v1::JobSpec spec = SmallSpec(kGlobalBatch, kGlobalBatch / c.micro_batches, c.optimizer);
  auto ref = ReferenceTrainer::Create(spec, &TrainSet()).value();
  std::vector<double> ref_losses;
  for (int s = 0; s < kSteps; ++s) ref_losses.push_back(ref->Step(s));

  auto programs =
      schedule::BuildPrograms(schedule::ScheduleKind::kDapple, c.stages, c.micro_batches).value();
  v1::ParallelPlanSummary plan;
  const int layers = spec.model().layers_size();
  for (int s = 0; s < c.stages; ++s) {
    auto* st = plan.add_stages();
    st->set_first_layer(s * layers / c.stages);
    st->set_last_layer((s + 1) * layers / c.stages - 1);
    st->set_replicas(1);
  }
  DeviceMailbox box;
  std::vector<std::unique_ptr<CudaDevice>> devices(c.stages);
  std::vector<std::unique_ptr<DeviceTestTransport>> transports(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    auto dev = CudaDevice::Open(0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    devices[s] = std::move(*dev);
    v1::StageAssignment a;
    a.set_job_id("job-gpu");
    *a.mutable_spec() = spec;
    *a.mutable_plan() = plan;
    a.set_stage(s);
    a.set_num_stages(c.stages);
    *a.mutable_program() = programs[s];
    transports[s] = std::make_unique<DeviceTestTransport>(&box, s, devices[s].get());
    auto backend = MakeCudaStageBackend(spec, plan.stages(s).first_layer(),
                                        plan.stages(s).last_layer(), devices[s].get());
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto rt =
        StageRuntime::Create(a, &TrainSet(), &TestSet(), transports[s].get(), std::move(*backend));
    ASSERT_TRUE(rt.ok()) << rt.status();
    runtimes[s] = std::move(*rt);
  }
  std::vector<std::vector<double>> losses(c.stages);
  std::vector<absl::Status> status(c.stages);
  std::vector<double> eval_acc(c.stages, -1);
  std::vector<std::thread> threads;
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

INSTANTIATE_TEST_SUITE_P(All, CudaParityTest,
                         ::testing::Values(Case{1, 1, "sgd"}, Case{1, 4, "adamw"},
                                           Case{2, 4, "sgd"}, Case{2, 8, "adamw"}),
                         [](const auto& info) {
                           return absl::StrCat("P", info.param.stages, "M",
                                               info.param.micro_batches, info.param.optimizer);
                         });

}  // namespace
}  // namespace dapple::worker
