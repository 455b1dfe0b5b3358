#include "worker/data/text_dataset.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

using ::dapple::testing::TempDir;

v1::DataSpec TextSpec(const std::string& path, int64_t seq_len, double validation_fraction) {
  v1::DataSpec data;
  data.set_dataset("text");
  data.set_path(path);
  data.set_seq_len(seq_len);
  data.set_validation_fraction(validation_fraction);
  return data;
}

// 41 bytes whose value tells their offset: byte o is 33 + o ('!' onwards).
std::string CountingText() {
  std::string text;
  for (int o = 0; o < 41; ++o) text.push_back(static_cast<char>(33 + o));
  return text;
}

// The bytes at file offsets [first, first + n) of CountingText, as Gather writes them.
std::vector<float> InputsAt(int first, int n) {
  std::vector<float> out;
  for (int o = first; o < first + n; ++o) out.push_back(static_cast<float>(33 + o));
  return out;
}
std::vector<int32_t> TargetsAt(int first, int n) {
  std::vector<int32_t> out;
  for (int o = first; o < first + n; ++o) out.push_back(33 + o);
  return out;
}

class TextDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 41 bytes at 0.25: training bytes [0, 30) (floor(30.75)), validation [30, 41). With T = 4:
    // (30 - 1) / 4 = 7 and (11 - 1) / 4 = 2 samples.
    absl::StatusOr<Datasets> loaded =
        TextDataset::Load(TextSpec(dir_.Write("t.txt", CountingText()), 4, 0.25));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    data_ = *std::move(loaded);
  }
  TempDir dir_;
  Datasets data_;
};

TEST_F(TextDatasetTest, DescribesItsSamples) {
  EXPECT_EQ(data_.file_bytes, 41);
  for (const Dataset* d : {data_.train.get(), data_.eval.get()}) {
    EXPECT_EQ(d->sample_shape(), std::vector<int64_t>{4});
    EXPECT_EQ(d->sample_elements(), 4);
    EXPECT_EQ(d->targets_per_sample(), 4);
    EXPECT_EQ(d->num_classes(), 256);
    EXPECT_TRUE(d->token_inputs());
  }
  EXPECT_EQ(data_.train->size(), 7);
  EXPECT_EQ(data_.eval->size(), 2);
}

TEST_F(TextDatasetTest, TrainingSamplesAreNextBytePairs) {
  // The first and the last training sample, and one between, in a shuffled order: sample i's
  // inputs are bytes [4i, 4i + 4), its targets the bytes one further.
  const int64_t indices[] = {6, 0, 3};
  std::vector<float> inputs(3 * 4, -1);
  std::vector<int32_t> targets(3 * 4, -1);
  data_.train->Gather(indices, 3, inputs.data(), targets.data());
  std::vector<float> want_inputs = InputsAt(24, 4);
  std::vector<int32_t> want_targets = TargetsAt(25, 4);
  for (int first : {0, 12}) {
    const std::vector<float> i = InputsAt(first, 4);
    const std::vector<int32_t> t = TargetsAt(first + 1, 4);
    want_inputs.insert(want_inputs.end(), i.begin(), i.end());
    want_targets.insert(want_targets.end(), t.begin(), t.end());
  }
  EXPECT_EQ(inputs, want_inputs);
  EXPECT_EQ(targets, want_targets);
  // The last training sample's last target (offset 28) stays inside the split [0, 30).
  EXPECT_EQ(targets[3], 33 + 28);
}

TEST_F(TextDatasetTest, ValidationSamplesStartAtTheSplit) {
  const int64_t indices[] = {0, 1};
  std::vector<float> inputs(2 * 4, -1);
  std::vector<int32_t> targets(2 * 4, -1);
  data_.eval->Gather(indices, 2, inputs.data(), targets.data());
  std::vector<float> want_inputs = InputsAt(30, 4);
  std::vector<int32_t> want_targets = TargetsAt(31, 4);
  const std::vector<float> i = InputsAt(34, 4);
  const std::vector<int32_t> t = TargetsAt(35, 4);
  want_inputs.insert(want_inputs.end(), i.begin(), i.end());
  want_targets.insert(want_targets.end(), t.begin(), t.end());
  EXPECT_EQ(inputs, want_inputs);
  EXPECT_EQ(targets, want_targets);
}

TEST_F(TextDatasetTest, EitherOutputMayBeNull) {
  const int64_t index = 1;
  std::vector<float> inputs(4, -1);
  data_.train->Gather(&index, 1, inputs.data(), nullptr);
  EXPECT_EQ(inputs, InputsAt(4, 4));
  std::vector<int32_t> targets(4, -1);
  data_.train->Gather(&index, 1, nullptr, targets.data());
  EXPECT_EQ(targets, TargetsAt(5, 4));
}

TEST(TextDatasetBytesTest, TokensAreByteValues) {
  // UTF-8 text: every byte of a multi-byte character is its own token, 0..255 exactly.
  TempDir dir;
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac!";  // 10 bytes
  absl::StatusOr<Datasets> data = TextDataset::Load(TextSpec(dir.Write("u.txt", text), 2, 0.5));
  ASSERT_TRUE(data.ok()) << data.status();
  // 5 bytes per split: (5 - 1) / 2 = 2 samples each.
  ASSERT_EQ(data->train->size(), 2);
  ASSERT_EQ(data->eval->size(), 2);
  const int64_t one = 1;
  std::vector<float> inputs(2);
  std::vector<int32_t> targets(2);
  data->train->Gather(&one, 1, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<float>{'f', 0xc3}));
  EXPECT_EQ(targets, (std::vector<int32_t>{0xc3, 0xa9}));
  const int64_t both[] = {0, 1};
  inputs.resize(4);
  targets.resize(4);
  data->eval->Gather(both, 2, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<float>{' ', 0xe2, 0x82, 0xac}));
  EXPECT_EQ(targets, (std::vector<int32_t>{0xe2, 0x82, 0xac, '!'}));
}

TEST(TextDatasetErrorTest, RefusesFilesLikeTheCoordinator) {
  TempDir dir;
  absl::StatusOr<Datasets> missing = TextDataset::Load(TextSpec("/nonexistent/kjv.txt", 4, 0.1));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("data.path /nonexistent/kjv.txt does not"));
  const std::string small = dir.Write("small.txt", "In the beginning");  // 16 bytes
  absl::StatusOr<Datasets> too_small = TextDataset::Load(TextSpec(small, 8, 0.5));
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_small.status().message(),
              HasSubstr("its training split has 8 bytes (0 samples)"));
  absl::StatusOr<Datasets> binary =
      TextDataset::Load(TextSpec(dir.Write("b.txt", std::string("ab\0", 3)), 1, 0.5));
  EXPECT_THAT(binary.status().message(), HasSubstr("byte offset 2 is a NUL byte"));
}

}  // namespace
}  // namespace dapple::worker
