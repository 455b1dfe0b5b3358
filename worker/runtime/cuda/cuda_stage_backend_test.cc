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
#include "worker/runtime/stage_runtime.h"
#include "worker/runtime/testing/parity_testing.h"

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
  parity::SpecOptions o;
  o.global_batch = kGlobalBatch;
  o.micro_batch = kGlobalBatch / c.micro_batches;
  o.optimizer = c.optimizer;
  o.weight_decay = c.optimizer == "sgd" ? 1e-4 : 0.01;
  o.hidden1 = 128;
  o.hidden2 = 64;
  o.seed = 11;
  const v1::JobSpec spec = parity::ParitySpec(o);
  auto programs =
      schedule::BuildPrograms(schedule::ScheduleKind::kDapple, c.stages, c.micro_batches).value();
  const v1::ParallelPlanSummary plan = parity::UniformPlan(spec.model().layers_size(), c.stages);
  DeviceMailbox box;
  std::vector<std::unique_ptr<CudaDevice>> devices(c.stages);
  std::vector<std::unique_ptr<DeviceTestTransport>> transports(c.stages);
  std::vector<std::unique_ptr<StageRuntime>> runtimes(c.stages);
  for (int s = 0; s < c.stages; ++s) {
    auto dev = CudaDevice::Open(0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    devices[s] = std::move(*dev);
    transports[s] = std::make_unique<DeviceTestTransport>(&box, s, devices[s].get());
    auto backend = MakeCudaStageBackend(spec, plan.stages(s).first_layer(),
                                        plan.stages(s).last_layer(), devices[s].get());
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto rt =
        StageRuntime::Create(parity::Assignment(spec, plan, s, programs[s]), &parity::TrainSet(),
                             &parity::TestSet(), transports[s].get(), std::move(*backend));
    ASSERT_TRUE(rt.ok()) << rt.status();
    runtimes[s] = std::move(*rt);
  }
  parity::PipelineRun run = parity::RunPipeline(runtimes, kSteps);
  parity::ExpectMatchesReference(spec, kSteps, runtimes, run);
}

INSTANTIATE_TEST_SUITE_P(All, CudaParityTest,
                         ::testing::Values(Case{1, 1, "sgd"}, Case{1, 4, "adamw"},
                                           Case{2, 4, "sgd"}, Case{2, 8, "adamw"}),
                         [](const auto& info) {
                           return absl::StrCat("P", info.param.stages, "M",
                                               info.param.micro_batches, info.param.optimizer);
                         });

// GradientSquaredNorm (cublasSnrm2 per gradient, squared and summed in double) against the CPU
// backend's double sum of squares after one forward and backward of the same batch: equal up to
// fp32 summation order. Zero before any backward (gradients start zeroed).
TEST(CudaStageBackendTest, GradientSquaredNormMatchesCpu) {
  if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  parity::SpecOptions o;
  o.global_batch = 64;
  o.micro_batch = 64;
  o.hidden1 = 128;
  o.hidden2 = 64;
  const v1::JobSpec spec = parity::ParitySpec(o);
  const int last = spec.model().layers_size() - 1;
  const int64_t rows = 64;
  std::vector<int64_t> idx(rows);
  for (int64_t i = 0; i < rows; ++i) idx[i] = i;
  std::vector<float> images(rows * 784);
  std::vector<int32_t> labels(rows);
  parity::TrainSet().Gather(idx.data(), rows, images.data(), labels.data());
  auto dev = CudaDevice::Open(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto gpu = MakeCudaStageBackend(spec, 0, last, dev->get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = MakeCpuStageBackend(spec, 0, last);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  double norm[2] = {0, 0};
  StageBackend* backends[2] = {cpu->get(), gpu->get()};
  for (int k = 0; k < 2; ++k) {
    StageBackend& b = *backends[k];
    auto before = b.GradientSquaredNorm();
    ASSERT_TRUE(before.ok()) << b.device() << ": " << before.status();
    EXPECT_EQ(*before, 0.0) << b.device();
    ASSERT_TRUE(b.LoadInput(0, images.data(), rows).ok());
    ASSERT_TRUE(b.Forward(0, rows, kernels::ForwardContext{}).ok());
    ASSERT_TRUE(b.Loss(0, labels.data(), rows, 1.0f / rows, true, nullptr).ok());
    ASSERT_TRUE(b.Backward(0, 0, rows, /*last_stage=*/true, /*need_dx=*/false).ok());
    auto n = b.GradientSquaredNorm();
    ASSERT_TRUE(n.ok()) << b.device() << ": " << n.status();
    norm[k] = *n;
  }
  ASSERT_GT(norm[0], 0);
  EXPECT_NEAR(norm[1], norm[0], 1e-4 * norm[0]) << "cuda " << norm[1] << " vs cpu " << norm[0];
}

// What text generation needs of a backend (StageRuntime::Generate): ReadOutput gives the CPU
// backend's logits of the same input up to fp32 summation order, and a message written to the
// device buffer reads back, as does one a transport copied into it.
TEST(CudaStageBackendTest, ReadOutputAndMessagesMatchCpu) {
  if (ProbeCuda().count == 0) GTEST_SKIP() << "no GPU: " << ProbeCuda().reason;
  const v1::JobSpec spec = parity::ParitySpec({});
  const int last = spec.model().layers_size() - 1;
  std::vector<float> images(2 * 784);
  for (size_t k = 0; k < images.size(); ++k) images[k] = static_cast<float>(k % 7) * 0.1f;
  auto dev = CudaDevice::Open(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto gpu = MakeCudaStageBackend(spec, 0, last, dev->get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = MakeCpuStageBackend(spec, 0, last);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<float> row[2] = {std::vector<float>(10), std::vector<float>(10)};
  StageBackend* backends[2] = {cpu->get(), gpu->get()};
  for (int k = 0; k < 2; ++k) {
    StageBackend& b = *backends[k];
    ASSERT_TRUE(b.LoadInput(0, images.data(), 2).ok());
    ASSERT_TRUE(b.Forward(0, 2, kernels::ForwardContext{}).ok());
    ASSERT_TRUE(b.ReadOutput(0, 10, 10, row[k].data()).ok()) << b.device();
    EXPECT_EQ(b.ReadOutput(0, 11, 10, row[k].data()).code(), absl::StatusCode::kInternal);
  }
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(row[1][c], row[0][c], 1e-4) << c;

  StageBackend& b = *gpu->get();
  auto buffer = b.MessageBuffer(sizeof(int32_t));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const int32_t token = 200;
  ASSERT_TRUE(b.WriteMessage(&token, sizeof(token)).ok());
  int32_t on_device = 0;
  ASSERT_EQ(cudaMemcpy(&on_device, *buffer, sizeof(on_device), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(on_device, 200);
  const int32_t received = 17;
  ASSERT_EQ(cudaMemcpy(*buffer, &received, sizeof(received), cudaMemcpyHostToDevice), cudaSuccess);
  int32_t back = 0;
  ASSERT_TRUE(b.ReadMessage(&back, sizeof(back)).ok());
  EXPECT_EQ(back, 17);
}

}  // namespace
}  // namespace dapple::worker
