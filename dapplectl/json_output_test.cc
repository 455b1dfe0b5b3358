#include "dapplectl/json_output.h"

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace dapple::ctl {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;

v1::Job FinishedJob() {
  v1::Job job;
  job.set_id("job-1");
  job.set_name("fmnist-mlp");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_spec_yaml("name: fmnist-mlp\ntraining:\n  epochs: 3\n");
  job.set_created_unix_ms(1'700'000'000'123);
  job.add_step_losses(2.5);
  job.add_step_losses(1.25);
  job.mutable_spec()->set_name("fmnist-mlp");
  job.mutable_spec()->mutable_training()->set_seed(42);
  job.mutable_plan()->set_micro_batches(8);
  job.mutable_plan()->add_stages()->add_worker_ids("w-1");
  v1::JobMetrics* m = job.mutable_metrics();
  m->set_step(702);
  m->set_total_steps(702);
  m->set_samples_per_second(1234.5);
  m->set_test_accuracy(0.8712);
  return job;
}

Struct ParseObject(const std::string& json) {
  Struct s;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return s;
}

TEST(JsonOutputTest, JobHasShortStateAndMetrics) {
  absl::StatusOr<std::string> json = JobToJson(FinishedJob());
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct job = ParseObject(*json);
  EXPECT_EQ(job.fields().at("id").string_value(), "job-1");
  EXPECT_EQ(job.fields().at("state").string_value(), "SUCCEEDED");
  const Struct& metrics = job.fields().at("metrics").struct_value();
  EXPECT_DOUBLE_EQ(metrics.fields().at("test_accuracy").number_value(), 0.8712);
  EXPECT_DOUBLE_EQ(metrics.fields().at("samples_per_second").number_value(), 1234.5);
  EXPECT_EQ(metrics.fields().at("step").string_value(), "702");  // int64: a JSON string
}

TEST(JsonOutputTest, FollowsTheProto3JsonMapping) {
  absl::StatusOr<std::string> json = JobToJson(FinishedJob());
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct job = ParseObject(*json);
  // Primitive fields are printed even at their default value.
  EXPECT_EQ(job.fields().at("message").string_value(), "");
  EXPECT_DOUBLE_EQ(job.fields().at("metrics").struct_value().fields().at("loss").number_value(), 0);
  // int64 fields are strings, proto field names are kept (not lowerCamelCase).
  EXPECT_EQ(job.fields().at("created_unix_ms").string_value(), "1700000000123");
  EXPECT_EQ(job.fields().count("createdUnixMs"), 0u);
  // The spec text and per-step losses stay in JSON.
  EXPECT_EQ(job.fields().at("spec_yaml").string_value(),
            "name: fmnist-mlp\ntraining:\n  epochs: 3\n");
  const auto& losses = job.fields().at("step_losses").list_value();
  ASSERT_EQ(losses.values_size(), 2);
  EXPECT_DOUBLE_EQ(losses.values(1).number_value(), 1.25);
  EXPECT_EQ(job.fields()
                .at("spec")
                .struct_value()
                .fields()
                .at("training")
                .struct_value()
                .fields()
                .at("seed")
                .string_value(),
            "42");
  // Fields keep declaration order: id, name, state, message, ...
  const size_t id = json->find("\"id\"");
  const size_t name = json->find("\"name\"");
  const size_t state = json->find("\"state\"");
  const size_t message = json->find("\"message\"");
  EXPECT_LT(id, name);
  EXPECT_LT(name, state);
  EXPECT_LT(state, message);
  EXPECT_EQ(json->back(), '\n');
}

TEST(JsonOutputTest, UnsetOptionalMetricIsLeftOut) {
  v1::Job job = FinishedJob();
  job.mutable_metrics()->clear_test_accuracy();
  absl::StatusOr<std::string> json = JobToJson(job);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  EXPECT_EQ(parsed.fields().at("metrics").struct_value().fields().count("test_accuracy"), 0u);
  // test_accuracy 0.0 that was set is printed.
  job.mutable_metrics()->set_test_accuracy(0.0);
  json = JobToJson(job);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(
      ParseObject(*json).fields().at("metrics").struct_value().fields().count("test_accuracy"), 1u);
}

TEST(JsonOutputTest, UnspecifiedStateIsNamed) {
  v1::Job job;
  job.set_id("job-2");
  absl::StatusOr<std::string> json = JobToJson(job);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(ParseObject(*json).fields().at("state").string_value(), "UNSPECIFIED");
}

TEST(JsonOutputTest, CompactIsOneLine) {
  absl::StatusOr<std::string> json = JobToJson(FinishedJob(), /*pretty=*/false);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->find('\n'), std::string::npos);
  EXPECT_THAT(*json, HasSubstr("\"state\":\"SUCCEEDED\""));
}

