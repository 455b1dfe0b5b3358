// Test-only helpers of the job spec tests: see job_spec_test_util.h.
#include "common/job_spec_test_util.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dapple::testing {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

std::string Edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the spec";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' is ambiguous";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

v1::JobSpec Example() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kExample, "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& parts) {
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::string message(status.message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const std::string& part : parts) EXPECT_THAT(message, HasSubstr(part));
}

void ExpectParseError(const std::string& yaml, const std::string& expected) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_EQ(std::string(spec.status().message()), expected);
}

v1::JobSpec Manual(const std::vector<std::pair<int, int>>& ranges) {
  v1::JobSpec spec = Example();
  v1::ParallelSpec& p = *spec.mutable_parallel();
  p.set_planner("manual");
  p.set_stages(static_cast<int>(ranges.size()));
  p.set_devices(static_cast<int>(ranges.size()));
  for (const auto& [first, last] : ranges) {
    v1::StageRange& r = *p.add_stage_ranges();
    r.set_first_layer(first);
    r.set_last_layer(last);
  }
  return spec;
}

void ExpectRoundTrip(const v1::JobSpec& spec) {
  const std::string yaml = JobSpecToYaml(spec);
  absl::StatusOr<v1::JobSpec> back = ParseJobSpec(yaml, "canonical.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(*back, spec)) << "YAML:\n"
                                                       << yaml << "\nwant:\n"
                                                       << spec.DebugString() << "got:\n"
                                                       << back->DebugString();
}

}  // namespace dapple::testing
