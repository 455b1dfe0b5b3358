// Flags that name a file a binary reads later (a token file, a tenants file): checked when the
// flags are, so that a wrong path is one usage line at start (exit code 2) in every binary.
// Thread safety: thread-safe.
#ifndef DAPPLE_COMMON_INPUT_FILE_H_
#define DAPPLE_COMMON_INPUT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dapple {

// Whether this process can read `path`, a regular file. kInvalidArgument naming the flag:
//   "--tenants-file '/no/such.yaml' cannot be read: No such file or directory"
//   "--tenants-file '/etc' is a directory; name the file"
absl::Status CheckInputFile(absl::string_view flag, const std::string& path);

}  // namespace dapple

#endif  // DAPPLE_COMMON_INPUT_FILE_H_
