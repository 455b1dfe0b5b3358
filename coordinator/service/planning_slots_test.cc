#include "coordinator/service/planning_slots.h"

#include <optional>
#include <utility>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

TEST(PlanningSlotsTest, EachCallerGetsItsOwnSlotsBackWhenAPlanEnds) {
  PlanningSlots slots;
  std::optional<absl::StatusOr<PlanningSlots::Slot>> first(slots.Acquire("bob"));
  ASSERT_TRUE(first->ok());
  {
    absl::StatusOr<PlanningSlots::Slot> second = slots.Acquire("bob");
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(slots.Held("bob"), 2);
    absl::StatusOr<PlanningSlots::Slot> third = slots.Acquire("bob");
    EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(third.status().message(),
              "user bob has 2 plans being computed (submit and plan each compute one): wait for "
              "one to finish");
    // Another caller is not held up by bob.
    absl::StatusOr<PlanningSlots::Slot> alice = slots.Acquire("alice");
    EXPECT_TRUE(alice.ok());
  }
  EXPECT_EQ(slots.Held("bob"), 1);
  EXPECT_EQ(slots.Held("alice"), 0);
  // A moved slot is released once.
  PlanningSlots::Slot moved = std::move(**first);
  first.reset();
  EXPECT_EQ(slots.Held("bob"), 1);
  EXPECT_TRUE(slots.Acquire("bob").ok());
}

}  // namespace
}  // namespace dapple::coordinator
