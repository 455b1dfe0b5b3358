// The rules of the data, model and sample sections (job_spec_internal.h): what the model must be
// to read its dataset (input, classes, vocabulary) besides what the layer types check themselves
// (common/model). Files are read by the coordinator at submit, not here: these rules are pure.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/eval_metrics.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/model_info.h"
#include "common/spec_text.h"

namespace dapple::job_spec_internal {
namespace {

constexpr int64_t kFashionMnistClasses = 10;
// A text sample's length: long enough for any model here, short enough that a per-sample
// token tensor stays small.
constexpr int64_t kMaxSeqLen = int64_t{1} << 16;
constexpr size_t kMaxPromptBytes = 4096;
constexpr double kMaxTemperature = 10;

// The YAML field an InferLayers message is about: its leading "model.layers[3]" or similar.
std::string FieldOfModelMessage(const std::string& message) {
  size_t end = 0;
  while (end < message.size()) {
    const char c = message[end];
    const bool path_char = absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
    if (!path_char) break;
    ++end;
  }
  std::string field = message.substr(0, end);
  while (!field.empty() && field.back() == '.') field.pop_back();
  return field.rfind("model", 0) == 0 ? field : "model";
}

Check CheckTextData(const v1::DataSpec& data) {
  if (data.seq_len() < 1) {
    return At("data.seq_len",
              data.seq_len() == 0
                  ? "data.seq_len is missing or 0: data.dataset text needs the tokens "
                    "(bytes) per sample, at least 1, e.g. seq_len: 128"
                  : absl::StrFormat("data.seq_len %d must be >= 1", data.seq_len()));
  }
  if (data.seq_len() > kMaxSeqLen) {
    return At("data.seq_len", absl::StrFormat("data.seq_len %d is more than the maximum %d",
                                              data.seq_len(), kMaxSeqLen));
  }
  if (!(data.validation_fraction() > 0 && data.validation_fraction() <= 0.5)) {
    return At("data.validation_fraction",
              absl::StrFormat("data.validation_fraction %s must be in (0, 0.5]: the share of the "
                              "file, from its end, held out for validation",
                              FormatDouble(data.validation_fraction())));
  }
  return std::nullopt;
}

// What a text dataset needs of the model: token input of [seq_len], and 256 classes per token.
Check CheckTextModel(const v1::JobSpec& spec, const std::vector<LayerInfo>& layers) {
  const v1::ModelSpec& model = spec.model();
  const int64_t seq_len = spec.data().seq_len();
  if (model.input_type() != "tokens") {
    return At("model.input_type",
              absl::StrFormat("model.input_type %s does not fit data.dataset text, whose samples "
                              "are token ids: use tokens (or leave input_type out)",
                              model.input_type()));
  }
  if (model.input_shape_size() != 1 || model.input_shape(0) != seq_len) {
    return At("model.input_shape",
              absl::StrFormat("model.input_shape %s does not match data.seq_len %d: a text "
                              "sample is [seq_len] tokens (leave input_shape out to take it from "
                              "data.seq_len)",
                              FormatShape(model.input_shape()), seq_len));
  }
  const LayerInfo& first = layers.front();
  if (first.type == "embedding" && first.params[0].shape[0] != kTextVocab) {
    return At("model.layers[0].vocab",
              absl::StrFormat("model.layers[0].vocab %d (embedding) does not match data.dataset "
                              "text, whose tokens are the %d byte values: its table needs a row "
                              "per byte value: set vocab: %d",
                              first.params[0].shape[0], kTextVocab, kTextVocab));
  }
  const LayerInfo& last = layers.back();
  const v1::LayerSpec& last_spec = model.layers(last.index);
  if (last.type == "lm_head" && last_spec.lm_head().has_vocab() &&
      last_spec.lm_head().vocab() != kTextVocab) {
    return At(absl::StrFormat("model.layers[%d].vocab", last.index),
              absl::StrFormat("model.layers[%d].vocab %d (lm_head) does not match data.dataset "
                              "text, whose tokens are the %d byte values: the head gives a logit "
                              "per byte value: set vocab: %d",
                              last.index, last_spec.lm_head().vocab(), kTextVocab, kTextVocab));
  }
  const std::vector<int64_t> want = {seq_len, kTextVocab};
  if (last.output_shape != want) {
    return At(
        absl::StrFormat("model.layers[%d]", last.index),
        absl::StrFormat("model.layers[%d] (%s) outputs %s, the model's output, which does not "
                        "fit data.dataset text with data.seq_len %d: a language model predicts "
                        "each next byte, so the last layer must output [%d, %d] (an lm_head "
                        "with vocab %d)",
                        last.index, last.type, FormatShape(last.output_shape), seq_len, seq_len,
                        kTextVocab, kTextVocab));
  }
  return std::nullopt;
}

Check CheckFashionMnistModel(const v1::JobSpec& spec, const std::vector<LayerInfo>& layers) {
  const v1::ModelSpec& model = spec.model();
  if (model.input_type() != "float") {
    return At("model.input_type",
              absl::StrFormat("model.input_type %s does not fit data.dataset fashion-mnist, whose "
                              "samples are images: use float (or leave input_type out)",
                              model.input_type()));
  }
  const std::vector<int64_t> shape(model.input_shape().begin(), model.input_shape().end());
  const bool image_shape = shape == std::vector<int64_t>{1, 28, 28} ||
                           shape == std::vector<int64_t>{28, 28} ||
                           shape == std::vector<int64_t>{784};
  if (!image_shape) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    if (elements == 784) {
      return At("model.input_shape",
                absl::StrFormat("model.input_shape %s holds fashion-mnist's 784 pixels in a "
                                "layout the dataset does not give: use [1, 28, 28] (for image "
                                "layers), [28, 28] or [784]",
                                FormatShape(shape)));
    }
    return At("model.input_shape",
              absl::StrFormat("model.input_shape %s (%d elements) does not fit fashion-mnist's "
                              "28x28 images (784 elements): use [1, 28, 28], [28, 28] or [784]",
                              FormatShape(shape), elements));
  }
  const std::vector<int64_t>& out = layers.back().output_shape;
  if (out != std::vector<int64_t>{kFashionMnistClasses}) {
    const std::string what = out.size() == 1 ? Count(out[0], "feature", "features")
                                             : absl::StrFormat("shape %s", FormatShape(out));
    return At(absl::StrFormat("model.layers[%d]", layers.size() - 1),
              absl::StrFormat("model.layers[%d] (%s), the model's output, has %s but "
                              "data.dataset fashion-mnist has %d classes: the last layer must "
                              "output [%d]",
                              layers.size() - 1, layers.back().type, what, kFashionMnistClasses,
                              kFashionMnistClasses));
  }
  return std::nullopt;
}

}  // namespace

