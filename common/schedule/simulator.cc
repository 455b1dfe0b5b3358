#include "common/schedule/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/schedule/action.h"
#include "common/status.h"

namespace dapple::schedule {
namespace {

constexpr int kMaxGridColumns = 240;
constexpr double kNotIssued = -1.0;

bool HasMicroBatch(v1::ActionKind kind) {
  return kind != v1::ALLREDUCE && kind != v1::OPTIMIZER_STEP;
}

bool IsNamedKind(v1::ActionKind kind) {
  return v1::ActionKind_IsValid(kind) && kind != v1::ACTION_KIND_UNSPECIFIED;
}

std::string Where(int stage, int index, const v1::Action& a) {
  return absl::StrCat(ActionToString(a), " (stage ", stage, " action ", index, ")");
}

absl::Status CheckCost(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("costs.", field, " ", value, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckPerStage(absl::string_view field, const std::vector<double>& per_stage,
                           int num_stages) {
  if (per_stage.empty()) return absl::OkStatus();
  if (static_cast<int>(per_stage.size()) != num_stages) {
    return absl::InvalidArgumentError(absl::StrCat("costs.", field, " has ", per_stage.size(),
                                                   " entries for ", num_stages, " stages"));
  }
  for (size_t s = 0; s < per_stage.size(); ++s) {
    DAPPLE_RETURN_IF_ERROR(CheckCost(absl::StrCat(field, "[", s, "]"), per_stage[s]));
  }
  return absl::OkStatus();
}

absl::Status CheckCosts(const ActionCosts& costs, int num_stages) {
  DAPPLE_RETURN_IF_ERROR(CheckCost("forward", costs.forward));
  DAPPLE_RETURN_IF_ERROR(CheckCost("backward", costs.backward));
  DAPPLE_RETURN_IF_ERROR(CheckCost("send", costs.send));
  DAPPLE_RETURN_IF_ERROR(CheckCost("recv", costs.recv));
  DAPPLE_RETURN_IF_ERROR(CheckCost("optimizer_step", costs.optimizer_step));
  DAPPLE_RETURN_IF_ERROR(CheckPerStage("forward_per_stage", costs.forward_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(CheckPerStage("backward_per_stage", costs.backward_per_stage, num_stages));
  return absl::OkStatus();
}

double ForwardCost(const ActionCosts& c, int s) {
  return c.forward_per_stage.empty() ? c.forward : c.forward_per_stage[s];
}
double BackwardCost(const ActionCosts& c, int s) {
  return c.backward_per_stage.empty() ? c.backward : c.backward_per_stage[s];
}

absl::Status Duplicate(int stage, v1::ActionKind kind, int mb) {
  return absl::InvalidArgumentError(absl::StrCat(
      "stage ", stage, kind == v1::FORWARD ? " forwards" : " backwards", " micro-batch ", mb,
      " more than once (", ActionToString(MakeAction(stage, kind, mb)), ")"));
}

// Checks everything that does not need time: stage numbering, kinds, micro-batch sets, order
// of data dependencies inside each program, and send/recv pairing. Sets *num_micro_batches.
absl::Status Validate(const std::vector<v1::RankProgram>& programs, int* num_micro_batches) {
  const int p = static_cast<int>(programs.size());
  if (p == 0) return absl::InvalidArgumentError("no rank programs to simulate");

  int64_t max_mb = -1;
  for (int s = 0; s < p; ++s) {
    const v1::RankProgram& prog = programs[s];
    if (prog.stage() != s) {
      return absl::InvalidArgumentError(absl::StrCat("programs[", s, "] has stage ", prog.stage(),
                                                     "; programs[s] must be stage s"));
    }
    for (int i = 0; i < prog.actions_size(); ++i) {
      const v1::Action& a = prog.actions(i);
      if (a.stage() != s) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " names stage ", a.stage(),
                                                       " in stage ", s, "'s program"));
      }
      if (!IsNamedKind(a.kind())) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " has no valid kind"));
      }
      if (!HasMicroBatch(a.kind())) continue;
      if (a.micro_batch() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(s, i, a), " has negative micro-batch ", a.micro_batch()));
      }
      const bool no_next = s == p - 1;
      const bool no_prev = s == 0;
      if ((a.kind() == v1::SEND_ACT && no_next) || (a.kind() == v1::RECV_GRAD && no_next) ||
          (a.kind() == v1::RECV_ACT && no_prev) || (a.kind() == v1::SEND_GRAD && no_prev)) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " has no peer: stage ", s,
                                                       " is ", no_prev ? "the first" : "the last",
                                                       " of ", p, " stages"));
      }
      if (a.kind() == v1::FORWARD || a.kind() == v1::BACKWARD) {
        max_mb = std::max<int64_t>(max_mb, a.micro_batch());
      }
    }
  }
  const int64_t m = max_mb + 1;

  // Each stage forwards and backwards exactly 0..M-1. Sorting (not a table of size M) keeps
  // a stray huge micro-batch number from allocating memory.
  for (int s = 0; s < p; ++s) {
    for (v1::ActionKind kind : {v1::FORWARD, v1::BACKWARD}) {
      std::vector<int> mbs;
      for (const v1::Action& a : programs[s].actions()) {
        if (a.kind() == kind) mbs.push_back(a.micro_batch());
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
  // it causes. Each table counts, per stage and micro-batch, how often that stage did it.
  using Table = std::vector<std::vector<int>>;
  const Table zeros(p, std::vector<int>(m, 0));
  Table sent_act = zeros, recv_act = zeros, sent_grad = zeros, recv_grad = zeros;
  for (int s = 0; s < p; ++s) {
    for (int i = 0; i < programs[s].actions_size(); ++i) {
      const v1::Action& a = programs[s].actions(i);
      if (!HasMicroBatch(a.kind())) continue;
      const int mb = a.micro_batch();
      if (mb >= m) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " names micro-batch ", mb,
                                                       " but the step forwards only 0..", m - 1));
      }
      Table* table = nullptr;
      switch (a.kind()) {
        case v1::SEND_ACT:
          table = &sent_act;
          break;
        case v1::RECV_ACT:
          table = &recv_act;
          break;
        case v1::SEND_GRAD:
          table = &sent_grad;
          break;
        case v1::RECV_GRAD:
          table = &recv_grad;
          break;
        case v1::FORWARD:
        case v1::BACKWARD:
        case v1::ACTION_KIND_UNSPECIFIED:
        case v1::ALLREDUCE:
        case v1::OPTIMIZER_STEP:
        case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
        case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
          break;
      }
      if (table != nullptr && ++(*table)[s][mb] > 1) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " appears twice"));
      }
    }
  }
  for (int s = 0; s + 1 < p; ++s) {
    for (int mb = 0; mb < m; ++mb) {
      const std::tuple<int, int, v1::Action, v1::Action> pairs[] = {
          {sent_act[s][mb], recv_act[s + 1][mb], MakeAction(s, v1::SEND_ACT, mb),
           MakeAction(s + 1, v1::RECV_ACT, mb)},
          {sent_grad[s + 1][mb], recv_grad[s][mb], MakeAction(s + 1, v1::SEND_GRAD, mb),
           MakeAction(s, v1::RECV_GRAD, mb)}};
      for (const auto& [sends, recvs, send, recv] : pairs) {
        if (sends > recvs) {
          return absl::InvalidArgumentError(absl::StrCat(
              "unpaired send: ", ActionToString(send), " has no matching ", ActionToString(recv)));
        }
        if (recvs > sends) {
          return absl::InvalidArgumentError(absl::StrCat("unpaired receive: ", ActionToString(recv),
                                                         " has no matching ",
                                                         ActionToString(send)));
        }
      }
    }
  }

  // Data dependencies inside each program, in program order.
  for (int s = 0; s < p; ++s) {
    std::vector<char> forwarded(m, 0), backwarded(m, 0), got_act(m, 0), got_grad(m, 0);
    for (int i = 0; i < programs[s].actions_size(); ++i) {
      const v1::Action& a = programs[s].actions(i);
      const int mb = a.micro_batch();
      auto needs = [&](bool done, v1::ActionKind before, absl::string_view rule) -> absl::Status {
        if (done) return absl::OkStatus();
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " comes before ",
                                                       ActionToString(MakeAction(s, before, mb)),
                                                       " (", rule, ")"));
      };
      switch (a.kind()) {
        case v1::FORWARD:
          if (s > 0) {
            DAPPLE_RETURN_IF_ERROR(
                needs(got_act[mb], v1::RECV_ACT, "a forward needs its input activation"));
          }
          forwarded[mb] = 1;
          break;
        case v1::BACKWARD:
          DAPPLE_RETURN_IF_ERROR(needs(forwarded[mb], v1::FORWARD, "backward before forward"));
          if (s < p - 1) {
            DAPPLE_RETURN_IF_ERROR(
                needs(got_grad[mb], v1::RECV_GRAD, "a backward needs its output gradient"));
          }
          backwarded[mb] = 1;
          break;
        case v1::SEND_ACT:
          DAPPLE_RETURN_IF_ERROR(
              needs(forwarded[mb], v1::FORWARD, "an activation is sent after it is computed"));
          break;
        case v1::SEND_GRAD:
          DAPPLE_RETURN_IF_ERROR(
              needs(backwarded[mb], v1::BACKWARD, "a gradient is sent after it is computed"));
          break;
        case v1::RECV_ACT:
          got_act[mb] = 1;
          break;
        case v1::RECV_GRAD:
          got_grad[mb] = 1;
          break;
        case v1::ACTION_KIND_UNSPECIFIED:
        case v1::ALLREDUCE:
        case v1::OPTIMIZER_STEP:
        case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
        case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
          break;
      }
    }
  }
  return absl::OkStatus();
}

