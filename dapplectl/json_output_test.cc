#include "dapplectl/json_output.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace dapple::ctl {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::Not;

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
  // The spec is in its canonical form, integers as numbers (see the Spec tests below).
  EXPECT_EQ(job.fields()
                .at("spec")
                .struct_value()
                .fields()
                .at("training")
                .struct_value()
                .fields()
                .at("seed")
                .number_value(),
            42);
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

TEST(JsonOutputTest, TextJobHasValidationMetricsAndItsSample) {
  v1::Job job = FinishedJob();
  job.mutable_metrics()->clear_test_accuracy();
  job.mutable_metrics()->set_validation_loss(1.25);
  job.mutable_metrics()->set_validation_bits_per_byte(1.8);
  job.mutable_metrics()->set_validation_accuracy(0.5);
  job.mutable_metrics()->set_eval_step(702);
  job.set_sample_text("And God said,\n\"Let there be light\"");
  absl::StatusOr<std::string> json = JobToJson(job);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  const Struct& metrics = parsed.fields().at("metrics").struct_value();
  EXPECT_DOUBLE_EQ(metrics.fields().at("validation_loss").number_value(), 1.25);
  EXPECT_DOUBLE_EQ(metrics.fields().at("validation_bits_per_byte").number_value(), 1.8);
  EXPECT_DOUBLE_EQ(metrics.fields().at("validation_accuracy").number_value(), 0.5);
  EXPECT_EQ(metrics.fields().at("eval_step").string_value(), "702");
  EXPECT_EQ(metrics.fields().count("test_accuracy"), 0u);
  EXPECT_EQ(parsed.fields().at("sample_text").string_value(),
            "And God said,\n\"Let there be light\"");
  // A job without a sample (fashion-mnist) has no sample_text key, nor validation metrics.
  json = JobToJson(FinishedJob());
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct plain = ParseObject(*json);
  EXPECT_EQ(plain.fields().count("sample_text"), 0u);
  EXPECT_EQ(plain.fields().at("metrics").struct_value().fields().count("validation_loss"), 0u);
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

// ------------------------------------------------------------------ the spec, canonical

constexpr char kExample[] = "examples/fashion_mnist_mlp.yaml";

// The repository root: $DAPPLE_SOURCE_DIR when set, else the first folder holding kExample among
// this file's repository (__FILE__ may be relative to the build folder) and the folders above
// the test binary (build folders sit inside the repository).
std::string SourceDir() {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("DAPPLE_SOURCE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const auto has_example = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / kExample, ec);
  };
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path();
  if (from_file.is_absolute() && has_example(from_file)) return from_file.string();
  std::error_code ec;
  for (fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path(); !ec && !dir.empty();
       dir = dir.parent_path()) {
    if (has_example(dir)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return from_file.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(in.good() || in.eof()) << path;
  return text.str();
}

// The example, then variants that exercise every way a spec prints: adamw (beta1/2, eps and no
// momentum), explicit stage ranges, auto stages, names and paths that need quotes.
std::vector<std::pair<std::string, std::string>> SpecSources() {
  const std::string example = ReadFile(SourceDir() + "/" + kExample);
  EXPECT_FALSE(example.empty());
  std::vector<std::pair<std::string, std::string>> out = {
      {"examples/fashion_mnist_mlp.yaml", example},
      {"adamw, manual ranges",
       absl::StrReplaceAll(example, {{"{type: sgd, lr: 0.05, momentum: 0.9}",
                                      "{type: adamw, lr: 0.001, weight_decay: 0.01, eps: 1e-07}"},
                                     {"stages: 2", "stages: [[0, 1], [2, 5]]"},
                                     {"planner: balanced", "planner: manual"}})},
      {"auto stages, cuda",
       absl::StrReplaceAll(example, {{"stages: 2", "stages: auto"},
                                     {"devices: 2", "devices: 3\n  device_type: cuda"}})},
      {"a path that needs quotes",
       absl::StrReplaceAll(example, {{"path: /usr/share/datasets/fashion-mnist",
                                      "path: \"/data/fashion mnist #1, 'v2': {x}\""}})},
  };
  // The GPT example, whose sample prompt is "\n" (a fresh user's `yq .spec` round trip read it
  // back as "" and was refused), and prompts with newlines in other places.
  const std::string gpt = ReadFile(SourceDir() + "/examples/gpt_kjv.yaml");
  EXPECT_FALSE(gpt.empty());
  out.push_back({"examples/gpt_kjv.yaml", gpt});
  for (const char* prompt : {"\"And God\\n\"", "\"a\\nb\\n\"", "\"\\n\\nx\"", "\"x\\n\\n\""}) {
    std::string text = gpt;
    const size_t at = text.find("prompt: ");
    EXPECT_NE(at, std::string::npos);
    const size_t end = text.find_first_of(",}", at);
    text.replace(at, end - at, absl::StrCat("prompt: ", prompt));
    out.push_back({absl::StrCat("gpt, prompt ", prompt), text});
  }
  // Names that a YAML reader would take for a number, a boolean or null.
  for (const char* name : {"2024", "1e5", "true", "null", "0.5"}) {
    out.push_back({absl::StrCat("name ", name),
                   absl::StrReplaceAll(
                       example, {{"name: fmnist-mlp", absl::StrCat("name: \"", name, "\"")}})});
  }
  return out;
}

v1::Job JobWithSpec(const v1::JobSpec& spec, const std::string& text) {
  v1::Job job = FinishedJob();
  *job.mutable_spec() = spec;
  job.set_spec_yaml(text);
  job.mutable_plan()->mutable_stages(0)->add_devices("cuda:0");
  return job;
}

// The `spec:` block of `get -o yaml` as a user cuts it out of the text: the lines after
// "spec:" that are indented, less two spaces.
std::string CutSpecBlock(const std::string& yaml) {
  std::string out;
  bool in_spec = false;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (in_spec && !absl::StartsWith(line, " ")) break;
    if (in_spec) absl::StrAppend(&out, line.substr(2), "\n");
    if (line == "spec:") in_spec = true;
  }
  return out;
}

void ExpectSameSpec(const v1::JobSpec& got, const v1::JobSpec& want, const std::string& what) {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(got, want)) << what << ": " << diff;
}

TEST(SpecOutputTest, TheSpecOfGetAsYamlSubmitsAgain) {
  for (const auto& [what, text] : SpecSources()) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, what);
    ASSERT_TRUE(spec.ok()) << what << ": " << spec.status();
    absl::StatusOr<std::string> yaml = MessageToYaml(JobWithSpec(*spec, text));
    ASSERT_TRUE(yaml.ok()) << yaml.status();

    // Cut out as text ...
    const std::string block = CutSpecBlock(*yaml);
    absl::StatusOr<v1::JobSpec> again = ParseJobSpec(block, "spec-block.yaml");
    ASSERT_TRUE(again.ok()) << what << ": " << again.status() << "\n" << *yaml;
    ExpectSameSpec(*again, *spec, what);
    // ... or taken from the parsed document (`yq .spec`).
    YAML::Emitter emitter;
    emitter << YAML::Load(*yaml)["spec"];
    again = ParseJobSpec(emitter.c_str(), "yq.yaml");
    ASSERT_TRUE(again.ok()) << what << ": " << again.status() << "\n" << emitter.c_str();
    ExpectSameSpec(*again, *spec, what);
  }
}

