// dapplectl plan: what it sends (the parsed job, profile and cluster files) and prints, and its
// usage errors, against a fake coordinator.
#include <string>
#include <vector>

#include "dapplectl/commands_testing.h"
#include "dapplectl/exit_codes.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::CommandsTest;
using ::dapple::ctl::testing::RefusingPort;
using ::dapple::ctl::testing::Result;
using ::dapple::ctl::testing::RunCtl;
using ::dapple::ctl::testing::WriteSpec;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// ----------------------------------------------------------------------------------- plan

constexpr char kProfileText[] =
    "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, "
    "activation_size=1024, parameter_size=0\n"
    "node2 -- Linear -- forward_compute_time=1.5, backward_compute_time=3, "
    "activation_size=512, parameter_size=4096\n"
    "\tnode1 -- node2\n";

constexpr char kClusterText[] =
    "nodes: 2\n"
    "devices_per_node: 4\n"
    "device_memory: 16 GiB\n"
    "intra_node: {bandwidth: 130 GB/s, latency: 5 us}\n"
    "inter_node: {bandwidth: 25 Gbit/s, latency: 10 us}\n";

v1::PlanJobResponse PlanAnswer() {
  v1::PlanJobResponse r;
  v1::ParallelPlanSummary* plan = r.mutable_plan();
  plan->set_planner("dapple");
  plan->set_schedule("dapple");
  plan->set_micro_batches(4);
  plan->set_micro_batch_size(8);
  plan->set_predicted_step_ms(42.5);
  plan->set_predicted_samples_per_second(752.9);
  plan->set_num_devices(2);
  v1::PlanStageSummary* s = plan->add_stages();
  s->set_first_layer(0);
  s->set_last_layer(1);
  s->set_replicas(2);
  s->add_placement("node0/0");
  s->add_placement("node0/1");
  s->add_devices("node0/0");
  s->add_devices("node0/1");
  s->set_compute_ms(40);
  s->set_peak_memory_bytes(int64_t{1} << 30);
  v1::ClusterNode* node = r.mutable_cluster()->add_nodes();
  node->set_name("node0");
  node->set_devices(8);
  return r;
}

