#include "dapplectl/config_command.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "dapplectl/ctl_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::testing::HasSubstr;

std::string FreshPath(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/dapple-config-" + name + "/config.yaml";
  std::remove(path.c_str());
  return path;
}

ConfigAction Set(const std::string& name, const std::string& coordinator) {
  ConfigAction a;
  a.verb = "set-context";
  a.name = name;
  a.coordinator = coordinator;
  return a;
}

TEST(ConfigCommandTest, ContextsAreCreatedUsedAndDeleted) {
  const std::string path = FreshPath("roundtrip");
  ConfigAction view;
  view.verb = "view";
  EXPECT_EQ(*RunConfigAction(path, view), "no contexts\nFILE          " + path + "\n");
  const std::string ca =
      std::filesystem::path(::testing::TempDir() + "/dapple-config-ca.pem").lexically_normal();
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\n";
  ConfigAction prod = Set("prod", "coord.example:7600");
  prod.ca = ca;
  const std::string token =
      std::filesystem::path(::testing::TempDir() + "/dapple-config-prod.token").lexically_normal();
  std::ofstream(token) << "dpl_x\n";
  prod.token_file = token;
  EXPECT_EQ(*RunConfigAction(path, prod), "context prod created\n");
  EXPECT_EQ(*RunConfigAction(path, Set("local", "127.0.0.1:7600")), "context local created\n");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // may name key files: the user's alone
  ConfigAction use;
  use.verb = "use-context";
  use.name = "prod";
  EXPECT_EQ(*RunConfigAction(path, use), "switched to context prod\n");
  const std::string table = *RunConfigAction(path, view);
  EXPECT_THAT(table, HasSubstr("CA" + std::string(ca.size() - 2 + 3, ' ') + "TOKEN-FILE\n"));
  EXPECT_THAT(table,
              HasSubstr("*         prod    coord.example:7600   " + ca + "   " + token + "\n"));
  // A context without a token-file shows "-".
  EXPECT_THAT(table, HasSubstr("local   127.0.0.1:7600       - (plain text)"));
  EXPECT_THAT(table, ::testing::ContainsRegex("local +127.0.0.1:7600 +- \\(plain text\\) +-\n"));
  absl::StatusOr<CtlConfig> loaded = LoadConfig(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->current_context, "prod");
  ASSERT_EQ(loaded->contexts.size(), 2u);
  EXPECT_EQ(FindContext(*loaded, "prod")->ca, ca);
  // An update keeps what is not given.
  ConfigAction update;
  update.verb = "set-context";
  update.name = "prod";
  update.coordinator = "coord2.example:7600";
  EXPECT_EQ(*RunConfigAction(path, update), "context prod updated\n");
  EXPECT_EQ(FindContext(*LoadConfig(path), "prod")->ca, ca);
  ConfigAction del;
  del.verb = "delete-context";
  del.name = "prod";
  EXPECT_EQ(*RunConfigAction(path, del), "context prod deleted\n");
  EXPECT_EQ(LoadConfig(path)->current_context, "");
}

TEST(ConfigCommandTest, MistakesAreNamed) {
  const std::string path = FreshPath("mistakes");
  ConfigAction use;
  use.verb = "use-context";
  use.name = "nope";
  EXPECT_EQ(RunConfigAction(path, use).status().message(),
            "no context 'nope' in " + path + " (contexts: none)");
  ConfigAction bare;
  bare.verb = "set-context";
  bare.name = "prod";
  EXPECT_THAT(RunConfigAction(path, bare).status().message(),
              HasSubstr("a new context needs --coordinator"));
  EXPECT_THAT(RunConfigAction(path, Set("Prod!", "a:1")).status().message(),
              HasSubstr("context name 'Prod!' must be 1-63 characters"));
  EXPECT_THAT(RunConfigAction(path, Set("prod", "nohost")).status().message(),
              HasSubstr("--coordinator must be HOST:PORT"));
  EXPECT_EQ(RunConfigAction("", use).status().code(), absl::StatusCode::kFailedPrecondition);
  // Files must exist now, and are kept absolute (the working folder changes).
  ConfigAction missing = Set("prod", "a:1");
  missing.ca = "no/such/ca.pem";
  EXPECT_EQ(RunConfigAction(path, missing).status().message(),
            "--ca no/such/ca.pem: No such file or directory");
  const std::string here = std::filesystem::current_path().string();
  std::ofstream("dapple-config-relative-ca.pem") << "x";
  ConfigAction relative = Set("rel", "a:1");
  relative.ca = "./dapple-config-relative-ca.pem";
  ASSERT_TRUE(RunConfigAction(path, relative).ok());
  EXPECT_EQ(FindContext(*LoadConfig(path), "rel")->ca, here + "/dapple-config-relative-ca.pem");
  std::remove("dapple-config-relative-ca.pem");
}

TEST(ConfigCommandTest, BadFilesSayWhereAndWhat) {
  const std::string path = FreshPath("bad");
  ASSERT_TRUE(RunConfigAction(path, Set("a", "127.0.0.1:1")).ok());
  auto load = [&](const std::string& text) {
    std::ofstream(path) << text;
    return std::string(LoadConfig(path).status().message());
  };
  EXPECT_THAT(load("contexts: [\n"), HasSubstr(path + ":2:1: "));
  EXPECT_EQ(load("context: []\n"), path + ": unknown key 'context' (current-context, contexts)");
  EXPECT_EQ(load("contexts:\n  - {name: a, coordinator: x:1, token: t}\n"),
            path +
                ": unknown key 'token' in a context (name, coordinator, ca, tls-cert, tls-key, "
                "token-file)");
  EXPECT_EQ(load("current-context: b\ncontexts:\n  - {name: a, coordinator: x:1}\n"),
            path + ": current-context 'b' names no context (a)");
  EXPECT_EQ(load("contexts:\n  - {name: a}\n"), path + ": context 'a' has no coordinator");
  EXPECT_EQ(load("contexts:\n  - {name: a, coordinator: x:1}\n  - {name: a, coordinator: y:1}\n"),
            path + ": context 'a' is defined twice");
  EXPECT_TRUE(LoadConfig(FreshPath("missing")).ok());  // no file: no contexts
}

}  // namespace
}  // namespace dapple::ctl
