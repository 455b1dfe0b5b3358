#include "common/grad_clip.h"

#include <cmath>

namespace dapple {

double ClipCoefficient(double max_norm, double total_sq_norm) {
  if (!(max_norm > 0)) return 1.0;
  const double coef = max_norm / (std::sqrt(total_sq_norm) + kClipEpsilon);
  // Written so that a NaN norm gives NaN (torch.clamp(nan, max=1) is nan), not 1.
  return coef >= 1.0 ? 1.0 : coef;
}

}  // namespace dapple