TEST(SpecOutputTest, YamlSpecIsTheCanonicalForm) {
  const auto sources = SpecSources();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(sources[0].second, "x.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::string> yaml = MessageToYaml(JobWithSpec(*spec, sources[0].second));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const std::string block = CutSpecBlock(*yaml);
  // What the user saw: adamw keys on an sgd job, out: "0" on flatten, quoted integers, an
  // empty stage_ranges.
  EXPECT_THAT(block, Not(HasSubstr("beta1")));
  EXPECT_THAT(block, Not(HasSubstr(", eps:")));
  EXPECT_THAT(block, Not(HasSubstr("\"0\"")));
  EXPECT_THAT(block, Not(HasSubstr("stage_ranges")));
  EXPECT_THAT(block, HasSubstr("global_batch: 256\n"));
  EXPECT_THAT(block, HasSubstr("input_shape: [1, 28, 28]\n"));
  EXPECT_THAT(block, HasSubstr("- {type: flatten}\n"));
  EXPECT_THAT(block, HasSubstr("- {type: linear, out: 1024}\n"));
  EXPECT_THAT(block, HasSubstr("stages: 2\n"));
  // The parsed tree equals JobSpecToYaml's.
  EXPECT_EQ(YAML::Dump(YAML::Load(block)), YAML::Dump(YAML::Load(JobSpecToYaml(*spec))));
  // The rest of the job is unchanged: the spec text and the fields around the spec.
  EXPECT_EQ(YAML::Load(*yaml)["spec_yaml"].as<std::string>(), sources[0].second);
  EXPECT_LT(yaml->find("\nmessage:"), yaml->find("\nspec:"));
  EXPECT_LT(yaml->find("\nspec:"), yaml->find("\nspec_yaml:"));
}

const Struct& Field(const Struct& s, const std::string& key) {
  EXPECT_EQ(s.fields().count(key), 1u) << key;
  return s.fields().at(key).struct_value();
}

TEST(SpecOutputTest, JsonSpecHasProperTypesAndOnlyKeysThatApply) {
  const auto sources = SpecSources();
  absl::StatusOr<v1::JobSpec> sgd = ParseJobSpec(sources[0].second, "x.yaml");
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  absl::StatusOr<std::string> json = JobToJson(JobWithSpec(*sgd, sources[0].second));
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct job = ParseObject(*json);
  const Struct& spec = Field(job, "spec");
  EXPECT_EQ(spec.fields().at("name").string_value(), "fmnist-mlp");
  const Struct& training = Field(spec, "training");
  EXPECT_EQ(training.fields().at("global_batch").kind_case(), Value::kNumberValue);
  EXPECT_EQ(training.fields().at("global_batch").number_value(), 256);
  EXPECT_EQ(training.fields().at("seed").number_value(), 42);
  const Struct& optimizer = Field(training, "optimizer");
  EXPECT_EQ(optimizer.fields().at("type").string_value(), "sgd");
  EXPECT_DOUBLE_EQ(optimizer.fields().at("lr").number_value(), 0.05);
  EXPECT_DOUBLE_EQ(optimizer.fields().at("momentum").number_value(), 0.9);
  EXPECT_EQ(optimizer.fields().count("beta1"), 0u);
  EXPECT_EQ(optimizer.fields().count("eps"), 0u);
  const auto& layers = Field(spec, "model").fields().at("layers").list_value();
  ASSERT_EQ(layers.values_size(), 6);
  EXPECT_EQ(layers.values(0).struct_value().fields().count("out"), 0u);  // flatten
  EXPECT_EQ(layers.values(1).struct_value().fields().at("out").number_value(), 1024);
  const auto& shape = Field(spec, "model").fields().at("input_shape").list_value();
  ASSERT_EQ(shape.values_size(), 3);
  EXPECT_EQ(shape.values(2).number_value(), 28);
  const Struct& parallel = Field(spec, "parallel");
  EXPECT_EQ(parallel.fields().at("stages").number_value(), 2);
  EXPECT_EQ(parallel.fields().at("devices").number_value(), 2);
  EXPECT_EQ(parallel.fields().count("stage_ranges"), 0u);
  // The fields scripts read are where they were, with their types.
  EXPECT_EQ(job.fields().at("step_losses").list_value().values_size(), 2);
  EXPECT_EQ(job.fields()
                .at("plan")
                .struct_value()
                .fields()
                .at("stages")
                .list_value()
                .values(0)
                .struct_value()
                .fields()
                .at("devices")
                .list_value()
                .values(0)
                .string_value(),
            "cuda:0");
  EXPECT_EQ(job.fields().at("metrics").struct_value().fields().at("step").string_value(), "702");

  // adamw and ranges; auto stages.
  absl::StatusOr<v1::JobSpec> adamw = ParseJobSpec(sources[1].second, "x.yaml");
  ASSERT_TRUE(adamw.ok()) << adamw.status();
  json = JobToJson(JobWithSpec(*adamw, sources[1].second), /*pretty=*/false);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct adamw_spec = Field(ParseObject(*json), "spec");
  const Struct& adamw_opt = Field(Field(adamw_spec, "training"), "optimizer");
  EXPECT_EQ(adamw_opt.fields().count("momentum"), 0u);
  EXPECT_DOUBLE_EQ(adamw_opt.fields().at("eps").number_value(), 1e-7);
  EXPECT_DOUBLE_EQ(adamw_opt.fields().at("beta2").number_value(), 0.999);
  const auto& ranges = Field(adamw_spec, "parallel").fields().at("stages").list_value();
  ASSERT_EQ(ranges.values_size(), 2);
  EXPECT_EQ(ranges.values(1).list_value().values(0).number_value(), 2);
  EXPECT_EQ(ranges.values(1).list_value().values(1).number_value(), 5);
  absl::StatusOr<v1::JobSpec> automatic = ParseJobSpec(sources[2].second, "x.yaml");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  json = JobToJson(JobWithSpec(*automatic, sources[2].second));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(
      Field(Field(ParseObject(*json), "spec"), "parallel").fields().at("stages").string_value(),
      "auto");
}

TEST(SpecOutputTest, TheSpecOfGetAsJsonSubmitsAgain) {
  for (const auto& [what, text] : SpecSources()) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, what);
    ASSERT_TRUE(spec.ok()) << what << ": " << spec.status();
    for (bool pretty : {true, false}) {
      absl::StatusOr<std::string> json = JobToJson(JobWithSpec(*spec, text), pretty);
      ASSERT_TRUE(json.ok()) << json.status();
      ParseObject(*json);  // valid JSON
      // JSON is YAML: `jq .spec` output is a spec.
      YAML::Emitter emitter;
      emitter << YAML::Load(*json)["spec"];
      absl::StatusOr<v1::JobSpec> again = ParseJobSpec(emitter.c_str(), "jq.json");
      ASSERT_TRUE(again.ok()) << what << ": " << again.status() << "\n" << *json;
      ExpectSameSpec(*again, *spec, what);
    }
  }
}

