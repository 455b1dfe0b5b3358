#include "common/compute_throughput.h"

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace dapple {
namespace {

// NVIDIA's datasheets (dense, i.e. without 2:4 sparsity), TFLOP/s. A name matches the first
// row whose every part it contains, so the specific variants (PCIe, NVL) come before the SXM
// parts whose CUDA names carry no form factor ("NVIDIA H100 80GB HBM3", "NVIDIA H200").
struct PeakRow {
  const char* part;
  const char* variant;  // "" for none
  double bf16;
  double fp32;
};
constexpr PeakRow kPeaks[] = {
    {"H100", "PCIe", 756, 51}, {"H100", "NVL", 835, 60}, {"H200", "NVL", 835, 60},
    {"H100", "", 989, 67},     {"H200", "", 989, 67},    {"A100", "", 312, 19.5},
};

}  // namespace

double StageTrainFlopsPerSample(const std::vector<LayerInfo>& infos, int first, int last) {
  // The first stage's backward stops at its first layer with parameters (no input gradient), as
  // the runtime's (stage_runtime_create.cc) and the emulated backend's accounting find it.
  int from = first;
  while (first == 0 && from <= last && infos[from].param_count == 0) ++from;
  double flops = 0;
  for (int l = first; l <= last; ++l) {
    flops += infos[l].forward_flops;
    if (first != 0 || l > from) {
      flops += infos[l].backward_flops;
    } else if (l == from) {
      flops += infos[l].backward_weight_flops;
    }
  }
  return flops;
}

std::optional<double> DevicePeakTflops(absl::string_view device_name, bool bf16) {
  for (const PeakRow& row : kPeaks) {
    if (!absl::StrContains(device_name, row.part)) continue;
    if (*row.variant != '\0' && !absl::StrContains(device_name, row.variant)) continue;
    return bf16 ? row.bf16 : row.fp32;
  }
  return std::nullopt;
}

void SetComputeThroughput(double flops, double compute_seconds, absl::string_view device_name,
                          bool bf16, v1::StageStepStats* stats) {
  stats->set_flops(flops);
  stats->set_compute_seconds(compute_seconds);
  stats->set_device_name(std::string(device_name));
  const double achieved = compute_seconds > 0 ? flops / compute_seconds / 1e12 : 0.0;
  stats->set_achieved_tflops(achieved);
  const std::optional<double> peak = DevicePeakTflops(device_name, bf16);
  if (peak.has_value() && compute_seconds > 0) {
    stats->set_mfu(achieved / *peak);
  } else {
    stats->clear_mfu();
  }
}

std::string FormatMfu(const v1::StageStepStats& stats) {
  return stats.has_mfu() ? absl::StrFormat("%.1f%%", stats.mfu() * 100.0) : std::string("-");
}

}  // namespace dapple
