#include "coordinator/planner/activation_memory.h"

#include <vector>

namespace dapple::coordinator {

ActivationMemory::ActivationMemory(const profile::ChainProfile& profile)
    : batch_size_(static_cast<double>(profile.batch_size)) {
  const int L = profile.num_layers();
  prefix_.assign(L + 1, 0.0);
  input_.assign(L, 0.0);
  for (int i = 0; i < L; ++i) {
    prefix_[i + 1] = prefix_[i] + static_cast<double>(profile.activation_bytes[i]) +
                     static_cast<double>(profile.saved_bytes[i]);
    input_[i] = i == 0 ? static_cast<double>(profile.input_bytes)
                       : static_cast<double>(profile.cut_bytes[i - 1]);
  }
}

double ActivationMemory::AtProfileBatch(int first, int last) const {
  return input_[first] + prefix_[last + 1] - prefix_[first];
}

double ActivationMemory::PerMicroBatch(int first, int last, double samples) const {
  return AtProfileBatch(first, last) * samples / batch_size_;
}

double ActivationMemory::LayerBytes(int i) const { return prefix_[i + 1] - prefix_[i]; }

}  // namespace dapple::coordinator
