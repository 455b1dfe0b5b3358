#include "worker/daemon/profile_runner.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "worker/daemon/host_capacity.h"

namespace dapple::worker {
namespace {

v1::ProfileRequest TinyMlpRequest() {
  v1::ProfileRequest request;
  request.set_request_id("profile-1");
  request.set_device("cpu");
  request.set_batch_size(4);
  v1::ModelSpec* m = request.mutable_spec()->mutable_model();
  m->add_input_shape(8);
  v1::LayerSpec* l = m->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(4);
  m->set_loss("softmax_cross_entropy");
  request.mutable_spec()->mutable_training()->mutable_optimizer()->set_type("sgd");
  request.mutable_spec()->mutable_training()->mutable_optimizer()->set_lr(0.1);
  return request;
}

// A cpu profile times the host's cores: it waits while another worker of the host measures
// the host (HostMeasurementLock), and the measurements wait for it.
TEST(ProfileRunnerTest, ACpuProfileWaitsForTheHostsMeasurements) {
  std::atomic<bool> done{false};
  v1::ReportProfileRequest report;
  std::thread profiler;
  {
    const HostMeasurementLock measuring;  // another worker's capacity and link measurement
    profiler = std::thread([&] {
      report = RunProfileRequest("w-1", TinyMlpRequest());
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(done.load());
  }
  profiler.join();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(report.error().empty()) << report.error();
  EXPECT_EQ(report.request_id(), "profile-1");
  EXPECT_EQ(report.profile().layers_size(), 1);
}

TEST(ProfileRunnerTest, ABadDeviceIsAnErrorLine) {
  v1::ProfileRequest request = TinyMlpRequest();
  request.set_device("tpu:0");
  const v1::ReportProfileRequest report = RunProfileRequest("w-1", request);
  EXPECT_FALSE(report.error().empty());
  EXPECT_FALSE(report.has_profile());
}

}  // namespace
}  // namespace dapple::worker
