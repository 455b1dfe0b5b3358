// ReadProfileFile, ToChain, CheckProfileMatchesModel, EstimateProfile and ModelFingerprint
// (model_profile.h). The graph.txt reader and writer are in graph_txt.cc.
#include "common/profile/model_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/model/layer_registry.h"
#include "common/model_info.h"
#include "common/profile/text_util.h"
#include "common/status.h"

namespace dapple::profile {
namespace {

// Image models in PipeDream's profiles feed fp32 3 x S x S images; these are the sides its
// torchvision models use (224; 299 for Inception-v3; 331 for NASNet-A large).
constexpr int64_t kImageSides[] = {224, 299, 331};
constexpr absl::string_view kBatchTag = "pbs-";

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

absl::string_view Stem(absl::string_view path) {
  absl::string_view name = Basename(path);
  const size_t dot = name.rfind('.');
  return dot == absl::string_view::npos || dot == 0 ? name : name.substr(0, dot);
}

// The N of "pbs-N" in the file name (DAPPLE's naming, e.g. bert-24-pbs-6.txt); 0 when absent.
absl::StatusOr<int64_t> BatchSizeFromFileName(const std::string& path) {
  const absl::string_view name = Basename(path);
  const size_t at = name.find(kBatchTag);
  if (at == absl::string_view::npos) return 0;
  size_t end = at + kBatchTag.size();
  while (end < name.size() && absl::ascii_isdigit(static_cast<unsigned char>(name[end]))) ++end;
  const absl::string_view digits = name.substr(at + kBatchTag.size(), end - at - kBatchTag.size());
  if (digits.empty()) return 0;
  int64_t batch = 0;
  if (!absl::SimpleAtoi(digits, &batch) || batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the file name says profile batch size ",
                                                   digits, ", which must be in [1, 2^63)"));
  }
  return batch;
}

// Batch size of an image model's profile: its Input node's output is batch x 3 x S x S fp32
// values. PipeDream's GNMT profiles have Input nodes of 0 bytes, so they give 0 (unknown).
int64_t ImageBatchSize(const v1::ModelProfile& profile) {
  for (const v1::LayerProfile& layer : profile.layers()) {
    if (!layer.input() || layer.activation_bytes() <= 0) continue;
    for (int64_t side : kImageSides) {
      const int64_t per_sample = 3 * side * side * 4;
      if (layer.activation_bytes() % per_sample == 0) return layer.activation_bytes() / per_sample;
    }
  }
  return 0;
}

// "Linear(784, 256)" -> "Linear": the description up to its first character that cannot be in a
// layer type name (PipeDream writes the module's repr, DAPPLE's measured profiles the type).
absl::string_view LeadingWord(absl::string_view description) {
  size_t n = 0;
  while (
      n < description.size() &&
      (absl::ascii_isalnum(static_cast<unsigned char>(description[n])) || description[n] == '_')) {
    ++n;
  }
  return description.substr(0, n);
}

// "linear 784->256", "relu": a model layer as the mismatch messages name it.
std::string ModelLayerText(const LayerInfo& info) {
  if (info.type == "linear" && !info.input_shape.empty() && !info.output_shape.empty()) {
    return absl::StrCat(info.type, " ", info.input_shape.back(), "->", info.output_shape.back());
  }
  return info.type;
}

std::string LayerName(const v1::LayerProfile& layer) {
  return layer.id().empty() ? layer.name() : absl::StrCat(layer.id(), " ", layer.name());
}

absl::Status CheckEdge(const v1::ModelProfile& profile, int index) {
  const v1::ProfileEdge& edge = profile.edges(index);
  const int n = profile.layers_size();
  if (edge.src() < 0 || edge.dst() < 0 || edge.src() >= n || edge.dst() >= n) {
    return absl::InvalidArgumentError(absl::StrCat("profile ", profile.source(), ": edges[", index,
                                                   "] (", edge.src(), " -> ", edge.dst(),
                                                   ") names a layer outside [0, ", n, ")"));
  }
  if (edge.src() >= edge.dst()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile ", profile.source(), ": edges[", index, "] (", edge.src(), " -> ", edge.dst(),
        ") does not go forward: the layers must be in a topological order of the graph"));
  }
  return absl::OkStatus();
}

