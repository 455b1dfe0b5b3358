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
       "examples/bad/unknown_layer.yaml:7:14: model.layers[1]: unknown layer type 'conv3d'; "
       "known: flatten, linear, relu, gelu, dropout, embedding, layernorm, transformer_block, "
       "lm_head, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm2d, residual_block"},
      {"indivisible_batch.yaml",
       "examples/bad/indivisible_batch.yaml:12:16: training.global_batch 256 is not divisible by "
       "training.micro_batch 48: use a micro_batch that divides 256 (1, 2, 4, 8, 16, 32, 64, 128, "
       "256)"},
      {"too_many_stages.yaml",
       "examples/bad/too_many_stages.yaml:20:11: parallel.stages 8 is more than the 6 layers of "
       "the model: each stage needs at least one layer: set stages to at most 6"},
      {"misspelled_field.yaml",
       "examples/bad/misspelled_field.yaml:8:1: unknown field 'trainig' in the job spec; known: "
       "name, model, data, training, parallel, sample, priority; did you mean 'training'?"},
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
       "examples/bad/too_deep.yaml:2:70: the job spec is nested more than 64 levels deep here (a "
       "valid job spec needs at most 4); refused before parsing"},
      // Real models: shapes that do not chain, sizes that do not fit the data or each other.
      {"block_after_flatten.yaml",
       "examples/bad/block_after_flatten.yaml:8:7: model.layers[2] (transformer_block) needs a "
       "[T, C] input (a vector of C values per position, as an embedding outputs), got [8192] "
       "from model.layers[1] (flatten)"},
      {"linear_after_embedding.yaml",
       "examples/bad/linear_after_embedding.yaml:7:7: model.layers[1] (linear) needs a flat "
       "input, got [128, 64] from model.layers[0] (embedding): add a flatten layer before it"},
      {"seq_len_above_positions.yaml",
       "examples/bad/seq_len_above_positions.yaml:6:57: model.layers[0].positions 64 is smaller "
       "than the sequence length 128 (model.input_shape [128], which data.seq_len sets for text "
       "data): the position table has a row per position: set positions to at least 128 (or "
       "leave it out to take the sequence length) or data.seq_len to at most 64"},
      {"embedding_vocab_mismatch.yaml",
       "examples/bad/embedding_vocab_mismatch.yaml:6:32: model.layers[0].vocab 128 (embedding) "
       "does not match data.dataset text, whose tokens are the 256 byte values: its table needs "
       "a row per byte value: set vocab: 256"},
      {"lm_head_vocab_mismatch.yaml",
       "examples/bad/lm_head_vocab_mismatch.yaml:9:30: model.layers[3].vocab 100 (lm_head) does "
       "not match data.dataset text, whose tokens are the 256 byte values: the head gives a "
       "logit per byte value: set vocab: 256"},
      {"tied_width_mismatch.yaml",
       "examples/bad/tied_width_mismatch.yaml:10:7: model.layers[4] (lm_head, tied: true) reads "
       "[32] from model.layers[3] (linear), of width 32, but the table it shares, "
       "model.layers[0] (embedding)'s [256, 64], has width 64: tied layers share one table, so "
       "the widths must match: make its input 64 wide or set tied: false with vocab: 256"},
      {"no_lm_head.yaml",
       "examples/bad/no_lm_head.yaml:8:7: model.layers[2] (layernorm) outputs [128, 64], the "
       "model's output, which does not fit data.dataset text with data.seq_len 128: a language "
       "model predicts each next byte, so the last layer must output [128, 256] (an lm_head with "
       "vocab 256)"},
      {"heads_do_not_divide.yaml",
       "examples/bad/heads_do_not_divide.yaml:7:40: model.layers[1].heads 5 does not divide the "
       "width C = 64 of its input [128, 64] from model.layers[0] (embedding): each head attends "
       "over C / heads values: use a divisor of 64 (1, 2, 4, 8, 16, 32, 64)"},
      // Image models: shapes that do not chain, windows that do not fit.
      {"conv_after_flatten.yaml",
       "examples/bad/conv_after_flatten.yaml:11:7: model.layers[4] (conv2d) needs a [C, H, W] "
       "input (channels, height, width), got [3136] from model.layers[3] (flatten): image "
       "layers go before the flatten, on a model.input_shape like [1, 28, 28]"},
      {"pool_leaves_nothing.yaml",
       "examples/bad/pool_leaves_nothing.yaml:12:33: model.layers[5].kernel 2 is larger than "
       "the padded input height 1 (H 1 + 2 x padding 0) of [8, 1, 1] from model.layers[4] "
       "(maxpool2d): the maxpool2d window fits nowhere and its output would be empty: use a "
       "kernel of at most 1, more padding, or fewer downsampling layers before it"},
      {"seq_len_zero.yaml",
       "examples/bad/seq_len_zero.yaml:10:72: data.seq_len is missing or 0: data.dataset text "
       "needs the tokens (bytes) per sample, at least 1, e.g. seq_len: 128"},
      {"bf16_on_cpu.yaml",
       "examples/bad/bf16_on_cpu.yaml:16:14: training.precision bf16 needs every stage on a "
       "CUDA GPU, but parallel.device_type is cpu: set parallel.device_type: cuda (or "
       "precision: fp32)"},
      {"conv_kernel_too_large.yaml",
       "examples/bad/conv_kernel_too_large.yaml:12:48: model.layers[5].kernel 7 is larger than "
       "the padded input height 3 (H 3 + 2 x padding 0) of [16, 3, 3] from model.layers[4] "
       "(maxpool2d): the conv2d window fits nowhere and its output would be empty: use a kernel "
       "of at most 3, more padding, or fewer downsampling layers before it"},
      {"attention_too_long.yaml",
       "examples/bad/attention_too_long.yaml:7:7: model.layers[1] (transformer_block): its input "
       "[65536, 32] is a sequence of T = 65536: 2 heads x T^2 = 8589934592 attention "
       "probabilities per sample exceed 2^28 = 268435456: use sequences of at most 11585 "
       "(data.seq_len, or the model's input shape) with 2 heads"},
      // A learning-rate schedule that would not do what it says.
      {"warmup_longer_than_job.yaml",
       "examples/bad/warmup_longer_than_job.yaml:16:31: training.lr_schedule.warmup_steps 40 is "
       "not less than the job's 12 steps (training.max_steps): the learning rate would never "
       "reach training.optimizer.lr 0.05; set warmup_steps to at most 11"},
      {"min_lr_without_decay.yaml",
       "examples/bad/min_lr_without_decay.yaml:14:43: training.lr_schedule.min_lr 0.005 has no "
       "effect with training.lr_schedule.decay none: only the cosine decay ends at min_lr; add "
       "decay: cosine, or remove min_lr"},
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
