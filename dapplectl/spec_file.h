// Reading a job spec file for `dapplectl submit`: the checks dapplectl makes before sending
// it, so that a file the coordinator could never accept is reported by name, line and column
// instead of as a gRPC error.
#ifndef DAPPLE_DAPPLECTL_SPEC_FILE_H_
#define DAPPLE_DAPPLECTL_SPEC_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"

namespace dapple::ctl {

// The largest job spec dapplectl sends, in bytes: the coordinator's own limit
// (common/job_spec.h), checked here so that a wrong file does not travel.
inline constexpr int64_t kMaxSpecBytes = kMaxJobSpecBytes;

// Checks `text`, the contents of the spec file `name` (as the user typed it; invalid UTF-8 in
// it is escaped in messages), against what SubmitJob accepts. kInvalidArgument:
//   "job.yaml is 1048585 bytes; a job spec may be at most 1048576 bytes (1 MiB)"  (more than
//       kMaxSpecBytes; exact byte counts, never a rounded size that looks within the limit)
//   "job.yaml: not UTF-8 text (invalid byte 0xE9 at line 3, column 5)"  (see FindTextFault;
//       also "control byte 0x00 ..." for NUL and other control bytes)
absl::Status CheckSpecText(absl::string_view name, absl::string_view text);

// Reads the spec file at `path` and checks it with CheckSpecText. A regular file larger than
// kMaxSpecBytes is refused from its size, without reading it; other files (pipes) are read up
// to the limit ("job.yaml is more than 1048576 bytes; ..."). Errors: kNotFound "cannot read job
// spec PATH: <strerror>" for a file that cannot be opened or read; kInvalidArgument from
// CheckSpecText.
absl::StatusOr<std::string> ReadSpecFile(const std::string& path);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_SPEC_FILE_H_
