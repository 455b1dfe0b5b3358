#include "coordinator/cluster/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"

namespace dapple::coordinator {
namespace {

bool IsAllowed(v1::WorkerState from, v1::WorkerState to) {
  switch (from) {
    case v1::WORKER_STATE_IDLE:
      return to == v1::WORKER_STATE_BUSY || to == v1::WORKER_STATE_DEAD;
    case v1::WORKER_STATE_BUSY:
      return to == v1::WORKER_STATE_IDLE || to == v1::WORKER_STATE_DEAD;
    case v1::WORKER_STATE_DEAD:
      return to == v1::WORKER_STATE_IDLE;
    case v1::WORKER_STATE_UNSPECIFIED:
    case v1::WorkerState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::WorkerState_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

}  // namespace

std::string WorkerStateName(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_STATE_UNSPECIFIED:
      return "UNSPECIFIED";
    case v1::WORKER_STATE_IDLE:
      return "IDLE";
    case v1::WORKER_STATE_BUSY:
      return "BUSY";
    case v1::WORKER_STATE_DEAD:
      return "DEAD";
    case v1::WorkerState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::WorkerState_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::StrCat("STATE_", static_cast<int>(state));
}

bool SameInstanceKey(absl::string_view known, absl::string_view presented) {
  if (known.empty() || known.size() != presented.size()) return false;
  // In constant time: the key is a secret.
  unsigned char diff = 0;
  for (size_t i = 0; i < known.size(); ++i) {
    diff |= static_cast<unsigned char>(known[i] ^ presented[i]);
  }
  return diff == 0;
}

WorkerRecord& WorkerRegistry::Register(const v1::RegisterWorkerRequest& request,
                                       int64_t now_unix_ms) {
  // A retry of a registration whose reply was lost (the worker's call timed out after this
  // registry recorded it) comes from the same process: give back the same id instead of making
  // up another and leaving an orphan that only the heartbeat timeout removes. The process proves
  // it with its secret instance key: hostname and pid are public (a user who read them from
  // `dapplectl workers` got a live worker's id and credential with the join token).
  for (auto& [order, record] : by_order_) {
    v1::WorkerInfo& known = record->info;
    if (known.state() == v1::WORKER_STATE_IDLE && known.hostname() == request.hostname() &&
        known.pid() == request.pid() && request.pid() != 0 &&
        SameInstanceKey(record->instance_key, request.instance_key()) &&
        (request.name().empty() || request.name() == known.id())) {
      *known.mutable_devices() = request.devices();
      known.set_last_heartbeat_unix_ms(now_unix_ms);
      DAPPLE_LOG_INFO("worker {} registered again from the same process (host {}, pid {})",
                      known.id(), request.hostname(), request.pid());
      return *record;
    }
  }
  std::string id;
  std::unique_ptr<WorkerRecord> previous;
  if (!request.name().empty()) {
    auto it = order_of_.find(request.name());
    if (it == order_of_.end()) {
      id = request.name();
    } else if (by_order_.at(it->second)->info.state() == v1::WORKER_STATE_DEAD) {
      id = request.name();
      previous = std::move(by_order_.at(it->second));
      by_order_.erase(it->second);
      order_of_.erase(it);
    } else {
      DAPPLE_LOG_WARN("worker name '{}' is taken by a live worker; making up another",
                      request.name());
    }
  }
  while (id.empty()) {
    std::string candidate = absl::StrCat("w-", next_generated_++);
    if (!order_of_.contains(candidate)) id = std::move(candidate);
  }

  auto record = std::make_unique<WorkerRecord>();
  record->instance_key = request.instance_key();
  v1::WorkerInfo& info = record->info;
  info.set_id(id);
  info.set_hostname(request.hostname());
  info.set_pid(request.pid());
  *info.mutable_devices() = request.devices();
  info.set_last_heartbeat_unix_ms(now_unix_ms);
  const int64_t order = next_order_++;
  WorkerRecord& result = *record;
  by_order_.emplace(order, std::move(record));
  order_of_.emplace(id, order);
  if (previous != nullptr) {
    // The old incarnation's lifecycle ends in DEAD; the name continues as a fresh IDLE worker.
    result.info.set_state(v1::WORKER_STATE_DEAD);
    (void)Transition(
        result, v1::WORKER_STATE_IDLE,
        absl::StrCat("registered again (host ", request.hostname(), ", pid ", request.pid(), ")"));
  } else {
    result.info.set_state(v1::WORKER_STATE_IDLE);
    DAPPLE_LOG_INFO("worker {} registered: IDLE (host {}, pid {})", id, request.hostname(),
                    request.pid());
    if (observer_) observer_->OnWorkerState(result.info, v1::WORKER_STATE_UNSPECIFIED);
  }
  return result;
}

WorkerRecord* WorkerRegistry::Find(const std::string& id) {
  auto it = order_of_.find(id);
  return it == order_of_.end() ? nullptr : by_order_.at(it->second).get();
}

absl::Status WorkerRegistry::Transition(WorkerRecord& worker, v1::WorkerState to,
                                        const std::string& reason, const std::string& job_id,
                                        int stage) {
  const v1::WorkerState from = worker.info.state();
  if (!IsAllowed(from, to) || (to == v1::WORKER_STATE_BUSY && job_id.empty())) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker.info.id(), " is ",
                                                      WorkerStateName(from), ": cannot go to ",
                                                      WorkerStateName(to)));
  }
  worker.info.set_state(to);
  if (to != v1::WORKER_STATE_DEAD) worker.dead_since_unix_ms = 0;
  if (to == v1::WORKER_STATE_BUSY) {
    worker.info.set_job_id(job_id);
    worker.info.set_stage(stage);
  } else {
    worker.info.clear_job_id();
    worker.info.clear_stage();
    worker.pending_assignment.reset();
  }
  DAPPLE_LOG_INFO("worker {} {} -> {}: {}", worker.info.id(), WorkerStateName(from),
                  WorkerStateName(to), reason);
  if (observer_) observer_->OnWorkerState(worker.info, from);
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Remove(const std::string& id, const std::string& reason) {
  auto it = order_of_.find(id);
  if (it == order_of_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  const v1::WorkerState from = by_order_.at(it->second)->info.state();
  if (observer_) observer_->OnWorkerRemoved(by_order_.at(it->second)->info);
  by_order_.erase(it->second);
  order_of_.erase(it);
  DAPPLE_LOG_INFO("worker {} {} -> removed: {}", id, WorkerStateName(from), reason);
  return absl::OkStatus();
}

int WorkerRegistry::CountLive() const {
  int live = 0;
  for (const auto& [order, record] : by_order_) {
    if (record->info.state() != v1::WORKER_STATE_DEAD) ++live;
  }
  return live;
}

std::vector<WorkerRecord*> WorkerRegistry::Schedulable() {
  std::vector<WorkerRecord*> out;
  for (auto& [order, record] : by_order_) {
    if (record->info.state() == v1::WORKER_STATE_IDLE && record->reported_job_id.empty()) {
      out.push_back(record.get());
    }
  }
  return out;
}

std::vector<WorkerRecord*> WorkerRegistry::TimedOut(int64_t now_unix_ms, int64_t timeout_ms) {
  std::vector<WorkerRecord*> out;
  for (auto& [order, record] : by_order_) {
    if (record->info.state() != v1::WORKER_STATE_DEAD &&
        now_unix_ms - record->info.last_heartbeat_unix_ms() >= timeout_ms) {
      out.push_back(record.get());
    }
  }
  return out;
}

std::vector<WorkerRecord*> WorkerRegistry::ForgettableDead(int64_t now_unix_ms,
                                                           int64_t retention_ms) {
  std::vector<WorkerRecord*> out;
  for (auto& [order, record] : by_order_) {
    if (record->info.state() == v1::WORKER_STATE_DEAD &&
        now_unix_ms - record->dead_since_unix_ms >= retention_ms) {
      out.push_back(record.get());
    }
  }
  return out;
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  std::vector<v1::WorkerInfo> out;
  out.reserve(by_order_.size());
  for (const auto& [order, record] : by_order_) out.push_back(record->info);
  return out;
}

void WorkerRegistry::ContinueGeneratedIdsFrom(int64_t next) {
  next_generated_ = std::max(next_generated_, next);
}

int64_t WorkerRegistry::GeneratedIdNumber(const std::string& id) {
  int64_t n = 0;
  // "w-" then 1..18 digits (no sign, no spaces: SimpleAtoi would take "w- 3" or "w-+3"), so
  // the value fits int64_t.
  if (!absl::StartsWith(id, "w-") || id.size() <= 2 || id.size() > 20) return -1;
  for (char c : absl::string_view(id).substr(2)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
    n = n * 10 + (c - '0');
  }
  return n >= 1 ? n : -1;
}

}  // namespace dapple::coordinator