TEST(SpecOutputTest, EveryJobOfAListHasItsOwnSpec) {
  const auto sources = SpecSources();
  v1::ListJobsResponse list;
  for (int i : {0, 1}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(sources[i].second, "x.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    *list.add_jobs() = JobWithSpec(*spec, sources[i].second);
  }
  list.add_jobs()->set_id("job-without-spec");
  absl::StatusOr<std::string> json = JobListToJson(list);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  const auto& jobs = parsed.fields().at("jobs").list_value();
  ASSERT_EQ(jobs.values_size(), 3);
  EXPECT_EQ(Field(Field(jobs.values(0).struct_value(), "spec"), "training")
                .fields()
                .at("optimizer")
                .struct_value()
                .fields()
                .at("type")
                .string_value(),
            "sgd");
  EXPECT_EQ(Field(Field(jobs.values(1).struct_value(), "spec"), "training")
                .fields()
                .at("optimizer")
                .struct_value()
                .fields()
                .at("type")
                .string_value(),
            "adamw");
  EXPECT_EQ(jobs.values(2).struct_value().fields().count("spec"), 0u);
  absl::StatusOr<std::string> yaml = MessageToYaml(list);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  const YAML::Node tree = YAML::Load(*yaml);
  EXPECT_EQ(tree["jobs"][0]["spec"]["training"]["optimizer"]["type"].as<std::string>(), "sgd");
  EXPECT_EQ(tree["jobs"][1]["spec"]["training"]["optimizer"]["type"].as<std::string>(), "adamw");
  EXPECT_FALSE(tree["jobs"][2]["spec"].IsDefined());
}

TEST(SpecOutputTest, AStringThatLooksLikeASpecMarkIsLeftAlone) {
  v1::Job job = FinishedJob();
  job.set_name("@@dapple-spec-0@@");
  job.set_message("\"spec\": \"@@dapple-spec-0@@\"");
  absl::StatusOr<std::string> json = JobToJson(job);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct parsed = ParseObject(*json);
  EXPECT_EQ(parsed.fields().at("name").string_value(), "@@dapple-spec-0@@");
  EXPECT_EQ(parsed.fields().at("message").string_value(), "\"spec\": \"@@dapple-spec-0@@\"");
  EXPECT_EQ(Field(parsed, "spec").fields().at("name").string_value(), "fmnist-mlp");
  absl::StatusOr<std::string> yaml = MessageToYaml(job);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(YAML::Load(*yaml)["name"].as<std::string>(), "@@dapple-spec-0@@");
}

}  // namespace
}  // namespace dapple::ctl
