// The simulator's checks of a program set before it runs it (simulator.h lists them): kinds,
// micro-batch sets, data dependencies inside each program, send/receive pairing and barrier
// counts, per (virtual) stage. Internal to simulator.cc, split out of it by concern; pure
// functions, thread-safe.
#ifndef DAPPLE_COMMON_SCHEDULE_SIMULATOR_VALIDATE_H_
#define DAPPLE_COMMON_SCHEDULE_SIMULATOR_VALIDATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/schedule/op.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::schedule::internal {

// The barriers: an action of one of these kinds completes once every member stage reached its
// own action of that kind with the same count (the k-th pairs with the k-th). GLOBAL_NORM's
// members are all stages, TIED_ALLREDUCE's the stages whose programs hold one.
inline constexpr v1::ActionKind kBarrierKinds[] = {v1::GLOBAL_NORM, v1::TIED_ALLREDUCE};
inline constexpr int kNumBarrierKinds = 2;

// The index of `kind` in kBarrierKinds; -1 for a kind that is no barrier.
int BarrierIndex(v1::ActionKind kind);

// "<action> (stage <stage> action <index>)", how every message names an action.
std::string Where(int stage, int index, const v1::Action& a);

// The checks of one action that need only its program: a named kind, a micro-batch >= 0 where
// the kind has one, and a peer stage for sends and receives (stage `s` of `p`).
absl::Status CheckOp(int s, int i, int p, const Op& op);

// The member stages of each barrier kind (kBarrierKinds order): GLOBAL_NORM every stage,
// TIED_ALLREDUCE the stages with at least one.
std::vector<std::vector<char>> BarrierMembers(const std::vector<OpProgram>& programs);

// Every check of simulator.h that needs no time, for programs whose actions may name virtual
// stages (interleaved 1F1B). Sets *num_micro_batches (M) and *chunks (v).
absl::Status ValidateChunks(const std::vector<OpProgram>& programs, int* num_micro_batches,
                            int* chunks);

}  // namespace dapple::schedule::internal

#endif  // DAPPLE_COMMON_SCHEDULE_SIMULATOR_VALIDATE_H_
