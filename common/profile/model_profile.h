// Model profiles: reading PipeDream's graph.txt format (../shared/profiles/README.md),
// writing it back, turning a profile (a chain or a DAG) into the planner's chain view, checking
// a profile against a job's model, and estimating one from a model's FLOPs. Pure functions
// (except the Read* file readers); thread-safe.
#ifndef DAPPLE_COMMON_PROFILE_MODEL_PROFILE_H_
#define DAPPLE_COMMON_PROFILE_MODEL_PROFILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/layer_type.h"
#include "common/profile/chain_profile.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::profile {

// The largest published profile is 250 KB with a few hundred layers; these caps refuse inputs
// that would make the planner (O(L^2) and more in the layers) run for minutes.
inline constexpr int64_t kMaxProfileFileBytes = int64_t{16} << 20;  // 16 MiB
inline constexpr int kMaxProfileLayers = 100000;
// The largest time (ms: 11.6 days) and size (bytes: 2^53, 8 PiB, exact in a double) of one
// layer a profile may give: finite is not enough, the simulator sums them over layers and
// micro-batches (a user's 1e308 ms planned "STEP inf ms").
inline constexpr double kMaxLayerMs = 1e9;
inline constexpr double kMaxLayerBytes = 9007199254740992.0;

// Parses graph.txt text: node lines "<id> -- <description> -- forward_compute_time=<ms>,
// backward_compute_time=<ms>, activation_size=<bytes or [a; b; ...]>, parameter_size=<bytes>"
// (an optional trailing " -- stage_id=K" is ignored), then edge lines "<TAB><src> -- <dst>".
// Layers are returned in a topological order of the graph (Kahn's algorithm, ties broken by
// file order), edges as indices into that order. `batch_size` (> 0, else kInvalidArgument) is
// stored as is. saved_bytes and optimizer_ms stay 0: the format has no key for them (a layer's
// backward state beyond its output is unknown, so the memory model counts outputs only).
// kInvalidArgument "<source>:<line>:<column>: <field>: <what is wrong>" for: a malformed line,
// a missing or repeated key, a value that is not a finite number >= 0, an edge naming an unknown
// node, a repeated node id, a cycle (naming a node on it), an empty file, more than
// kMaxProfileLayers nodes. Every error starts with `source` ("<profile>" when it is empty).
// Details: blank lines are skipped; edge lines are the indented ones (TAB or spaces); trailing
// blanks and CR are ignored; the four metrics may come in any order; numbers are decimal (integer,
// fraction or exponent); byte counts are rounded to the nearest integer; an edge may come before
// the node it names; a repeated edge is kept once; `input` is set when the description starts
// with "Input". A cycle is reported at the line of its last edge in the file.
absl::StatusOr<v1::ModelProfile> ParseGraphTxt(absl::string_view text, absl::string_view source,
                                               int64_t batch_size);

// Reads `path` and parses it. The batch size: `batch_size` when > 0; otherwise "pbs-<N>" in the
// file name; otherwise inferred from an Input node of an image model (activation bytes =
// batch * 3 * S * S * 4 for S in 224, 299, 331). kNotFound / kPermissionDenied naming the path,
// kInvalidArgument when the batch size cannot be known ("...: profile batch size unknown: name
// the file <stem>-pbs-<N>.txt or give it"), ParseGraphTxt's errors; ReadTextFile's
// "<path>: not a regular file" (kInvalidArgument) and kResourceExhausted for a file over
// kMaxProfileFileBytes. The first Input node with
// activation bytes > 0 is tried against S = 224, 299, 331 in that order. PipeDream's GNMT files
// (pipedream/gnmt.txt, gnmt_large.txt) have Input nodes of 0 bytes: their batch size is unknown
// and must be given (their Embedding outputs fit batch 64).
absl::StatusOr<v1::ModelProfile> ReadProfileFile(const std::string& path, int64_t batch_size = 0);

