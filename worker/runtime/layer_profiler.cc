#include "worker/runtime/layer_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/median.h"
#include "common/model_info.h"
#include "common/profile/model_profile.h"
#include "common/status.h"

namespace dapple::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> RandomValues(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Token ids for a layer that reads them (an embedding, LayerInfo::token_input): integers
// uniform in [0, vocab) as exact floats, as a text dataset gives them (worker/data/dataset.h);
// other values are a caller bug the kernel aborts on. The vocabulary is the row count of the
// layer's first parameter, its token table [vocab, dim].
std::vector<float> RandomTokens(int64_t n, const LayerInfo& info, std::mt19937_64& rng) {
  const int64_t vocab = info.params.empty() ? 1 : info.params[0].shape[0];
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// Times fn() bracketed by Synchronize, so work a device enqueues counts.
absl::StatusOr<double> TimeMs(StageBackend& backend, const std::function<absl::Status()>& fn) {
  DAPPLE_RETURN_IF_ERROR(backend.Synchronize());
  const Clock::time_point start = Clock::now();
  DAPPLE_RETURN_IF_ERROR(fn());
  DAPPLE_RETURN_IF_ERROR(backend.Synchronize());
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One layer's timed runs, of every pass so far (ms each).
struct LayerSamples {
  std::vector<double> forward;
  std::vector<double> backward;
  std::vector<double> optimizer;
  std::vector<double> load_input;  // LoadInput of the batch
  std::vector<double> loss;        // Loss of the batch (with `time_loss`), else 0
};

// Labels for a loss over the layer's output: one per position of its last dimension's rows
// (rows x NumElements(output) / classes of them), uniform in [0, classes).
std::vector<int32_t> RandomLabels(int64_t rows, const LayerInfo& info, std::mt19937_64& rng) {
  const int64_t classes = info.output_shape.empty() ? 1 : info.output_shape.back();
  const int64_t per_sample = NumElements(info.output_shape) / std::max<int64_t>(1, classes);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(classes - 1));
  std::vector<int32_t> labels(static_cast<size_t>(rows * per_sample));
  for (int32_t& l : labels) l = dist(rng);
  return labels;
}

// One layer of a window being timed: its backend and what its runs feed it.
struct LayerUnderTest {
  const LayerInfo* info = nullptr;
  std::unique_ptr<StageBackend> backend;
  std::vector<float> input;
  std::vector<int32_t> labels;  // the model's last layer only: its loss's labels
  bool need_dx = false;
};

// Feeds `t`'s backend its input and output gradient (random values, as TimeWindow's runs use).
absl::Status Feed(LayerUnderTest& t, int64_t rows, std::mt19937_64& rng) {
  const LayerInfo& info = *t.info;
  const int64_t input_elements = rows * NumElements(info.input_shape);
  t.input = info.token_input ? RandomTokens(input_elements, info, rng)
                             : RandomValues(input_elements, rng);
  StageBackend& backend = *t.backend;
  DAPPLE_RETURN_IF_ERROR(backend.Input(0, rows).status());
  DAPPLE_RETURN_IF_ERROR(backend.LoadInput(0, t.input.data(), rows));
  DAPPLE_ASSIGN_OR_RETURN(void* dy, backend.GradInput(0, rows));
  if (!backend.device_memory()) {
    // A device backend's gradient buffer keeps whatever it holds: GPU arithmetic speed does not
    // depend on the values, while a CPU's does (denormals), so only host values are set.
    const std::vector<float> grad = RandomValues(rows * NumElements(info.output_shape), rng);
    std::memcpy(dy, grad.data(), grad.size() * sizeof(float));
  }
  return absl::OkStatus();
}

// Prefixes an error with the layer it happened on ("model.layers[2] (linear): ...").
absl::Status AtLayer(const LayerInfo& info, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrFormat("model.layers[%d] (%s): %s", info.index,
                                                     info.type, status.message()));
}

// Runs the layers of one window as a step runs a stage's: every layer's forward in order (the
// first model layer's LoadInput before it, the last's loss after it), then every backward in
// reverse order, then every layer's update, at `rows` samples; options.warmup_runs untimed runs,
// then options.timed_runs timed ones, appended to `samples` (indexed by model layer).
absl::Status TimeWindow(std::vector<LayerUnderTest>& window, int num_layers, int64_t rows,
                        const ProfileOptions& options, std::vector<LayerSamples>& samples) {
  // A training forward, as in a step: dropout's masks and batch norm's batch statistics cost
  // what they cost there, and a backward needs the forward's training state (a batch norm's
  // backward of an evaluation forward is a bug).
  kernels::ForwardContext ctx;
  ctx.training = true;
  for (int run = 0; run < options.warmup_runs + options.timed_runs; ++run) {
    const bool keep = run >= options.warmup_runs;
    for (LayerUnderTest& t : window) {
      StageBackend& backend = *t.backend;
      const LayerInfo& info = *t.info;
      LayerSamples& s = samples[info.index];
      if (info.index == 0) {
        // What stage 0 does with each micro-batch of samples before its forward.
        absl::StatusOr<double> in =
            TimeMs(backend, [&] { return backend.LoadInput(0, t.input.data(), rows); });
        DAPPLE_RETURN_IF_ERROR(AtLayer(info, in.status()));
        if (keep) s.load_input.push_back(*in);
      }
      absl::StatusOr<double> f = TimeMs(backend, [&] { return backend.Forward(0, rows, ctx); });
      DAPPLE_RETURN_IF_ERROR(AtLayer(info, f.status()));
      if (keep) s.forward.push_back(*f);
      if (info.index + 1 == num_layers) {
        // The last stage's loss and its gradient (kept for a backward that is not timed after
        // it: the timed backward uses the gradient buffer, like a middle stage).
        absl::StatusOr<double> l = TimeMs(backend, [&]() -> absl::Status {
          return backend
              .Loss(0, t.labels.data(), rows, 1.0f / static_cast<float>(rows),
                    /*training=*/true, /*correct=*/nullptr)
              .status();
        });
        DAPPLE_RETURN_IF_ERROR(AtLayer(info, l.status()));
        if (keep) s.loss.push_back(*l);
      } else if (keep) {
        s.loss.push_back(0);
      }
    }
    for (auto t = window.rbegin(); t != window.rend(); ++t) {
      StageBackend& backend = *t->backend;
      absl::StatusOr<double> b = TimeMs(backend, [&] {
        return backend.Backward(0, /*micro_batch=*/0, rows, /*last_stage=*/false, t->need_dx);
      });
      DAPPLE_RETURN_IF_ERROR(AtLayer(*t->info, b.status()));
      if (keep) samples[t->info->index].backward.push_back(*b);
    }
    for (LayerUnderTest& t : window) {
      StageBackend& backend = *t.backend;
      // The real step runs the update once per M micro-batches; timed here once per run, as a
      // step runs it (gradient_exchange.h PrepareUpdate): the gradients' squared norm (the
      // step's reported gradient norm, and clipping's), then the optimizer step.
      absl::StatusOr<double> u = TimeMs(backend, [&] {
        DAPPLE_RETURN_IF_ERROR(backend.GradientSquaredNorm().status());
        return backend.OptimizerStep();
      });
      DAPPLE_RETURN_IF_ERROR(AtLayer(*t.info, u.status()));
      if (keep) samples[t.info->index].optimizer.push_back(*u);
    }
  }
  return absl::OkStatus();
}

// What one layer's backend holds at `batch_size` samples, roughly: its parameters with their
// gradients and optimizer state, what it saves for the backward, its output and the output's
// gradient. Only sizes the windows.
int64_t LayerFootprintBytes(const LayerInfo& info, int64_t batch_size) {
  v1::LayerProfile sizes;
  profile::SetLayerSizes(info, batch_size, &sizes);
  return 4 * sizes.parameter_bytes() + sizes.saved_bytes() + 2 * sizes.activation_bytes();
}

}  // namespace

