#include "common/schedule/simulator_validate.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/schedule/action.h"
#include "common/status.h"

namespace dapple::schedule::internal {

int BarrierIndex(v1::ActionKind kind) {
  for (int b = 0; b < kNumBarrierKinds; ++b) {
    if (kBarrierKinds[b] == kind) return b;
  }
  return -1;
}

namespace {

// The actions that compute a micro-batch's input gradient (the one a BACKWARD_WEIGHT follows,
// when split).
bool IsBackwardOfInput(v1::ActionKind kind) {
  return kind == v1::BACKWARD || kind == v1::BACKWARD_INPUT;
}

bool IsNamedKind(v1::ActionKind kind) {
  return v1::ActionKind_IsValid(kind) && kind != v1::ACTION_KIND_UNSPECIFIED;
}

}  // namespace

std::string Where(int stage, int index, const v1::Action& a) {
  return absl::StrCat(ActionToString(a), " (stage ", stage, " action ", index, ")");
}

namespace {

absl::Status Duplicate(int stage, v1::ActionKind kind, int mb) {
  return absl::InvalidArgumentError(absl::StrCat(
      "stage ", stage, kind == v1::FORWARD ? " forwards" : " backwards", " micro-batch ", mb,
      " more than once (", ActionToString(MakeAction(stage, kind, mb)), ")"));
}

}  // namespace

// The checks of one action that need only its program: a named kind, a micro-batch >= 0 where
// the kind has one, and a peer stage for sends and receives.
absl::Status CheckOp(int s, int i, int p, const Op& op) {
  if (!IsNamedKind(op.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(s, i, ToAction(s, op)), " has no valid kind"));
  }
  if (!KindHasMicroBatch(op.kind)) return absl::OkStatus();
  if (op.micro_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(s, i, ToAction(s, op)), " has negative micro-batch ", op.micro_batch));
  }
  const bool no_next = s == p - 1;
  const bool no_prev = s == 0;
  if ((op.kind == v1::SEND_ACT && no_next) || (op.kind == v1::RECV_GRAD && no_next) ||
      (op.kind == v1::RECV_ACT && no_prev) || (op.kind == v1::SEND_GRAD && no_prev)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(s, i, ToAction(s, op)), " has no peer: stage ", s, " is ",
                     no_prev ? "the first" : "the last", " of ", p, " stages"));
  }
  return absl::OkStatus();
}

