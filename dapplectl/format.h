// Small pure formatters shared by dapplectl's tables, progress line and summaries: state
// names, durations, percentages, rates. No I/O; thread-safe.
#ifndef DAPPLE_DAPPLECTL_FORMAT_H_
#define DAPPLE_DAPPLECTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dapple/v1/job.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::ctl {

// "PENDING", "RUNNING", "SUCCEEDED", ... (the enum value name without "JOB_STATE_");
// JOB_STATE_UNSPECIFIED -> "UNSPECIFIED"; a value this build does not know -> "STATE_<n>".
std::string JobStateName(v1::JobState state);

// "IDLE", "BUSY", "DEAD", "UNSPECIFIED"; unknown values -> "STATE_<n>".
std::string WorkerStateName(v1::WorkerState state);

// True for SUCCEEDED, FAILED and CANCELLED: states a job never leaves.
bool IsTerminal(v1::JobState state);

// A duration in seconds as a clock: "0:07", "0:42", "12:05", "1:02:03" (hours only when
// >= 1 h), rounded to the nearest second. Negative, NaN or infinite -> "-".
std::string FormatClock(double seconds);

// An age in seconds for tables, kubectl-style, truncated: "0s", "59s", "1m", "59m", "1h",
// "23h", "1d", "400d". Negative (clock skew) counts as 0; NaN -> "-".
std::string FormatAge(double seconds);

// A time left in seconds (a token's expiry), in FormatAge's units but rounded to the nearest:
// a token made with --expires 24h reads "1d" a second later, not "23h"; --expires 90m reads
// "2h" (1.5 h rounds up). A unit is used while the rounded count is below the next
// unit's: "59s", "1m" .. "59m", "1h" .. "23h", "1d" ... Negative -> "0s"; NaN or infinite -> "-".
std::string FormatRemaining(double seconds);

// A fraction in [0, 1] as a percentage with two decimals: 0.87123 -> "87.12%".
std::string FormatPercent(double fraction);

// Training loss with four decimals: "0.4213". NaN -> "nan", infinities -> "inf" / "-inf".
std::string FormatLoss(double loss);

// Samples per second: no decimals from 100 up ("1234"), one decimal below ("12.5").
std::string FormatRate(double samples_per_second);

// Steps as "done/total" ("120/702"), or just "120" when the total is not known (0).
std::string FormatSteps(int64_t step, int64_t total_steps);

// A size in bytes, binary units with one decimal from 1 KiB up: "1 byte", "512 bytes", "1.5 KiB",
// "70.0 MiB", "2.0 GiB". Negative -> "-".
std::string FormatBytes(int64_t bytes);

// Several sizes (one per stage), each with its own unit (FormatBytes), comma-separated:
// {2.3 GiB, 900 MiB, 1536} -> "2.3 GiB, 900.0 MiB, 1.5 KiB" (one unit at the end read as the
// unit of every value, also of those far smaller). Empty -> "-". Negative entries print "-".
std::string FormatByteList(const std::vector<int64_t>& bytes);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_FORMAT_H_