TEST_F(CommandsTest, PlanSendsTheParsedFilesAndPrintsATable) {
  fake_.SetPlanResponse(PlanAnswer());
  const std::string spec = WriteSpec("plan-job.yaml", "name: fmnist-mlp\n");
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  const std::string cluster = WriteSpec("cluster.yaml", kClusterText);
  Result r = RunCtl({"--coordinator", addr_, "plan", spec, "--profile", profile, "--cluster",
                     cluster, "--planner", "dapple"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out,
              StartsWith("STAGE   LAYERS   REPLICAS   DEVICES     COMPUTE MS   PEAK MEMORY"));
  EXPECT_THAT(r.out, HasSubstr("0       0-1      2          node0/0-1   40.00        1.0 GiB"));
  EXPECT_THAT(r.out, HasSubstr("STEP          42.50 ms (predicted)\n"));
  EXPECT_THAT(r.out, HasSubstr("SAMPLES/S     753\n"));
  const v1::PlanJobRequest sent = fake_.last_plan();
  EXPECT_EQ(sent.spec_yaml(), "name: fmnist-mlp\n");
  EXPECT_EQ(sent.source_name(), spec);
  EXPECT_EQ(sent.planner(), "dapple");
  EXPECT_EQ(sent.global_batch(), 0);
  ASSERT_TRUE(sent.has_profile());
  EXPECT_EQ(sent.profile().batch_size(), 4);
  EXPECT_EQ(sent.profile().layers_size(), 2);
  ASSERT_TRUE(sent.has_cluster());
  EXPECT_EQ(sent.cluster().nodes_size(), 2);
  EXPECT_EQ(sent.cluster().nodes(1).devices(), 4);
}

TEST_F(CommandsTest, PlanWithoutAJobOrAClusterSendsOnlyTheProfile) {
  fake_.SetPlanResponse(PlanAnswer());
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  Result r = RunCtl(
      {"--coordinator", addr_, "plan", "--profile", profile, "--global-batch", "64", "-o", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const v1::PlanJobRequest sent = fake_.last_plan();
  EXPECT_EQ(sent.spec_yaml(), "");
  EXPECT_FALSE(sent.has_cluster());
  EXPECT_EQ(sent.global_batch(), 64);
  EXPECT_EQ(sent.schedule(), "");  // the default: the job's, or dapple
  // -o json: the plan summary with the proto's field names.
  google::protobuf::Struct plan;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok()) << r.out;
  EXPECT_EQ(plan.fields().at("planner").string_value(), "dapple");
  EXPECT_EQ(plan.fields().at("micro_batches").number_value(), 4);
  EXPECT_EQ(plan.fields().at("predicted_step_ms").number_value(), 42.5);
  const google::protobuf::Struct& stage =
      plan.fields().at("stages").list_value().values(0).struct_value();
  EXPECT_EQ(stage.fields().at("first_layer").number_value(), 0);
  EXPECT_EQ(stage.fields().at("last_layer").number_value(), 1);
  EXPECT_EQ(stage.fields().at("replicas").number_value(), 2);
  EXPECT_EQ(stage.fields().at("devices").list_value().values(1).string_value(), "node0/1");
  // 64-bit integers are strings in protobuf's JSON mapping.
  EXPECT_EQ(stage.fields().at("peak_memory_bytes").string_value(), "1073741824");
  // -o yaml: the same fields as YAML.
  r = RunCtl(
      {"--coordinator", addr_, "plan", "--profile", profile, "--global-batch", "64", "-o", "yaml"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("planner: dapple\n"));
  EXPECT_THAT(r.out, HasSubstr("micro_batches: 4\n"));
}

// --schedule auto: sent as is; the coordinator chooses and the table shows the alternatives.
TEST_F(CommandsTest, PlanScheduleAutoIsSentAndItsAlternativesShown) {
  v1::PlanJobResponse answer = PlanAnswer();
  v1::PlanAlternative* a = answer.mutable_plan()->add_alternatives();
  a->set_schedule("zb-h1");
  a->set_recompute("none");
  a->set_fits(true);
  a->set_chosen(true);
  a->set_layout("1x2");
  a->set_micro_batches(4);
  a->set_predicted_step_ms(42.5);
  a->add_peak_memory_bytes(int64_t{1} << 30);
  answer.mutable_plan()->set_choice_reason(
      "zb-h1: 3.0% faster than dapple at the same peak memory");
  fake_.SetPlanResponse(answer);
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  Result r = RunCtl({"--coordinator", addr_, "plan", "--profile", profile, "--schedule", "auto"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last_plan().schedule(), "auto");
  EXPECT_THAT(r.out, HasSubstr("ALTERNATIVES (each planned and simulated on its own)\n"));
  EXPECT_THAT(r.out, HasSubstr("*   zb-h1      none        1   1x2      4   42.50"));
  EXPECT_THAT(r.out, HasSubstr("CHOSEN        zb-h1: 3.0% faster than dapple at the same peak "
                               "memory\n"));
}

TEST_F(CommandsTest, PlanUsageErrorsSendNothing) {
  const std::string spec = WriteSpec("plan-job.yaml", "name: fmnist-mlp\n");
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"plan"},
            "dapplectl: plan needs a job spec file, or --profile FILE to plan a profile's model "
            "(see dapplectl plan --help)\n"},
           {{"plan", spec, "--global-batch", "64"},
            "dapplectl: --global-batch is for plans without a job spec; the job's "
            "training.global_batch applies\n"},
           {{"plan", "--profile", profile, "--global-batch", "0"},
            "dapplectl: --global-batch must be a whole number from 1 to 1048576, got \"0\"\n"},
           {{"plan", "--profile", profile, "--profile-batch", "x"},
            "dapplectl: --profile-batch must be a whole number from 1 to 1048576, got \"x\"\n"},
           // An empty value is not the default: it is a mistake, named.
           {{"plan", "--profile", ""},
            "dapplectl: --profile must not be empty: give a profile file name, or leave "
            "--profile out for the default\n"},
           {{"plan", spec, "--cluster", ""},
            "dapplectl: --cluster must not be empty: give a cluster file name, or leave "
            "--cluster out for the default\n"},
           {{"plan", spec, "--planner", ""},
            "dapplectl: --planner must not be empty: give dapple, pipedream, pipedream-code, dp, "
            "uniform, balanced or manual, or leave --planner out for the default\n"},
           {{"plan", spec, "--schedule", ""},
            "dapplectl: --schedule must not be empty: give a schedule name or auto, or leave "
            "--schedule out for the default\n"},
           {{"plan", ""}, "dapplectl: a job spec file name must not be empty\n"},
           // --profile-batch says what batch a --profile file's times are for: nothing else.
           {{"plan", spec, "--profile-batch", "4"},
            "dapplectl: --profile-batch is the batch size of the --profile file's times; it "
            "needs --profile FILE\n"},
       }) {
    std::vector<std::string> args = {"--coordinator", addr_};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = RunCtl(args);
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_EQ(r.err, c.error);
  }
  EXPECT_EQ(fake_.plan_calls(), 0);
}

