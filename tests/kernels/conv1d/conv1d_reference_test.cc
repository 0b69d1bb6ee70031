// The float64 reference against independent formulations: a hand-computed case, per-sequence zero padding,
// layouts/strides, bias; and the host bf16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/conv1d/conv1d_workload.h"
#include "kernels/conv1d/reference.h"

namespace dflash::conv1d {
namespace {

double Silu(double a) { return a / (1.0 + std::exp(-a)); }

std::vector<std::uint16_t> RandomBf16(std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<std::uint16_t> v(n);
  for (auto& e : v) e = FloatToBf16(u(rng));
  return v;
}

TEST(Conv1dReference, HandComputedSingleChannelMatches) {
  // x = 1, 2, 3, 4; w = (0.5, 0.25, -1, 2); y[t] = silu(w0 x[t-3] + w1 x[t-2] + w2 x[t-1] + w3 x[t]).
  std::vector<std::uint16_t> x = {FloatToBf16(1), FloatToBf16(2), FloatToBf16(3), FloatToBf16(4)};
  std::vector<std::uint16_t> w = {FloatToBf16(0.5f), FloatToBf16(0.25f), FloatToBf16(-1), FloatToBf16(2)};
  ReferenceInput in;
  in.x = x;
  in.weight = w;
  in.tokens = 4;
  in.channels = 1;
  in.x_stride_t = 1;
  in.x_stride_c = 1;
  const std::vector<double> y = ReferenceConv1d(in);
  ASSERT_EQ(y.size(), 4u);
  EXPECT_DOUBLE_EQ(y[0], Silu(2.0 * 1));
  EXPECT_DOUBLE_EQ(y[1], Silu(-1.0 * 1 + 2.0 * 2));
  EXPECT_DOUBLE_EQ(y[2], Silu(0.25 * 1 - 1.0 * 2 + 2.0 * 3));
  EXPECT_DOUBLE_EQ(y[3], Silu(0.5 * 1 + 0.25 * 2 - 1.0 * 3 + 2.0 * 4));
}

TEST(Conv1dReference, PackedSequencesEqualEachSequenceZeroPaddedAlone) {
  std::mt19937_64 rng(7);
  const std::int64_t T = 23, C = 5;
  const std::vector<std::int32_t> cu = {0, 1, 4, 4, 11, 23};  // lengths 1, 3, 0 (empty), 7, 12
  auto x = RandomBf16(T * C, rng, -2, 2);
  auto w = RandomBf16(C * 4, rng, -0.5f, 0.5f);
  auto b = RandomBf16(C, rng, -0.5f, 0.5f);
  ReferenceInput in;
  in.x = x;
  in.weight = w;
  in.bias = b;
  in.cu_seqlens = cu;
  in.tokens = T;
  in.channels = C;
  in.x_stride_t = C;
  in.x_stride_c = 1;
  const std::vector<double> y = ReferenceConv1d(in);

  // Independent formula: each sequence alone, left-padded with three zeros, as a dot product over a window.
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    const std::int64_t start = cu[s], len = cu[s + 1] - cu[s];
    for (std::int64_t c = 0; c < C; ++c) {
      std::vector<double> padded(static_cast<std::size_t>(len + 3), 0.0);
      for (std::int64_t i = 0; i < len; ++i) padded[i + 3] = Bf16ToDouble(x[(start + i) * C + c]);
      for (std::int64_t i = 0; i < len; ++i) {
        double dot = Bf16ToDouble(b[c]);
        for (int j = 0; j < 4; ++j) dot += Bf16ToDouble(w[c * 4 + j]) * padded[i + j];
        EXPECT_NEAR(y[(start + i) * C + c], Silu(dot), 1e-12) << "seq " << s << " token " << i << " ch " << c;
      }
    }
  }
  // The first token of a sequence sees only itself: a change before it must not matter.
  std::vector<std::uint16_t> x2 = x;
  for (std::int64_t c = 0; c < C; ++c) x2[10 * C + c] = FloatToBf16(100.0f);  // token 10: last of sequence 3
  in.x = x2;
  const std::vector<double> y2 = ReferenceConv1d(in);
  for (std::int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(y2[11 * C + c], y[11 * C + c]);  // token 11 starts sequence 4
    EXPECT_NE(y2[10 * C + c], y[10 * C + c]);
  }
}

TEST(Conv1dReference, ChannelMajorAndPaddedStridesGiveTheSameOutput) {
  std::mt19937_64 rng(11);
  const std::int64_t T = 9, C = 6, pad = 3;
  auto xt = RandomBf16(T * C, rng, -2, 2);
  auto w = RandomBf16(C * 4, rng, -0.5f, 0.5f);
  std::vector<std::uint16_t> xc(C * (T + pad), FloatToBf16(NAN));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < C; ++c) xc[c * (T + pad) + t] = xt[t * C + c];
  const std::vector<std::int32_t> cu = {0, 4, 9};
  ReferenceInput a;
  a.x = xt;
  a.weight = w;
  a.cu_seqlens = cu;
  a.tokens = T;
  a.channels = C;
  a.x_stride_t = C;
  a.x_stride_c = 1;
  ReferenceInput b = a;
  b.x = xc;
  b.x_stride_t = 1;
  b.x_stride_c = T + pad;
  const auto ya = ReferenceConv1d(a), yb = ReferenceConv1d(b);
  ASSERT_EQ(ya.size(), yb.size());
  for (std::size_t i = 0; i < ya.size(); ++i) {
    EXPECT_FALSE(std::isnan(yb[i])) << i;
    EXPECT_EQ(ya[i], yb[i]) << i;
  }
}

TEST(Conv1dReference, Bf16ConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to even.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0xFFFF)));  // the poison pattern is a NaN
}

TEST(Conv1dReference, RandomCuSeqlensCoverAllTokens) {
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    for (auto [T, S] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 3}, {17, 5}, {1000, 7}, {1000, 999}}) {
      const auto cu = RandomCuSeqlens(T, S, /*allow_empty=*/false, seed);
      ASSERT_EQ(cu.size(), static_cast<std::size_t>(S + 1));
      EXPECT_EQ(cu.front(), 0);
      EXPECT_EQ(cu.back(), T);
      for (std::size_t i = 0; i + 1 < cu.size(); ++i) EXPECT_LT(cu[i], cu[i + 1]) << "empty sequence " << i;
    }
    const auto cu = RandomCuSeqlens(10, 40, /*allow_empty=*/true, seed);
    ASSERT_EQ(cu.size(), 41u);
    EXPECT_EQ(cu.back(), 10);
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) EXPECT_LE(cu[i], cu[i + 1]);
  }
}

}  // namespace
}  // namespace dflash::conv1d
