#include "worker/runtime/param_io.h"

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace dapple::worker {

absl::Status SaveParams(const std::string& path, const std::vector<kernels::Param*>& params) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    for (const kernels::Param* p : params) {
      const uint32_t n = static_cast<uint32_t>(p->name.size());
      const uint64_t count = p->value.data.size();
      f.write(reinterpret_cast<const char*>(&n), sizeof(n));
      f.write(p->name.data(), n);
      f.write(reinterpret_cast<const char*>(&count), sizeof(count));
      f.write(reinterpret_cast<const char*>(p->value.data.data()), count * sizeof(float));
    }
    if (!f) return absl::UnavailableError(absl::StrCat("write to ", tmp, " failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::vector<float>>> LoadParams(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("no parameter file ", path));
  std::map<std::string, std::vector<float>> out;
  while (true) {
    uint32_t n = 0;
    if (!f.read(reinterpret_cast<char*>(&n), sizeof(n))) break;
    if (n > 4096) return absl::DataLossError(absl::StrCat(path, ": bad name length"));
    std::string name(n, '\0');
    uint64_t count = 0;
    if (!f.read(name.data(), n) || !f.read(reinterpret_cast<char*>(&count), sizeof(count)) ||
        count > (1ull << 34)) {
      return absl::DataLossError(absl::StrCat(path, ": truncated header"));
    }
    std::vector<float> values(count);
    if (!f.read(reinterpret_cast<char*>(values.data()), count * sizeof(float))) {
      return absl::DataLossError(absl::StrCat(path, ": truncated values of ", name));
    }
    out[name] = std::move(values);
  }
  return out;
}

}  // namespace dapple::worker
