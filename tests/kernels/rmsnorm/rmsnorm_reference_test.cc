// The float64 reference against hand-computed rows for every option combination (kind x residual x gate x weight
// storage), eps, strided rows, the residual sum's rounding, and the bf16 ulp the tolerance is built on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/rmsnorm/reference.h"
#include "kernels/rmsnorm/rmsnorm_workload.h"

namespace dflash::rmsnorm {
namespace {

std::vector<std::uint16_t> Bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out;
  for (float f : v) out.push_back(FloatToBf16(f));
  return out;
}

// One row of 8: s = (2, -2, ...) has mean square 4, so with eps = 0 the normalised row is n = (1, -1, 1, -1, ...).
const std::vector<float> kS = {2, -2, 2, -2, 2, -2, 2, -2};
const std::vector<float> kN = {1, -1, 1, -1, 1, -1, 1, -1};
// s = x + r with every term exact in bf16.
const std::vector<float> kX = {1, -3, 2.5f, -1, 0, 0, 2, -2.5f};
const std::vector<float> kR = {1, 1, -0.5f, -1, 2, -2, 0, 0.5f};
const std::vector<float> kW = {0.5f, 1, 1.5f, 2, -0.5f, -1, -1.5f, -2};
const std::vector<float> kZ = {0, 1, -1, 2, -2, 3, 4, -4};
// silu(z) = z * sigmoid(z), to 16 digits.
const std::vector<double> kSiluZ = {0.0, 0.7310585786300049, -0.2689414213699951, 1.7615941559557646,
                                    -0.2384058440442351, 2.8577223804672998, 3.928055160151634, -0.07194483984836623};

// The fp32 weights: kW plus 2^-13 (c + 1), which bf16 cannot hold: its spacing at these magnitudes is at least
// 2^-9, so rounding to bf16 gives kW back.
std::vector<float> Fp32Weights() {
  std::vector<float> w = kW;
  for (std::size_t c = 0; c < w.size(); ++c) w[c] += std::ldexp(1.0f, -13) * static_cast<float>(c + 1);
  return w;
}

TEST(RmsNormReference, HandComputedRowsForEveryOptionCombination) {
  const auto s16 = Bf16(kS), x16 = Bf16(kX), r16 = Bf16(kR), w16 = Bf16(kW), z16 = Bf16(kZ);
  const std::vector<float> w32 = Fp32Weights();
  int combinations = 0;
  for (Kind kind : {Kind::kStandard, Kind::kZeroCentred}) {
    for (bool residual : {false, true}) {
      for (bool gate : {false, true}) {
        for (WeightDtype wd : {WeightDtype::kBf16, WeightDtype::kFp32}) {
          SCOPED_TRACE(::testing::Message() << KindName(kind) << " residual=" << residual << " gate=" << gate
                                            << " weight=" << WeightDtypeName(wd));
          ReferenceInput in;
          in.x = residual ? x16 : s16;
          if (residual) in.residual = r16;
          if (gate) in.gate = z16;
          if (wd == WeightDtype::kFp32) in.weight_fp32 = w32; else in.weight_bf16 = w16;
          in.x_stride = in.residual_stride = in.gate_stride = 8;
          in.rows = 1;
          in.cols = 8;
          in.kind = kind;
          in.eps = 0.0f;
          const ReferenceOutput o = ReferenceRmsNorm(in);
          ASSERT_EQ(o.out.size(), 8u);
          EXPECT_EQ(o.sum.size(), residual ? 8u : 0u);
          for (int c = 0; c < 8; ++c) {
            const double w = wd == WeightDtype::kFp32 ? static_cast<double>(w32[c]) : static_cast<double>(kW[c]);
            double want = kN[c] * (kind == Kind::kZeroCentred ? 1.0 + w : w);
            if (gate) want *= kSiluZ[c];
            EXPECT_NEAR(o.out[c], want, 1e-14) << "col " << c;
            if (residual) {
              EXPECT_EQ(o.sum[c], s16[c]) << "col " << c;
            }
          }
          ++combinations;
        }
      }
    }
  }
  EXPECT_EQ(combinations, 16);
}

TEST(RmsNormReference, Fp32WeightsAreNotRoundedToBf16) {
  const auto s16 = Bf16(kS), w16 = Bf16(kW);
  const std::vector<float> w32 = Fp32Weights();
  ReferenceInput in;
  in.x = s16;
  in.x_stride = 8;
  in.rows = 1;
  in.cols = 8;
  in.eps = 0.0f;
  in.weight_fp32 = w32;
  const ReferenceOutput full = ReferenceRmsNorm(in);
  const std::vector<std::uint16_t> w32_as_bf16 = Bf16(w32);  // kW again: the added 2^-13 (c + 1) rounds away
  EXPECT_EQ(w32_as_bf16, w16);
  in.weight_fp32 = {};
  in.weight_bf16 = w32_as_bf16;
  const ReferenceOutput rounded = ReferenceRmsNorm(in);
  for (int c = 0; c < 8; ++c) EXPECT_NE(full.out[c], rounded.out[c]) << c;
}

// The backward on the row kS (rms 2, n = +-1, eps 0) by hand: g = dy * w', dx = (g - n * mean(g * n)) / 2,
// dw = dy * n; for both kinds.
TEST(RmsNormReferenceBackward, HandComputedRowForBothKinds) {
  const std::vector<float> dy = {1, 0.5f, -1, 2, 0, -0.5f, 1.5f, -2};
  const auto s16 = Bf16(kS), w16 = Bf16(kW), dy16 = Bf16(dy);
  for (const Kind kind : {Kind::kStandard, Kind::kZeroCentred}) {
    ReferenceInput in;
    in.x = s16;
    in.x_stride = 8;
    in.rows = 1;
    in.cols = 8;
    in.eps = 0.0f;
    in.kind = kind;
    in.weight_bf16 = w16;
    const ReferenceGradients got = ReferenceRmsNormBackward(in, dy16, 8);
    double mean_gn = 0.0;
    std::vector<double> g(8);
    for (int c = 0; c < 8; ++c) {
      g[c] = dy[c] * (kind == Kind::kZeroCentred ? 1.0 + kW[c] : kW[c]);
      mean_gn += g[c] * kN[c] / 8.0;
    }
    for (int c = 0; c < 8; ++c) {
      EXPECT_DOUBLE_EQ(got.dx[c], (g[c] - kN[c] * mean_gn) / 2.0) << c;
      EXPECT_DOUBLE_EQ(got.dw[c], dy[c] * kN[c]) << c;
    }
  }
}

// dw is the derivative of L = sum(out * dy) in the (fp32, so continuous) weights: central differences of the forward
// reference over three rows; and with eps = 0 the norm is scale-invariant, so sum_c dx * x = 0 on every row.
TEST(RmsNormReferenceBackward, WeightGradientIsTheForwardsDerivativeAndDxIsOrthogonalToX) {
  const int rows = 3, cols = 8;
  std::vector<float> x, dy;
  for (int i = 0; i < rows * cols; ++i) {
    x.push_back(static_cast<float>((i * 7) % 11) * 0.25f - 1.2f);
    dy.push_back(static_cast<float>((i * 5) % 9) * 0.5f - 2.0f);
  }
  const auto x16 = Bf16(x), dy16 = Bf16(dy);
  std::vector<float> w = Fp32Weights();
  for (const Kind kind : {Kind::kStandard, Kind::kZeroCentred}) {
    ReferenceInput in;
    in.x = x16;
    in.x_stride = cols;
    in.rows = rows;
    in.cols = cols;
    in.eps = 0.0f;
    in.kind = kind;
    in.weight_fp32 = w;
    const ReferenceGradients got = ReferenceRmsNormBackward(in, dy16, cols);
    auto loss = [&](const std::vector<float>& weights) {
      ReferenceInput probe = in;
      probe.weight_fp32 = weights;
      const ReferenceOutput o = ReferenceRmsNorm(probe);
      double l = 0.0;
      for (int i = 0; i < rows * cols; ++i) l += o.out[i] * Bf16ToFloat(dy16[i]);
      return l;
    };
    for (int c = 0; c < cols; ++c) {
      const float h = 1.0f / 64;  // exact in fp32; L is linear in w, so the difference is exact up to rounding
      std::vector<float> up = w, down = w;
      up[c] += h;
      down[c] -= h;
      const double numeric = (loss(up) - loss(down)) / (2.0 * h);
      EXPECT_NEAR(got.dw[c], numeric, 1e-9 * std::max(1.0, std::abs(numeric))) << c;
    }
    for (int i = 0; i < rows; ++i) {
      double dot = 0.0, scale = 0.0;
      for (int c = 0; c < cols; ++c) {
        dot += got.dx[i * cols + c] * Bf16ToFloat(x16[i * cols + c]);
        scale += std::abs(got.dx[i * cols + c] * Bf16ToFloat(x16[i * cols + c]));
      }
      EXPECT_NEAR(dot, 0.0, 1e-12 * std::max(1.0, scale)) << "row " << i;
    }
  }
}

TEST(RmsNormReference, EpsEntersTheMeanSquare) {
  // mean(s^2) = 4, eps = 12: rms = 4, so n = s / 4.
  const auto s16 = Bf16(kS), w16 = Bf16({1, 1, 1, 1, 1, 1, 1, 1});
  ReferenceInput in;
  in.x = s16;
  in.weight_bf16 = w16;
  in.x_stride = 8;
  in.rows = 1;
  in.cols = 8;
  in.eps = 12.0f;
  const ReferenceOutput o = ReferenceRmsNorm(in);
  for (int c = 0; c < 8; ++c) EXPECT_DOUBLE_EQ(o.out[c], kS[c] / 4.0) << c;
}

TEST(RmsNormReference, StridedRowsGiveTheContiguousResultAndNeverReadTheGaps) {
  // Three rows of 8 with different scales; strided copies with NaN in the 8-element gaps.
  const std::int64_t R = 3, C = 8, S = 16;
  std::vector<float> xs, rs, zs;
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t c = 0; c < C; ++c) {
      xs.push_back(static_cast<float>((i + 1) * (c % 3 + 1)) * (c % 2 ? -0.25f : 0.5f));
      rs.push_back(static_cast<float>(c) * 0.125f);
      zs.push_back(static_cast<float>(c) - 3.5f);
    }
  const auto x = Bf16(xs), r = Bf16(rs), z = Bf16(zs), w = Bf16(kW);
  auto strided = [&](const std::vector<std::uint16_t>& v) {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(R * S), FloatToBf16(NAN));
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t c = 0; c < C; ++c) out[i * S + c] = v[i * C + c];
    return out;
  };
  const auto xp = strided(x), rp = strided(r), zp = strided(z);
  ReferenceInput a;
  a.x = x;
  a.residual = r;
  a.gate = z;
  a.weight_bf16 = w;
  a.x_stride = a.residual_stride = a.gate_stride = C;
  a.rows = R;
  a.cols = C;
  a.kind = Kind::kZeroCentred;
  ReferenceInput b = a;
  b.x = xp;
  b.residual = rp;
  b.gate = zp;
  b.x_stride = b.residual_stride = b.gate_stride = S;
  const ReferenceOutput oa = ReferenceRmsNorm(a), ob = ReferenceRmsNorm(b);
  ASSERT_EQ(oa.out.size(), static_cast<std::size_t>(R * C));
  for (std::size_t i = 0; i < oa.out.size(); ++i) {
    EXPECT_FALSE(std::isnan(ob.out[i])) << i;
    EXPECT_EQ(oa.out[i], ob.out[i]) << i;
    EXPECT_EQ(oa.sum[i], ob.sum[i]) << i;
  }
  // Each row is normalised on its own: without the residual, rows 1 and 2 are row 0 times 2 and 3, so with eps = 0
  // all three normalise to the same values.
  a.residual = {};
  a.eps = 0.0f;
  const ReferenceOutput pure = ReferenceRmsNorm(a);
  for (std::int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(pure.out[C + c], pure.out[c], 1e-12) << c;
    EXPECT_NEAR(pure.out[2 * C + c], pure.out[c], 1e-12) << c;
  }
}

