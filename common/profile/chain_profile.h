// The planner's view of a model profile: layers in one topological order, with the bytes that
// cross each possible cut between consecutive layers. Pure data; see model_profile.h for how a
// v1::ModelProfile (a chain or a DAG) becomes one.
#ifndef DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_
#define DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dapple::profile {

// All vectors have L entries (one per layer, topological order) except cut_bytes (L - 1).
// Times are ms and sizes bytes for one batch of `batch_size` samples; planners scale them
// linearly to other batch sizes (time(b) = time * b / batch_size).
struct ChainProfile {
  std::string source;                     // where it came from (file path, "measured ...")
  int64_t batch_size = 0;                 // > 0
  std::vector<std::string> names;         // "node5 Conv2d(...)" / "layers[3] linear", for messages
  std::vector<double> forward_ms;         // >= 0; 0 for Input nodes
  std::vector<double> backward_ms;        // >= 0; 0 for Input nodes
  std::vector<int64_t> parameter_bytes;   // >= 0 (fp32 weights)
  std::vector<int64_t> activation_bytes;  // >= 0: the layer's output, kept for its backward
  // >= 0: one optimizer update of the layer's weights, once per step whatever the batch (0 when
  // the profile does not say: graph.txt files).
  std::vector<double> optimizer_ms;
  // cut_bytes[k]: bytes sent forward (and, as gradients, backward) when a stage ends after
  // layer k: the outputs of layers <= k consumed by some layer > k. A chain: activation_bytes[k].
  std::vector<int64_t> cut_bytes;

  int num_layers() const { return static_cast<int>(forward_ms.size()); }
};

}  // namespace dapple::profile

#endif  // DAPPLE_COMMON_PROFILE_CHAIN_PROFILE_H_
