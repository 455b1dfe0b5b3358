#include "common/memory_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "common/schedule/pipedream_steps.h"

namespace dapple::memory {
namespace {

int64_t RoundBytes(double bytes) { return static_cast<int64_t>(std::llround(bytes)); }

int NumStages(const ReplicaPlace& place) { return static_cast<int>(place.replicas.size()); }

int ReplicasOf(const ReplicaPlace& place, int stage) {
  return std::max(1, place.replicas[static_cast<size_t>(stage)]);
}

schedule::PipeDreamLayout Layout(const ReplicaPlace& place) {
  schedule::PipeDreamLayout layout;
  for (int s = 0; s < NumStages(place); ++s) layout.replicas.push_back(ReplicasOf(place, s));
  layout.num_micro_batches = std::max(1, place.micro_batches);
  // A long run unless told: the warm-up is then the whole K_s.
  layout.num_steps = place.num_steps > 0 ? place.num_steps : int64_t{1} << 40;
  return layout;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The stashed versions a replica of a pipedream stage keeps at an update, in steady state:
// the distinct versions its micro-batches in flight ran their forwards under. The stage's order
// is F_0..F_{K-1}, then (B_b, F_{b+K}), an update right after B_b when (b + 1) % M == 0
// (schedule/pipedream_steps.h), so F_g ran under version floor((g - K + 1) / M); at the update
// after B_b the stage holds b + 1 .. b + K - 1, the replica those with g % D == its replica.
// The pattern repeats every D steps: enumerating D steps is exact; `replica` < 0 takes the
// largest over the D replicas. At most schedule::PipeDreamReplicaVersions - 1 (the bound
// without M).
int64_t StashedVersions(const schedule::PipeDreamLayout& layout, int stage, int replica) {
  const int64_t k = schedule::PipeDreamWarmUp(layout, stage);
  const int64_t m = layout.num_micro_batches;
  const int64_t d = layout.replicas[static_cast<size_t>(stage)];
  const int64_t first = k / m + 2;  // past the warm-up
  int64_t most = 0;
  for (int64_t t = first; t < first + d; ++t) {
    const int64_t b = t * m + m - 1;
    for (int64_t r = 0; r < d; ++r) {
      if (replica >= 0 && r != replica % d) continue;
      int64_t distinct = 0;
      int64_t previous = -1;
      for (int64_t g = b + 1; g <= b + k - 1; ++g) {
        if (g % d != r) continue;
        const int64_t version = (g - k + 1) / m;  // non-decreasing in g
        if (version != previous) ++distinct;
        previous = version;
      }
      most = std::max(most, distinct);
    }
  }
  return most;
}

}  // namespace

int OptimizerStateCopies(const v1::OptimizerSpec& optimizer) {
  if (optimizer.type() == "adamw") return 2;
  return optimizer.momentum() != 0 ? 1 : 0;
}

double ParameterStateBytes(double parameter_bytes, double optimizer_state_copies) {
  return (2.0 + optimizer_state_copies) * parameter_bytes;
}

double InFlightBound(schedule::ScheduleKind schedule, int stages_from_here, double micro_batches) {
  if (schedule == schedule::ScheduleKind::kGPipe) return micro_batches;
  // The zero-bubble schedules hold P (ZB-H1) or 2P - 1 (ZB-H2) on every stage; without P, the
  // stages from here give the lower bound P - s, or 2(P - s) - 1.
  if (schedule == schedule::ScheduleKind::kZbH2) {
    return std::min(2.0 * stages_from_here - 1, micro_batches);
  }
  return std::min(static_cast<double>(stages_from_here), micro_batches);
}

int ActivationsInFlight(const ReplicaPlace& place) {
  const int M = std::max(1, place.micro_batches);
  if (place.schedule == schedule::ScheduleKind::kPipeDream) {
    return static_cast<int>(schedule::PipeDreamReplicaInFlight(Layout(place), place.stage));
  }
  // Warm-up + W lag (schedule/generators.h): P on every stage under ZB-H1, 2P - 1 under ZB-H2.
  const int p = NumStages(place);
  if (place.schedule == schedule::ScheduleKind::kZbH1) return std::min(p, M);
  if (place.schedule == schedule::ScheduleKind::kZbH2) return std::min(2 * p - 1, M);
  if (place.schedule == schedule::ScheduleKind::kInterleaved) {
    return schedule::InterleavedInFlight(p, std::max(1, place.chunks), M, place.stage);
  }
  // GPipe runs every forward before the first backward; 1F1B (dapple, pipesgd) at most P - s.
  return static_cast<int>(InFlightBound(place.schedule, NumStages(place) - place.stage, M));
}

double ReplicaRows(const ReplicaPlace& place, double micro_batch_size) {
  if (place.schedule == schedule::ScheduleKind::kPipeDream) return micro_batch_size;
  return micro_batch_size / static_cast<double>(ReplicasOf(place, place.stage));
}

int WeightVersions(const ReplicaPlace& place) {
  if (place.schedule != schedule::ScheduleKind::kPipeDream) return 1;
  const schedule::PipeDreamLayout layout = Layout(place);
  int64_t versions = 1 + StashedVersions(layout, place.stage, place.replica);
  if (place.vertical_sync) {
    // The runtime keeps every version from stage 0's version of the step's first micro-batch
    // t M, i.e. t - ceil((K_0 - 1) / M), to the live one after the update, t + 1.
    const int64_t k0 = schedule::PipeDreamWarmUp(layout, 0);
    versions = std::max(versions, 2 + CeilDiv(k0 - 1, layout.num_micro_batches));
  }
  return static_cast<int>(versions);
}

int ExtraWeightCopies(const ReplicaPlace& place) {
  const int stashed = WeightVersions(place) - 1;
  return stashed > 0 ? stashed + 1 : 0;
}

int CommunicationBufferIds(const ReplicaPlace& place) {
  const int M = std::max(1, place.micro_batches);
  if (place.schedule != schedule::ScheduleKind::kPipeDream) return M;
  const schedule::PipeDreamLayout layout = Layout(place);
  const int64_t ids = M + schedule::PipeDreamWarmUp(layout, place.stage);
  return static_cast<int>(ids /
                          std::gcd(ids, static_cast<int64_t>(ReplicasOf(place, place.stage))));
}

double ActivationBytes(const ReplicaPlace& place, const StageSizes& sizes, int in_flight) {
  const bool last = place.stage == NumStages(place) - 1;
  const double dlogits = last ? sizes.output_bytes : 0.0;
  if (!place.recompute) return (sizes.activation_bytes + dlogits) * in_flight;
  // The scratch set: every layer's output and saved bytes; its input is the slot's.
  const double scratch = sizes.activation_bytes - sizes.input_bytes;
  return (sizes.input_bytes + sizes.output_bytes + dlogits) * in_flight + scratch;
}

namespace {

// The backward's two gradient buffers between layers (a layer's input gradient and the next
// one's, alternating): each the largest of the outputs that land in it.
double TwoBufferBytes(const std::vector<double>& inner_output_bytes) {
  double buffers[2] = {0, 0};
  const int inner = static_cast<int>(inner_output_bytes.size());
  for (int i = 0; i < inner; ++i) {
    // Output i is the input gradient of layer i + 1, at distance inner - 1 - i from the last.
    double& buffer = buffers[(inner - 1 - i) % 2];
    buffer = std::max(buffer, inner_output_bytes[static_cast<size_t>(i)]);
  }
  return buffers[0] + buffers[1];
}

// Per id: the output sent and its gradient received (not the last virtual stage), the input
// gradient sent back (not the first).
double CommunicationPerId(bool first, bool last, double input_bytes, double output_bytes) {
  return (last ? 0.0 : 2.0 * output_bytes) + (first ? 0.0 : input_bytes);
}

// Interleaved 1F1B with one ChunkSizes per chunk: every chunk backend keeps its own slots (as
// many as its micro-batches were ever in flight at once, reused), its own two backward buffers
// and its own message buffers, one per micro-batch id.
void PredictChunks(const ReplicaPlace& place, const StageSizes& sizes, ReplicaMemory* m) {
  const int p = NumStages(place);
  const int v = static_cast<int>(sizes.chunks.size());
  const int M = std::max(1, place.micro_batches);
  const std::vector<int> slots = schedule::InterleavedChunkSlots(p, v, M, place.stage);
  double activations = 0;
  double workspace = 0;
  double communication = 0;
  for (int c = 0; c < v; ++c) {
    const ChunkSizes& chunk = sizes.chunks[static_cast<size_t>(c)];
    const bool first = place.stage == 0 && c == 0;
    const bool last = place.stage == p - 1 && c == v - 1;
    const double dlogits = last ? chunk.output_bytes : 0.0;
    activations += (chunk.activation_bytes + dlogits) * slots[static_cast<size_t>(c)];
    workspace += TwoBufferBytes(chunk.inner_output_bytes);
    communication += CommunicationPerId(first, last, chunk.input_bytes, chunk.output_bytes) * M;
  }
  m->activations = RoundBytes(activations);
  m->workspace = RoundBytes(workspace);
  m->communication = RoundBytes(communication);
}

}  // namespace

void AddChunkSizes(ChunkSizes chunk, int chunks, StageSizes* sizes) {
  const double v = std::max(1, chunks);
  sizes->activation_bytes += chunk.activation_bytes / v;
  sizes->input_bytes += chunk.input_bytes / v;
  sizes->output_bytes += chunk.output_bytes / v;
  sizes->inner_output_bytes.insert(sizes->inner_output_bytes.end(),
                                   chunk.inner_output_bytes.begin(),
                                   chunk.inner_output_bytes.end());
  if (chunks > 1) sizes->chunks.push_back(std::move(chunk));
}

int64_t EvalPieceRows(int64_t micro_batch, int64_t widest_floats) {
  return std::clamp<int64_t>(
      std::min<int64_t>(kMaxEvalActivationFloats / std::max<int64_t>(1, widest_floats),
                        micro_batch),
      1, kMaxEvalPieceRows);
}

ReplicaMemory PredictReplicaMemory(const ReplicaPlace& place, const StageSizes& sizes) {
  const double w = sizes.parameter_bytes;
  ReplicaMemory m;
  m.in_flight = ActivationsInFlight(place);
  m.weight_versions = WeightVersions(place);
  m.weights = RoundBytes(w);
  m.gradients = RoundBytes(w);
  m.optimizer_state = RoundBytes(sizes.optimizer_state_copies * w);
  if (place.schedule == schedule::ScheduleKind::kPipeSgd) m.gradient_buffers = RoundBytes(2.0 * w);
  m.stashed_weights = RoundBytes(w * ExtraWeightCopies(place));
  const bool first = place.stage == 0;
  const bool last = place.stage == NumStages(place) - 1;
  if (place.schedule == schedule::ScheduleKind::kInterleaved && place.chunks > 1 &&
      static_cast<int>(sizes.chunks.size()) == place.chunks && !place.recompute) {
    PredictChunks(place, sizes, &m);
    return m;
  }
  m.activations = RoundBytes(ActivationBytes(place, sizes, m.in_flight));
  m.workspace = RoundBytes(TwoBufferBytes(sizes.inner_output_bytes));
  if (place.schedule == schedule::ScheduleKind::kZbH1 ||
      place.schedule == schedule::ScheduleKind::kZbH2) {
    // The split backward never uses the two shared buffers: each slot keeps its own inner
    // gradients from BACKWARD_INPUT for BACKWARD_WEIGHT, and keeps them allocated for reuse.
    double inner_sum = 0;
    for (double bytes : sizes.inner_output_bytes) inner_sum += bytes;
    m.activations += RoundBytes(inner_sum * m.in_flight);
    m.workspace = 0;
  }
  double communication = CommunicationPerId(first, last, sizes.input_bytes, sizes.output_bytes) *
                         CommunicationBufferIds(place);
  // Replica 0 of each stage evaluates for its siblings (the largest, replica -1, counts it).
  if (place.schedule == schedule::ScheduleKind::kPipeDream && place.evaluates_between_steps &&
      !last && place.replica <= 0) {
    communication += kEvalSendsInFlight * sizes.eval_piece_output_bytes;
  }
  m.communication = RoundBytes(communication);
  return m;
}

}  // namespace dapple::memory