TEST(RmsNormReference, ResidualSumIsTheFp32AddRoundedToNearestEven) {
  const std::uint16_t one = FloatToBf16(1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the tie goes to the even mantissa (1).
  EXPECT_EQ(ResidualSum(one, FloatToBf16(std::ldexp(1.0f, -8))), one);
  // (1 + 2^-7) + 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to the even one.
  EXPECT_EQ(ResidualSum(FloatToBf16(1.0f + std::ldexp(1.0f, -7)), FloatToBf16(std::ldexp(1.0f, -8))),
            FloatToBf16(1.0f + std::ldexp(1.0f, -6)));
  // Just above the tie rounds up.
  EXPECT_EQ(ResidualSum(one, FloatToBf16(std::ldexp(1.0f, -8) + std::ldexp(1.0f, -15))), 0x3F81);
  // Far apart: the small term vanishes; opposite signs cancel exactly.
  EXPECT_EQ(ResidualSum(FloatToBf16(256.0f), FloatToBf16(std::ldexp(1.0f, -20))), FloatToBf16(256.0f));
  EXPECT_EQ(ResidualSum(FloatToBf16(-3.5f), FloatToBf16(3.5f)), FloatToBf16(0.0f));
}

TEST(RmsNormReference, Bf16UlpIsTheSpacingOfBf16ValuesAtTheMagnitude) {
  EXPECT_EQ(Bf16Ulp(1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(Bf16Ulp(1.99), std::ldexp(1.0, -7));
  EXPECT_EQ(Bf16Ulp(-3.0), std::ldexp(1.0, -6));
  EXPECT_EQ(Bf16Ulp(0.75), std::ldexp(1.0, -8));
  EXPECT_EQ(Bf16Ulp(0.0), std::ldexp(1.0, -133));
  // The next bf16 value after 1 is exactly one ulp away.
  EXPECT_EQ(static_cast<double>(Bf16ToFloat(0x3F81)) - 1.0, Bf16Ulp(1.0));
  // The exponent-bit reading agrees with frexp's definition everywhere, the edge of the normal range included.
  EXPECT_EQ(Bf16Ulp(0x1p-126), 0x1p-133);
  EXPECT_EQ(Bf16Ulp(std::nextafter(0x1p-126, 0.0)), 0x1p-133);
  EXPECT_EQ(Bf16Ulp(std::nextafter(2.0, 0.0)), 0x1p-7);
  EXPECT_EQ(Bf16Ulp(3.0e38), 0x1p120);
  EXPECT_TRUE(std::isinf(Bf16Ulp(INFINITY)));
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> exponent(-125.0, 127.0), mantissa(1.0, 2.0);
  for (int i = 0; i < 100000; ++i) {
    const double v = (i % 2 ? -1.0 : 1.0) * std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
    int e = 0;
    std::frexp(v, &e);
    ASSERT_EQ(Bf16Ulp(v), std::ldexp(1.0, e - 8)) << v;
  }
}

}  // namespace
}  // namespace dflash::rmsnorm
