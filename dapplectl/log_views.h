// `dapplectl logs`: the log lines of a job's ranks (v1::JobLogLine) as text, and the parsing of
// --rank. Pure functions; thread-safe.
#ifndef DAPPLE_DAPPLECTL_LOG_VIEWS_H_
#define DAPPLE_DAPPLECTL_LOG_VIEWS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::ctl {

// --rank "S/R" -> (S, R); "S" alone means replica 0. kInvalidArgument "--rank must be
// STAGE/REPLICA, e.g. 1/0: got 'x'" otherwise (negative numbers included).
absl::StatusOr<std::pair<int, int>> ParseRank(const std::string& text);

// The lines as text, one per line, each "[S/R WORKER] TEXT" (stage/replica and worker), with
// "WARNING: " / "ERROR: " before the text of warning, error and critical lines. A line whose
// text has several lines has its prefix on each.
//
// collapse: lines with the same level and text from different ranks, in a run of lines no more
// than 2 s apart from the first of them, print once, the ranks listed in the prefix in the
// order they arrived: "[0/0 w-1, 0/1 w-2] TEXT". Lines keep the order of their first occurrence.
std::string RenderLogLines(const google::protobuf::RepeatedPtrField<v1::JobLogLine>& lines,
                           bool collapse);

// The last `n` lines of `text` (lines end with '\n'); all of it when it has at most n. `logs
// --tail N` prints N printed lines: a logged line whose text has several lines (a generated
// sample) prints as several. Pure.
std::string LastLines(const std::string& text, int64_t n);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_LOG_VIEWS_H_
