#include "worker/data/dataset.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

using ::testing::HasSubstr;

TEST(LoadDatasetsTest, FashionMnistTrainsOnTrainAndEvaluatesOnTest) {
  v1::DataSpec data;
  data.set_dataset("fashion-mnist");
  data.set_path("/usr/share/datasets/fashion-mnist");
  absl::StatusOr<Datasets> loaded = LoadDatasets(data);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->train->size(), 60000);
  EXPECT_EQ(loaded->eval->size(), 10000);
  EXPECT_EQ(loaded->train->sample_elements(), 784);
  EXPECT_EQ(loaded->file_bytes, 0);
}

TEST(LoadDatasetsTest, FashionMnistErrorsNameTheField) {
  v1::DataSpec data;
  data.set_dataset("fashion-mnist");
  data.set_path("/nonexistent/fmnist");
  absl::StatusOr<Datasets> loaded = LoadDatasets(data);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("data.path: fashion-mnist: missing "
                        "/nonexistent/fmnist/train-images-idx3-ubyte.gz"));
}

TEST(LoadDatasetsTest, TextTrainsOnTrainAndEvaluatesOnValidation) {
  std::string pattern = (std::filesystem::temp_directory_path() / "dataset_test.XXXXXX").string();
  const std::string dir = mkdtemp(pattern.data());
  const std::string path = dir + "/t.txt";
  std::ofstream(path) << std::string(101, 'a');
  v1::DataSpec data;
  data.set_dataset("text");
  data.set_path(path);
  data.set_seq_len(10);
  data.set_validation_fraction(0.2);
  absl::StatusOr<Datasets> loaded = LoadDatasets(data);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // floor(80.8) = 80 training bytes: 7 samples; 21 validation bytes: 2.
  EXPECT_EQ(loaded->train->size(), 7);
  EXPECT_EQ(loaded->eval->size(), 2);
  EXPECT_EQ(loaded->file_bytes, 101);
}

TEST(LoadDatasetsTest, UnknownDataset) {
  v1::DataSpec data;
  data.set_dataset("imagenet");
  EXPECT_EQ(LoadDatasets(data).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckSubmittedDataTest, TheFileMustHaveTheSubmittedSize) {
  Datasets loaded;
  loaded.file_bytes = 4298000;
  v1::DataSpec data;
  data.set_path("/d/kjv.txt");
  // Not resolved (a spec that did not go through the coordinator): nothing to compare.
  EXPECT_TRUE(CheckSubmittedData(loaded, data, "worker w-2 (node-a)").ok());
  data.set_file_bytes(4298000);
  EXPECT_TRUE(CheckSubmittedData(loaded, data, "worker w-2 (node-a)").ok());
  data.set_file_bytes(4298239);
  absl::Status s = CheckSubmittedData(loaded, data, "worker w-2 (node-a)");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "data.path /d/kjv.txt has 4298000 bytes on worker w-2 (node-a) but 4298239 bytes "
            "where the job was submitted (data.file_bytes): every worker and the coordinator "
            "need the same file");
}

}  // namespace
}  // namespace dapple::worker
