// The warmup + cosine schedule against its closed form at the boundaries.
#include "trainer/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace dflash::trainer {
namespace {

TEST(LrSchedule, LinearWarmupThenCosineToZero) {
  LrSchedule s{.peak_lr = 1.0, .total_steps = 100, .warmup_fraction = 0.04};
  EXPECT_EQ(s.warmup_steps(), 4);
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);  // cosine starts at the peak
  EXPECT_NEAR(s.At(52), 0.5, 1e-12);  // half-way through the decay
  EXPECT_NEAR(s.At(99), 0.5 * (1 + std::cos(std::numbers::pi * 95.0 / 96.0)), 1e-12);
  EXPECT_EQ(s.At(100), 0.0);
  for (int i = 5; i < 100; ++i) EXPECT_LE(s.At(i), s.At(i - 1));
}

TEST(LrSchedule, TinyRunsStillWarmUpOneStep) {
  LrSchedule s{.peak_lr = 2.0, .total_steps = 3, .warmup_fraction = 0.04};
  EXPECT_EQ(s.warmup_steps(), 1);
  EXPECT_DOUBLE_EQ(s.At(0), 2.0);
  EXPECT_GT(s.At(1), s.At(2));
}

}  // namespace
}  // namespace dflash::trainer
