// Achieved TFLOP/s and MFU (model FLOPs utilisation) of a stage: the one place they are
// computed. The worker's runtime fills StageStepStats with them after every step; the
// coordinator exports them (dapple_stage_achieved_tflops, dapple_stage_mfu_ratio) and
// `dapplectl top` shows them.
//
// FLOPs are common/model's per-layer counts (LayerInfo::forward_flops + backward_flops, per
// sample; a multiply-add is 2 FLOPs), i.e. model FLOPs as in PaLM's MFU (Chowdhery et al. 2022,
// appendix B): no recomputation, no optimizer, no elementwise work beyond what the layers
// declare. MFU = achieved / the device's stated dense peak for the precision it computes in.
// Pure functions; thread-safe.
#ifndef DAPPLE_COMMON_COMPUTE_THROUGHPUT_H_
#define DAPPLE_COMMON_COMPUTE_THROUGHPUT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

// FLOPs of one sample's forward and backward through layers [first, last] of `infos` (valid
// indices, first <= last) as a stage runs them: backward counting both the input and the weight
// gradients, except on the first stage (first == 0), whose backward stops at the model's first
// layer with parameters (kernels::FirstLayerWithParams): the layers before it run no backward
// and it computes its weight gradients only (backward_weight_flops).
double StageTrainFlopsPerSample(const std::vector<LayerInfo>& infos, int first, int last);

// The stated dense peak of the device named `device_name` (CUDA's device name, e.g. "NVIDIA
// H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") in TFLOP/s: with `bf16` the bf16
// tensor-core peak without sparsity, else the fp32 (non-tensor) peak, since dapple's fp32 GEMMs
// use no TF32. nullopt for a CPU or a device not in the table (docs/gpu.md lists it).
std::optional<double> DevicePeakTflops(absl::string_view device_name, bool bf16);

// Sets stats' flops, compute_seconds, achieved_tflops (flops / compute_seconds / 1e12; 0 when
// compute_seconds <= 0), device_name and mfu (achieved / DevicePeakTflops; cleared when the
// peak is unknown or nothing was timed).
void SetComputeThroughput(double flops, double compute_seconds, absl::string_view device_name,
                          bool bf16, v1::StageStepStats* stats);

// "41.3%" for a set mfu, "-" otherwise: how `dapplectl top` shows it.
std::string FormatMfu(const v1::StageStepStats& stats);

}  // namespace dapple

#endif  // DAPPLE_COMMON_COMPUTE_THROUGHPUT_H_
