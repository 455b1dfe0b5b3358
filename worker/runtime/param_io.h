// Writes and reads a rank's parameters as a flat binary file, for the parity harness and
// `dapple-worker --dump-dir`. Format (little-endian): repeated { u32 name length, name bytes,
// u64 element count, float32 values }.
#ifndef DAPPLE_WORKER_RUNTIME_PARAM_IO_H_
#define DAPPLE_WORKER_RUNTIME_PARAM_IO_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/layer.h"

namespace dapple::worker {

// Writes to `path` through a temporary file and rename, so a reader never sees half a file.
// kUnavailable naming the path when it cannot be written.
absl::Status SaveParams(const std::string& path, const std::vector<kernels::Param*>& params);

// name -> values. kNotFound / kDataLoss naming the path.
absl::StatusOr<std::map<std::string, std::vector<float>>> LoadParams(const std::string& path);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_PARAM_IO_H_
