// How many plans each caller may have the coordinator compute at once (SubmitJob and PlanJob
// plan outside the service lock, on the coordinator's cores). A plan of a large global batch
// with micro_batch 1 takes tens of seconds of a core; six of them at once from one user slowed
// another tenant's running job from 5000 to 1000 samples/s on a 2-core host. So a caller gets
// kPerCaller slots; a call beyond them is refused at once (RESOURCE_EXHAUSTED, saying so)
// rather than queued, and the user retries when a plan is done.
//
// Thread-safe (one internal mutex; nothing slow under it).
#ifndef DAPPLE_COORDINATOR_SERVICE_PLANNING_SLOTS_H_
#define DAPPLE_COORDINATOR_SERVICE_PLANNING_SLOTS_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace dapple::coordinator {

class PlanningSlots {
 public:
  static constexpr int kPerCaller = 2;

  // A slot held until destroyed (movable, not copyable).
  class Slot {
   public:
    Slot(Slot&& other) noexcept : slots_(other.slots_), caller_(std::move(other.caller_)) {
      other.slots_ = nullptr;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot();

   private:
    friend class PlanningSlots;
    Slot(PlanningSlots* slots, std::string caller) : slots_(slots), caller_(std::move(caller)) {}
    PlanningSlots* slots_;
    std::string caller_;
  };

  // A slot for `caller` (a user name; the PlanningSlots must outlive it). kResourceExhausted
  // when the caller holds kPerCaller already: "user bob has 2 plans being computed (submit and
  // plan each compute one): wait for one to finish".
  absl::StatusOr<Slot> Acquire(const std::string& caller);

  // Slots `caller` holds now (for tests and metrics).
  int Held(const std::string& caller) const;

 private:
  void Release(const std::string& caller);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_PLANNING_SLOTS_H_
