#include "common/model_info.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dapple {
namespace {

constexpr char kKnownTypes[] = "flatten, linear, relu, gelu";

// Per-element cost guesses for the element-wise layers. Only their relative size matters: the
// planner prefers measured profiles, and these keep estimates sane where none exist. GELU's exact
// form evaluates erf (a rational approximation of a few dozen operations) and its backward also
// exp, hence its larger factors.
constexpr double kReluForwardFlopsPerElement = 1;
constexpr double kReluBackwardFlopsPerElement = 1;
constexpr double kGeluForwardFlopsPerElement = 20;
constexpr double kGeluBackwardFlopsPerElement = 40;

// Bounds that keep every size the system derives from a model (buffers, byte counts, FLOPs) far
// from int64 overflow and a worker's memory: at most 2^24 floats (64 MiB) per sample for the input
// and for any layer's output, and at most 2^28 parameters in all (1 GiB of fp32 weights; the
// optimizer keeps up to three more copies), in at most 4096 layers.
constexpr int64_t kMaxSampleElements = int64_t{1} << 24;
constexpr int64_t kMaxParams = int64_t{1} << 28;
constexpr int kMaxLayers = 4096;
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<LayerInfo>> InferLayers(const v1::ModelSpec& model) {
  if (model.input_shape().empty()) {
    return absl::InvalidArgumentError(
        "model.input_shape is empty: give the per-sample shape, e.g. [1, 28, 28]");
  }
  int64_t input_elems = 1;
  for (int i = 0; i < model.input_shape_size(); ++i) {
    const int64_t d = model.input_shape(i);
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.input_shape[", i, "] ", d, " must be > 0"));
    }
    if (d > kMaxSampleElements / input_elems) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.input_shape ",
          ShapeString({model.input_shape().begin(), model.input_shape().end()}),
          " has more than the maximum 2^24 (", kMaxSampleElements, ") elements per sample"));
    }
    input_elems *= d;
  }
  if (model.layers().empty()) {
    return absl::InvalidArgumentError("model.layers is empty: a model needs at least one layer");
  }
  if (model.layers_size() > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("model.layers has ", model.layers_size(),
                                                   " layers, more than the maximum ", kMaxLayers));
  }

  std::vector<int64_t> shape(model.input_shape().begin(), model.input_shape().end());
  std::vector<LayerInfo> infos;
  int64_t total_params = 0;
  infos.reserve(model.layers_size());
  for (int i = 0; i < model.layers_size(); ++i) {
    const v1::LayerSpec& spec = model.layers(i);
    LayerInfo info;
    info.index = i;
    info.type = spec.type();
    info.input_shape = shape;
    const int64_t in_elems = NumElements(shape);
    // An unknown type is reported below, as such.
    const bool takes_no_out =
        spec.type() == "flatten" || spec.type() == "relu" || spec.type() == "gelu";
    if (takes_no_out && spec.out() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.layers[", i,
                                                     "].out applies only to linear layers, not ",
                                                     spec.type(), " (got out ", spec.out(), ")"));
    }
    if (spec.type() == "flatten") {
      info.output_shape = {in_elems};
    } else if (spec.type() == "linear") {
      if (spec.out() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.layers[", i, "].out ", spec.out(), " must be > 0"));
      }
      if (shape.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.layers[", i, "] (linear) needs a flat input, got ",
                         ShapeString(shape), ": add a flatten layer before it"));
      }
      const int64_t in = shape[0];
      const int64_t out = spec.out();
      if (out > kMaxSampleElements) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.layers[", i, "].out ", out, " is more than the maximum 2^24 (",
                         kMaxSampleElements, ") output elements per sample"));
      }
      // in, out <= 2^24, so in * out + out cannot overflow.
      info.output_shape = {out};
      info.param_count = in * out + out;
      info.forward_flops = 2.0 * static_cast<double>(in) * static_cast<double>(out);
      info.backward_flops = 4.0 * static_cast<double>(in) * static_cast<double>(out);
      if (total_params + info.param_count > kMaxParams) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "model.layers[%d] (linear %d -> %d) has %d parameters, bringing the model to %d "
            "(%.2f GiB of fp32 weights), more than the maximum 2^28 (%d, 1 GiB)",
            i, in, out, info.param_count, total_params + info.param_count,
            static_cast<double>(total_params + info.param_count) * sizeof(float) / kBytesPerGiB,
            kMaxParams));
      }
      total_params += info.param_count;
    } else if (spec.type() == "relu") {
      info.output_shape = shape;
      info.forward_flops = kReluForwardFlopsPerElement * static_cast<double>(in_elems);
      info.backward_flops = kReluBackwardFlopsPerElement * static_cast<double>(in_elems);
    } else if (spec.type() == "gelu") {
      info.output_shape = shape;
      info.forward_flops = kGeluForwardFlopsPerElement * static_cast<double>(in_elems);
      info.backward_flops = kGeluBackwardFlopsPerElement * static_cast<double>(in_elems);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("model.layers[", i, "]: unknown layer type '",
                                                     spec.type(), "'; known: ", kKnownTypes));
    }
    info.output_bytes = NumElements(info.output_shape) * static_cast<int64_t>(sizeof(float));
    shape = info.output_shape;
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace dapple
