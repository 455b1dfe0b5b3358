#include "dapplectl/flag_values.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

TEST(ParsePositiveSecondsTest, AcceptsDecimalSeconds) {
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "10"), absl::Seconds(10));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "0.5"), absl::Milliseconds(500));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", ".25"), absl::Milliseconds(250));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "2."), absl::Seconds(2));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "1e2"), absl::Seconds(100));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "+3"), absl::Seconds(3));
  EXPECT_EQ(*ParsePositiveSeconds("--timeout", "86400"), absl::Hours(24));
}

TEST(ParsePositiveSecondsTest, RefusesEverythingElseNamingFlagAndValue) {
  for (const char* bad :
       {"0",    "-1", "-0.5", "0.0", "0e5", "abc", "nan", "NaN", "inf", "-inf",  "infinity",
        "0x10", "",   " 5",   "5 ",  "5s",  "1e",  "1e+", ".",   "-",   "1e-400"}) {
    absl::StatusOr<absl::Duration> d = ParsePositiveSeconds("--timeout", bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(),
              "--timeout must be a positive number of seconds, got " + QuoteValue(bad));
  }
}

TEST(ParsePositiveSecondsTest, RefusesTooLarge) {
  for (const char* big : {"86400.5", "1e9", "1e400",
                          "179769313486231570000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "0000000000000000000000000000000000000000"
                          "00000000000000000000000000000000000000000"}) {
    absl::StatusOr<absl::Duration> d = ParsePositiveSeconds("--timeout", big);
    ASSERT_FALSE(d.ok()) << big;
    EXPECT_EQ(d.status().message(),
              "--timeout must be at most 86400 seconds (one day), got " + QuoteValue(big));
  }
}

TEST(CheckCoordinatorAddressTest, AcceptsHostPort) {
  for (const char* ok : {"127.0.0.1:7600", "localhost:1", "coord-1.example.com:65535",
                         "my_host:7600", "[::1]:7600", "[fe80::1]:80", "[::ffff:10.0.0.1]:7600"}) {
    EXPECT_TRUE(CheckCoordinatorAddress("--coordinator", ok).ok()) << ok;
  }
}

TEST(CheckCoordinatorAddressTest, RefusesWithTheSourceAndTheReason) {
  struct Case {
    std::string address;
    std::string reason;
  };
  for (const Case& c : {
           Case{"", "empty"},
           Case{"localhost", "no port"},
           Case{":7600", "no host"},
           Case{"localhost:", "no port"},
           Case{"localhost:0", "port 0 is not in 1..65535"},
           Case{"localhost:65536", "port 65536 is not in 1..65535"},
           Case{"localhost:123456", "the port is not a number"},
           Case{"localhost:-1", "the port is not a number"},
           Case{"localhost:http", "the port is not a number"},
           Case{"localhost:76 00", "the port is not a number"},
           Case{"::1:7600", "an IPv6 address goes in brackets: [::1]:7600"},
           Case{"[::1:7600", "an IPv6 address needs its ']'"},
           Case{"[]:7600", "an IPv6 address needs its ']'"},
           Case{"[::g]:7600", "character \"g\" in the IPv6 address"},
           Case{"my host:7600", "character \" \" in the host"},
           Case{"dns:///h:7600", "character \"/\" in the host"},
           Case{"caf\xE9:7600", "character \"\\xE9\" in the host"},
       }) {
    const absl::Status s = CheckCoordinatorAddress("DAPPLE_COORDINATOR", c.address);
    ASSERT_FALSE(s.ok()) << c.address;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(s.message()),
              "DAPPLE_COORDINATOR must be HOST:PORT (e.g. 127.0.0.1:7600), got " +
                  QuoteValue(c.address) + " (" + c.reason + ")");
  }
}

TEST(QuoteValueTest, EscapesWhatCannotBePrintedAsIs) {
  EXPECT_EQ(QuoteValue(""), "\"\"");
  EXPECT_EQ(QuoteValue("abc"), "\"abc\"");
  EXPECT_EQ(QuoteValue("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
  EXPECT_EQ(QuoteValue("caf\xE9"), "\"caf\\xE9\"");
  EXPECT_EQ(QuoteValue("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteValue("a\nb\x7F"), "\"a\\x0Ab\\x7F\"");
  // A backslash of the value is not confused with an escape.
  EXPECT_EQ(QuoteValue("\\xE9"), "\"\\\\xE9\"");
}

TEST(CheckJobIdTest, EmptyIsRefusedAnythingElseIsTheCoordinatorsToJudge) {
  EXPECT_EQ(CheckJobId("").message(),
            "a job id must not be empty (e.g. job-3; see dapplectl list)");
  EXPECT_EQ(CheckJobId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckJobId("job-3").ok());
  EXPECT_TRUE(CheckJobId("nonsense").ok());
  EXPECT_EQ(CheckSpecFileName("").message(), "a job spec file name must not be empty");
  EXPECT_TRUE(CheckSpecFileName("job.yaml").ok());
}

TEST(FlagValuesTest, PositiveCount) {
  EXPECT_EQ(*ParsePositiveCount("--global-batch", "256", 1 << 20), 256);
  EXPECT_EQ(*ParsePositiveCount("--global-batch", "1048576", 1 << 20), 1 << 20);
  for (const char* bad : {"0", "-1", "1.5", "", "1e3", " 3", "1048577", "99999999999999999999"}) {
    absl::StatusOr<int64_t> v = ParsePositiveCount("--global-batch", bad, 1 << 20);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(),
              std::string("--global-batch must be a whole number from 1 to 1048576, got \"") + bad +
                  "\"");
  }
}

}  // namespace
}  // namespace dapple::ctl
