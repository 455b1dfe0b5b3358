#include "dapplectl/text_table.h"

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(TextTableTest, AlignsColumnsWithoutTrailingSpaces) {
  TextTable t({"ID", "NAME", "STATE"});
  t.AddRow({"job-1", "mlp", "RUNNING"});
  t.AddRow({"job-10", "a-longer-name", ""});
  EXPECT_EQ(t.rows(), 2);
  EXPECT_EQ(t.Render(),
            "ID       NAME            STATE\n"
            "job-1    mlp             RUNNING\n"
            "job-10   a-longer-name\n");
}

TEST(TextTableTest, IndentAndShortRows) {
  TextTable t({"A", "B"});
  t.AddRow({"x"});
  t.AddRow({"1", "2", "dropped"});
  EXPECT_EQ(t.Render("  "), "  A   B\n  x\n  1   2\n");
}

TEST(TextTableTest, CountsUtf8CodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3);
  EXPECT_EQ(DisplayWidth("d\xC3\xA9j\xC3\xA0"), 4);  // "déjà"
  TextTable t({"NAME", "X"});
  t.AddRow({"d\xC3\xA9j\xC3\xA0", "1"});
  EXPECT_EQ(t.Render(), "NAME   X\nd\xC3\xA9j\xC3\xA0   1\n");
}

}  // namespace
}  // namespace dapple::ctl
