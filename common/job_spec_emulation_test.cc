// parallel.device_type emulated and parallel.emulation: parsing, defaults, validation, YAML.
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::HasSubstr;

std::string Spec(const std::string& parallel_extra) {
  return R"(name: emu
model:
  input_shape: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: linear, out: 64}
    - {type: relu}
    - {type: linear, out: 10}
data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
training:
  global_batch: 64
  micro_batch: 16
  optimizer: {lr: 0.1}
parallel:
  stages: 2
  devices: 2
)" + parallel_extra;
}

TEST(EmulationSpec, ParsesProfileAndScaleAndDefaultsScaleToOne) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      Spec("  device_type: emulated\n  emulation: {profile: /p/m-pbs-16.txt}\n"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().device_type(), "emulated");
  EXPECT_EQ(spec->parallel().emulation().profile(), "/p/m-pbs-16.txt");
  EXPECT_EQ(spec->parallel().emulation().scale(), 1.0);

  spec = ParseJobSpec(
      Spec("  device_type: emulated\n  emulation: {profile: /p/m.txt, scale: 2.5}\n"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().emulation().scale(), 2.5);
  // The YAML form reads back to the same spec.
  absl::StatusOr<v1::JobSpec> again = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(again->parallel().emulation().profile(), "/p/m.txt");
  EXPECT_EQ(again->parallel().emulation().scale(), 2.5);
  EXPECT_EQ(again->parallel().device_type(), "emulated");

  // The largest scale accepted (the bound is inclusive).
  spec = ParseJobSpec(
      Spec("  device_type: emulated\n  emulation: {profile: /p/m.txt, scale: 1000}\n"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().emulation().scale(), 1000.0);
}

void ExpectError(const std::string& parallel_extra, const std::string& part) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(Spec(parallel_extra), "job.yaml");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(part));
}

TEST(EmulationSpec, RefusesWhatCannotBeEmulated) {
  ExpectError("  device_type: emulated\n",
              "parallel.device_type emulated needs parallel.emulation.profile");
  ExpectError("  device_type: emulated\n  emulation: {profile: rel/m.txt}\n",
              "parallel.emulation.profile 'rel/m.txt' must be an absolute path");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scale: 0}\n",
              "parallel.emulation.scale 0 must be a finite number > 0");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scale: -2}\n",
              "parallel.emulation.scale -2 must be a finite number > 0");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scale: .inf}\n",
              "parallel.emulation.scale inf must be a finite number > 0");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scale: 1e12}\n",
              "parallel.emulation.scale 1e+12 must be in (0, 1000]: it multiplies every "
              "profiled time");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scale: 1000.5}\n",
              "parallel.emulation.scale 1000.5 must be in (0, 1000]");
  ExpectError("  device_type: cpu\n  emulation: {profile: /m.txt}\n",
              "parallel.emulation applies only to parallel.device_type emulated, got "
              "parallel.device_type cpu");
  ExpectError("  device_type: emulated\n  emulation: {profile: /m.txt, scael: 2}\n",
              "unknown field 'scael' in parallel.emulation; known: profile, scale");
}

}  // namespace
}  // namespace dapple
