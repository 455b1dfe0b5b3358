// A test hook: a NaN injected on one rank, at some steps and one micro-batch, so that tests can
// prove the job-wide skip of non-finite steps (gradient_exchange.h; docs/schedules.md,
// "Non-finite steps"). FOR TESTS ONLY: no spec field sets it; a runtime gets it from
// StageRuntime::InjectNonFinite (the runtime's tests) or, in a worker daemon, from the
// environment variable DAPPLE_TEST_INJECT_NONFINITE (the integration tests), which no user
// sets by accident and the worker logs loudly when it is set.
//
// On the last stage the NaN replaces the loss sum of the micro-batch (its gradient stays
// finite: the step's loss is what is non-finite); on any other stage it is written into the
// first element of the stage's accumulated gradient right after the micro-batch's backward
// (BACKWARD, or BACKWARD_WEIGHT of a split one).
//
// Thread safety: pure functions.
#ifndef DAPPLE_WORKER_RUNTIME_NONFINITE_INJECTION_H_
#define DAPPLE_WORKER_RUNTIME_NONFINITE_INJECTION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dapple::worker {

inline constexpr char kInjectNonFiniteEnv[] = "DAPPLE_TEST_INJECT_NONFINITE";

struct NonFiniteInjection {
  int stage = 0;
  int replica = 0;
  int64_t first_step = 1;  // 1-based, inclusive (as progress reports count steps)
  int64_t last_step = 1;   // inclusive, >= first_step
  int micro_batch = 0;     // 0-based within the step
  // Whether this injects into global step `step` (0-based) and micro-batch `micro_batch`.
  bool Hits(int64_t step, int micro_batch_in_step) const {
    return step + 1 >= first_step && step + 1 <= last_step && micro_batch_in_step == micro_batch;
  }
};

// "STAGE/REPLICA@STEP:MICRO_BATCH" or "STAGE/REPLICA@FIRST-LAST:MICRO_BATCH", e.g. "1/1@3:0"
// (stage 1 replica 1, step 3, micro-batch 0) or "2/0@4-6:1"; steps 1-based, the rest 0-based.
// kInvalidArgument naming DAPPLE_TEST_INJECT_NONFINITE, the value and the form otherwise.
absl::StatusOr<NonFiniteInjection> ParseNonFiniteInjection(absl::string_view text);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_NONFINITE_INJECTION_H_
