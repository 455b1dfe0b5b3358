#include "dapplectl/checkpoint_views.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec_text.h"
#include "dapplectl/format.h"
#include "dapplectl/text_table.h"

namespace dapple::ctl {
namespace {

// The key column of `dapplectl get` (views.cc): 14 characters.
std::string Field(const std::string& key, const std::string& value) {
  constexpr size_t kKeyWidth = 14;
  std::string line = key;
  line.append(key.size() < kKeyWidth ? kKeyWidth - key.size() : 1, ' ');
  return absl::StrCat(line, value, "\n");
}

// Automatic restarts (training.restart), when there were any: one row each.
std::string RenderRestarts(const v1::Job& job) {
  if (job.restart_history().empty()) return "";
  std::string out =
      Field("RESTARTS", absl::StrCat(job.restarts(), " (",
                                     job_spec_internal::Count(job.steps_redone(), "step", "steps"),
                                     " redone)"));
  TextTable table({"CAUSE", "FAILED AFTER", "RESUMED AFTER", "REDONE", "PLAN"});
  for (const v1::JobRestart& r : job.restart_history()) {
    const bool resumed = r.resumed_unix_ms() > 0;
    table.AddRow({r.cause(), absl::StrCat(r.failed_after_step()),
                  resumed ? absl::StrCat(r.resumed_after_step()) : "-",
                  resumed ? absl::StrCat(r.steps_redone()) : "-",
                  r.plan().empty() ? "-" : r.plan()});
  }
  return out + table.Render("  ");
}

}  // namespace

std::string RenderCheckpoints(const v1::Job& job, int64_t now_unix_ms) {
  std::string out = RenderRestarts(job);
  if (!job.resumed_from().empty()) out += Field("RESUMED FROM", job.resumed_from());
  if (job.checkpoints().empty()) return out + Field("CHECKPOINTS", "none");
  out += Field("CHECKPOINTS", absl::StrCat(job.checkpoints_size()));
  TextTable table({"STEP", "PATH", "SIZE", "REASON", "AGE"});
  for (const v1::CheckpointInfo& c : job.checkpoints()) {
    const double age = std::max<int64_t>(now_unix_ms - c.created_unix_ms(), 0) / 1000.0;
    table.AddRow({absl::StrCat(c.step()), c.path(), FormatBytes(c.bytes()),
                  c.reason().empty() ? "-" : c.reason(), FormatAge(age)});
  }
  return out + table.Render("  ");
}

std::string RenderCheckpointRequested(const v1::CheckpointJobResponse& response) {
  return absl::StrCat(response.job().id(), ": checkpoint after step ", response.step(),
                      " requested\n");
}

}  // namespace dapple::ctl
