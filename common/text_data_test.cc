#include "common/text_data.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple {
namespace {

using ::testing::AllOf;
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

TEST(LayoutTextTest, SplitsTheBytesAndCountsOverlappingSamples) {
  // 100 bytes, 5% validation: train bytes [0, 95), validation [95, 100). Samples of T = 4 need
  // T + 1 bytes and share one: (95 - 1) / 4 = 23 and (5 - 1) / 4 = 1.
  const TextLayout layout = LayoutText(100, 4, 0.05);
  EXPECT_EQ(layout.train.begin, 0);
  EXPECT_EQ(layout.train.bytes, 95);
  EXPECT_EQ(layout.train.samples, 23);
  EXPECT_EQ(layout.validation.begin, 95);
  EXPECT_EQ(layout.validation.bytes, 5);
  EXPECT_EQ(layout.validation.samples, 1);
}

TEST(LayoutTextTest, FloorsTheDecimalProduct) {
  // 100 * (1 - 0.05) is 94.99999999999999 in binary floating point; the split is still 95.
  EXPECT_EQ(LayoutText(100, 1, 0.05).train.bytes, 95);
  EXPECT_EQ(LayoutText(10, 1, 0.3).train.bytes, 7);
  EXPECT_EQ(LayoutText(10, 1, 0.1).train.bytes, 9);
  // A real fraction of a byte is floored.
  EXPECT_EQ(LayoutText(99, 1, 0.05).train.bytes, 94);  // 94.05
  EXPECT_EQ(LayoutText(19, 1, 0.5).train.bytes, 9);    // 9.5
  EXPECT_EQ(LayoutText(19, 1, 0.5).validation.bytes, 10);
  // The King James Bible of scripts/setup at the default fraction.
  const TextLayout kjv = LayoutText(4298239, 128, 0.05);
  EXPECT_EQ(kjv.train.bytes, 4083327);  // floor(4083327.05)
  EXPECT_EQ(kjv.validation.bytes, 214912);
  EXPECT_EQ(kjv.train.samples, 31900);  // floor(4083326 / 128)
  EXPECT_EQ(kjv.validation.samples, 1678);
}

TEST(LayoutTextTest, ASampleNeedsSeqLenPlusOneBytes) {
  // 20 bytes at 0.5: 10 and 10. T = 9 fits once (10 bytes), T = 10 not at all.
  EXPECT_EQ(LayoutText(20, 9, 0.5).train.samples, 1);
  EXPECT_EQ(LayoutText(20, 9, 0.5).validation.samples, 1);
  EXPECT_EQ(LayoutText(20, 10, 0.5).train.samples, 0);
  EXPECT_EQ(LayoutText(20, 10, 0.5).validation.samples, 0);
  EXPECT_EQ(LayoutText(0, 4, 0.05).train.samples, 0);
  EXPECT_EQ(LayoutText(1, 1, 0.05).train.samples, 0);
}

TEST(CheckedTextLayoutTest, RefusesAFileTooSmallForOneSamplePerSplit) {
  absl::StatusOr<TextLayout> layout = CheckedTextLayout(TextSpec("/d/tiny.txt", 64, 0.05), 100);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layout.status().message(),
            "data.path /d/tiny.txt has 100 bytes: with data.seq_len 64 and "
            "data.validation_fraction 0.05 its training split has 95 bytes (1 sample) and its "
            "validation split 5 bytes (0 samples); each split needs at least data.seq_len + 1 = "
            "65 bytes for one sample: use a longer file, a smaller data.seq_len or a larger "
            "data.validation_fraction");
  // Exactly one sample in each split is enough.
  EXPECT_TRUE(CheckedTextLayout(TextSpec("/d/x.txt", 9, 0.5), 20).ok());
  EXPECT_FALSE(CheckedTextLayout(TextSpec("/d/x.txt", 10, 0.5), 20).ok());
}

TEST(FirstNonTextByteTest, AcceptsUtf8Text) {
  EXPECT_EQ(FirstNonTextByte(""), -1);
  EXPECT_EQ(FirstNonTextByte("In the beginning\n\tGod\r\n"), -1);
  EXPECT_EQ(FirstNonTextByte("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"), -1);
}

TEST(FirstNonTextByteTest, FindsTheFirstBadByte) {
  EXPECT_EQ(FirstNonTextByte(std::string("ab\0cd", 5)), 2);
  EXPECT_EQ(FirstNonTextByte("abc\xff"), 3);
  EXPECT_EQ(FirstNonTextByte("\x80"), 0);               // stray continuation byte
  EXPECT_EQ(FirstNonTextByte("a\xc0\x80"), 1);          // overlong NUL
  EXPECT_EQ(FirstNonTextByte("ab\xed\xa0\x80"), 2);     // surrogate U+D800
  EXPECT_EQ(FirstNonTextByte("\xf4\x90\x80\x80"), 0);   // above U+10FFFF
  EXPECT_EQ(FirstNonTextByte("\xc3\xa9z\xe2\x82"), 3);  // cut short by the end
  EXPECT_EQ(FirstNonTextByte("\xe2\x82z"), 0);          // cut short by an ASCII byte
  EXPECT_EQ(FirstNonTextByte(std::string("\xc3\xa9\0", 3)), 2);
}

