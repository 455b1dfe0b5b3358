#include "worker/runtime/nonfinite_injection.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dapple::worker {

absl::StatusOr<NonFiniteInjection> ParseNonFiniteInjection(absl::string_view text) {
  auto bad = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        kInjectNonFiniteEnv, " '", text,
        "' must be STAGE/REPLICA@STEP:MICRO_BATCH or STAGE/REPLICA@FIRST-LAST:MICRO_BATCH (steps "
        "1-based, FIRST <= LAST; stage, replica and micro-batch 0-based), e.g. 1/1@3:0"));
  };
  const std::vector<absl::string_view> at = absl::StrSplit(text, '@');
  if (at.size() != 2) return bad();
  const std::vector<absl::string_view> rank = absl::StrSplit(at[0], '/');
  const std::vector<absl::string_view> when = absl::StrSplit(at[1], ':');
  if (rank.size() != 2 || when.size() != 2) return bad();
  const std::vector<absl::string_view> steps = absl::StrSplit(when[0], '-');
  if (steps.size() > 2) return bad();
  NonFiniteInjection inj;
  if (!absl::SimpleAtoi(rank[0], &inj.stage) || !absl::SimpleAtoi(rank[1], &inj.replica) ||
      !absl::SimpleAtoi(steps[0], &inj.first_step) ||
      !absl::SimpleAtoi(steps.back(), &inj.last_step) ||
      !absl::SimpleAtoi(when[1], &inj.micro_batch)) {
    return bad();
  }
  if (inj.stage < 0 || inj.replica < 0 || inj.first_step < 1 || inj.last_step < inj.first_step ||
      inj.micro_batch < 0) {
    return bad();
  }
  return inj;
}

}  // namespace dapple::worker
