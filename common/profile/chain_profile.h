// The planner's view of a model profile: layers in one topological order, with the bytes that
// cross each possible cut between consecutive layers. Pure data; see model_profile.h for how a
// v1::ModelProfile (a chain or a DAG) becomes one.
#ifndef DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_
#define DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dapple::profile {

// The per-layer vectors have L entries (one per layer, topological order), cut_bytes L - 1.
// Times are ms and sizes bytes for one batch of `batch_size` samples; planners scale them
// linearly to other batch sizes (time(b) = time * b / batch_size).
struct ChainProfile {
  std::string source;                    // where it came from (file path, "measured ...")
  int64_t batch_size = 0;                // > 0
  std::vector<std::string> names;        // "node5 Conv2d(...)" / "layers[3] linear", for messages
  std::vector<double> forward_ms;        // >= 0; 0 for Input nodes
  std::vector<double> backward_ms;       // >= 0; 0 for Input nodes
  std::vector<int64_t> parameter_bytes;  // >= 0 (fp32 weights)
  // >= 0: the layer's output, kept for its backward and sent when a stage ends after it.
  std::vector<int64_t> activation_bytes;
  // >= 0: what the layer keeps for its backward beyond its input and output (LayerProfile
  // .saved_bytes; 0 for graph.txt files). Held, never sent.
  std::vector<int64_t> saved_bytes;
  // >= 0: one optimizer update of the layer's weights, once per step whatever the batch (0 when
  // the profile does not say: graph.txt files).
  std::vector<double> optimizer_ms;
  // Empty (every layer's time scales linearly with the samples: files) or one entry per layer,
  // each in [0, forward_ms / backward_ms of the layer]: the part of the layer's time at
  // batch_size that does not shrink with fewer samples. A layer then takes
  // fixed + (time - fixed) * samples / batch_size (cost_model.h ForwardMs). From a measured
  // profile's two batch sizes (LayerProfile.half_batch_forward_ms: ToChain).
  std::vector<double> forward_fixed_ms;
  std::vector<double> backward_fixed_ms;
  // cut_bytes[k]: bytes sent forward (and, as gradients, backward) when a stage ends after
  // layer k: the outputs of layers <= k consumed by some layer > k. A chain: activation_bytes[k].
  std::vector<int64_t> cut_bytes;
  // >= 0: the model input of `batch_size` samples, which the first stage holds per micro-batch
  // in flight as its input (fp32; token ids are held as exact floats). The job planner sets it
  // from the model (coordinator/planner/planner.h MakePlan); 0 for a profile planned on its own,
  // whose data loading, if any, is a layer of its own (graph.txt Input nodes).
  int64_t input_bytes = 0;
  // Weights of one layer tied to another's (lm_head tied to the embedding's table): `copy_layer`
  // holds a copy of `bytes` bytes of `owner_layer`'s parameters (counted in both layers'
  // parameter_bytes). On different stages the two copies' gradients are summed every step. Set
  // by the job planner from the model; profiles carry none.
  struct Tie {
    int owner_layer = 0;
    int copy_layer = 0;
    int64_t bytes = 0;
  };
  std::vector<Tie> ties;
  // Per-step work outside the layers (ModelProfile's fields of the same names, >= 0, 0 when
  // unknown): stage 0 loads input_ms_per_sample per sample, the last stage runs the loss at
  // loss_ms_per_sample per sample, and every send and receive of a micro-batch between stages
  // costs its rank action_ms.
  double input_ms_per_sample = 0;
  double loss_ms_per_sample = 0;
  double action_ms = 0;

  int num_layers() const { return static_cast<int>(forward_ms.size()); }
};

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_
