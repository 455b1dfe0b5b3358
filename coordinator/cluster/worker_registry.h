// WorkerRegistry: the workers known to the coordinator and the worker lifecycle
// (v1::WorkerState), changed only by WorkerRegistry::Transition.
//
//                        job assigned
//   RegisterWorker ──▶ IDLE ◀──────────▶ BUSY
//                       │ ▲   job done, or   │
//                       │ │   ended and no   │
//                       │ │   longer reported│
//                       │ │ RegisterWorker   │
//                       │ │ (same name)      │
//                       ▼ │                  │
//                       DEAD ◀───────────────┘
//                 no heartbeat for worker_timeout_ms (a DEAD worker's Heartbeat is answered
//                 with unknown_worker, so it registers again)
//
//   IDLE -> BUSY, BUSY -> IDLE, IDLE | BUSY -> DEAD, DEAD -> IDLE (re-registration only).
//   Any state -> removed (Remove: the worker deregistered because it is shutting down, or it
//   was DEAD for the retention period, see ForgettableDead).
//
// Thread safety: thread-compatible. The coordinator service guards it with its own mutex,
// because worker and job changes must happen together.
#ifndef DAPPLE_COORDINATOR_CLUSTER_WORKER_REGISTRY_H_
#define DAPPLE_COORDINATOR_CLUSTER_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/cluster/worker_observer.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

struct WorkerRecord {
  // id, hostname, pid, devices, state, job_id and stage (while BUSY), last_heartbeat_unix_ms.
  v1::WorkerInfo info;
  // running_job_id of the worker's last heartbeat ("" before its first one).
  std::string reported_job_id;
  // Set when the worker is given a stage; handed out (and cleared) by the next heartbeat.
  std::optional<v1::StageAssignment> pending_assignment;
  // When the worker became DEAD (ms since the Unix epoch; set by whoever moves it there, 0
  // while it is not DEAD). DEAD workers are forgotten some time after it (ForgettableDead).
  int64_t dead_since_unix_ms = 0;
  // The profile request the worker said it is measuring (registration, heartbeat, or a busy
  // answer to ReportProfile), "" when none, and since when (ms since the Unix epoch; 0 when
  // none). After a coordinator restart it may be a request of the previous coordinator.
  std::string measuring_request_id;
  int64_t measuring_since_unix_ms = 0;
  // RegisterWorkerRequest.instance_key of the registration that made this record ("" for a
  // worker that sent none): only a registration with the same key is a retry of it.
  std::string instance_key;
  // Records what the worker says it measures now (a new request id restarts the clock).
  void NoteMeasuring(const std::string& request_id, int64_t now_unix_ms) {
    if (request_id != measuring_request_id) measuring_since_unix_ms = now_unix_ms;
    measuring_request_id = request_id;
    if (request_id.empty()) measuring_since_unix_ms = 0;
  }
};

// Whether `presented` is the non-empty instance key `known` (RegisterWorkerRequest.instance_key),
// compared in time independent of where they differ.
bool SameInstanceKey(absl::string_view known, absl::string_view presented);

// "IDLE", "BUSY", "DEAD" ("UNSPECIFIED" / "STATE_<n>" otherwise).
std::string WorkerStateName(v1::WorkerState state);

class WorkerRegistry {
 public:
  // Tells `observer` (null: nobody) about every state change, registration and removal from
  // now on (worker_observer.h).
  void SetObserver(std::shared_ptr<WorkerObserver> observer) { observer_ = std::move(observer); }

  // Registers a worker as IDLE with last heartbeat `now_unix_ms`. Its id is request.name when
  // that is non-empty and no IDLE or BUSY worker has it (a DEAD worker of that name comes back
  // to life as a new registration); otherwise the next free "w-N" (N = 1, 2, ...). A
  // registration counts as the newest for registration order. A request from the host and pid
  // (pid != 0) of an IDLE worker, with that worker's name or none and its instance key
  // (SameInstanceKey), is a retried registration: it returns that worker (same id and order,
  // devices and heartbeat refreshed).
  WorkerRecord& Register(const v1::RegisterWorkerRequest& request, int64_t now_unix_ms);

  // nullptr when no worker ever registered with `id` (DEAD workers are found).
  WorkerRecord* Find(const std::string& id);

  // THE way a worker's state changes; logs one line with `reason`. To BUSY it records `job_id`
  // and `stage` (job_id must be non-empty); leaving BUSY clears them and any undelivered
  // assignment. kFailedPrecondition "worker w-2 is DEAD: cannot go to BUSY" for an edge not in
  // the diagram (including from == to).
  absl::Status Transition(WorkerRecord& worker, v1::WorkerState to, const std::string& reason,
                          const std::string& job_id = "", int stage = 0);

  // Forgets worker `id` (any state); logs one line with `reason`. Later Find(id) returns
  // nullptr, and a generated id is never handed out again. kNotFound "unknown worker w-9".
  absl::Status Remove(const std::string& id, const std::string& reason);

  // Number of IDLE and BUSY workers.
  int CountLive() const;

  // IDLE workers that report no running job, in registration order (oldest first).
  std::vector<WorkerRecord*> Schedulable();

  // IDLE and BUSY workers whose last heartbeat is at least `timeout_ms` old at `now_unix_ms`.
  std::vector<WorkerRecord*> TimedOut(int64_t now_unix_ms, int64_t timeout_ms);

  // DEAD workers that died at least `retention_ms` before `now_unix_ms` (dead_since), in
  // registration order: the ones to Remove so that DEAD workers are not listed forever.
  std::vector<WorkerRecord*> ForgettableDead(int64_t now_unix_ms, int64_t retention_ms);

  // Every worker registered and not removed (DEAD included), in registration order.
  std::vector<v1::WorkerInfo> List() const;

  // The N of the next generated id "w-N" (1 for a fresh registry). A coordinator persists it
  // after each registration that raised it (jobs/worker_id_store.h) and gives it back to
  // ContinueGeneratedIdsFrom after a restart, so generated ids are never handed out again.
  int64_t next_generated_id() const { return next_generated_; }

  // Generated ids continue at "w-<next>" or later: never lowers the sequence.
  void ContinueGeneratedIdsFrom(int64_t next);

  // The N of a generated id "w-N" (N >= 1, plain decimal digits); -1 for any other id.
  static int64_t GeneratedIdNumber(const std::string& id);

 private:
  std::shared_ptr<WorkerObserver> observer_;
  int64_t next_order_ = 1;
  int64_t next_generated_ = 1;
  std::map<int64_t, std::unique_ptr<WorkerRecord>> by_order_;  // registration order
  absl::flat_hash_map<std::string, int64_t> order_of_;         // id -> key of by_order_
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_WORKER_REGISTRY_H_
