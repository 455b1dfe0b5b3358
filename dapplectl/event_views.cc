#include "dapplectl/event_views.h"

#include "absl/strings/str_cat.h"
#include "dapplectl/format.h"
#include "dapplectl/text_table.h"
#include "dapplectl/views.h"

namespace dapple::ctl {
namespace {

std::string Age(int64_t then_unix_ms, int64_t now_unix_ms) {
  if (then_unix_ms <= 0) return "-";
  return FormatAge(static_cast<double>(now_unix_ms - then_unix_ms) / 1000.0);
}

}  // namespace

std::string EventAge(const v1::JobEventRecord& event, int64_t now_unix_ms) {
  std::string age = Age(event.last_unix_ms(), now_unix_ms);
  if (event.count() > 1) {
    absl::StrAppend(&age, " (x", event.count(), " over ", Age(event.first_unix_ms(), now_unix_ms),
                    ")");
  }
  return age;
}

std::string RenderJobEvents(const google::protobuf::RepeatedPtrField<v1::JobEventRecord>& events,
                            int64_t now_unix_ms) {
  if (events.empty()) return "EVENTS        <none>\n";
  TextTable table({"TYPE", "REASON", "AGE", "MESSAGE"});
  for (const v1::JobEventRecord& e : events) {
    table.AddRow({e.type(), e.reason(), EventAge(e, now_unix_ms), e.message()});
  }
  return absl::StrCat("EVENTS\n", table.Render("  "));
}

std::string RenderDescribe(const v1::Job& job, int64_t now_unix_ms) {
  return absl::StrCat(RenderJobDetails(job, now_unix_ms), RenderJobScheduling(job), "\n",
                      RenderJobEvents(job.events(), now_unix_ms));
}

}  // namespace dapple::ctl
