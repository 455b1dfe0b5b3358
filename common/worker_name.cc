#include "common/worker_name.h"

namespace dapple {

bool ValidWorkerName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  // A leading '.' would let a name read as a path component ("..") where one is shown or used.
  if (!alnum(name.front())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace dapple
