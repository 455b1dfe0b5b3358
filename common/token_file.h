// Bearer tokens kept in files (issue 16; docs/security.md): the coordinator's admin and join
// token files, dapplectl's --token-file and a context's token-file, dapple-worker's
// --join-token-file.
#ifndef DAPPLE_COMMON_TOKEN_FILE_H_
#define DAPPLE_COMMON_TOKEN_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace dapple::common {

// Longest token file read (a token is 85 bytes; anything much longer is not a token file).
inline constexpr size_t kMaxTokenFileBytes = 4096;

// The token in file `path`, surrounding whitespace removed. kFailedPrecondition naming the file
// and why: "cannot read token file '/x': No such file or directory", "token file '/x' is empty",
// "token file '/x' holds more than 4096 bytes: it is not a token file".
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace dapple::common

#endif  // DAPPLE_COMMON_TOKEN_FILE_H_
