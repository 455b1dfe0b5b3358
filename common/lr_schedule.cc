#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace dapple {

double LearningRate(const v1::TrainingSpec& training, int64_t update, int64_t total_steps) {
  const double lr = training.optimizer().lr();
  if (!training.has_lr_schedule()) return lr;
  const v1::LrSchedule& s = training.lr_schedule();
  const int64_t t = std::max<int64_t>(update, 0);
  const int64_t warmup = std::max<int64_t>(s.warmup_steps(), 0);
  if (t < warmup) return lr * static_cast<double>(t + 1) / static_cast<double>(warmup);
  if (s.decay() != "cosine") return lr;
  const int64_t end = s.decay_steps() > 0 ? s.decay_steps() : total_steps;
  if (t >= end) return s.min_lr();
  const double progress = static_cast<double>(t - warmup) / static_cast<double>(end - warmup);
  return s.min_lr() + (lr - s.min_lr()) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace dapple
