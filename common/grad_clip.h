// Global-norm gradient clipping (job spec training.max_grad_norm; docs/job_spec.md), as
// torch.nn.utils.clip_grad_norm_ (Pascanu et al., "On the difficulty of training recurrent
// neural networks", ICML 2013): every gradient is multiplied by
// clip_coef = max_norm / (total_norm + 1e-6) when that is below 1. The pipeline runtime, the
// reference trainer and Pipe-SGD's updater all take the coefficient from here.
//
// Thread safety: pure functions.
#ifndef DAPPLE_COMMON_GRAD_CLIP_H_
#define DAPPLE_COMMON_GRAD_CLIP_H_

namespace dapple {

// torch.nn.utils.clip_grad_norm_'s epsilon.
inline constexpr double kClipEpsilon = 1e-6;

// The factor to multiply every gradient by, given `max_norm` (training.max_grad_norm) and the
// SQUARED L2 norm of all gradients of the model (each parameter counted once): 1 when
// max_norm <= 0 (no clipping) or the norm is within it, else max_norm / (sqrt(total_sq_norm) +
// kClipEpsilon), in (0, 1). A non-finite norm gives what PyTorch's gives: 0 for +inf, NaN for
// NaN (the caller's non-finite check sees the gradients then).
double ClipCoefficient(double max_norm, double total_sq_norm);

}  // namespace dapple

#endif  // DAPPLE_COMMON_GRAD_CLIP_H_
