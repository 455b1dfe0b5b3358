#include "common/schedule/golden_test_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_split.h"

namespace dapple::schedule::testing {

std::string TestdataDir() {
  if (const char* src = std::getenv("DAPPLE_SOURCE_DIR"); src != nullptr && *src != '\0') {
    return std::string(src) + "/common/schedule/testdata";
  }
#ifdef DAPPLE_SCHEDULE_TESTDATA_DIR
  return DAPPLE_SCHEDULE_TESTDATA_DIR;
#else
  const std::string file = __FILE__;
  const size_t slash = file.rfind('/');
  return (slash == std::string::npos ? std::string(".") : file.substr(0, slash)) + "/testdata";
#endif
}

::testing::AssertionResult MatchesGolden(const std::string& name, const std::string& actual) {
  const std::string path = TestdataDir() + "/" + name;
  const char* update = std::getenv("DAPPLE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << actual;
    out.close();
    if (!out) return ::testing::AssertionFailure() << "could not write golden file " << path;
    return ::testing::AssertionSuccess() << "wrote " << path;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return ::testing::AssertionFailure()
           << "cannot read golden file " << path
           << " (set DAPPLE_SOURCE_DIR to the source root, or DAPPLE_UPDATE_GOLDEN=1 to create it)";
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string expected = buffer.str();
  if (expected == actual) return ::testing::AssertionSuccess();

  const std::vector<std::string> want = absl::StrSplit(expected, '\n');
  const std::vector<std::string> got = absl::StrSplit(actual, '\n');
  size_t line = 0;
  while (line < want.size() && line < got.size() && want[line] == got[line]) ++line;
  return ::testing::AssertionFailure()
         << path << " differs at line " << line + 1
         << "\n  golden: " << (line < want.size() ? want[line] : "<end of file>")
         << "\n  actual: " << (line < got.size() ? got[line] : "<end of output>")
         << "\n(rerun with DAPPLE_UPDATE_GOLDEN=1 to rewrite it, then review the diff)";
}

}  // namespace dapple::schedule::testing