TEST_F(CommandsTest, PlanOfAnEmptyJobFileSaysTheSpecIsEmptyAndSendsNothing) {
  const std::string empty = WriteSpec("empty.yaml", "");
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--profile", profile}}) {
    std::vector<std::string> args = {"--coordinator", addr_, "plan", empty};
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = RunCtl(args);
    EXPECT_EQ(r.code, kExitRefused) << r.err;
    EXPECT_EQ(r.err, "dapplectl: " + empty +
                         ": the job spec is empty; expected a map with name, model, data, "
                         "training and parallel\n");
  }
  EXPECT_EQ(fake_.plan_calls(), 0);
  // A comment-only file is not empty text: it is sent, and the coordinator's parser judges it.
  fake_.SetPlanResponse(PlanAnswer());
  const std::string comments = WriteSpec("comments.yaml", "# later\n");
  Result r = RunCtl(
      {"--coordinator", addr_, "plan", comments, "--profile", profile, "--profile-batch", "8"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(fake_.last_plan().spec_yaml(), "# later\n");
  EXPECT_EQ(fake_.last_plan().source_name(), comments);
  EXPECT_EQ(fake_.last_plan().profile().batch_size(), 8);
}

TEST_F(CommandsTest, PlanWithABadProfileFileNamesItsLineAndSendsNothing) {
  const std::string profile = WriteSpec(
      "broken-pbs-2.txt",
      "node1 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=8, "
      "parameter_size=0\n"
      "node2 -- Linear -- forward_compute_time=1, backward_compute_time=2, activation_size=8\n");
  Result r = RunCtl({"--coordinator", addr_, "plan", "--profile", profile});
  EXPECT_EQ(r.code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: " + profile + ":2:"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const std::string cluster = WriteSpec("bad-cluster.yaml", "nodes: 2\n");
  r = RunCtl({"--coordinator", addr_, "plan", "--profile", WriteSpec("ok-pbs-4.txt", kProfileText),
              "--cluster", cluster});
  EXPECT_EQ(r.code, kExitRefused) << r.err;
  EXPECT_THAT(r.err, StartsWith("dapplectl: " + cluster + ":"));
  EXPECT_EQ(fake_.plan_calls(), 0);
}

TEST_F(CommandsTest, PlanRefusedByTheCoordinatorExitsWithOne) {
  fake_.SetPlanResponse({}, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                         "no registered workers to plan on: start workers, or "
                                         "give a cluster file (dapplectl plan --cluster "
                                         "CLUSTER.yaml)"));
  const std::string spec = WriteSpec("plan-job.yaml", "name: fmnist-mlp\n");
  Result r = RunCtl({"--coordinator", addr_, "plan", spec});
  EXPECT_EQ(r.code, kExitRefused) << r.err;
  EXPECT_EQ(r.err,
            "dapplectl: no registered workers to plan on: start workers, or give a cluster file "
            "(dapplectl plan --cluster CLUSTER.yaml)\n");
}

TEST_F(CommandsTest, PlanWithoutACoordinatorExitsWithThree) {
  RefusingPort refusing;
  const std::string profile = WriteSpec("tiny-pbs-4.txt", kProfileText);
  Result r =
      RunCtl({"--coordinator", refusing.address(), "--timeout", "2", "plan", "--profile", profile});
  EXPECT_EQ(r.code, kExitUnreachable) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(connection refused)"));
}

}  // namespace
}  // namespace dapple::ctl
