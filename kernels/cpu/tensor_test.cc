#include "kernels/cpu/tensor.h"

#include <vector>

#include "gtest/gtest.h"

namespace dapple::kernels {
namespace {

TEST(TensorTest, EmptyTensor) {
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.rows(), 0);
  EXPECT_EQ(t.cols(), 0);
  EXPECT_EQ(t.bytes(), 0);
}

TEST(TensorTest, ShapeArithmetic) {
  Tensor t = Tensor::Zeros({4, 1, 28, 28});
  EXPECT_EQ(t.numel(), 4 * 784);
  EXPECT_EQ(t.rows(), 4);
  EXPECT_EQ(t.cols(), 784);
  EXPECT_EQ(t.bytes(), 4 * 784 * 4);
  EXPECT_EQ(t.data, std::vector<float>(4 * 784, 0.0f));
  Tensor v = Tensor::Zeros({5});
  EXPECT_EQ(v.rows(), 5);
  EXPECT_EQ(v.cols(), 1);
  EXPECT_EQ(Tensor::Zeros({0, 10}).numel(), 0);
}

TEST(TensorTest, ResizeReusesStorageAndResizeZeroClears) {
  Tensor t;
  t.Resize({8, 8});
  t.Fill(3.0f);
  const float* storage = t.data.data();
  t.Resize({2, 3});
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.data.size(), 6u);
  EXPECT_EQ(t.data.data(), storage);
  t.ResizeZero({4, 4});
  EXPECT_EQ(t.data.data(), storage);
  EXPECT_EQ(t.data, std::vector<float>(16, 0.0f));
}

TEST(TensorTest, ShapeToString) {
  EXPECT_EQ(ShapeToString({256, 784}), "[256, 784]");
  EXPECT_EQ(ShapeToString({7}), "[7]");
  EXPECT_EQ(ShapeToString({}), "[]");
}

}  // namespace
}  // namespace dapple::kernels
