#include "worker/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/sample_order.h"

namespace dapple::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kDebianDir[] = "/usr/share/datasets/fashion-mnist";

// The Debian training set, loaded once per process (ctest runs each test in its own process).
const absl::StatusOr<FashionMnist>& DebianTrain() {
  static const auto* train =
      new absl::StatusOr<FashionMnist>(LoadFashionMnist(kDebianDir, Split::kTrain));
  return *train;
}

using ::dapple::testing::TempDir;

void PutBigEndian32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

// IDX images: magic, count, rows, cols, then `payload_images` images of pixel value i % 256.
std::string ImagesIdx(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                      int64_t payload_images) {
  std::string out;
  PutBigEndian32(out, magic);
  PutBigEndian32(out, count);
  PutBigEndian32(out, rows);
  PutBigEndian32(out, cols);
  for (int64_t i = 0; i < payload_images * rows * cols; ++i) out.push_back(static_cast<char>(i));
  return out;
}

std::string LabelsIdx(uint32_t magic, uint32_t count, const std::vector<uint8_t>& labels) {
  std::string out;
  PutBigEndian32(out, magic);
  PutBigEndian32(out, count);
  out.append(labels.begin(), labels.end());
  return out;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadPlain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A valid 3-sample train split in `dir`.
void WriteValidTrain(const TempDir& dir) {
  WriteGz(dir.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 3));
  WriteGz(dir.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {7, 0, 9}));
}

TEST(FashionMnistTest, LoadsTheDebianTrainingSet) {
  const absl::StatusOr<FashionMnist>& train = DebianTrain();
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(train->sample_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(train->sample_elements(), 784);
  EXPECT_EQ(train->targets_per_sample(), 1);
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_FALSE(train->token_inputs());
  ASSERT_EQ(train->pixels().size(), 60000u * 784u);
  ASSERT_EQ(train->labels().size(), 60000u);
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : train->labels()) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 6000) << "class " << c;
  double sum = 0;
  for (uint8_t p : train->pixels()) sum += p;
  const double mean = sum / 255.0 / static_cast<double>(train->pixels().size());
  EXPECT_NEAR(mean, 0.2860, 1e-3);
  // The first training sample of Fashion-MNIST is an ankle boot (class 9).
  EXPECT_EQ(train->labels()[0], 9);
}

TEST(FashionMnistTest, LoadsTheDebianTestSet) {
  absl::StatusOr<FashionMnist> test = LoadFashionMnist(kDebianDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  ASSERT_EQ(test->pixels().size(), 10000u * 784u);
  ASSERT_EQ(test->labels().size(), 10000u);
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : test->labels()) ++per_class[label];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;
}

TEST(FashionMnistTest, AcceptsAFolderWithATrailingSlash) {
  TempDir dir;
  WriteValidTrain(dir);
  absl::StatusOr<FashionMnist> data = LoadFashionMnist(dir.path() + "/", Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3);
  EXPECT_EQ(data->labels(), (std::vector<int32_t>{7, 0, 9}));
  ASSERT_EQ(data->pixels().size(), 3u * 784u);
  EXPECT_EQ(data->pixels()[1], 1);
  EXPECT_EQ(data->pixels()[784], 784 % 256);
}

TEST(FashionMnistTest, MissingFolderIsNotFoundNamingTheFileAndThePackage) {
  absl::StatusOr<FashionMnist> data = LoadFashionMnist("/nonexistent/fmnist", Split::kTrain);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kNotFound) << data.status();
  EXPECT_THAT(data.status().message(),
              AllOf(HasSubstr("missing /nonexistent/fmnist/train-images-idx3-ubyte.gz"),
                    HasSubstr("dataset-fashion-mnist"), HasSubstr("data.path")));
}

TEST(FashionMnistTest, MissingLabelsFileIsNotFound) {
  TempDir dir;
  WriteGz(dir.File("t10k-images-idx3-ubyte.gz"), ImagesIdx(2051, 2, 28, 28, 2));
  absl::StatusOr<FashionMnist> data = LoadFashionMnist(dir.path(), Split::kTest);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kNotFound) << data.status();
  EXPECT_THAT(data.status().message(), HasSubstr(dir.File("t10k-labels-idx1-ubyte.gz")));
}

class CorruptFileTest : public ::testing::Test {
 protected:
  void ExpectDataLoss(const std::string& file, const std::string& problem) {
    absl::StatusOr<FashionMnist> data = LoadFashionMnist(dir_.path(), Split::kTrain);
    ASSERT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();
    EXPECT_THAT(data.status().message(), AllOf(HasSubstr(dir_.File(file)), HasSubstr(problem)));
  }
  TempDir dir_;
};

TEST_F(CorruptFileTest, TruncatedPayload) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 2));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 2, 3}));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "truncated");
}

TEST_F(CorruptFileTest, TruncatedGzipStream) {
  WriteValidTrain(dir_);
  const std::string path = dir_.File("train-images-idx3-ubyte.gz");
  const std::string whole = ReadPlain(path);
  ASSERT_GT(whole.size(), 40u);
  WritePlain(path, whole.substr(0, whole.size() / 2));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "truncated");
}