// cut_bytes[k] = the outputs of layers i <= k that some layer j > k consumes, each counted once
// however many consumers it has beyond the cut. Layer i crosses the cuts i .. last(i) - 1, where
// last(i) is its last consumer, so a difference array gives every cut in O(L + E).
absl::StatusOr<std::vector<int64_t>> CutBytes(const v1::ModelProfile& profile) {
  const int n = profile.layers_size();
  std::vector<int64_t> cuts(n - 1, 0);
  if (profile.edges().empty()) {
    for (int k = 0; k + 1 < n; ++k) cuts[k] = profile.layers(k).activation_bytes();
    return cuts;
  }
  std::vector<int> last_consumer(n, -1);
  for (int e = 0; e < profile.edges_size(); ++e) {
    DAPPLE_RETURN_IF_ERROR(CheckEdge(profile, e));
    const v1::ProfileEdge& edge = profile.edges(e);
    last_consumer[edge.src()] = std::max(last_consumer[edge.src()], edge.dst());
  }
  std::vector<int64_t> delta(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    if (last_consumer[i] <= i) continue;
    delta[i] += profile.layers(i).activation_bytes();
    delta[last_consumer[i]] -= profile.layers(i).activation_bytes();
  }
  int64_t running = 0;
  for (int k = 0; k + 1 < n; ++k) {
    running += delta[k];
    cuts[k] = running;
  }
  return cuts;
}

}  // namespace

absl::StatusOr<v1::ModelProfile> ReadProfileFile(const std::string& path, int64_t batch_size) {
  DAPPLE_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, kMaxProfileFileBytes));
  int64_t batch = batch_size;
  if (batch <= 0) {
    DAPPLE_ASSIGN_OR_RETURN(batch, BatchSizeFromFileName(path));
  }
  // Parse with a stand-in batch size when it must come from the Input node.
  DAPPLE_ASSIGN_OR_RETURN(v1::ModelProfile profile,
                          ParseGraphTxt(text, path, batch > 0 ? batch : 1));
  if (batch <= 0) {
    batch = ImageBatchSize(profile);
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": profile batch size unknown: name the file ", Stem(path),
          "-pbs-<N>.txt or give it (no 'pbs-N' in the name, and no Input node of batch x 3 x S x "
          "S x 4 bytes for S in 224, 299, 331)"));
    }
    profile.set_batch_size(batch);
  }
  return profile;
}

absl::StatusOr<ChainProfile> ToChain(const v1::ModelProfile& profile) {
  if (profile.layers().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("profile ", profile.source(), " has no layers"));
  }
  if (profile.layers_size() > kMaxProfileLayers) {
    return absl::InvalidArgumentError(absl::StrCat("profile ", profile.source(), " has ",
                                                   profile.layers_size(), " layers; at most ",
                                                   kMaxProfileLayers, " are allowed"));
  }
  if (profile.batch_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("profile ", profile.source(), ": batch_size ",
                                                   profile.batch_size(), " must be > 0"));
  }
  ChainProfile chain;
  chain.source = profile.source();
  chain.batch_size = profile.batch_size();
  chain.input_ms_per_sample = profile.input_ms_per_sample();
  chain.loss_ms_per_sample = profile.loss_ms_per_sample();
  chain.action_ms = profile.action_ms();
  for (const v1::LayerProfile& layer : profile.layers()) {
    chain.names.push_back(LayerName(layer));
    // PipeDream counts data loading (Input nodes) as no compute.
    chain.forward_ms.push_back(layer.input() ? 0.0 : layer.forward_ms());
    chain.backward_ms.push_back(layer.input() ? 0.0 : layer.backward_ms());
    chain.parameter_bytes.push_back(layer.parameter_bytes());
    chain.activation_bytes.push_back(layer.activation_bytes());
    chain.saved_bytes.push_back(layer.saved_bytes());
    chain.optimizer_ms.push_back(layer.optimizer_ms());
  }
  const int64_t half = profile.batch_size() / 2;
  const bool two_sizes =
      half >= 1 &&
      std::any_of(profile.layers().begin(), profile.layers().end(), [](const v1::LayerProfile& l) {
        return l.half_batch_forward_ms() > 0 || l.half_batch_backward_ms() > 0;
      });
  if (two_sizes) {
    // t(s) = a + c s through (half, t_half) and (batch, t): a = t - c batch, c = (t - t_half) /
    // (batch - half); clamped to [0, t] (a half batch measured slower than the whole, or
    // faster than its share, is noise).
    const double batch = static_cast<double>(profile.batch_size());
    auto fixed = [&](double t, double t_half) {
      if (!(t_half > 0)) return 0.0;
      const double per_sample = (t - t_half) / (batch - static_cast<double>(half));
      return std::clamp(t - per_sample * batch, 0.0, t);
    };
    for (int k = 0; k < profile.layers_size(); ++k) {
      const v1::LayerProfile& layer = profile.layers(k);
      chain.forward_fixed_ms.push_back(
          fixed(chain.forward_ms[k], layer.input() ? 0.0 : layer.half_batch_forward_ms()));
      chain.backward_fixed_ms.push_back(
          fixed(chain.backward_ms[k], layer.input() ? 0.0 : layer.half_batch_backward_ms()));
    }
  }
  DAPPLE_ASSIGN_OR_RETURN(chain.cut_bytes, CutBytes(profile));
  double compute_ms = 0;
  for (int k = 0; k < chain.num_layers(); ++k) {
    compute_ms += chain.forward_ms[k] + chain.backward_ms[k];
  }
  // Every plan of such a profile takes 0 ms, so no planner can tell plans apart.
  if (!(compute_ms > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", profile.source(),
                     " has no compute: every layer's forward and backward time is 0"));
  }
  return chain;
}

