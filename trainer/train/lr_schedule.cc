#include "trainer/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dflash::trainer {

std::int64_t LrSchedule::warmup_steps() const {
  return std::max<std::int64_t>(1, std::llround(warmup_fraction * double(total_steps)));
}

double LrSchedule::At(std::int64_t step) const {
  const std::int64_t warmup = warmup_steps();
  if (step < warmup) return peak_lr * double(step + 1) / double(warmup);
  if (step >= total_steps || total_steps <= warmup) return 0.0;
  const double progress = double(step - warmup) / double(total_steps - warmup);
  return peak_lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace dflash::trainer
