// `dapplectl trace`: a job's traced steps (trace.proto JobTrace) as Chrome trace-event JSON, the
// format Perfetto (ui.perfetto.dev) and chrome://tracing open ("Trace Event Format", Google,
// JSON Object Format with complete events, ph "X", and metadata events, ph "M").
//
// The object: {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}.
//  - One process per stage: pid = stage + 1 (pid 0 means "no process" to some viewers), named
//    "stage S" (process_name) and sorted by stage (process_sort_index).
//  - One thread per replica: tid = replica + 1, named "replica R (WORKER, DEVICE)" (thread_name,
//    from the rank's newest traced step) and sorted by replica (thread_sort_index).
//  - Every action as a complete event: name "F3" / "B3" (forward / backward of micro-batch 3),
//    "SEND_ACT 3", "RECV_ACT 3", "SEND_GRAD 3", "RECV_GRAD 3", "ALLREDUCE", "OPTIMIZER_STEP";
//    cat the kind in lower case: "forward", "backward", "send", "recv", "allreduce",
//    "optimizer"; args {"step": N, "micro_batch": M} (M = -1 for ALLREDUCE and OPTIMIZER_STEP).
//  - Per rank and traced step, one event "step N" (cat "step") spanning the step, whose args
//    hold "step" and the step's StageStepStats (step_seconds, forward_seconds, ...,
//    idle_seconds, peak_memory_bytes, ...).
//  - The bubble as events "idle" (cat "idle", args {"step": N}), one per gap of the step's
//    timeline not covered by a busy action. The rule: every action is busy except RECV_ACT /
//    RECV_GRAD, which is waiting for a neighbour (job.proto StageStepStats.idle_seconds), so
//    an idle event spans from the end of one busy action (or the step's start) to the start of
//    the next busy one, and contains the RECV events in between, which are drawn too (nested
//    under it). The idle events of a rank's step therefore add up to its stats.idle_seconds up
//    to the microsecond rounding of the events' ends. Gaps of 0 us get no event.
// Times: ts and dur in microseconds (integers), ts relative to the earliest traced step's
// start over all ranks (each rank stamps events with its own system clock: ranks on different
// hosts are only as aligned as the hosts' clocks). Events are written rank by rank, step by
// step, each step's event first, then each idle event before the actions it contains, so that
// nesting is explicit for viewers that sort stably by ts.
//
// Thread-safe (pure functions).
#ifndef DAPPLE_DAPPLECTL_TRACE_JSON_H_
#define DAPPLE_DAPPLECTL_TRACE_JSON_H_

#include <string>

#include "dapple/v1/trace.pb.h"

namespace dapple::ctl {

// The Chrome trace-event JSON of `trace` (see above), pretty enough to diff: one event per
// line. An empty trace gives a valid object with no events.
std::string TraceToChromeJson(const v1::JobTrace& trace);

struct TraceCounts {
  int steps = 0;  // distinct step numbers
  int ranks = 0;  // distinct (stage, replica)
};
TraceCounts CountTrace(const v1::JobTrace& trace);

// The event name of one action: "F3", "B3", "SEND_ACT 3", "OPTIMIZER_STEP", ...
std::string TraceEventName(const v1::TraceEvent& event);
// Its category: "forward", "backward", "send", "recv", "allreduce" (ALLREDUCE, TIED_ALLREDUCE,
// GLOBAL_NORM), "optimizer".
std::string TraceEventCategory(v1::ActionKind kind);

// `s` as a JSON string literal, quotes included (control characters escaped as \u00XX).
std::string JsonString(const std::string& s);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_TRACE_JSON_H_