absl::Status CheckProfileMatchesModel(const v1::ModelProfile& profile, const v1::ModelSpec& model) {
  std::vector<const v1::LayerProfile*> layers;
  for (const v1::LayerProfile& layer : profile.layers()) {
    if (!layer.input()) layers.push_back(&layer);
  }
  const std::string prefix =
      absl::StrCat("profile ", profile.source(), " does not match the job's model: ");
  const size_t common = std::min<size_t>(layers.size(), model.layers_size());
  for (size_t i = 0; i < common; ++i) {
    const std::string& type = model.layers(static_cast<int>(i)).type();
    if (absl::AsciiStrToLower(LeadingWord(layers[i]->name())) == absl::AsciiStrToLower(type)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "its layer ", i, " (", layers[i]->id(), " ", Quote(layers[i]->name()),
        ") is not model.layers[", i, "] (", type,
        ") (a layer matches when its description starts with the layer type, any case)"));
  }
  if (layers.size() != static_cast<size_t>(model.layers_size())) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "it has ", layers.size(),
                                                   " layers (Input nodes not counted), the model ",
                                                   model.layers_size()));
  }
  bool any_parameters = false;
  for (const v1::LayerProfile* layer : layers) any_parameters |= layer->parameter_bytes() > 0;
  if (!any_parameters) return absl::OkStatus();
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(model));
  for (size_t i = 0; i < layers.size() && i < infos.size(); ++i) {
    const int64_t given = layers[i]->parameter_bytes();
    const int64_t expected = infos[i].param_count * static_cast<int64_t>(sizeof(float));
    if (given <= 0 || given == expected) continue;
    return absl::InvalidArgumentError(absl::StrCat(prefix, "its layer ", i, " (", layers[i]->id(),
                                                   " ", Quote(layers[i]->name()), ") has ", given,
                                                   " parameter bytes, model.layers[", i, "] (",
                                                   ModelLayerText(infos[i]), ") has ", expected));
  }
  return absl::OkStatus();
}

void SetLayerSizes(const LayerInfo& info, int64_t batch_size, v1::LayerProfile* layer) {
  layer->set_activation_bytes(info.output_bytes * batch_size);
  layer->set_saved_bytes(info.saved_bytes * batch_size);
  layer->set_parameter_bytes(info.param_count * static_cast<int64_t>(sizeof(float)));
}

absl::StatusOr<v1::ModelProfile> EstimateProfile(const v1::ModelSpec& model, int64_t batch_size,
                                                 double flops_per_second) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimated profile: batch size ", batch_size, " must be > 0"));
  }
  if (!std::isfinite(flops_per_second) || flops_per_second <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("estimated profile: flops_per_second ",
                                                   flops_per_second, " must be finite and > 0"));
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(model));
  v1::ModelProfile profile;
  profile.set_source(absl::StrFormat("estimated from FLOPs at %g GFLOP/s", flops_per_second / 1e9));
  profile.set_batch_size(batch_size);
  profile.set_model_fingerprint(ModelFingerprint(model));
  const double batch = static_cast<double>(batch_size);
  for (const LayerInfo& info : infos) {
    v1::LayerProfile* layer = profile.add_layers();
    layer->set_id(absl::StrCat("layers[", info.index, "]"));
    layer->set_name(info.type);
    layer->set_forward_ms(info.forward_flops * batch / flops_per_second * 1000.0);
    layer->set_backward_ms(info.backward_flops * batch / flops_per_second * 1000.0);
    SetLayerSizes(info, batch_size, layer);
  }
  return profile;
}

std::string ModelFingerprint(const v1::ModelSpec& model) {
  std::vector<std::string> parts;
  parts.push_back(absl::StrCat("in=", absl::StrJoin(model.input_shape(), "x")));
  for (const v1::LayerSpec& layer : model.layers()) {
    parts.push_back(LayerSignature(layer));
  }
  return absl::StrJoin(parts, ";");
}

}  // namespace dapple::profile
