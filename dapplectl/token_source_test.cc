#include "dapplectl/token_source.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "dapplectl/ctl_config.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/token-source-", getpid(), "-", name);
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(TokenSourceTest, FirstFoundWins) {
  const std::string flag = TempFile("flag", "from-flag\n");
  const std::string env_file = TempFile("env", "from-env-file\n");
  const std::string context = TempFile("context", "from-context\n");
  TokenSources s;
  EXPECT_EQ(*ResolveToken(s), "");  // none: calls go without a token
  s.context_file = context;
  s.context_name = "prod";
  EXPECT_EQ(*ResolveToken(s), "from-context");
  s.env_token_file = env_file.c_str();
  EXPECT_EQ(*ResolveToken(s), "from-env-file");
  s.env_token = " from-env ";
  EXPECT_EQ(*ResolveToken(s), "from-env");
  s.flag_file = flag;
  EXPECT_EQ(*ResolveToken(s), "from-flag");
  for (const std::string& p : {flag, env_file, context}) std::remove(p.c_str());
}

TEST(TokenSourceTest, UnreadableSourcesAreUnauthenticatedAndNamed) {
  TokenSources s;
  s.flag_file = "/no/such/token";
  absl::StatusOr<std::string> t = ResolveToken(s);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated);  // exit code 6
  EXPECT_EQ(t.status().message(),
            "--token-file: cannot read token file '/no/such/token': No such file or directory");
  s = TokenSources();
  s.env_token = "";
  EXPECT_EQ(ResolveToken(s).status().message(), "DAPPLE_TOKEN is empty");
  // gRPC would abort the process on such a header value and log it in hex.
  s.env_token = "dpl_secret\nsecond";
  EXPECT_EQ(ResolveToken(s).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ResolveToken(s).status().message(),
            "DAPPLE_TOKEN holds byte 0x0a at offset 10: a token is one word of printable "
            "characters (dpl_...); is there a second line or a stray character?");
  s = TokenSources();
  s.context_file = "/no/such/token";
  s.context_name = "prod";
  EXPECT_EQ(ResolveToken(s).status().message(),
            "context prod's token-file: cannot read token file '/no/such/token': No such file "
            "or directory");
}

TEST(TokenSourceTest, AContextKeepsItsTokenFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/token-source-", getpid(), ".yaml");
  CtlConfig config;
  config.contexts.push_back(Context{"prod", "c.example:7600", "", "", "", "/home/me/prod.token"});
  ASSERT_TRUE(SaveConfig(path, config).ok());
  absl::StatusOr<CtlConfig> loaded = LoadConfig(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->contexts.at(0).token_file, "/home/me/prod.token");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dapple::ctl