Check CheckData(const v1::JobSpec& spec) {
  const v1::DataSpec& data = spec.data();
  if (!Contains(kKnownDatasets, data.dataset())) {
    return At("data.dataset", absl::StrFormat("data.dataset '%s' is unknown; known datasets: %s",
                                              data.dataset(), absl::StrJoin(kKnownDatasets, ", ")));
  }
  if (data.path().empty()) {
    return At("data.path", data.dataset() == kTextDataset
                               ? "data.path is required for data.dataset text: the text file to "
                                 "train on (scripts/setup writes the King James Bible to "
                                 "/var/lib/dapple/datasets/kjv.txt)"
                               : "data.path must not be empty: it names the folder with the "
                                 "dataset");
  }
  if (data.dataset() == kTextDataset) return CheckTextData(data);
  if (data.seq_len() != 0) {
    return At(
        "data.seq_len",
        absl::StrFormat("data.seq_len applies only to data.dataset text, not %s", data.dataset()));
  }
  return std::nullopt;
}

Check CheckModel(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  if (model.layers_size() > kMaxModelLayers) {
    return At("model.layers", absl::StrFormat("model.layers has %d layers; a model may have at "
                                              "most %d",
                                              model.layers_size(), kMaxModelLayers));
  }
  absl::StatusOr<std::vector<LayerInfo>> layers = InferLayers(model);
  if (!layers.ok()) {
    const std::string message(layers.status().message());
    return At(FieldOfModelMessage(message), message);
  }
  if (model.loss() != kDefaultLoss) {
    return At("model.loss", absl::StrFormat("model.loss '%s' is not supported; supported: %s",
                                            model.loss(), kDefaultLoss));
  }
  if (spec.data().dataset() == kTextDataset) return CheckTextModel(spec, *layers);
  if (spec.data().dataset() == kFashionMnist) return CheckFashionMnistModel(spec, *layers);
  return std::nullopt;
}

Check CheckSample(const v1::JobSpec& spec) {
  if (!spec.has_sample()) return std::nullopt;
  const v1::SampleSpec& s = spec.sample();
  if (spec.model().input_type() != "tokens") {
    return At("sample",
              "sample applies to language models (data.dataset text, model.input_type tokens): "
              "this model reads images: remove the sample section");
  }
  if (s.tokens() < 0 || s.tokens() > kMaxSampleTokens) {
    return At("sample.tokens", absl::StrFormat("sample.tokens %d must be in [0, %d] (0 = no "
                                               "sample)",
                                               s.tokens(), kMaxSampleTokens));
  }
  if (!(s.temperature() >= 0 && s.temperature() <= kMaxTemperature)) {
    return At("sample.temperature",
              absl::StrFormat("sample.temperature %s must be in [0, %s] (0 = the most likely "
                              "byte every time)",
                              FormatDouble(s.temperature()), FormatDouble(kMaxTemperature)));
  }
  if (s.prompt().empty() || s.prompt().size() > kMaxPromptBytes) {
    return At("sample.prompt", absl::StrFormat("sample.prompt has %d bytes; it needs 1 to %d",
                                               s.prompt().size(), kMaxPromptBytes));
  }
  return std::nullopt;
}

Violation At(std::string field, std::string message) {
  return Violation{std::move(field), std::move(message)};
}

}  // namespace dapple::job_spec_internal
