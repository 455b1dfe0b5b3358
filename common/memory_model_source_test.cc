// The memory model is written in one place (common/memory_model.{h,cc}): this test reads every
// C++ source of the project (tests excluded: they may compute expectations on their own) and
// fails on the formula's known shapes anywhere else, naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace dapple::memory {
namespace {

namespace fs = std::filesystem;

struct Rule {
  const char* what;
  const char* needle;  // a substring every match contains (std::regex is slow on every line)
  std::regex pattern;
  std::vector<std::string> allowed;  // path prefixes (from the source root) that may match
};

std::vector<Rule> Rules() {
  const std::vector<std::string> model = {"common/memory_model."};
  return {
      {"weights x (2 + optimizer state): call memory::ParameterStateBytes or "
       "PredictReplicaMemory",
       "ptimizer", std::regex(R"(\b2(\.0)?\s*\+\s*[A-Za-z_.>()\-]*[oO]ptimizer)"), model},
      {"a second optimizer-state table: call memory::OptimizerStateCopies", "Optimizer",
       std::regex(R"(\bOptimizer(State)?(Copies|Factor)\s*\([^)]*\)\s*\{)"), model},
      {"PipeDream's in-flight or version bound: call memory::ActivationsInFlight or "
       "WeightVersions",
       "PipeDreamReplica",
       std::regex(R"(\bPipeDreamReplica(InFlight|Versions)\s*\()"),
       {"common/memory_model.", "common/schedule/"}},
      {"1F1B's in-flight rule min(P - s, M): call memory::ActivationsInFlight or InFlightBound",
       "P - s", std::regex(R"(\bmin(<\w+>)?\(\s*P\s*-\s*s\s*,)"), model},
  };
}

bool Allowed(const std::string& path, const Rule& rule) {
  for (const std::string& prefix : rule.allowed) {
    if (path.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(MemoryModelSourceTest, TheFormulaIsWrittenOnce) {
  const fs::path root = DAPPLE_MEMORY_MODEL_SOURCE_ROOT;
  ASSERT_TRUE(fs::exists(root / "common" / "memory_model.h")) << root;
  const std::vector<Rule> rules = Rules();
  int files = 0;
  for (const char* folder : {"common", "coordinator", "worker", "kernels", "dapplectl", "bench"}) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / folder)) {
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
      if (name.size() > 8 && name.substr(name.size() - 8) == "_test.cc") continue;
      const std::string path = fs::relative(e.path(), root).generic_string();
      std::ifstream in(e.path());
      std::string line;
      int number = 0;
      ++files;
      while (std::getline(in, line)) {
        ++number;
        const size_t comment = line.find("//");
        const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
        for (const Rule& rule : rules) {
          if (code.find(rule.needle) == std::string::npos) continue;
          if (std::regex_search(code, rule.pattern) && !Allowed(path, rule)) {
            ADD_FAILURE() << path << ":" << number << ": " << rule.what << "\n  " << line;
          }
        }
      }
    }
  }
  EXPECT_GT(files, 100) << "the scan found too few sources under " << root;
}

// The rules catch the shapes they were written for (the five copies this test replaced).
TEST(MemoryModelSourceTest, RulesCatchTheOldCopies) {
  const std::vector<Rule> rules = Rules();
  auto caught = [&](const std::string& code) {
    for (const Rule& rule : rules) {
      if (code.find(rule.needle) != std::string::npos && std::regex_search(code, rule.pattern)) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(caught("  const double state_factor = 2.0 + problem.optimizer_state_factor;"));
  EXPECT_TRUE(
      caught("    double weight_bytes = weights * (2.0 + problem.optimizer_state_factor);"));
  EXPECT_TRUE(caught("(2 + OptimizerCopies(spec.training().optimizer()));"));
  EXPECT_TRUE(caught("int OptimizerCopies(const v1::OptimizerSpec& spec) { return 1; }"));
  EXPECT_TRUE(caught("double OptimizerStateFactor(const v1::OptimizerSpec& optimizer) {"));
  EXPECT_TRUE(caught("schedule::PipeDreamReplicaVersions(layout, s) - 1"));
  EXPECT_TRUE(caught("dapple_schedule_ ? std::min<double>(P - s, MaxMicroBatches(r))"));
  EXPECT_TRUE(caught("m.in_flight = std::min(P - s, M);"));
  EXPECT_FALSE(caught("memory::OptimizerStateCopies(spec.training().optimizer())"));
}

}  // namespace
}  // namespace dapple::memory
