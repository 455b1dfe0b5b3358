// The published profiles of examples/profiles and the clusters of examples/clusters as the
// planner's profile tests use them (profiles_test.cc, schedule_choice_profiles_test.cc): file
// list, batch sizes the files do not state and the global batch of each. Test-only; needs
// DAPPLE_SOURCE_ROOT (the source tree) defined by the test's CMake target.
#ifndef DAPPLE_COORDINATOR_PLANNER_PUBLISHED_PROFILES_TESTING_H_
#define DAPPLE_COORDINATOR_PLANNER_PUBLISHED_PROFILES_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"

#ifndef DAPPLE_SOURCE_ROOT
#error "DAPPLE_SOURCE_ROOT must name the source tree (coordinator/CMakeLists.txt sets it)"
#endif

namespace dapple::coordinator::published {

// Every examples/profiles/{dapple,pipedream}/*.txt, sorted.
inline std::vector<std::string> ProfileFiles() {
  std::vector<std::string> files;
  for (const char* dir : {"dapple", "pipedream"}) {
    const std::filesystem::path path =
        std::filesystem::path(DAPPLE_SOURCE_ROOT) / "examples" / "profiles" / dir;
    if (!std::filesystem::is_directory(path)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (absl::EndsWith(entry.path().string(), ".txt")) files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string Stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

// "dapple/bert-48-pbs-2": the profile's directory and stem.
inline std::string ProfileName(const std::string& path) {
  return std::filesystem::path(path).parent_path().filename().string() + "/" + Stem(path);
}

// PipeDream's GNMT profiles state no batch size: 64 sentences (the embedding's output is
// 64 x 24 tokens x 1024 x 4 bytes).
inline int64_t KnownBatch(const std::string& stem) {
  return stem == "gnmt" || stem == "gnmt_large" ? 64 : 0;
}

// The DAPPLE paper's global batch where it has one (VGG-19 2048, GNMT-16 1024, BERT-48 64,
// XLNet-36 128, AmoebaNet-36 128), otherwise 16 x the profile batch.
inline int64_t GlobalBatch(const std::string& stem, int64_t profile_batch) {
  static const std::map<std::string, int64_t>* const kPaper =
      new std::map<std::string, int64_t>{{"vgg-19-pbs-32", 2048},
                                         {"gnmt-16-pbs-64", 1024},
                                         {"bert-48-pbs-2", 64},
                                         {"xlnet-36-pbs-1", 128},
                                         {"amoeba-36-pbs-1", 128}};
  const auto it = kPaper->find(stem);
  return it != kPaper->end() ? it->second : 16 * profile_batch;
}

inline std::string ClusterFile(const std::string& name) {
  return std::string(DAPPLE_SOURCE_ROOT) + "/examples/clusters/" + name + ".yaml";
}

}  // namespace dapple::coordinator::published

#endif  // DAPPLE_COORDINATOR_PLANNER_PUBLISHED_PROFILES_TESTING_H_