namespace {

// The communication kinds' index in per-kind tables: SEND_ACT 0, RECV_ACT 1, SEND_GRAD 2,
// RECV_GRAD 3; -1 for every other kind.
constexpr int kNumCommTables = 4;

int CommTable(v1::ActionKind kind) {
  switch (kind) {
    case v1::SEND_ACT:
      return 0;
    case v1::RECV_ACT:
      return 1;
    case v1::SEND_GRAD:
      return 2;
    case v1::RECV_GRAD:
      return 3;
    case v1::FORWARD:
    case v1::BACKWARD:
    case v1::BACKWARD_INPUT:
    case v1::BACKWARD_WEIGHT:
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ALLREDUCE:
    case v1::TIED_ALLREDUCE:
    case v1::GLOBAL_NORM:
    case v1::GLOBAL_NORM_ASYNC:
    case v1::OPTIMIZER_STEP:
    case v1::USE_WEIGHTS:
    case v1::RESTORE_WEIGHTS:
    case v1::STASH_WEIGHTS:
    case v1::DROP_WEIGHTS:
    case v1::ALLREDUCE_ASYNC:
    case v1::STALE_OPTIMIZER_STEP:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return -1;
}

// Which of micro-batches 0..M-1 one stage sends and receives (validated: each at most once).
struct CommMarks {
  std::vector<char> sent_act, recv_act, sent_grad, recv_grad;
};

CommMarks Marks(const OpProgram& program, int m) {
  CommMarks marks{std::vector<char>(m, 0), std::vector<char>(m, 0), std::vector<char>(m, 0),
                  std::vector<char>(m, 0)};
  std::vector<char>* const by_table[kNumCommTables] = {&marks.sent_act, &marks.recv_act,
                                                       &marks.sent_grad, &marks.recv_grad};
  for (const Op& op : program) {
    const int table = CommTable(op.kind);
    if (table >= 0) (*by_table[table])[op.micro_batch] = 1;
  }
  return marks;
}

}  // namespace

// The member stages of each barrier kind (kBarrierKinds order): GLOBAL_NORM every stage,
// TIED_ALLREDUCE the stages with at least one.
std::vector<std::vector<char>> BarrierMembers(const std::vector<OpProgram>& programs) {
  const int p = static_cast<int>(programs.size());
  std::vector<std::vector<char>> members(kNumBarrierKinds, std::vector<char>(p, 0));
  members[BarrierIndex(v1::GLOBAL_NORM)].assign(p, 1);
  for (int s = 0; s < p; ++s) {
    for (const Op& op : programs[s]) {
      if (op.kind == v1::TIED_ALLREDUCE) members[BarrierIndex(v1::TIED_ALLREDUCE)][s] = 1;
    }
  }
  return members;
}

namespace {

// Every member of a barrier runs it equally often (the k-th of each stage meet), or some would
// wait forever.
absl::Status CheckBarriers(const std::vector<OpProgram>& programs) {
  const int p = static_cast<int>(programs.size());
  const std::vector<std::vector<char>> members = BarrierMembers(programs);
  for (int b = 0; b < kNumBarrierKinds; ++b) {
    const v1::ActionKind kind = kBarrierKinds[b];
    int first = -1;
    int64_t first_count = 0;
    for (int s = 0; s < p; ++s) {
      if (!members[b][s]) continue;
      const int64_t count = std::count_if(programs[s].begin(), programs[s].end(),
                                          [kind](const Op& op) { return op.kind == kind; });
      if (first < 0) {
        first = s;
        first_count = count;
      } else if (count != first_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stage ", s, " runs ", count, " ", v1::ActionKind_Name(kind), " but stage ", first,
            " runs ", first_count, ": a ", v1::ActionKind_Name(kind), " waits for ",
            kind == v1::GLOBAL_NORM ? "every stage" : "every stage that holds one",
            ", so each must run as many"));
      }
    }
  }
  return absl::OkStatus();
}