TEST(JsonOutputTest, JobListWrapsJobs) {
  v1::ListJobsResponse list;
  *list.add_jobs() = FinishedJob();
  v1::Job* running = list.add_jobs();
  running->set_id("job-2");
  running->set_state(v1::JOB_STATE_RUNNING);
  absl::StatusOr<std::string> json = JobListToJson(list);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  const auto& jobs = parsed.fields().at("jobs").list_value();
  ASSERT_EQ(jobs.values_size(), 2);
  EXPECT_EQ(jobs.values(0).struct_value().fields().at("state").string_value(), "SUCCEEDED");
  EXPECT_EQ(jobs.values(1).struct_value().fields().at("state").string_value(), "RUNNING");
  EXPECT_DOUBLE_EQ(jobs.values(0)
                       .struct_value()
                       .fields()
                       .at("metrics")
                       .struct_value()
                       .fields()
                       .at("test_accuracy")
                       .number_value(),
                   0.8712);
}

TEST(JsonOutputTest, EmptyJobListIsAnEmptyArray) {
  absl::StatusOr<std::string> json = JobListToJson(v1::ListJobsResponse());
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  ASSERT_EQ(parsed.fields().count("jobs"), 1u);
  EXPECT_EQ(parsed.fields().at("jobs").list_value().values_size(), 0);
}

TEST(JsonOutputTest, WorkersHaveShortState) {
  v1::ListWorkersResponse workers;
  v1::WorkerInfo* w = workers.add_workers();
  w->set_id("w-1");
  w->set_state(v1::WORKER_STATE_DEAD);
  w->add_devices("cpu");
  absl::StatusOr<std::string> json = WorkerListToJson(workers);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  const Struct& first = parsed.fields().at("workers").list_value().values(0).struct_value();
  EXPECT_EQ(first.fields().at("state").string_value(), "DEAD");
  EXPECT_EQ(first.fields().at("devices").list_value().values(0).string_value(), "cpu");
}

TEST(YamlOutputTest, SameTreeAsJson) {
  absl::StatusOr<std::string> yaml = MessageToYaml(FinishedJob());
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const YAML::Node job = YAML::Load(*yaml);
  EXPECT_EQ(job["id"].as<std::string>(), "job-1");
  EXPECT_EQ(job["state"].as<std::string>(), "SUCCEEDED");
  EXPECT_DOUBLE_EQ(job["metrics"]["test_accuracy"].as<double>(), 0.8712);
  EXPECT_DOUBLE_EQ(job["metrics"]["samples_per_second"].as<double>(), 1234.5);
  EXPECT_EQ(job["spec_yaml"].as<std::string>(), "name: fmnist-mlp\ntraining:\n  epochs: 3\n");
  EXPECT_EQ(job["message"].as<std::string>(), "");
  EXPECT_EQ(job["created_unix_ms"].as<std::string>(), "1700000000123");
  ASSERT_EQ(job["step_losses"].size(), 2u);
  EXPECT_EQ(job["worker_ids"].size(), 0u);
  // Multi-line text as a literal block, without a stray blank line after it.
  EXPECT_THAT(*yaml, HasSubstr("spec_yaml: |\n  name: fmnist-mlp\n  training:\n    epochs: 3\n"
                               "plan:\n"));
  EXPECT_LT(yaml->find("id:"), yaml->find("state:"));
}

TEST(YamlOutputTest, StringsThatLookLikeOtherTypesStayStrings) {
  v1::Job job;
  job.set_id("123");
  job.set_name("true");
  job.set_message("null");
  absl::StatusOr<std::string> yaml = MessageToYaml(job);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const YAML::Node parsed = YAML::Load(*yaml);
  EXPECT_EQ(parsed["id"].Tag(), "!");  // quoted
  EXPECT_EQ(parsed["id"].as<std::string>(), "123");
  EXPECT_EQ(parsed["name"].Tag(), "!");
  EXPECT_EQ(parsed["message"].Tag(), "!");
  EXPECT_EQ(parsed["message"].as<std::string>(), "null");
}

}  // namespace
}  // namespace dapple::ctl
