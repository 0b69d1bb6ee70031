// The learning-rate schedule of the recipe (spec dflash-training.md §6): linear warmup from 0 over the first
// warmup_fraction of the steps, then cosine decay to 0 at total_steps.
//   lr(s) = peak * (s + 1) / W                         for s < W = max(1, round(warmup_fraction * total))
//   lr(s) = peak * 0.5 * (1 + cos(pi * (s - W) / (total - W)))   afterwards (0 at and after total)
// Who may call: the training loop (s = optimizer steps taken so far). Thread-safety: pure.
#pragma once

#include <cstdint>

namespace dflash::trainer {

struct LrSchedule {
  double peak_lr = 6e-4;
  std::int64_t total_steps = 1;
  double warmup_fraction = 0.04;

  std::int64_t warmup_steps() const;
  double At(std::int64_t step) const;
};

}  // namespace dflash::trainer
