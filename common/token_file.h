// Bearer tokens kept in files (issue 16; docs/security.md): the coordinator's admin and join
// token files, dapplectl's --token-file and a context's token-file, dapple-worker's
// --join-token-file.
#ifndef DAPPLE_COMMON_TOKEN_FILE_H_
#define DAPPLE_COMMON_TOKEN_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::common {

// Longest token file read (a token is 85 bytes; anything much longer is not a token file).
inline constexpr size_t kMaxTokenFileBytes = 4096;

// Whether `token` can travel as `authorization: Bearer <token>` metadata: one word of printable
// ASCII (0x21-0x7e). gRPC's client aborts the process on a header value with other bytes and
// logs the value, the secret, in hex: every token is checked here before it is attached.
// kInvalidArgument naming the first bad byte's offset and value, never the token itself:
// "holds byte 0x0a at offset 85: a token is one word of printable characters (dpl_...); is
// there a second line or a stray character?".
absl::Status CheckTokenText(absl::string_view token);

// The token in file `path`, surrounding whitespace removed. kFailedPrecondition naming the file
// and why: "cannot read token file '/x': No such file or directory", "cannot read token file
// '/x': Is a directory", "token file '/x' is empty", "token file '/x' holds more than 4096 bytes:
// it is not a token file", "token file '/x' holds byte 0x0a at offset 85: ..." (CheckTokenText).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace dapple::common

#endif  // DAPPLE_COMMON_TOKEN_FILE_H_