TEST_F(CorruptFileTest, TruncatedHeader) {
  WriteValidTrain(dir_);
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), std::string("\0\0\x08", 3));
  ExpectDataLoss("train-labels-idx1-ubyte.gz", "8-byte IDX header");
}

TEST_F(CorruptFileTest, BadImagesMagic) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2049, 3, 28, 28, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 2, 3}));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "magic number 2049, expected 2051");
}

TEST_F(CorruptFileTest, BadLabelsMagic) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2051, 3, {1, 2, 3}));
  ExpectDataLoss("train-labels-idx1-ubyte.gz", "magic number 2051, expected 2049");
}

TEST_F(CorruptFileTest, NotGzip) {
  WritePlain(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 2, 3}));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "not a gzip file");
}

TEST_F(CorruptFileTest, EmptyFile) {
  WriteValidTrain(dir_);
  WritePlain(dir_.File("train-labels-idx1-ubyte.gz"), "");
  ExpectDataLoss("train-labels-idx1-ubyte.gz", "empty");
}

TEST_F(CorruptFileTest, WrongImageSize) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 32, 32, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 2, 3}));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "32x32 images, expected 28x28");
}

TEST_F(CorruptFileTest, LabelCountDiffersFromImageCount) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 2, {1, 2}));
  ExpectDataLoss("train-labels-idx1-ubyte.gz", "2 labels but its images file has 3 images");
}

TEST_F(CorruptFileTest, LabelOutOfRange) {
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), ImagesIdx(2051, 3, 28, 28, 3));
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 10, 3}));
  ExpectDataLoss("train-labels-idx1-ubyte.gz", "label 10 of sample 1 is out of range");
}

TEST_F(CorruptFileTest, TrailingData) {
  std::string images = ImagesIdx(2051, 3, 28, 28, 3);
  images += "extra";
  WriteGz(dir_.File("train-images-idx3-ubyte.gz"), images);
  WriteGz(dir_.File("train-labels-idx1-ubyte.gz"), LabelsIdx(2049, 3, {1, 2, 3}));
  ExpectDataLoss("train-images-idx3-ubyte.gz", "data after the samples");
}

TEST(FashionMnistGatherTest, NormalisesPixelsAndCopiesLabels) {
  std::vector<uint8_t> pixels(3 * 784, 0);
  for (int k = 0; k < 784; ++k) {
    pixels[k] = 0;
    pixels[784 + k] = 255;
    pixels[2 * 784 + k] = static_cast<uint8_t>(k % 256);
  }
  const FashionMnist data(std::move(pixels), {4, 8, 1});
  const int64_t indices[] = {2, 0, 1, 2};
  std::vector<float> images(4 * 784, -100.0f);
  std::vector<int32_t> labels(4, -1);
  data.Gather(indices, 4, images.data(), labels.data());
  EXPECT_EQ(labels, (std::vector<int32_t>{1, 4, 8, 1}));
  const float at0 = -kFashionMnistMean / kFashionMnistStd;
  const float at255 = (1.0f - kFashionMnistMean) / kFashionMnistStd;
  EXPECT_NEAR(at0, -0.8102f, 1e-4);
  EXPECT_NEAR(at255, 2.0227f, 1e-4);
  for (int k = 0; k < 784; ++k) {
    ASSERT_NEAR(images[k], ((k % 256) / 255.0f - kFashionMnistMean) / kFashionMnistStd, 1e-6) << k;
    ASSERT_NEAR(images[784 + k], at0, 1e-6);
    ASSERT_NEAR(images[2 * 784 + k], at255, 1e-6);
    ASSERT_EQ(images[3 * 784 + k], images[k]);
  }
}

TEST(FashionMnistGatherTest, EitherOutputMayBeNull) {
  const FashionMnist data(std::vector<uint8_t>(2 * 784, 51), {3, 6});  // 51 / 255 = 0.2
  const int64_t indices[] = {1};
  std::vector<float> images(784, 0.0f);
  data.Gather(indices, 1, images.data(), nullptr);
  EXPECT_NEAR(images[100], (0.2f - kFashionMnistMean) / kFashionMnistStd, 1e-6);
  int32_t label = -1;
  data.Gather(indices, 1, nullptr, &label);
  EXPECT_EQ(label, 6);
}

TEST(FashionMnistGatherTest, NormalisedTrainingSetHasZeroMeanAndUnitStd) {
  const absl::StatusOr<FashionMnist>& train = DebianTrain();
  ASSERT_TRUE(train.ok()) << train.status();
  const int64_t n = 5000;
  std::vector<int64_t> indices = EpochOrder(train->size(), 7, 0);
  std::vector<float> images(n * 784);
  train->Gather(indices.data(), n, images.data(), nullptr);
  double sum = 0, sum_sq = 0;
  for (float v : images) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / images.size();
  const double std_dev = std::sqrt(sum_sq / images.size() - mean * mean);
  // A random 5000-sample subset: statistics close to the whole set's (0 and 1).
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std_dev, 1.0, 0.02);
}

}  // namespace
}  // namespace dapple::worker
