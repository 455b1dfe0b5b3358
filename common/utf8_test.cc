#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace dapple {
namespace {

const std::string kFffd = kReplacementCharacter;

TEST(Utf8SequenceLengthTest, WellFormedSequences) {
  EXPECT_EQ(Utf8SequenceLength("a", 0), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(Utf8SequenceLength("\xE2\x82\xAC", 0), 3u);      // €
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x98\x80", 0), 4u);  // U+1F600
}

TEST(Utf8SequenceLengthTest, IllFormedSequences) {
  EXPECT_EQ(Utf8SequenceLength("\x80", 0), 0u);              // continuation byte
  EXPECT_EQ(Utf8SequenceLength("\xC0\xAF", 0), 0u);          // overlong
  EXPECT_EQ(Utf8SequenceLength("\xE0\x80\xAF", 0), 0u);      // overlong
  EXPECT_EQ(Utf8SequenceLength("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(Utf8SequenceLength("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8SequenceLength("\xE2\x82", 0), 0u);          // cut off
  EXPECT_EQ(Utf8SequenceLength("\xFF", 0), 0u);
}

// Quoted in a message, text shows what it holds: "\u202e" reversed the rest of an error line, a
// zero-width space showed as nothing between the quotes.
TEST(QuotableTextTest, EscapesWhatATerminalWouldNotShowAsWritten) {
  EXPECT_EQ(QuotableText("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");  // é 😀
  EXPECT_EQ(QuotableText("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
  EXPECT_EQ(QuotableText("zw\xe2\x80\x8bsp"), "zw\\u200bsp");  // U+200B
  EXPECT_EQ(QuotableText("lin\xe2\x80\xae"
                         "ear"),
            "lin\\u202eear");                                           // U+202E
  EXPECT_EQ(QuotableText("\xef\xbb\xbfx\xc2\x85"), "\\ufeffx\\u0085");  // BOM, C1 NEL
  EXPECT_EQ(QuotableText("\xe2\x80\xa8"), "\\u2028");
  EXPECT_EQ(QuotableText("bad \xff\xc3"), "bad \\xff\\xc3");  // not UTF-8
}

TEST(DisplayTextTest, KeepsTextWithNewlinesAndTabs) {
  const std::string text =
      "In the beginning\n\tGod cr\xC3\xA9"
      "ated";
  EXPECT_EQ(DisplayText(text, 1000), text);
}

TEST(DisplayTextTest, ReplacesEveryInvalidByte) {
  EXPECT_EQ(DisplayText("a\xE9z", 1000), "a" + kFffd + "z");
  EXPECT_EQ(DisplayText("\xFF\xFE", 1000), kFffd + kFffd);
  // A cut-off sequence: its lead byte is replaced, the next byte is looked at on its own.
  EXPECT_EQ(DisplayText("\xE2\x82z", 1000), kFffd + kFffd + "z");
  EXPECT_EQ(DisplayText("x\xE2\x82", 1000), "x" + kFffd + kFffd);
}

TEST(DisplayTextTest, ReplacesControlsThatWouldRedrawTheTerminal) {
  EXPECT_EQ(DisplayText("a\rb", 1000), "a" + kFffd + "b");
  EXPECT_EQ(DisplayText("\x1b[2J", 1000), kFffd + "[2J");
  EXPECT_EQ(DisplayText(std::string("a\0b", 3), 1000), "a" + kFffd + "b");
  EXPECT_EQ(DisplayText("\x7f", 1000), kFffd);
  EXPECT_EQ(DisplayText("\xC2\x9B"
                        "1m",
                        1000),
            kFffd + "1m");                               // C1 CSI
  EXPECT_EQ(DisplayText("\xC2\xA0", 1000), "\xC2\xA0");  // no-break space stays
}

TEST(DisplayTextTest, BoundedAtACharacterBoundary) {
  EXPECT_EQ(DisplayText("abcdef", 4), "abcd");
  EXPECT_EQ(DisplayText("ab\xE2\x82\xAC", 4), "ab");  // the euro sign does not fit
  EXPECT_EQ(DisplayText("ab\xE9", 4), "ab");          // nor does its replacement
  EXPECT_EQ(DisplayText("ab\xE9", 5), "ab" + kFffd);
  EXPECT_EQ(DisplayText("abc", 0), "");
}

TEST(DisplayTextTest, OutputIsValidAndStable) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string shown = DisplayText(all, 10000);
  for (size_t i = 0; i < shown.size();) {
    const size_t n = Utf8SequenceLength(shown, i);
    ASSERT_GT(n, 0u) << "at " << i;
    i += n;
  }
  EXPECT_EQ(DisplayText(shown, 10000), shown);
}

}  // namespace
}  // namespace dapple
