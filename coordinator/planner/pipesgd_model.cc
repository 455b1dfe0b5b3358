#include "coordinator/planner/pipesgd_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/planner/cost_model.h"

namespace dapple::coordinator {

namespace {
constexpr double kMsPerSecond = 1000.0;
// Pipelining must beat the synchronous step by more than this fraction to be worth the
// staleness.
constexpr double kPaysBelow = 0.95;
}  // namespace

absl::StatusOr<PipeSgdCompression> ParsePipeSgdCompression(absl::string_view name) {
  if (name.empty() || name == "none") return PipeSgdCompression::kNone;
  if (name == "fp16") return PipeSgdCompression::kFp16;
  if (name == "int8") return PipeSgdCompression::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression \"", name, "\" (known: none, fp16, int8)"));
}

v1::PipeSgdTiming PipeSgdTime(const PipeSgdInputs& in) {
  v1::PipeSgdTiming out;
  out.set_replicas(in.replicas);
  out.set_compute_ms(in.compute_ms);
  double allreduce = 0, codec = 0;
  if (in.replicas > 1 && in.bandwidth_bytes_per_s > 0) {
    const double d = in.replicas;
    const double s = in.gradient_bytes;
    const double per_byte_ms = kMsPerSecond / in.bandwidth_bytes_per_s;
    switch (in.compression) {
      case PipeSgdCompression::kNone:
        allreduce = 2 * (d - 1) * (in.latency_ms + s / d * per_byte_ms);
        break;
      case PipeSgdCompression::kFp16:
        allreduce = (d - 1) * (in.latency_ms + s / 2 * per_byte_ms);
        break;
      case PipeSgdCompression::kInt8:
        allreduce = (d - 1) * (in.latency_ms + (s / 4 + 4) * per_byte_ms);
        break;
    }
    if (in.compression != PipeSgdCompression::kNone && in.codec_bytes_per_s > 0) {
      codec = (s + d * s) / in.codec_bytes_per_s * kMsPerSecond;
    }
  }
  out.set_allreduce_ms(allreduce);
  out.set_compression_ms(codec);
  const double sync = in.compute_ms + allreduce + codec;
  const double pipelined = std::max(in.compute_ms, allreduce + codec);
  out.set_sync_step_ms(sync);
  out.set_pipelined_step_ms(pipelined);
  out.set_pays(in.replicas > 1 && pipelined < kPaysBelow * sync);
  return out;
}

v1::PipeSgdTiming PipeSgdTimeOn(const v1::ClusterTopology& topology,
                                const std::vector<int>& devices, double compute_ms,
                                double gradient_bytes, PipeSgdCompression compression) {
  PipeSgdInputs in;
  in.replicas = static_cast<int>(devices.size());
  in.compute_ms = compute_ms;
  in.gradient_bytes = gradient_bytes;
  in.latency_ms = LinkLatencyMs(topology, devices, devices);
  in.bandwidth_bytes_per_s = LinkBandwidth(topology, devices, devices);
  in.compression = compression;
  return PipeSgdTime(in);
}

std::string PipeSgdLine(const v1::PipeSgdTiming& timing) {
  const double pipelined = timing.pipelined_step_ms();
  const double sync = timing.sync_step_ms();
  std::string verdict = timing.pays() ? "pipelining pays off" : "pipelining does not pay off";
  if (!timing.pays() && pipelined < sync && sync > 0) {
    // Faster, but by less than the margin one-step-stale updates must buy: say both, or a
    // user reads "does not pay off" under a smaller number as a contradiction.
    verdict = absl::StrFormat(
        "%.0f%% faster, under the %.0f%% that would pay for one-step-stale updates: pipelining "
        "does not pay off",
        100.0 * (1.0 - pipelined / sync), 100.0 * (1.0 - kPaysBelow));
  }
  return absl::StrFormat("Pipe-SGD (width 2): %.1f ms/step vs %.1f ms synchronous: %s", pipelined,
                         sync, verdict);
}

}  // namespace dapple::coordinator