// Checks everything that does not need time: kinds, micro-batch sets, order of data
// dependencies inside each program, and send/recv pairing. Sets *num_micro_batches. Scratch
// memory is O(M) per stage (never P x M), and the work O(actions log actions + P * M).
absl::Status Validate(const std::vector<OpProgram>& programs, int* num_micro_batches) {
  const int p = static_cast<int>(programs.size());
  if (p == 0) return absl::InvalidArgumentError("no rank programs to simulate");

  int64_t max_mb = -1;
  for (int s = 0; s < p; ++s) {
    const OpProgram& prog = programs[s];
    for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
      DAPPLE_RETURN_IF_ERROR(CheckOp(s, i, p, prog[i]));
      if (prog[i].kind == v1::FORWARD || IsBackwardOfInput(prog[i].kind)) {
        max_mb = std::max<int64_t>(max_mb, prog[i].micro_batch);
      }
    }
  }
  const int64_t m = max_mb + 1;

  // Each stage forwards and backwards exactly 0..M-1 (a BACKWARD_INPUT counts as the backward;
  // its BACKWARD_WEIGHT is checked with the data dependencies below). Sorting (not a table of
  // size M) keeps a stray huge micro-batch number from allocating memory.
  std::vector<int> mbs;
  for (int s = 0; s < p; ++s) {
    for (v1::ActionKind kind : {v1::FORWARD, v1::BACKWARD}) {
      mbs.clear();
      for (const Op& a : programs[s]) {
        if (a.kind == kind || (kind == v1::BACKWARD && a.kind == v1::BACKWARD_INPUT)) {
          mbs.push_back(a.micro_batch);
        }
      }
      std::sort(mbs.begin(), mbs.end());
      const absl::string_view verb = kind == v1::FORWARD ? "forwards" : "backwards";
      for (int64_t j = 0; j < m; ++j) {
        if (j >= static_cast<int64_t>(mbs.size()) || mbs[j] > j) {
          return absl::InvalidArgumentError(
              absl::StrCat("stage ", s, " never ", verb, " micro-batch ", j, " (",
                           ActionToString(MakeAction(s, kind, static_cast<int>(j))),
                           " missing; the step has M=", m, ")"));
        }
        if (mbs[j] < j) {
          return Duplicate(s, kind, mbs[j]);
        }
      }
      // All entries are < M, so more than M of them means a repeat past the first M.
      if (static_cast<int64_t>(mbs.size()) > m) return Duplicate(s, kind, mbs[m]);
    }
  }
  *num_micro_batches = static_cast<int>(m);

  // Pairing first, so a missing partner is reported as such rather than as an ordering problem
  // it causes. First each communication action at most once per stage, with a micro-batch < M.
  std::vector<char> seen(kNumCommTables * static_cast<size_t>(m), 0);
  for (int s = 0; s < p; ++s) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int i = 0; i < static_cast<int>(programs[s].size()); ++i) {
      const Op& a = programs[s][i];
      if (!KindHasMicroBatch(a.kind)) continue;
      const int mb = a.micro_batch;
      if (mb >= m) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, ToAction(s, a)),
                                                       " names micro-batch ", mb,
                                                       " but the step forwards only 0..", m - 1));
      }
      const int table = CommTable(a.kind);
      if (table >= 0 && seen[table * m + mb]++ > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(s, i, ToAction(s, a)), " appears twice"));
      }
    }
  }
  if (p > 1) {
    CommMarks upper = Marks(programs[0], static_cast<int>(m));
    for (int s = 0; s + 1 < p; ++s) {
      CommMarks lower = Marks(programs[s + 1], static_cast<int>(m));
      for (int mb = 0; mb < m; ++mb) {
        if (upper.sent_act[mb] == lower.recv_act[mb] &&
            lower.sent_grad[mb] == upper.recv_grad[mb]) {
          continue;  // the common case: no message to build
        }
        const std::tuple<int, int, v1::Action, v1::Action> pairs[] = {
            {upper.sent_act[mb], lower.recv_act[mb], MakeAction(s, v1::SEND_ACT, mb),
             MakeAction(s + 1, v1::RECV_ACT, mb)},
            {lower.sent_grad[mb], upper.recv_grad[mb], MakeAction(s + 1, v1::SEND_GRAD, mb),
             MakeAction(s, v1::RECV_GRAD, mb)}};
        for (const auto& [sends, recvs, send, recv] : pairs) {
          if (sends > recvs) {
            return absl::InvalidArgumentError(absl::StrCat("unpaired send: ", ActionToString(send),
                                                           " has no matching ",
                                                           ActionToString(recv)));
          }
          if (recvs > sends) {
            return absl::InvalidArgumentError(
                absl::StrCat("unpaired receive: ", ActionToString(recv), " has no matching ",
                             ActionToString(send)));
          }
        }
      }
      upper = std::move(lower);
    }
  }

  // Data dependencies inside each program, in program order.
  std::vector<char> forwarded(m), backwarded(m), got_act(m), got_grad(m);
  // Per micro-batch of a zero-bubble split: 1 after its BACKWARD_INPUT, 2 after its
  // BACKWARD_WEIGHT.
  std::vector<char> split(m);
  for (int s = 0; s < p; ++s) {
    std::fill(forwarded.begin(), forwarded.end(), 0);
    std::fill(backwarded.begin(), backwarded.end(), 0);
    std::fill(split.begin(), split.end(), 0);
    std::fill(got_act.begin(), got_act.end(), 0);
    std::fill(got_grad.begin(), got_grad.end(), 0);
    for (int i = 0; i < static_cast<int>(programs[s].size()); ++i) {
      const Op& a = programs[s][i];
      const int mb = a.micro_batch;
      // Builds the error only when a rule is broken: this loop sees every action.
      auto broken = [&](v1::ActionKind before, absl::string_view rule) -> absl::Status {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(s, i, ToAction(s, a)), " comes before ",
                         ActionToString(MakeAction(s, before, mb)), " (", rule, ")"));
      };
      switch (a.kind) {
        case v1::FORWARD:
          if (s > 0 && !got_act[mb]) {
            return broken(v1::RECV_ACT, "a forward needs its input activation");
          }
          forwarded[mb] = 1;
          break;
        case v1::BACKWARD:
        case v1::BACKWARD_INPUT:
          if (!forwarded[mb]) return broken(v1::FORWARD, "backward before forward");
          if (s < p - 1 && !got_grad[mb]) {
            return broken(v1::RECV_GRAD, "a backward needs its output gradient");
          }
          backwarded[mb] = 1;
          if (a.kind == v1::BACKWARD_INPUT) split[mb] = 1;
          break;
        case v1::BACKWARD_WEIGHT:
          if (split[mb] == 2) {
            return absl::InvalidArgumentError(
                absl::StrCat(Where(s, i, ToAction(s, a)), " appears twice"));
          }
          if (split[mb] != 1) {
            return broken(v1::BACKWARD_INPUT,
                          "a weight-gradient backward follows its input-gradient backward");
          }
          split[mb] = 2;
          break;
        case v1::SEND_ACT:
          if (!forwarded[mb]) {
            return broken(v1::FORWARD, "an activation is sent after it is computed");
          }
          break;
        case v1::SEND_GRAD:
          if (!backwarded[mb]) {
            return broken(v1::BACKWARD, "a gradient is sent after it is computed");
          }
          break;
        case v1::RECV_ACT:
          got_act[mb] = 1;
          break;
        case v1::RECV_GRAD:
          got_grad[mb] = 1;
          break;
        case v1::ACTION_KIND_UNSPECIFIED:
        case v1::ALLREDUCE:
        case v1::TIED_ALLREDUCE:
        case v1::GLOBAL_NORM:
        case v1::GLOBAL_NORM_ASYNC:
        case v1::OPTIMIZER_STEP:
        case v1::USE_WEIGHTS:
        case v1::RESTORE_WEIGHTS:
        case v1::STASH_WEIGHTS:
        case v1::DROP_WEIGHTS:
        case v1::ALLREDUCE_ASYNC:
        case v1::STALE_OPTIMIZER_STEP:
        case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
        case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
          break;
      }
    }
    for (int mb = 0; mb < m; ++mb) {
      if (split[mb] == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stage ", s, " never runs ", ActionToString(MakeAction(s, v1::BACKWARD_WEIGHT, mb)),
            " after ", ActionToString(MakeAction(s, v1::BACKWARD_INPUT, mb)),
            " (the weight gradients of micro-batch ", mb, " would be missing from the update)"));
      }
    }
  }
  return CheckBarriers(programs);
}

}  // namespace

