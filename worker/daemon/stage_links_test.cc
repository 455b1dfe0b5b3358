#include "worker/daemon/stage_links.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"

namespace dapple::worker {
namespace {

v1::ParallelPlanSummary Plan(std::initializer_list<std::pair<std::string, std::string>> stages) {
  v1::ParallelPlanSummary plan;
  for (const auto& [device, host] : stages) {
    v1::PlanStageSummary* s = plan.add_stages();
    if (!device.empty()) s->add_devices(device);
    if (!host.empty()) s->add_hostnames(host);
  }
  return plan;
}

TEST(ChooseLinkTest, FollowsTheTable) {
  auto plan = Plan(
      {{"cpu", "a"}, {"cuda:0", "a"}, {"cuda:0", "a"}, {"cuda:1", "a"}, {"cuda:1", "b"}, {"", ""}});
  EXPECT_EQ(ChooseLink(plan, 0, 1), LinkKind::kUcx);      // CPU side: plain UCX
  EXPECT_EQ(ChooseLink(plan, 1, 0), LinkKind::kStaging);  // GPU side of a CPU neighbour
  EXPECT_EQ(ChooseLink(plan, 1, 2), LinkKind::kCudaIpc);  // same GPU, same host
  EXPECT_EQ(ChooseLink(plan, 2, 3), LinkKind::kNccl);     // other GPU, same host
  EXPECT_EQ(ChooseLink(plan, 3, 4), LinkKind::kNccl);     // same index, other host
  EXPECT_EQ(ChooseLink(plan, 4, 5), LinkKind::kStaging);  // a plan without devices means cpu
  EXPECT_EQ(StageDevice(plan, 5), "cpu");
  EXPECT_EQ(StageDevice(plan, 9), "cpu");
}

TEST(ChooseLinkTest, SameGpuWithoutKnownHostsIsNotIpc) {
  // Unknown hosts (an old coordinator): never assume one machine.
  auto plan = Plan({{"cuda:0", ""}, {"cuda:0", ""}});
  EXPECT_EQ(ChooseLink(plan, 0, 1), LinkKind::kNccl);
}

v1::StageAssignment Assignment(const std::string& device) {
  v1::StageAssignment a;
  auto* model = a.mutable_spec()->mutable_model();
  for (int64_t d : {1, 28, 28}) model->add_input_shape(d);
  model->add_layers()->set_type("flatten");
  auto* l = model->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(10);
  model->set_loss("softmax_cross_entropy");
  a.mutable_spec()->mutable_training()->mutable_optimizer()->set_type("sgd");
  a.mutable_spec()->mutable_training()->mutable_optimizer()->set_lr(0.1);
  auto* s = a.mutable_plan()->add_stages();
  s->set_first_layer(0);
  s->set_last_layer(1);
  s->add_devices(device);
  a.set_stage(0);
  a.set_num_stages(1);
  a.set_device(device);
  return a;
}

TEST(StageLinksTest, CpuStageGetsTheCpuBackend) {
  auto links = StageLinks::Open(Assignment("cpu"));
  ASSERT_TRUE(links.ok()) << links.status();
  auto backend = (*links)->TakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->device(), "cpu");
}

TEST(StageLinksTest, UnusableGpuFailsTheJobNamingTheDevice) {
  if (ProbeCuda().count > 0) GTEST_SKIP() << "this machine has a GPU";
  auto links = StageLinks::Open(Assignment("cuda:0"));
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()), ::testing::StartsWith("cuda:0: "));
}

TEST(StageLinksTest, BadDeviceIsInvalid) {
  auto links = StageLinks::Open(Assignment("tpu:0"));
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(links.status().message()), ::testing::HasSubstr("tpu:0"));
}

}  // namespace
}  // namespace dapple::worker
