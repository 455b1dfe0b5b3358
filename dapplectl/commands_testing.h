// What dapplectl's command tests share (commands_test.cc, commands_plan_test.cc): running
// RunDapplectl in process with captured output, spec files in a folder of the test process's
// own, and a fixture with a fake coordinator and no user configuration.
#ifndef DAPPLE_DAPPLECTL_COMMANDS_TESTING_H_
#define DAPPLE_DAPPLECTL_COMMANDS_TESTING_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dapplectl/commands.h"
#include "dapplectl/fake_coordinator_test_util.h"
#include "gtest/gtest.h"

namespace dapple::ctl::testing {

struct Result {
  int code;
  std::string out;
  std::string err;
};

inline Result RunCtl(std::vector<std::string> args, bool terminal = false) {
  args.insert(args.begin(), "dapplectl");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Environment env;
  env.out = &out;
  env.err = &err;
  env.stdout_is_terminal = terminal;
  env.terminal_columns = 200;
  const int code = RunDapplectl(static_cast<int>(argv.size()), argv.data(), env);
  return {code, out.str(), err.str()};
}

// In a folder of this process's own: ctest runs test cases as parallel processes, and two of
// them writing one /tmp/tiny-pbs-4.txt raced (a reader saw it truncated).
inline std::string TestDir() {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/commands_test.", getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline std::string WriteSpec(const std::string& name, const std::string& text) {
  const std::string path = TestDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DAPPLE_COORDINATOR");
    unsetenv("DAPPLE_CA");
    // No user's configuration file (contexts) applies here.
    setenv("DAPPLE_CONFIG", (::testing::TempDir() + "/no-dapple-config.yaml").c_str(), 1);
  }
  dapple::ctl::testing::FakeCoordinator fake_;
  std::string addr_ = fake_.address();
};

}  // namespace dapple::ctl::testing

#endif  // DAPPLE_DAPPLECTL_COMMANDS_TESTING_H_
