// `dapplectl describe`: a job's summary, then its events (Job.events) as Kubernetes prints
// them. Pure functions; `now_unix_ms` is passed in so that ages are testable. Thread-safe.
#ifndef DAPPLE_DAPPLECTL_EVENT_VIEWS_H_
#define DAPPLE_DAPPLECTL_EVENT_VIEWS_H_

#include <cstdint>
#include <string>

#include "dapple/v1/job.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::ctl {

// An event's AGE column, kubectl-style: the age of its last occurrence ("45s"), and for a
// coalesced event also the count and the age of the first: "45s (x3 over 5m)".
std::string EventAge(const v1::JobEventRecord& event, int64_t now_unix_ms);

// "EVENTS" then a TYPE / REASON / AGE / MESSAGE table, newest last (the order given);
// "EVENTS        <none>\n" without events.
std::string RenderJobEvents(const google::protobuf::RepeatedPtrField<v1::JobEventRecord>& events,
                            int64_t now_unix_ms);

// The whole of `describe`: RenderJobDetails and RenderJobScheduling (views.h: owner, tenant,
// priority, preemptions), a blank line, RenderJobEvents.
std::string RenderDescribe(const v1::Job& job, int64_t now_unix_ms);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_EVENT_VIEWS_H_