absl::StatusOr<v1::ModelProfile> MeasureProfile(const v1::JobSpec& spec,
                                                const BackendFactory& make_backend,
                                                const std::string& device_kind,
                                                const ProfileOptions& options) {
  if (options.batch_size <= 0 || options.warmup_runs < 0 || options.timed_runs < 1 ||
      options.passes < 1 || options.max_passes < options.passes || !(options.min_seconds >= 0) ||
      options.window_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "profile options: batch_size %d must be > 0, warmup_runs %d >= 0, timed_runs %d >= 1, "
        "passes %d >= 1, max_passes %d >= passes, min_seconds %g >= 0, window_bytes %d > 0",
        options.batch_size, options.warmup_runs, options.timed_runs, options.passes,
        options.max_passes, options.min_seconds, options.window_bytes));
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> layers, InferLayers(spec.model()));
  v1::ModelProfile profile;
  profile.set_source(absl::StrCat("measured on ", device_kind));
  profile.set_batch_size(options.batch_size);
  profile.set_device_kind(device_kind);
  profile.set_model_fingerprint(profile::ModelFingerprint(spec.model()));
  std::mt19937_64 rng(options.seed);
  // Pass after pass over the whole model, rather than all of one layer's runs at once: a slow
  // moment of the host (another process, the hypervisor taking a vCPU away for tens of ms)
  // then slows one pass of a layer, which the median over every pass's runs drops, instead of
  // every run of that layer (the demo's P = 1 prediction moved by 25% between two quiet runs
  // with one pass of 5 runs).
  std::vector<LayerSamples> samples(layers.size());
  // The layers up to the model's first with parameters always run on stage 0, whose backward
  // computes no input gradient (stage_runtime.cc: need_dx is false on the first stage): its
  // first parameter layer computes only its weight gradients (an embedding's token ids have no
  // gradient either) and the layers below it no backward at all. Timed so, or stage 0's
  // backward read twice its forward where the run measured about one forward.
  int first_param_layer = static_cast<int>(layers.size());
  for (const LayerInfo& info : layers) {
    if (!info.params.empty()) {
      first_param_layer = info.index;
      break;
    }
  }
  // Windows of consecutive layers whose backends exist at once (a model larger than the device
  // is profiled a window at a time): each run goes through a window's layers as a step goes
  // through a stage's, so a layer's weights and activations are as cold in the caches as
  // between two micro-batches of a step. Timed one layer at a time with the same data each
  // run, the demo's layers stayed in the caches and read 10-20% faster than in a step.
  std::vector<std::pair<int, int>> windows;
  int64_t window_bytes = 0;
  for (const LayerInfo& info : layers) {
    const int64_t bytes = LayerFootprintBytes(info, options.batch_size);
    if (windows.empty() || window_bytes + bytes > options.window_bytes) {
      windows.emplace_back(info.index, info.index);
      window_bytes = 0;
    }
    windows.back().second = info.index;
    window_bytes += bytes;
  }
  const int num_layers = static_cast<int>(layers.size());
  const Clock::time_point start = Clock::now();
  auto more = [&](int pass) {
    if (pass < options.passes) return true;
    return pass < options.max_passes &&
           std::chrono::duration<double>(Clock::now() - start).count() < options.min_seconds;
  };
  // Each pass also times the layers at half the batch (its two points give each layer a fixed
  // and a per-sample part: LayerProfile.half_batch_forward_ms).
  std::vector<LayerSamples> half(layers.size());
  const int64_t half_rows = options.half_batch ? options.batch_size / 2 : 0;
  for (int pass = 0; more(pass); ++pass) {
    for (const auto& [rows, into] :
         {std::pair{options.batch_size, &samples}, std::pair{half_rows, &half}}) {
      if (rows < 1) continue;
      for (const auto& [first, last] : windows) {
        std::vector<LayerUnderTest> window(static_cast<size_t>(last - first + 1));
        for (int i = first; i <= last; ++i) {
          const LayerInfo& info = layers[static_cast<size_t>(i)];
          LayerUnderTest& t = window[static_cast<size_t>(i - first)];
          t.info = &info;
          t.need_dx = info.index > first_param_layer;
          absl::StatusOr<std::unique_ptr<StageBackend>> backend = make_backend(spec, i, i);
          DAPPLE_RETURN_IF_ERROR(AtLayer(info, backend.status()));
          t.backend = *std::move(backend);
          DAPPLE_RETURN_IF_ERROR(AtLayer(info, Feed(t, rows, rng)));
          if (i + 1 == num_layers) t.labels = RandomLabels(rows, info, rng);
        }
        DAPPLE_RETURN_IF_ERROR(TimeWindow(window, num_layers, rows, options, *into));
      }
    }
  }
  const double per_sample = 1.0 / static_cast<double>(options.batch_size);
  for (const LayerInfo& info : layers) {
    const LayerSamples& times = samples[info.index];
    const bool last = info.index + 1 == static_cast<int>(layers.size());
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_id(absl::StrCat("layers[", info.index, "]"));
    layer->set_name(info.type);
    layer->set_forward_ms(Median(times.forward));
    layer->set_backward_ms(Median(times.backward));
    layer->set_optimizer_ms(Median(times.optimizer));
    if (half_rows >= 1) {
      layer->set_half_batch_forward_ms(Median(half[info.index].forward));
      layer->set_half_batch_backward_ms(Median(half[info.index].backward));
    }
    if (info.index == 0) profile.set_input_ms_per_sample(Median(times.load_input) * per_sample);
    if (last) profile.set_loss_ms_per_sample(Median(times.loss) * per_sample);
    profile::SetLayerSizes(info, options.batch_size, layer);
  }
  return profile;
}

}  // namespace dapple::worker
