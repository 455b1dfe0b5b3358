#include "coordinator/service/planning_slots.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dapple::coordinator {

PlanningSlots::Slot::~Slot() {
  if (slots_ != nullptr) slots_->Release(caller_);
}

absl::StatusOr<PlanningSlots::Slot> PlanningSlots::Acquire(const std::string& caller) {
  absl::MutexLock lock(&mu_);
  int& held = held_[caller];
  if (held >= kPerCaller) {
    return absl::ResourceExhaustedError(
        absl::StrCat("user ", caller, " has ", held,
                     " plans being computed (submit and plan each compute one): wait for one to "
                     "finish"));
  }
  ++held;
  return Slot(this, caller);
}

int PlanningSlots::Held(const std::string& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(caller);
  return it == held_.end() ? 0 : it->second;
}

void PlanningSlots::Release(const std::string& caller) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(caller);
  if (it == held_.end()) return;
  if (--it->second <= 0) held_.erase(it);
}

}  // namespace dapple::coordinator
