// trainer/nn/layers: each block against a scalar double-precision loop over the spec's formula, fresh random inputs.
#include "trainer/nn/layers.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dflash::trainer::nn {
namespace {

torch::Tensor Rand(std::initializer_list<std::int64_t> shape) { return torch::randn(shape, torch::kDouble); }

TEST(NnLayers, RmsNormBothKindsMatchScalarLoop) {
  torch::manual_seed(1);
  const auto x = Rand({5, 24}), w = Rand({24});
  for (auto kind : {NormKind::kStandard, NormKind::kZeroCentred}) {
    const auto got = RmsNorm(x.to(torch::kFloat), w.to(torch::kFloat), 1e-6, kind).to(torch::kDouble);
    for (int r = 0; r < 5; ++r) {
      double ms = 0;
      for (int c = 0; c < 24; ++c) ms += std::pow(x[r][c].item<double>(), 2) / 24;
      for (int c = 0; c < 24; ++c) {
        const double scale = kind == NormKind::kZeroCentred ? 1 + w[c].item<double>() : w[c].item<double>();
        EXPECT_NEAR(got[r][c].item<double>(), x[r][c].item<double>() / std::sqrt(ms + 1e-6) * scale, 1e-5);
      }
    }
  }
}

TEST(NnLayers, GatedRmsNormMultipliesBySiluOfGate) {
  torch::manual_seed(2);
  const auto x = Rand({3, 16}), w = Rand({16}), z = Rand({3, 16});
  const auto got = GatedRmsNorm(x.to(torch::kFloat), w.to(torch::kFloat), z.to(torch::kFloat), 1e-6);
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int c = 0; c < 16; ++c) ms += std::pow(x[r][c].item<double>(), 2) / 16;
    for (int c = 0; c < 16; ++c) {
      const double zz = z[r][c].item<double>();
      const double want = x[r][c].item<double>() / std::sqrt(ms + 1e-6) * w[c].item<double>() * zz / (1 + std::exp(-zz));
      EXPECT_NEAR(got[r][c].item<double>(), want, 1e-5);
    }
  }
}

TEST(NnLayers, SwiGluMlpMatchesLoop) {
  torch::manual_seed(3);
  const auto x = Rand({2, 6}), g = Rand({4, 6}), u = Rand({4, 6}), d = Rand({6, 4});
  const auto got = SwiGluMlp(x, g, u, d);
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 6; ++o) {
      double acc = 0;
      for (int i = 0; i < 4; ++i) {
        double gi = 0, ui = 0;
        for (int c = 0; c < 6; ++c) {
          gi += g[i][c].item<double>() * x[r][c].item<double>();
          ui += u[i][c].item<double>() * x[r][c].item<double>();
        }
        acc += d[o][i].item<double>() * gi / (1 + std::exp(-gi)) * ui;
      }
      EXPECT_NEAR(got[r][o].item<double>(), acc, 1e-9);
    }
}

TEST(NnLayers, PartialRopeRotatesPairsAndPassesTheRest) {
  // HF rotate_half: dims i and i + rot/2 form a pair rotated by angle pos * theta^(-2i/rot).
  torch::manual_seed(4);
  const std::int64_t T = 4, H = 2, D = 16, rot = 8;
  const double theta = 10000.0;
  const auto x = Rand({T, H, D});
  const auto positions = torch::tensor({0, 3, 17, 1000}, torch::kLong);
  const auto got = ApplyRope(x, MakeRope(positions, rot, theta));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < rot / 2; ++i) {
        const double angle = positions[t].item<double>() * std::pow(theta, -2.0 * i / rot);
        const double a = x[t][h][i].item<double>(), b = x[t][h][i + rot / 2].item<double>();
        EXPECT_NEAR(got[t][h][i].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-4);
        EXPECT_NEAR(got[t][h][i + rot / 2].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-4);
      }
      for (int i = rot; i < D; ++i) EXPECT_EQ(got[t][h][i].item<double>(), x[t][h][i].item<double>());
    }
}

TEST(NnLayers, LinearGradientReachesAnFp32MasterWeightThroughBf16Compute) {
  auto w = torch::randn({3, 4}, torch::TensorOptions().dtype(torch::kFloat).requires_grad(true));
  const auto x = torch::randn({2, 4}).to(torch::kBFloat16);
  const auto y = Linear(x, w);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.to(torch::kFloat).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(w.grad(), x.to(torch::kFloat).sum(0).expand({3, 4}), 1e-2, 1e-2));
}

}  // namespace
}  // namespace dflash::trainer::nn
