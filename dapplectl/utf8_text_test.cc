#include "dapplectl/utf8_text.h"

#include <string>

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(FindTextFaultTest, ValidTextHasNone) {
  EXPECT_FALSE(FindTextFault("").has_value());
  EXPECT_FALSE(FindTextFault("name: fmnist-mlp\n\tlr: 0.1\r\n").has_value());
  // 2-, 3- and 4-byte sequences at the edges of their ranges, and a BOM.
  EXPECT_FALSE(
      FindTextFault("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF").has_value());
  EXPECT_FALSE(FindTextFault("\xEF\xBB\xBFname: x\n").has_value());
  EXPECT_FALSE(FindTextFault("\xED\x9F\xBF \xEE\x80\x80").has_value());  // U+D7FF, U+E000
}

TEST(FindTextFaultTest, Latin1ByteInACommentIsLocated) {
  // "  # caf\xE9" on line 3: columns count characters, so "é" before it counts once.
  const std::string text = "name: x\nmodel: y\n# \xC3\xA9t\xE9 here\n";
  const std::optional<TextFault> f = FindTextFault(text);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, TextFault::Kind::kInvalidUtf8);
  EXPECT_EQ(f->byte, 0xE9);
  EXPECT_EQ(f->offset, 22u);
  EXPECT_EQ(f->line, 3);
  EXPECT_EQ(f->column, 5);
  EXPECT_EQ(DescribeTextFault(*f), "invalid byte 0xE9 at line 3, column 5");
}

TEST(FindTextFaultTest, EveryKindOfInvalidSequence) {
  struct Case {
    std::string text;
    uint8_t byte;
    size_t offset;
  };
  for (const Case& c : {
           Case{"a\x80", 0x80, 1},             // lone continuation byte
           Case{"\xC0\xAF", 0xC0, 0},          // overlong '/'
           Case{"\xC1\xBF", 0xC1, 0},          // overlong
           Case{"\xE0\x80\xAF", 0xE0, 0},      // overlong 3-byte
           Case{"\xF0\x80\x80\xAF", 0xF0, 0},  // overlong 4-byte
           Case{"\xED\xA0\x80", 0xED, 0},      // surrogate U+D800
           Case{"\xF4\x90\x80\x80", 0xF4, 0},  // U+110000
           Case{"\xF5\x80\x80\x80", 0xF5, 0},  // never valid
           Case{"\xFF", 0xFF, 0},              // never valid
           Case{"ab\xE2\x82", 0xE2, 2},        // cut off at the end
           Case{"\xC3(", 0xC3, 0},             // bad continuation
           Case{"\xE2\x82(", 0xE2, 0},         // bad third byte
       }) {
    const std::optional<TextFault> f = FindTextFault(c.text);
    ASSERT_TRUE(f.has_value()) << EscapeInvalidUtf8(c.text);
    EXPECT_EQ(f->kind, TextFault::Kind::kInvalidUtf8) << EscapeInvalidUtf8(c.text);
    EXPECT_EQ(f->byte, c.byte) << EscapeInvalidUtf8(c.text);
    EXPECT_EQ(f->offset, c.offset) << EscapeInvalidUtf8(c.text);
    EXPECT_FALSE(IsValidUtf8(c.text)) << EscapeInvalidUtf8(c.text);
  }
}

TEST(FindTextFaultTest, ControlBytesAreNotText) {
  std::optional<TextFault> f = FindTextFault(std::string("\0\0\0", 3));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, TextFault::Kind::kControl);
  EXPECT_EQ(DescribeTextFault(*f), "control byte 0x00 at line 1, column 1");
  f = FindTextFault("a: 1\nb: \x1B[0m\n");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(DescribeTextFault(*f), "control byte 0x1B at line 2, column 4");
  f = FindTextFault("x\x7F");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->byte, 0x7F);
  // Control bytes are valid UTF-8 all the same: protobuf carries them.
  EXPECT_TRUE(IsValidUtf8(std::string("\0\x1B\x7F", 3)));
}

TEST(EscapeInvalidUtf8Test, EscapesOnlyInvalidBytes) {
  EXPECT_EQ(EscapeInvalidUtf8("caf\xE9.yaml"), "caf\\xE9.yaml");
  EXPECT_EQ(EscapeInvalidUtf8("caf\xC3\xA9.yaml"), "caf\xC3\xA9.yaml");
  EXPECT_EQ(EscapeInvalidUtf8("\xC3(\xFF\xE2\x82"), "\\xC3(\\xFF\\xE2\\x82");
  EXPECT_EQ(EscapeInvalidUtf8("job-1"), "job-1");
  EXPECT_EQ(EscapeInvalidUtf8(""), "");
  // The result is always valid UTF-8.
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  EXPECT_FALSE(IsValidUtf8(all_bytes));
  EXPECT_TRUE(IsValidUtf8(EscapeInvalidUtf8(all_bytes)));
}

}  // namespace
}  // namespace dapple::ctl
