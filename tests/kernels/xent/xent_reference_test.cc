// The float64 reference against hand-computed rows: ignored labels, zero weights (also over NaN and inf), a huge
// logit, -inf logits, rows of -inf, +inf, ties and NaNs for the argmax, and the gradient's defining identities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/xent/reference.h"

namespace dflash::xent {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(XentReference, HandComputedRow) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  const ReferenceRow r = ReferenceXentRow(x, 2, 0.5f, 0.25f);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_DOUBLE_EQ(r.lse, lse);
  EXPECT_TRUE(r.valid);
  EXPECT_NEAR(r.loss, 0.5 * (lse - 3.0), 1e-15);  // the reference subtracts the max first
  EXPECT_EQ(r.argmax, 2);
  EXPECT_DOUBLE_EQ(r.coef, 0.125);
  EXPECT_NEAR(ReferenceGrad(r, 1.0f, 0), 0.125 * std::exp(1.0 - lse), 1e-16);
  EXPECT_NEAR(ReferenceGrad(r, 3.0f, 2), 0.125 * (std::exp(3.0 - lse) - 1.0), 1e-16);
}

TEST(XentReference, GradientOfAValidRowSumsToZeroAndIsTheSoftmaxMinusTheOnehot) {
  const std::vector<float> x = {0.5f, -1.25f, 2.0f, 0.0f, 7.5f};
  const ReferenceRow r = ReferenceXentRow(x, 1, 1.0f, 1.0f);
  double sum = 0.0, softmax_sum = 0.0;
  for (std::size_t v = 0; v < x.size(); ++v) {
    const double g = ReferenceGrad(r, x[v], static_cast<std::int64_t>(v));
    sum += g;
    softmax_sum += g + (v == 1 ? 1.0 : 0.0);
  }
  EXPECT_NEAR(sum, 0.0, 1e-15);
  EXPECT_NEAR(softmax_sum, 1.0, 1e-15);
  EXPECT_LT(ReferenceGrad(r, x[1], 1), 0.0);
}

TEST(XentReference, IgnoredLabelsGiveZeroLossAndGradientButStillAnArgmax) {
  const std::vector<float> x = {1.0f, 4.0f, 2.0f};
  for (std::int64_t label : {kIgnoreIndex, std::int64_t{-5}, std::int64_t{3}, std::int64_t{1} << 40}) {
    const ReferenceRow r = ReferenceXentRow(x, label, 1.0f, 1.0f);
    EXPECT_FALSE(r.valid) << label;
    EXPECT_EQ(r.loss, 0.0) << label;
    EXPECT_EQ(r.argmax, 1) << label;
    EXPECT_EQ(ReferenceGrad(r, x[1], 1), 0.0) << label;
  }
}

TEST(XentReference, ZeroWeightRowsAreZeroEvenOverNanAndInf) {
  const std::vector<float> x = {1.0f, kNaN, kInf, kNaN};
  const ReferenceRow r = ReferenceXentRow(x, 0, 0.0f, 1.0f);
  EXPECT_FALSE(r.valid);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(ReferenceGrad(r, kNaN, 1), 0.0);
  EXPECT_EQ(ReferenceGrad(r, kInf, 2), 0.0);
  EXPECT_EQ(r.argmax, 1) << "the first NaN";
  EXPECT_TRUE(std::isnan(r.lse));
}

TEST(XentReference, ArgmaxTakesTheFirstOfTiedMaxima) {
  EXPECT_EQ(ReferenceXentRow(std::vector<float>{5.0f, 1.0f, 5.0f}, 0, 1.0f, 1.0f).argmax, 0);
  EXPECT_EQ(ReferenceXentRow(std::vector<float>{1.0f, 5.0f, 5.0f}, 0, 1.0f, 1.0f).argmax, 1);
  EXPECT_EQ(ReferenceXentRow(std::vector<float>{-kInf, -kInf, -kInf}, 0, 1.0f, 1.0f).argmax, 0);
  EXPECT_EQ(ReferenceXentRow(std::vector<float>{kInf, 1.0f, kInf}, 1, 1.0f, 1.0f).argmax, 0);
  EXPECT_EQ(ReferenceXentRow(std::vector<float>{9.0f, kNaN, kInf, kNaN}, 0, 1.0f, 1.0f).argmax, 1);
}

TEST(XentReference, AHugeLogitNeedsTheMaximumSubtracted) {
  const std::vector<float> x = {1e4f, 0.0f, 0.0f};
  const ReferenceRow r = ReferenceXentRow(x, 1, 2.0f, 1.0f);
  EXPECT_DOUBLE_EQ(r.lse, 1e4);  // log(1 + 2 exp(-1e4)) is below double's resolution at 1e4
  EXPECT_DOUBLE_EQ(r.loss, 2.0 * 1e4);
  EXPECT_EQ(r.argmax, 0);
  EXPECT_DOUBLE_EQ(ReferenceGrad(r, x[0], 0), 2.0);
  EXPECT_DOUBLE_EQ(ReferenceGrad(r, x[1], 1), -2.0);
  EXPECT_EQ(ReferenceXentRow(x, 0, 1.0f, 1.0f).loss, 0.0);
}

TEST(XentReference, NegativeInfinityLogitsDropOut) {
  const std::vector<float> x = {-kInf, 0.0f, 0.0f};
  const ReferenceRow r = ReferenceXentRow(x, 2, 1.0f, 1.0f);
  EXPECT_DOUBLE_EQ(r.lse, std::log(2.0));
  EXPECT_DOUBLE_EQ(r.loss, std::log(2.0));
  EXPECT_EQ(r.argmax, 1);
  EXPECT_EQ(ReferenceGrad(r, x[0], 0), 0.0);
  EXPECT_DOUBLE_EQ(ReferenceGrad(r, x[1], 1), 0.5);
  EXPECT_DOUBLE_EQ(ReferenceGrad(r, x[2], 2), -0.5);
}

TEST(XentReference, ARowOfNegativeInfinityHasLseMinusInfinityAndANanLoss) {
  const std::vector<float> x = {-kInf, -kInf};
  const ReferenceRow r = ReferenceXentRow(x, 1, 1.0f, 1.0f);
  EXPECT_EQ(r.lse, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_TRUE(std::isnan(ReferenceGrad(r, x[0], 0)));
  EXPECT_TRUE(std::isnan(ReferenceGrad(r, x[1], 1)));
}

TEST(XentReference, PositiveInfinityGivesAnInfiniteLseAndANanGradient) {
  const std::vector<float> x = {1.0f, kInf, 2.0f};
  const ReferenceRow r = ReferenceXentRow(x, 0, 1.0f, 1.0f);
  EXPECT_EQ(r.lse, std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.loss, std::numeric_limits<double>::infinity());
  for (std::int64_t v = 0; v < 3; ++v) EXPECT_TRUE(std::isnan(ReferenceGrad(r, x[v], v))) << v;
  EXPECT_TRUE(std::isnan(ReferenceXentRow(x, 1, 1.0f, 1.0f).loss)) << "inf - inf";
}

TEST(XentReference, ANanInAValidRowMakesEverythingNan) {
  const std::vector<float> x = {1.0f, kNaN, 2.0f};
  const ReferenceRow r = ReferenceXentRow(x, 0, 1.0f, 1.0f);
  EXPECT_TRUE(std::isnan(r.lse));
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_TRUE(std::isnan(ReferenceGrad(r, x[0], 0)));
}

}  // namespace
}  // namespace dflash::xent