TEST(TextFileTest, MapsTheWholeFile) {
  TempDir dir;
  const std::string text = "And God said, Let there be light: and there was light.\n";
  const std::string path = dir.Write("a.txt", text);
  absl::StatusOr<std::unique_ptr<const TextFile>> file = TextFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ((*file)->bytes(), text);
}

class TextFileErrorTest : public ::testing::Test {
 protected:
  // Open(path) fails with `code` and a message naming data.path, the path and `problem`.
  void ExpectRefused(const std::string& path, absl::StatusCode code, const std::string& problem,
                     int64_t max_bytes = kMaxTextFileBytes) {
    absl::StatusOr<std::unique_ptr<const TextFile>> file = TextFile::Open(path, max_bytes);
    ASSERT_EQ(file.status().code(), code) << file.status();
    EXPECT_THAT(file.status().message(), AllOf(HasSubstr("data.path " + path), HasSubstr(problem)));
    EXPECT_EQ(file.status().message().find('\n'), absl::string_view::npos);
  }
  TempDir dir_;
};

TEST_F(TextFileErrorTest, Missing) {
  ExpectRefused(dir_.path() + "/none.txt", absl::StatusCode::kNotFound,
                "does not exist (scripts/setup writes the King James Bible to "
                "/var/lib/dapple/datasets/kjv.txt)");
}

TEST_F(TextFileErrorTest, Unreadable) {
  // A path through a regular file (root reads every file, so no permission test).
  const std::string file = dir_.Write("a.txt", "text");
  ExpectRefused(file + "/b.txt", absl::StatusCode::kInvalidArgument,
                "cannot be read: Not a directory");
}

TEST_F(TextFileErrorTest, Directory) {
  ExpectRefused(dir_.path(), absl::StatusCode::kInvalidArgument,
                "is a directory; data.dataset text reads one text file");
}

TEST_F(TextFileErrorTest, NotARegularFile) {
  const std::string fifo = dir_.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectRefused(fifo, absl::StatusCode::kInvalidArgument, "is not a regular file");
  ExpectRefused("/dev/null", absl::StatusCode::kInvalidArgument, "is not a regular file");
}

TEST_F(TextFileErrorTest, Empty) {
  ExpectRefused(dir_.Write("empty.txt", ""), absl::StatusCode::kInvalidArgument,
                "is empty; data.dataset text needs a text file");
}

TEST_F(TextFileErrorTest, LargerThanTheCap) {
  const std::string path = dir_.Write("big.txt", std::string(11, 'a'));
  ExpectRefused(path, absl::StatusCode::kInvalidArgument,
                "has 11 bytes, more than the 10 bytes a text dataset may have", 10);
  EXPECT_TRUE(TextFile::Open(path, 11).ok());
  EXPECT_EQ(kMaxTextFileBytes, 1073741824);
}

TEST_F(TextFileErrorTest, NulByte) {
  ExpectRefused(dir_.Write("nul.txt", std::string("abc\0def", 7)),
                absl::StatusCode::kInvalidArgument,
                "is not text: byte offset 3 is a NUL byte; data.dataset text reads UTF-8 text");
}

TEST_F(TextFileErrorTest, InvalidUtf8) {
  ExpectRefused(dir_.Write("latin1.txt", "caf\xc3\xa9 na\xefve"),
                absl::StatusCode::kInvalidArgument,
                "is not text: byte offset 8 (0xef) does not start a valid UTF-8 sequence");
}

TEST_F(TextFileErrorTest, PathOnOneLine) {
  absl::StatusOr<std::unique_ptr<const TextFile>> file =
      TextFile::Open(dir_.path() + "/new\nline.txt");
  ASSERT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr(dir_.path() + "/new\\x0aline.txt does not"));
}

TEST(ResolveTextDataTest, FillsTheCountsAndTheFileSize) {
  TempDir dir;
  v1::DataSpec data = TextSpec(dir.Write("t.txt", std::string(100, 'x')), 4, 0.05);
  ASSERT_TRUE(ResolveTextData(&data).ok());
  EXPECT_EQ(data.train_samples(), 23);
  EXPECT_EQ(data.eval_samples(), 1);
  EXPECT_EQ(data.file_bytes(), 100);
}

TEST(ResolveTextDataTest, PassesTheFileErrorsOn) {
  TempDir dir;
  v1::DataSpec data = TextSpec(dir.Write("t.txt", std::string(100, 'x')), 64, 0.05);
  absl::Status s = ResolveTextData(&data);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("each split needs at least data.seq_len + 1 = 65 bytes"));
  EXPECT_EQ(data.train_samples(), 0);
  data.set_path(dir.path() + "/none.txt");
  EXPECT_EQ(ResolveTextData(&data).code(), absl::StatusCode::kNotFound);
}

TEST(ResolveTextDataTest, LeavesOtherDatasetsAlone) {
  v1::DataSpec data;
  data.set_dataset("fashion-mnist");
  data.set_path("/nonexistent");
  data.set_train_samples(60000);
  ASSERT_TRUE(ResolveTextData(&data).ok());
  EXPECT_EQ(data.train_samples(), 60000);
  EXPECT_EQ(data.file_bytes(), 0);
}

}  // namespace
}  // namespace dapple
