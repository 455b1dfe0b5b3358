#include "dapplectl/usage_errors.h"

#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(UsageErrorsTest, RepeatedOptionIsNamedWithItsCount) {
  EXPECT_EQ(UsageErrorText("ArgumentMismatch", "--tail: At Most 1 required but received 2", "logs"),
            "--tail given 2 times: give it once (see dapplectl logs --help)");
  EXPECT_EQ(UsageErrorText("ArgumentMismatch", "--output: At Most 1 required but received 3", ""),
            "--output given 3 times: give it once (see dapplectl --help)");
}

TEST(UsageErrorsTest, MissingValueShowsTheForm) {
  EXPECT_EQ(UsageErrorText("ArgumentMismatch", "--rank: 1 required STAGE/REPLICA missing", "logs"),
            "--rank needs a value: --rank STAGE/REPLICA (see dapplectl logs --help)");
}

TEST(UsageErrorsTest, ExtrasInTheOrderTypedFlagsApart) {
  EXPECT_EQ(UsageErrorText("ExtrasError", "The following arguments were not expected: c b", "get"),
            "get: unexpected arguments b, c (see dapplectl get --help)");
  EXPECT_EQ(
      UsageErrorText("ExtrasError", "The following argument was not expected: --bogus", "list"),
      "list: unknown flag --bogus (see dapplectl list --help)");
  EXPECT_EQ(
      UsageErrorText("ExtrasError", "The following arguments were not expected: x --bogus", "get"),
      "get: unknown flag --bogus; unexpected argument x (see dapplectl get --help)");
}

TEST(UsageErrorsTest, AValueWithoutATypeNameIsNotCalledText) {
  EXPECT_EQ(UsageErrorText("ArgumentMismatch", "--output: 1 required TEXT missing", "list"),
            "--output needs a value (see dapplectl list --help)");
}

TEST(UsageErrorsTest, SuggestFlagWithinTwoEdits) {
  const std::vector<std::string> flags = {"--tail", "--rank", "--follow", "-f", "--collapse"};
  EXPECT_EQ(SuggestFlag("--tial", flags), "--tail");
  EXPECT_EQ(SuggestFlag("--tail=3", flags), "--tail");
  EXPECT_EQ(SuggestFlag("--folow", flags), "--follow");
  EXPECT_EQ(SuggestFlag("--collapsed", flags), "--collapse");
  EXPECT_EQ(SuggestFlag("--bogus", flags), "");
  EXPECT_EQ(SuggestFlag("--verbose", {}), "");
}

TEST(UsageErrorsTest, ASuggestionComesBeforeTheHelp) {
  EXPECT_EQ(UsageErrorText("ExtrasError", "The following argument was not expected: --tial", "logs",
                           "--tail"),
            "logs: unknown flag --tial; did you mean --tail? (see dapplectl logs --help)");
}

TEST(UsageErrorsTest, MissingArgumentNamesTheCommand) {
  EXPECT_EQ(UsageErrorText("RequiredError", "FILE is required", "submit"),
            "submit needs FILE (see dapplectl submit --help)");
}

TEST(UsageErrorsTest, OtherErrorsKeepTheirText) {
  EXPECT_EQ(UsageErrorText("ValidationError", "--output: xml not in {table,json,yaml}", "list"),
            "--output: xml not in {table,json,yaml} (see dapplectl list --help)");
  EXPECT_EQ(UsageErrorText("ArgumentMismatch", "something new", ""),
            "something new (see dapplectl --help)");
}

}  // namespace
}  // namespace dapple::ctl
