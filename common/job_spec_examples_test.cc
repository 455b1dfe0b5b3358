// The job specs under examples/: each bad one fails with its one-line error, each good one
// parses, validates and round-trips.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/job_spec_test_util.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::dapple::testing::ExpectRoundTrip;

// The repository root: $DAPPLE_SOURCE_DIR (set by ctest), else found from this file's path or
// by walking up from the test binary (build folders sit inside the repository).
std::string SourceDir() {
  namespace fs = std::filesystem;
  const auto has_examples = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / "examples" / "bad", ec);
  };
  if (const char* dir = std::getenv("DAPPLE_SOURCE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path();
  if (has_examples(from_file)) return from_file.string();
  std::error_code ec;
  for (fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path(); !ec && !dir.empty();
       dir = dir.parent_path()) {
    if (has_examples(dir)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return from_file.string();
}

struct BadExample {
  const char* file;
  const char* error;
};

TEST(BadExamplesTest, EachFailsWithItsOneLineError) {
  const BadExample cases[] = {
      {"malformed.yaml",
       "examples/bad/malformed.yaml:6:7: YAML syntax error: this '{' is never closed (yaml-cpp "
       "stopped at 8:5: illegal block entry)"},
      {"unknown_layer.yaml",
       "examples/bad/unknown_layer.yaml:7:14: model.layers[1]: unknown layer type 'conv2d'; "
       "known: flatten, linear, relu, gelu, dropout, embedding, layernorm, transformer_block, "
       "lm_head"},
      {"indivisible_batch.yaml",
       "examples/bad/indivisible_batch.yaml:12:16: training.global_batch 256 is not divisible by "
       "training.micro_batch 48"},
      {"too_many_stages.yaml",
       "examples/bad/too_many_stages.yaml:20:11: parallel.stages 8 is more than the 6 layers of "
       "the model: each stage needs at least one layer"},
      {"misspelled_field.yaml",
       "examples/bad/misspelled_field.yaml:8:1: unknown field 'trainig' in the job spec; known: "
       "name, model, data, training, parallel, sample; did you mean 'training'?"},
      {"huge_epochs.yaml",
       "examples/bad/huge_epochs.yaml:14:11: training.epochs 9223372036854775807 is more than "
       "the maximum 100000"},
      {"model_too_large.yaml",
       "examples/bad/model_too_large.yaml:8:7: model.layers[1] (linear 784 -> 1000000) has "
       "785000000 parameters, bringing the model to 785000000 (2.92 GiB of fp32 weights), more "
       "than the maximum 2^28 (268435456, 1 GiB)"},
      {"key_does_not_apply.yaml",
       "examples/bad/key_does_not_apply.yaml:9:20: model.layers[2].out applies only to linear "
       "layers, not relu"},
      {"too_deep.yaml",
       "examples/bad/too_deep.yaml:2:70: the job spec is nested more than 64 levels deep here (it "
       "needs 4); refused before parsing"},
  };
  for (const BadExample& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = SourceDir() + "/examples/bad/" + c.file;
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "cannot read " << path;
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, std::string("examples/bad/") + c.file);
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
    EXPECT_EQ(std::string(spec.status().message()), std::string(c.error));
  }
}

// The job specs under examples/ are meant to run as they are: each must parse and validate.
TEST(GoodExamplesTest, EveryExampleSpecIsValid) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(SourceDir() + "/examples")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, entry.path().filename().string());
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (spec.ok()) ExpectRoundTrip(*spec);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

}  // namespace
}  // namespace dapple