// The graph.txt text of `profile` (nodes then edges; a chain gets edges k -> k + 1), so that
// ParseGraphTxt(WriteGraphTxt(p), ...) gives back p's layers and edges (when p's order is
// topological; a chain comes back with its edges k -> k + 1 explicit). To keep each node on one
// parseable line it writes an empty id as "layer<k>", blanks in ids as '_', line breaks in names
// as ' ', " -- " in names as " - " and an empty name as "unnamed"; times use the shortest text
// that reads back exactly; a layer's `input` flag comes back only if its name starts with
// "Input". The format has no key for saved_bytes and optimizer_ms: they are not written (and
// come back 0).
std::string WriteGraphTxt(const v1::ModelProfile& profile);

// The planner's chain view (chain_profile.h): layers in the profile's order, Input nodes' times
// forced to 0, cut_bytes from the edges (a chain without edges: cut_bytes[k] =
// activation_bytes[k]), input_bytes 0 and no ties (the job planner adds both from the model).
// kInvalidArgument for an empty profile, more than kMaxProfileLayers layers, batch_size <= 0, an
// edge that goes backwards in the order (the profile is not topologically sorted), or no compute at
// all ("profile X has no compute: every layer's forward and backward time is 0", e.g. only Input
// nodes): a plan of it would take 0 ms.
absl::StatusOr<ChainProfile> ToChain(const v1::ModelProfile& profile);

// Checks that `profile` describes `model`: after dropping Input nodes it has one layer per
// model.layers entry, and each layer's description starts with that layer's type as a whole
// word, any case ("Linear(784, 256)", "linear" and "LINEAR" are linear; "Linearx" is not), and
// its parameter_bytes, when > 0, are the model layer's parameters * 4 (fp32; linear: (in * out
// + out) * 4). kInvalidArgument naming the first mismatch, e.g. "profile vgg16.txt does not
// match the job's model: its layer 0 (node2 'Conv2d(3, 64)') is not model.layers[0] (flatten)
// (a layer matches when its description starts with the layer type, any case)", "... its layer 1
// (node2 'Linear(784, 256)') has 999999999 parameter bytes, model.layers[1] (linear 784->256)
// has 803840" or "... has 24 layers, the model 6"; InferLayers' errors for a model it cannot
// walk.
absl::Status CheckProfileMatchesModel(const v1::ModelProfile& profile, const v1::ModelSpec& model);

// Sets `layer`'s sizes from the model's declaration of it (common/model/layer_type.h) at
// `batch_size` samples: activation_bytes = output_bytes x batch, saved_bytes = saved_bytes x
// batch, parameter_bytes = param_count x 4 (fp32; a tied copy counts on its own layer). Every
// profile of a dapple model gets its sizes here (estimated, measured, emulated), so they agree
// with the runtime's accounting whatever measured the times.
void SetLayerSizes(const LayerInfo& info, int64_t batch_size, v1::LayerProfile* layer);

// A profile of `model` at `batch_size` samples estimated from its FLOPs (model_info.h) at
// `flops_per_second`, one layer per model layer named by its type with SetLayerSizes' sizes, a
// chain; source says "estimated from FLOPs at <X> GFLOP/s". kInvalidArgument for InferLayers'
// errors or batch_size <= 0 or flops_per_second <= 0.
absl::StatusOr<v1::ModelProfile> EstimateProfile(const v1::ModelSpec& model, int64_t batch_size,
                                                 double flops_per_second);

// A stable key for a model's layers and input shape (the measured-profile cache key): a
// readable canonical string "in=<d0>x<d1>...;<layer>;..." of the layers' LayerSignature
// (common/model/layer_registry.h), e.g. "in=1x28x28;flatten;linear:1024;relu;linear:10" or
// "...;transformer_block{heads=4}". The loss is not part of it.
std::string ModelFingerprint(const v1::ModelSpec& model);

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_MODEL_PROFILE_H_