// One stretch of time a rank spent on an action (waiting is not a slot).
struct Slot {
  double start;
  double end;
  std::string label;
};

std::string CellLabel(const v1::Action& a) {
  switch (a.kind()) {
    case v1::FORWARD:
      return absl::StrCat("F", a.micro_batch());
    case v1::BACKWARD:
      return absl::StrCat("B", a.micro_batch());
    case v1::SEND_ACT:
      return absl::StrCat("sa", a.micro_batch());
    case v1::RECV_ACT:
      return absl::StrCat("ra", a.micro_batch());
    case v1::SEND_GRAD:
      return absl::StrCat("sg", a.micro_batch());
    case v1::RECV_GRAD:
      return absl::StrCat("rg", a.micro_batch());
    case v1::ALLREDUCE:
      return "AR";
    case v1::OPTIMIZER_STEP:
      return "ST";
    case v1::ACTION_KIND_UNSPECIFIED:
    case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return "?";
}

// The column width of the grid: the smallest positive compute cost, so unit-ish costs get one
// column per unit; communication only when nothing computes for a positive time.
double GridQuantum(const ActionCosts& c, int num_stages) {
  double q = 0;
  auto consider = [&q](double v) {
    if (v > 0 && (q == 0 || v < q)) q = v;
  };
  for (int s = 0; s < num_stages; ++s) {
    consider(ForwardCost(c, s));
    consider(BackwardCost(c, s));
  }
  consider(c.optimizer_step);
  if (q == 0) {
    consider(c.send);
    consider(c.recv);
  }
  return q;
}

std::string RenderGrid(const std::vector<std::vector<Slot>>& slots, double end_time, double quantum,
                       const std::vector<std::string>& row_suffix) {
  const int p = static_cast<int>(slots.size());
  int columns = 0;
  if (quantum > 0 && end_time > 0) {
    // The epsilon absorbs rounding in sums of costs such as 0.1 + 0.2.
    const double exact = end_time / quantum;
    columns = static_cast<int>(std::min<double>(std::ceil(exact - 1e-9), kMaxGridColumns));
    if (exact > kMaxGridColumns) quantum = end_time / kMaxGridColumns;
  }
  size_t width = std::max<size_t>(2, absl::StrCat(columns > 0 ? columns - 1 : 0).size());
  for (const auto& row : slots) {
    for (const Slot& slot : row) width = std::max(width, slot.label.size());
  }
  const std::string row_name_last = absl::StrCat("stage ", p - 1);
  const size_t name_width = row_name_last.size();

  auto trim = [](std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line;
  };
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat("one column = %g time unit%s", quantum, quantum == 1 ? "" : "s"));
  std::string header = absl::StrFormat("%*s |", static_cast<int>(name_width), "t");
  for (int c = 0; c < columns; ++c) absl::StrAppendFormat(&header, " %-*d", width, c);
  lines.push_back(trim(header));
  for (int s = 0; s < p; ++s) {
    std::string line =
        absl::StrFormat("%*s |", static_cast<int>(name_width), absl::StrCat("stage ", s));
    size_t k = 0;
    for (int c = 0; c < columns; ++c) {
      // A cell shows what ran at the middle of its time slot.
      const double t = (c + 0.5) * quantum;
      while (k < slots[s].size() && slots[s][k].end <= t) ++k;
      const bool busy = k < slots[s].size() && slots[s][k].start <= t;
      absl::StrAppendFormat(&line, " %-*s", width, busy ? slots[s][k].label : ".");
    }
    line = trim(line);
    if (!row_suffix.empty()) absl::StrAppend(&line, "  <- ", row_suffix[s]);
    lines.push_back(line);
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace

absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs) {
  int m = 0;
  DAPPLE_RETURN_IF_ERROR(Validate(programs, &m));
  const int p = static_cast<int>(programs.size());
  DAPPLE_RETURN_IF_ERROR(CheckCosts(costs, p));

  // End time of each issued send, by sending stage and micro-batch.
  std::vector<std::vector<double>> act_sent(p, std::vector<double>(m, kNotIssued));
  std::vector<std::vector<double>> grad_sent(p, std::vector<double>(m, kNotIssued));
  std::vector<int> pc(p, 0);
  std::vector<double> clock(p, 0.0);
  std::vector<int> in_flight(p, 0);
  std::vector<std::vector<Slot>> slots(p);

  SimulationResult result;
  result.busy_time.assign(p, 0.0);
  result.peak_in_flight.assign(p, 0);

  // Times depend only on the dependency graph, not on the order ranks are visited in, so each
  // rank runs until it blocks and we sweep until a sweep moves nothing. Sends never block, so a
  // sweep that moves nothing with ranks unfinished is a wait-for cycle: a deadlock.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const v1::RankProgram& prog = programs[s];
      while (pc[s] < prog.actions_size()) {
        const v1::Action& a = prog.actions(pc[s]);
        const int mb = a.micro_batch();
        double start = clock[s];
        double cost = 0;
        bool compute = false;
        bool blocked = false;
        switch (a.kind()) {
          case v1::FORWARD:
            cost = ForwardCost(costs, s);
            compute = true;
            result.peak_in_flight[s] = std::max(result.peak_in_flight[s], ++in_flight[s]);
            break;
          case v1::BACKWARD:
            cost = BackwardCost(costs, s);
            compute = true;
            --in_flight[s];
            break;
          case v1::OPTIMIZER_STEP:
            cost = costs.optimizer_step;
            compute = true;
            break;
          case v1::ALLREDUCE:
            // Replicas are not simulated: an AllReduce among them costs nothing here.
            break;
          case v1::SEND_ACT:
            cost = costs.send;
            act_sent[s][mb] = start + cost;
            break;
          case v1::SEND_GRAD:
            cost = costs.send;
            grad_sent[s][mb] = start + cost;
            break;
          case v1::RECV_ACT:
          case v1::RECV_GRAD: {
            const double sent =
                a.kind() == v1::RECV_ACT ? act_sent[s - 1][mb] : grad_sent[s + 1][mb];
            if (sent == kNotIssued) {
              blocked = true;
              break;
            }
            start = std::max(start, sent);
            cost = costs.recv;
            break;
          }
          case v1::ACTION_KIND_UNSPECIFIED:
          case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
          case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
            return absl::InternalError(absl::StrCat("unvalidated ", ActionToString(a)));
        }
        if (blocked) break;
        if (compute) result.busy_time[s] += cost;
        if (cost > 0) slots[s].push_back({start, start + cost, CellLabel(a)});
        clock[s] = start + cost;
        ++pc[s];
        progress = true;
      }
    }
  }

  const double quantum = GridQuantum(costs, p);
  result.step_time = *std::max_element(clock.begin(), clock.end());

  bool deadlocked = false;
  for (int s = 0; s < p; ++s) deadlocked |= pc[s] < programs[s].actions_size();
  if (deadlocked) {
    std::vector<std::string> waits;
    std::vector<std::string> suffix;
    for (int s = 0; s < p; ++s) {
      if (pc[s] >= programs[s].actions_size()) {
        suffix.push_back("finished");
        continue;
      }
      const v1::Action& a = programs[s].actions(pc[s]);
      const v1::Action peer = a.kind() == v1::RECV_ACT
                                  ? MakeAction(s - 1, v1::SEND_ACT, a.micro_batch())
                                  : MakeAction(s + 1, v1::SEND_GRAD, a.micro_batch());
      const std::string wait = absl::StrCat("stage ", s, " waits on ", ActionToString(a),
                                            " (action ", pc[s], ") for ", ActionToString(peer));
      waits.push_back(wait);
      suffix.push_back(absl::StrCat("waits on ", ActionToString(a)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("deadlock: ", absl::StrJoin(waits, "; "), "; what ran:\n",
                     RenderGrid(slots, result.step_time, quantum, suffix)));
  }

  double idle_sum = 0;
  result.idle_time.resize(p);
  for (int s = 0; s < p; ++s) {
    result.idle_time[s] = result.step_time - result.busy_time[s];
    idle_sum += result.idle_time[s];
  }
  result.bubble_fraction = result.step_time > 0 ? idle_sum / (p * result.step_time) : 0.0;
  result.grid = RenderGrid(slots, result.step_time, quantum, {});
  return result;
}

}  // namespace dapple::schedule