// Validate for programs whose actions may name virtual stages (interleaved 1F1B: rank s of P runs
// virtual stages s, s + P, ..., s + (v - 1)P). Sets *chunks to v (1 + the largest chunk named)
// and checks every virtual stage of every rank as a stage of its own: its actions with a
// micro-batch, plus the rank's actions without one (OPTIMIZER_STEP, the collectives), so that
// micro-batch sets, pairing with the neighbouring virtual stages and data dependencies hold per
// virtual stage (action indices in those messages count within the virtual stage).
absl::Status ValidateChunks(const std::vector<OpProgram>& programs, int* num_micro_batches,
                            int* chunks) {
  const int p = static_cast<int>(programs.size());
  int v = 1;
  for (int s = 0; s < p; ++s) {
    for (int i = 0; i < static_cast<int>(programs[s].size()); ++i) {
      const Op& op = programs[s][i];
      if (op.stage < 0) continue;
      if (op.stage % p != s) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(s, i, ToAction(s, op)), " names stage ", op.stage, " in stage ", s,
            "'s program (rank ", s, " of ", p, " runs stages ", s, ", ", s + p, ", ..."));
      }
      v = std::max(v, op.stage / p + 1);
    }
  }
  *chunks = v;
  if (v == 1) return Validate(programs, num_micro_batches);
  std::vector<OpProgram> virtual_programs(static_cast<size_t>(p) * v);
  for (int s = 0; s < p; ++s) {
    for (const Op& op : programs[s]) {
      if (KindHasMicroBatch(op.kind)) {
        virtual_programs[StageOf(op, s)].push_back(op);
        continue;
      }
      for (int c = 0; c < v; ++c) {
        Op copy = op;
        copy.stage = c * p + s;
        virtual_programs[copy.stage].push_back(copy);
      }
    }
  }
  return Validate(virtual_programs, num_micro_batches);
}

}  // namespace dapple::schedule::internal
