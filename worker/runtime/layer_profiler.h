// Measures a model's per-layer profile on a stage backend (the planner's "measured" input,
// design.md "Planner"): for each layer, a one-layer backend times Forward and Backward at the
// profile batch size, after warm-up runs, taking the median of several timed runs.
#ifndef DAPPLE_WORKER_RUNTIME_LAYER_PROFILER_H_
#define DAPPLE_WORKER_RUNTIME_LAYER_PROFILER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// Makes the backend of layers [first_layer, last_layer] of spec.model() on the device being
// profiled (MakeCpuStageBackend, or MakeCudaStageBackend bound to an open device).
using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<StageBackend>>(
    const v1::JobSpec& spec, int first_layer, int last_layer)>;

struct ProfileOptions {
  int64_t batch_size = 32;  // samples per timed run, > 0
  int warmup_runs = 2;      // untimed runs per layer and pass first (caches, allocator, cuBLAS)
  int timed_runs = 3;       // timed runs per layer and pass, >= 1
  // Passes over the model, >= 1: each pass makes every layer's backend anew and runs it
  // warmup_runs + timed_runs times; a time reported is the median over every pass's timed runs.
  int passes = 3;
  // More passes, up to max_passes (>= passes), while the passes so far took less than
  // min_seconds (>= 0) in all: a small model's passes take tens of ms, a moment in which a
  // shared host's speed swings by 10-20% (the demo's P = 1 prediction moved by +-12% between
  // profiles of 3 passes, +-9% with a second of passes); a large model's first passes already
  // take longer and stop at `passes`.
  int max_passes = 12;
  double min_seconds = 1.0;
  // Layers whose backends exist at once, run in a step's order (every forward, every backward
  // in reverse, every update): consecutive layers while their rough footprint (4 x parameters,
  // saved activations, output and its gradient at batch_size) stays within this many bytes; a
  // layer past it on its own starts a window of its own. > 0.
  int64_t window_bytes = int64_t{256} << 20;
  // Each pass also times every layer at batch_size / 2 samples (when >= 1): the profile's
  // half_batch_forward_ms / half_batch_backward_ms.
  bool half_batch = true;
  // Input and gradient values: uniform in [-1, 1), token ids uniform in [0, vocab) for a layer
  // that reads tokens (an embedding).
  uint64_t seed = 1;
};

// Profiles every layer of spec.model(), in options.passes passes over the layers, a window of
// consecutive layers at a time (options.window_bytes, so a model larger than the device can be
// profiled), each run of a window as a step runs a stage: forward of every layer in order,
// backward in reverse, then every update, so that a layer finds the caches as the layers
// around it leave them in a step. forward_ms /
// backward_ms are medians of the passes' options.timed_runs wall-clock measurements each (each
// bracketed by Synchronize, so device work is included); backward includes the gradient with
// respect to the layer's input, except for the layers up to the model's first with parameters,
// timed as they run on a job's stage 0, which needs no input gradient: the first parameter
// layer (an embedding, the first linear) computes its weight gradients only, the layers below
// it (a flatten) no backward at all; half_batch_forward_ms / half_batch_backward_ms the same at
// batch_size / 2 samples (with options.half_batch each pass times both sizes; none when
// batch_size is 1); optimizer_ms is
// the median time of one update of the layer's parameters as a step runs it (GradientSquaredNorm,
// for the step's reported gradient norm, then OptimizerStep with the job's optimizer). Sizes are
// profile::SetLayerSizes' at batch_size samples (activation_bytes the output, saved_bytes what
// the layer keeps for its backward, parameter_bytes its parameters: the model's declaration, not
// a measurement). Beyond the layers: input_ms_per_sample is the median LoadInput of a batch into
// layer 0's backend / batch_size (what stage 0 does with each micro-batch's samples),
// loss_ms_per_sample the median Loss (softmax cross-entropy and its gradient against random
// labels, one per row of the last dimension) of the last layer's output / batch_size; action_ms
// stays 0 (the transport is not measured here).
// Layer i gets id "layers[i]" and the layer type as its name (what
// profile::CheckProfileMatchesModel expects); the profile is a chain (no edges); source is
// "measured on <device>", device_kind is `device_kind`, model_fingerprint
// profile::ModelFingerprint(spec.model()).
// Errors: kInvalidArgument for bad options or an invalid model (InferLayers' message); the
// factory's and the backend's errors, prefixed with the layer ("model.layers[2] (linear): ...").
// Thread safety: uses the backends from one thread; blocks for the measurement (about
// passes * layers * (warmup + timed) * (forward + backward + update) time, and at least
// min_seconds unless max_passes come first).
absl::StatusOr<v1::ModelProfile> MeasureProfile(const v1::JobSpec& spec,
                                                const BackendFactory& make_backend,
                                                const std::string& device_kind,
                                                const ProfileOptions& options);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_LAYER_PROFILER_H_
