#include "common/schedule/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/schedule/action.h"
#include "common/schedule/simulator_grid.h"
#include "common/schedule/simulator_validate.h"
#include "common/status.h"

namespace dapple::schedule {
namespace {

using internal::BarrierIndex;
using internal::BarrierMembers;
using internal::CheckOp;
using internal::kBarrierKinds;
using internal::kNumBarrierKinds;
using internal::ValidateChunks;
using internal::Where;

constexpr double kNotIssued = -1.0;

absl::Status CheckCost(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("costs.", field, " ", value, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckFraction(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0 || value > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("costs.", field, " ", value, " must be in [0, 1]"));
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

// Boundary b lies between stages b and b + 1.
double TransferCost(const std::vector<double>& per_boundary, int b) {
  return per_boundary.empty() ? 0.0 : per_boundary[b];
}

absl::Status CheckPerBoundary(absl::string_view field, const std::vector<double>& per_boundary,
                              int num_stages) {
  if (per_boundary.empty()) return absl::OkStatus();
  if (static_cast<int>(per_boundary.size()) != num_stages - 1) {
    return absl::InvalidArgumentError(absl::StrCat("costs.", field, " has ", per_boundary.size(),
                                                   " entries for ", num_stages - 1,
                                                   " stage boundaries (P - 1)"));
  }
  for (size_t s = 0; s < per_boundary.size(); ++s) {
    DAPPLE_RETURN_IF_ERROR(CheckCost(absl::StrCat(field, "[", s, "]"), per_boundary[s]));
  }
  return absl::OkStatus();
}

absl::Status CheckCosts(const ActionCosts& costs, int num_stages) {
  DAPPLE_RETURN_IF_ERROR(CheckCost("forward", costs.forward));
  DAPPLE_RETURN_IF_ERROR(CheckCost("backward", costs.backward));
  DAPPLE_RETURN_IF_ERROR(CheckCost("send", costs.send));
  DAPPLE_RETURN_IF_ERROR(CheckCost("recv", costs.recv));
  DAPPLE_RETURN_IF_ERROR(CheckCost("optimizer_step", costs.optimizer_step));
  DAPPLE_RETURN_IF_ERROR(CheckCost("allreduce", costs.allreduce));
  DAPPLE_RETURN_IF_ERROR(CheckCost("tied_allreduce", costs.tied_allreduce));
  DAPPLE_RETURN_IF_ERROR(CheckCost("global_norm", costs.global_norm));
  DAPPLE_RETURN_IF_ERROR(CheckFraction("backward_weight_fraction", costs.backward_weight_fraction));
  DAPPLE_RETURN_IF_ERROR(CheckPerStage("forward_per_stage", costs.forward_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(CheckPerStage("backward_per_stage", costs.backward_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(CheckPerStage("backward_weight_fraction_per_stage",
                                       costs.backward_weight_fraction_per_stage, num_stages));
  for (size_t s = 0; s < costs.backward_weight_fraction_per_stage.size(); ++s) {
    DAPPLE_RETURN_IF_ERROR(
        CheckFraction(absl::StrCat("backward_weight_fraction_per_stage[", s, "]"),
                      costs.backward_weight_fraction_per_stage[s]));
  }
  DAPPLE_RETURN_IF_ERROR(
      CheckPerStage("optimizer_step_per_stage", costs.optimizer_step_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerStage("allreduce_per_stage", costs.allreduce_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerStage("recompute_per_stage", costs.recompute_per_stage, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerBoundary("act_transfer_per_boundary", costs.act_transfer_per_boundary, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerBoundary("grad_transfer_per_boundary", costs.grad_transfer_per_boundary, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerBoundary("host_copy_per_boundary", costs.host_copy_per_boundary, num_stages));
  DAPPLE_RETURN_IF_ERROR(
      CheckPerBoundary("link_latency_per_boundary", costs.link_latency_per_boundary, num_stages));
  for (size_t b = 0; b < costs.link_latency_per_boundary.size(); ++b) {
    const double latency = costs.link_latency_per_boundary[b];
    const double act = TransferCost(costs.act_transfer_per_boundary, static_cast<int>(b));
    const double grad = TransferCost(costs.grad_transfer_per_boundary, static_cast<int>(b));
    if (latency > act || latency > grad) {
      return absl::InvalidArgumentError(
          absl::StrCat("costs.link_latency_per_boundary[", b, "] = ", latency,
                       " exceeds the boundary's transfer (activation ", act, ", gradient ", grad,
                       "): the latency is a part of each transfer"));
    }
  }
  return absl::OkStatus();
}

double PerStage(const std::vector<double>& per_stage, double scalar, int s) {
  return per_stage.empty() ? scalar : per_stage[s];
}
double ForwardCost(const ActionCosts& c, int s) {
  return PerStage(c.forward_per_stage, c.forward, s);
}
double BackwardCost(const ActionCosts& c, int s) {
  return PerStage(c.backward_per_stage, c.backward, s) + PerStage(c.recompute_per_stage, 0.0, s);
}
// The zero-bubble split of the stage's backward (simulator.h, ActionCosts).
double BackwardWeightCost(const ActionCosts& c, int s) {
  return BackwardCost(c, s) *
         PerStage(c.backward_weight_fraction_per_stage, c.backward_weight_fraction, s);
}
double BackwardInputCost(const ActionCosts& c, int s) {
  return BackwardCost(c, s) - BackwardWeightCost(c, s);
}
double OptimizerStepCost(const ActionCosts& c, int s) {
  return PerStage(c.optimizer_step_per_stage, c.optimizer_step, s);
}
double AllReduceCost(const ActionCosts& c, int s) {
  return PerStage(c.allreduce_per_stage, c.allreduce, s);
}
// The column width of the grid (simulator_grid.h GridQuantum) from the costs the programs use.
double GridQuantum(const ActionCosts& c, int num_stages, bool split_backward) {
  std::vector<double> compute;
  for (int s = 0; s < num_stages; ++s) {
    compute.insert(compute.end(), {ForwardCost(c, s), BackwardCost(c, s), OptimizerStepCost(c, s)});
    if (split_backward) {
      compute.insert(compute.end(), {BackwardInputCost(c, s), BackwardWeightCost(c, s)});
    }
  }
  return internal::GridQuantum(compute, {c.send, c.recv});
}

// The event loop. Each rank runs until a receive finds its send not yet issued; it then waits
// until exactly that send is issued, which puts it back on the ready list, so every action is
// executed once: O(actions). The resulting times depend only on the dependency graph (a
// directed link's transfers come from one rank, in its program order), not on the order ranks
// are taken from the ready list.
// The barriers' rounds during a run: per kind (kBarrierKinds order), its member stages, which of
// them reached the round being gathered, and the latest of their arrival times.
class Barriers {
 public:
  explicit Barriers(const std::vector<OpProgram>& programs)
      : members_(BarrierMembers(programs)),
        arrived_(kNumBarrierKinds, std::vector<char>(programs.size(), 0)),
        count_(kNumBarrierKinds, 0),
        latest_(kNumBarrierKinds, 0.0) {}

  // Stage `s` reaches its next barrier of kind index `b` at `time`. False while members are
  // missing (s waits). True for the last member: *start is the latest arrival, *released the
  // other members (who waited), and the next round begins.
  bool Arrive(int b, int s, double time, double* start, std::vector<int>* released) {
    arrived_[b][s] = 1;
    latest_[b] = std::max(latest_[b], time);
    const int size = static_cast<int>(std::count(members_[b].begin(), members_[b].end(), 1));
    if (++count_[b] < size) return false;
    *start = latest_[b];
    released->clear();
    for (int w = 0; w < static_cast<int>(arrived_[b].size()); ++w) {
      if (w != s && arrived_[b][w]) released->push_back(w);
    }
    std::fill(arrived_[b].begin(), arrived_[b].end(), 0);
    count_[b] = 0;
    latest_[b] = 0;
    return true;
  }

  // The members of kind index `b` that have not reached the round being gathered.
  std::vector<int> Missing(int b) const {
    std::vector<int> missing;
    for (int w = 0; w < static_cast<int>(members_[b].size()); ++w) {
      if (members_[b][w] && !arrived_[b][w]) missing.push_back(w);
    }
    return missing;
  }

 private:
  std::vector<std::vector<char>> members_;
  std::vector<std::vector<char>> arrived_;
  std::vector<int> count_;
  std::vector<double> latest_;
};

struct RunState {
  std::vector<int> pc;
  std::vector<double> clock;
  std::vector<std::vector<internal::GridSlot>> slots;
  std::unique_ptr<Barriers> barriers;
};

// `chunks`: v, the virtual stages per rank (ranks are programs; costs, links and message tables
// are per virtual stage, busy time and the grid per rank).
SimulationResult Run(const std::vector<OpProgram>& programs, const ActionCosts& costs, int m,
                     int chunks, bool record_slots, bool keep_intervals, RunState* state) {
  const int p = static_cast<int>(programs.size());
  const int num_virtual = p * chunks;
  const size_t table_size = static_cast<size_t>(num_virtual) * static_cast<size_t>(m);
  // Arrival time at the peer of each issued send, by sending (virtual) stage * M + micro-batch.
  std::vector<double> act_arrival(table_size, kNotIssued);
  std::vector<double> grad_arrival(table_size, kNotIssued);
  // When each directed link (by sending virtual stage) finishes its last transfer.
  std::vector<double> act_link_free(num_virtual, 0.0);
  std::vector<double> grad_link_free(num_virtual, 0.0);
  // Interleaved programs label each cell with its chunk too ("F3.1": micro-batch 3, chunk 1).
  auto label = [&](const Op& a, int s) {
    std::string cell = internal::GridCellLabel(a);
    if (chunks > 1 && KindHasMicroBatch(a.kind)) absl::StrAppend(&cell, ".", StageOf(a, s) / p);
    return cell;
  };
  std::vector<int>& pc = state->pc;
  std::vector<double>& clock = state->clock;
  pc.assign(p, 0);
  clock.assign(p, 0.0);
  state->slots.assign(record_slots ? p : 0, {});
  std::vector<int> in_flight(p, 0);
  std::vector<char> waiting(p, 0);
  state->barriers = std::make_unique<Barriers>(programs);
  std::vector<int> released;

  SimulationResult result;
  result.busy_time.assign(p, 0.0);
  result.allreduce_time.assign(p, 0.0);
  result.comm_time.assign(p, 0.0);
  result.message_time.assign(p, 0.0);
  result.peak_in_flight.assign(p, 0);
  result.optimizer_step_end.assign(p, {});
  result.compute_intervals.assign(keep_intervals ? p : 0, {});

  std::vector<int> ready;
  ready.reserve(p);
  for (int s = p - 1; s >= 0; --s) ready.push_back(s);
  // Wakes rank `peer` if it waits on exactly the receive (kind, mb) of virtual stage `peer_vs`
  // that was just made possible.
  auto wake = [&](int peer, v1::ActionKind kind, int mb, int peer_vs) {
    if (!waiting[peer]) return;
    const Op& next = programs[peer][pc[peer]];
    if (next.kind != kind || next.micro_batch != mb || StageOf(next, peer) != peer_vs) return;
    waiting[peer] = 0;
    ready.push_back(peer);
  };

  while (!ready.empty()) {
    const int s = ready.back();
    ready.pop_back();
    const OpProgram& prog = programs[s];
    const int size = static_cast<int>(prog.size());
    while (pc[s] < size) {
      const Op& a = prog[pc[s]];
      const int mb = a.micro_batch;
      const int vs = StageOf(a, s);  // costs are per (virtual) stage
      double start = clock[s];
      double cost = 0;
      switch (a.kind) {
        case v1::FORWARD:
          cost = ForwardCost(costs, vs);
          result.busy_time[s] += cost;
          result.peak_in_flight[s] = std::max(result.peak_in_flight[s], ++in_flight[s]);
          break;
        case v1::BACKWARD:
          cost = BackwardCost(costs, vs);
          result.busy_time[s] += cost;
          --in_flight[s];
          break;
        case v1::BACKWARD_INPUT:
          cost = BackwardInputCost(costs, vs);
          result.busy_time[s] += cost;
          break;
        case v1::BACKWARD_WEIGHT:
          // The stashed activations live until the weight gradients are computed.
          cost = BackwardWeightCost(costs, vs);
          result.busy_time[s] += cost;
          --in_flight[s];
          break;
        case v1::OPTIMIZER_STEP:
        case v1::STALE_OPTIMIZER_STEP:
          cost = OptimizerStepCost(costs, vs);
          result.busy_time[s] += cost;
          result.optimizer_step_end[s].push_back(start + cost);
          break;
        // The asynchronous AllReduce is charged like a synchronous one: the simulator knows no
        // overlap across steps (the plan simulator prices Pipe-SGD's with pipesgd_model.h).
        case v1::ALLREDUCE:
        case v1::ALLREDUCE_ASYNC:
          cost = AllReduceCost(costs, vs);
          result.allreduce_time[s] += cost;
          break;
        // Local and free: weight versions are copies the memory model counts; the deferred
        // check's AllGather runs beside the rank (16 bytes per rank, awaited a step later).
        case v1::GLOBAL_NORM_ASYNC:
        case v1::USE_WEIGHTS:
        case v1::RESTORE_WEIGHTS:
        case v1::STASH_WEIGHTS:
        case v1::DROP_WEIGHTS:
          break;
        case v1::TIED_ALLREDUCE:
        case v1::GLOBAL_NORM: {
          cost = a.kind == v1::GLOBAL_NORM ? costs.global_norm : costs.tied_allreduce;
          if (!state->barriers->Arrive(BarrierIndex(a.kind), s, start, &start, &released)) {
            waiting[s] = 1;  // resumed by the last member to arrive
            break;
          }
          // The last member: the collective runs from the latest arrival, and every member's
          // action ends with it.
          for (int w : released) {
            if (record_slots && cost > 0) {
              state->slots[w].push_back({start, start + cost, label(a, w)});
            }
            result.allreduce_time[w] += cost;
            clock[w] = start + cost;
            ++pc[w];
            waiting[w] = 0;
            ready.push_back(w);
          }
          result.allreduce_time[s] += cost;
          break;
        }
        case v1::SEND_ACT:
        case v1::SEND_GRAD: {
          const bool act = a.kind == v1::SEND_ACT;
          cost = costs.send + TransferCost(costs.host_copy_per_boundary, act ? vs : vs - 1);
          result.message_time[s] += cost;
          const int peer_vs = act ? vs + 1 : vs - 1;
          const int peer = peer_vs % p;
          const double transfer =
              TransferCost(act ? costs.act_transfer_per_boundary : costs.grad_transfer_per_boundary,
                           act ? vs : vs - 1);
          const double latency = TransferCost(costs.link_latency_per_boundary, act ? vs : vs - 1);
          double& link_free = act ? act_link_free[vs] : grad_link_free[vs];
          link_free = std::max(start + cost, link_free) + (transfer - latency);
          (act ? act_arrival : grad_arrival)[static_cast<size_t>(vs) * m + mb] =
              link_free + latency;
          result.comm_time[s] += transfer;
          result.comm_time[peer] += transfer;
          wake(peer, act ? v1::RECV_ACT : v1::RECV_GRAD, mb, peer_vs);
          break;
        }
        case v1::RECV_ACT:
        case v1::RECV_GRAD: {
          const double arrival = a.kind == v1::RECV_ACT
                                     ? act_arrival[static_cast<size_t>(vs - 1) * m + mb]
                                     : grad_arrival[static_cast<size_t>(vs + 1) * m + mb];
          if (arrival == kNotIssued) {
            waiting[s] = 1;
            break;
          }
          start = std::max(start, arrival);
          cost = costs.recv +
                 TransferCost(costs.host_copy_per_boundary, a.kind == v1::RECV_ACT ? vs - 1 : vs);
          result.message_time[s] += cost;
          break;
        }
        case v1::ACTION_KIND_UNSPECIFIED:
        case v1::ActionKind_INT_MIN_SENTINEL_DO_NOT_USE_:
        case v1::ActionKind_INT_MAX_SENTINEL_DO_NOT_USE_:
          break;  // Validate refuses these
      }
      if (waiting[s]) break;
      if (record_slots && cost > 0) state->slots[s].push_back({start, start + cost, label(a, s)});
      if (keep_intervals && cost > 0 &&
          (a.kind == v1::FORWARD || a.kind == v1::BACKWARD || a.kind == v1::BACKWARD_INPUT ||
           a.kind == v1::BACKWARD_WEIGHT || a.kind == v1::OPTIMIZER_STEP ||
           a.kind == v1::STALE_OPTIMIZER_STEP)) {
        result.compute_intervals[s].push_back({start, start + cost});
      }
      clock[s] = start + cost;
      ++pc[s];
    }
  }
  result.step_time = *std::max_element(clock.begin(), clock.end());
  return result;
}

absl::StatusOr<SimulationResult> SimulateValidated(const std::vector<OpProgram>& programs,
                                                   const ActionCosts& costs,
                                                   const SimulateOptions& options) {
  int m = 0;
  int chunks = 1;
  DAPPLE_RETURN_IF_ERROR(ValidateChunks(programs, &m, &chunks));
  const int p = static_cast<int>(programs.size());
  DAPPLE_RETURN_IF_ERROR(CheckCosts(costs, p * chunks));

  RunState state;
  SimulationResult result =
      Run(programs, costs, m, chunks, options.render_grid, options.keep_compute_intervals, &state);
  bool split_backward = false;
  for (const OpProgram& prog : programs) {
    for (const Op& op : prog) split_backward |= op.kind == v1::BACKWARD_WEIGHT;
  }
  const double quantum = GridQuantum(costs, p * chunks, split_backward);

  bool deadlocked = false;
  for (int s = 0; s < p; ++s) deadlocked |= state.pc[s] < static_cast<int>(programs[s].size());
  if (deadlocked) {
    // The message shows what ran: run again with slots if the first run kept none.
    if (!options.render_grid) result = Run(programs, costs, m, chunks, true, false, &state);
    std::vector<std::string> waits;
    std::vector<std::string> suffix;
    for (int s = 0; s < p; ++s) {
      if (state.pc[s] >= static_cast<int>(programs[s].size())) {
        suffix.push_back("finished");
        continue;
      }
      const v1::Action a = ToAction(s, programs[s][state.pc[s]]);
      std::string awaited;
      if (const int b = BarrierIndex(a.kind()); b >= 0) {
        // A barrier waits on the members that have not reached it.
        const std::vector<int> missing = state.barriers->Missing(b);
        awaited =
            absl::StrCat(missing.size() == 1 ? "stage " : "stages ", absl::StrJoin(missing, ", "),
                         " to reach ", v1::ActionKind_Name(a.kind()));
      } else {
        const int vs = a.stage();
        awaited = ActionToString(a.kind() == v1::RECV_ACT
                                     ? MakeAction(vs - 1, v1::SEND_ACT, a.micro_batch())
                                     : MakeAction(vs + 1, v1::SEND_GRAD, a.micro_batch()));
      }
      const std::string wait = absl::StrCat("stage ", s, " waits on ", ActionToString(a),
                                            " (action ", state.pc[s], ") for ", awaited);
      waits.push_back(wait);
      suffix.push_back(absl::StrCat("waits on ", ActionToString(a)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("deadlock: ", absl::StrJoin(waits, "; "), "; what ran:\n",
                     internal::RenderGrid(state.slots, result.step_time, quantum, suffix)));
  }

  double idle_sum = 0;
  result.idle_time.resize(p);
  for (int s = 0; s < p; ++s) {
    result.idle_time[s] = result.step_time - result.busy_time[s] - result.allreduce_time[s];
    idle_sum += result.idle_time[s];
  }
  result.bubble_fraction = result.step_time > 0 ? idle_sum / (p * result.step_time) : 0.0;
  if (options.render_grid)
    result.grid = internal::RenderGrid(state.slots, result.step_time, quantum, {});
  return result;
}

}  // namespace

absl::StatusOr<SimulationResult> SimulateOps(const std::vector<OpProgram>& programs,
                                             const ActionCosts& costs,
                                             const SimulateOptions& options) {
  return SimulateValidated(programs, costs, options);
}

absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs,
                                          const SimulateOptions& options) {
  // The checks only the proto form needs (stage fields), in the order the per-action checks
  // report, then the shared path on Ops.
  const int p = static_cast<int>(programs.size());
  // Virtual stages (interleaved 1F1B): rank s runs s, s + P, ...; the per-action checks see the
  // virtual stage among P * v.
  int max_stage = p - 1;
  for (const v1::RankProgram& prog : programs) {
    for (const v1::Action& a : prog.actions()) max_stage = std::max(max_stage, a.stage());
  }
  const int num_virtual = p > 0 ? (max_stage / p + 1) * p : 0;
  std::vector<OpProgram> ops(p);
  for (int s = 0; s < p; ++s) {
    const v1::RankProgram& prog = programs[s];
    if (prog.stage() != s) {
      return absl::InvalidArgumentError(absl::StrCat("programs[", s, "] has stage ", prog.stage(),
                                                     "; programs[s] must be stage s"));
    }
    ops[s].reserve(prog.actions_size());
    for (int i = 0; i < prog.actions_size(); ++i) {
      const v1::Action& a = prog.actions(i);
      // A virtual stage of the rank (interleaved 1F1B) is checked by ValidateChunks.
      if (a.stage() < 0 || a.stage() % p != s) {
        return absl::InvalidArgumentError(absl::StrCat(Where(s, i, a), " names stage ", a.stage(),
                                                       " in stage ", s, "'s program"));
      }
      const Op op{a.kind(), a.micro_batch(), a.stage() == s ? -1 : a.stage()};
      DAPPLE_RETURN_IF_ERROR(CheckOp(a.stage(), i, num_virtual, op));
      ops[s].push_back(op);
    }
  }
  return SimulateValidated(ops, costs, options);
}

absl::StatusOr<SimulationResult> Simulate(const std::vector<v1::RankProgram>& programs,
                                          const ActionCosts& costs) {
  return Simulate(programs, costs, SimulateOptions{});
}

}  // namespace dapple::schedule
