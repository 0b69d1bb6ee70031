// The rope family on the CPU: the float64 reference (a hand-computed head, the backward sign undoing the forward,
// the tail copied, strides), its problem (parse, refusals, bucket), its space (validity, grid, kernel name, seeds)
// and LaunchRope's argument checks, all before anything touches a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/rope/reference.h"
#include "kernels/rope/rope_api.h"
#include "kernels/rope/rope_family.h"

namespace dflash::rope {
namespace {

std::uint16_t B(float f) { return FloatToBf16(f); }

TEST(RopeReference, HandComputedHeadWithAnUnrotatedTail) {
  // One token, one head of 32 dims, rotary 16: pairs (i, i + 8) rotate, dims 16..31 are copied.
  std::vector<std::uint16_t> x(32);
  for (int i = 0; i < 32; ++i) x[i] = B(static_cast<float>(i + 1));
  std::vector<float> cos(16), sin(16);
  for (int i = 0; i < 16; ++i) {
    cos[i] = 0.5f;
    sin[i] = 0.25f;
  }
  ReferenceInput in{x, cos, sin, 32, 32, 1, 1, 32, 16, 1.0};
  const auto y = ReferenceRope(in);
  EXPECT_DOUBLE_EQ(y[0], 1 * 0.5 - 9 * 0.25);
  EXPECT_DOUBLE_EQ(y[8], 9 * 0.5 + 1 * 0.25);
  EXPECT_DOUBLE_EQ(y[7], 8 * 0.5 - 16 * 0.25);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(y[i], i + 1.0);
  in.sign = -1.0;
  const auto z = ReferenceRope(in);
  EXPECT_DOUBLE_EQ(z[0], 1 * 0.5 + 9 * 0.25);
  EXPECT_DOUBLE_EQ(z[8], 9 * 0.5 - 1 * 0.25);
}

TEST(RopeReference, TheBackwardSignIsTheTransposeOfTheForward) {
  // <rope(x), dy> == <x, rope^-1(dy)> for every x, dy: sign -1 is the forward's transpose (its backward).
  const std::int64_t T = 3, H = 2, D = 48, R = 32;
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<std::uint16_t> x(T * H * D), dy(T * H * D);
  for (auto& v : x) v = B(n(rng));
  for (auto& v : dy) v = B(n(rng));
  std::vector<float> cos(T * R), sin(T * R);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < R; ++i) {
      const double f = (t + 1) * std::pow(10000.0, -2.0 * (i % (R / 2)) / R);
      cos[t * R + i] = static_cast<float>(std::cos(f));
      sin[t * R + i] = static_cast<float>(std::sin(f));
    }
  const auto y = ReferenceRope({x, cos, sin, H * D, D, T, H, D, R, 1.0});
  const auto g = ReferenceRope({dy, cos, sin, H * D, D, T, H, D, R, -1.0});
  double lhs = 0.0, rhs = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    lhs += y[i] * Bf16ToFloat(dy[i]);
    rhs += Bf16ToFloat(x[i]) * g[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::fabs(lhs) + 1e-9);
}

TEST(RopeReference, StridedHeadsGiveTheContiguousResultAndNeverReadTheGaps) {
  const std::int64_t T = 2, H = 3, D = 16, R = 16;
  std::vector<std::uint16_t> dense(T * H * D), strided(T * (H * 2 * D + 8), B(NAN));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < D; ++i) {
        const auto v = B(static_cast<float>(t * 100 + h * 10 + i));
        dense[(t * H + h) * D + i] = v;
        strided[t * (H * 2 * D + 8) + h * 2 * D + i] = v;
      }
  std::vector<float> cos(T * R, 0.8f), sin(T * R, 0.6f);
  const auto a = ReferenceRope({dense, cos, sin, H * D, D, T, H, D, R, 1.0});
  const auto b = ReferenceRope({strided, cos, sin, H * 2 * D + 8, 2 * D, T, H, D, R, 1.0});
  EXPECT_EQ(a, b);
}

TEST(RopeProblem, ParsesRefusesAndBuckets) {
  Result<ProblemSpec> p = ParseProblem({{"tokens", 4096}, {"heads", 24}, {"head_dim", 256}, {"rotary_dim", 64}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, (ProblemSpec{4096, 24, 256, 64}));
  EXPECT_EQ(*ParseProblem(ToJson(*p)), *p);
  EXPECT_EQ(ToJson(*p)["dtype"], "bf16");
  auto message = [](const tuner::Problem& q) { return ParseProblem(q).status().message(); };
  const tuner::Problem base = {{"tokens", 10}, {"heads", 2}, {"head_dim", 64}, {"rotary_dim", 32}};
  tuner::Problem extra = base;
  extra["window"] = 3;
  EXPECT_NE(message(extra).find("unknown field \"window\""), std::string::npos) << message(extra);
  tuner::Problem odd = base;
  odd["rotary_dim"] = 24;
  EXPECT_NE(message(odd).find("not a multiple of 16"), std::string::npos) << message(odd);
  tuner::Problem wide = base;
  wide["rotary_dim"] = 128;
  EXPECT_NE(message(wide).find("outside [16, 64]"), std::string::npos) << message(wide);
  tuner::Problem no_heads = base;
  no_heads.erase("heads");
  EXPECT_NE(message(no_heads).find("missing field \"heads\""), std::string::npos);
  tuner::Problem fp32 = base;
  fp32["dtype"] = "fp32";
  EXPECT_EQ(ParseProblem(fp32).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(BucketOf(ProblemSpec{12288, 8, 128, 128}).tokens, 16384);
  EXPECT_EQ(BucketOf(ProblemSpec{5, 8, 128, 128}).tokens, 1024);
  EXPECT_EQ((*Family().Bucket(MakeProblem(8192, 32, 128, 128)))["tokens"], 8192);
  EXPECT_TRUE(Supported(256, 64));
  EXPECT_FALSE(Supported(256, 24));
  EXPECT_FALSE(Supported(100, 32));
}

tuner::Config C(int items, int threads, int vec) { return {{"items", items}, {"threads", threads}, {"vec", vec}}; }

TEST(RopeSpace, ValidityGridAndKernelName) {
  const ProblemSpec q{4096, 24, 256, 64};
  EXPECT_EQ(InvalidReasonFor(C(4, 256, 8), q), "");
  EXPECT_NE(InvalidReasonFor(C(3, 256, 8), q).find("items"), std::string::npos);
  EXPECT_NE(InvalidReasonFor({{"threads", 256}, {"vec", 8}}, q), "");
  // 64 rotated dims: 4 pairs of 8; the 192-dim tail: 24 vectors of 8 -> 28 items a head.
  EXPECT_EQ(WorkItems(q, 8), 4096 * 24 * 28);
  EXPECT_EQ(GridBlocks(*GeometryOf(C(4, 256, 8)), q), (4096 * 24 * 28 + 1023) / 1024);
  EXPECT_EQ(GridBlocks(*GeometryOf(C(1, 128, 4)), ProblemSpec{kMaxTokens, 1024, 1024, 1024}), kMaxGridBlocks);
  EXPECT_EQ(KernelNameExpression(*GeometryOf(C(4, 256, 8)), q), "dflash_rope::rope<256, 64, 8, 256>");
  for (const ProblemSpec& b : {q, ProblemSpec{8192, 32, 128, 128}, ProblemSpec{1024, 1, 16, 16}}) {
    const auto seeds = Family().SeedConfigs(ToJson(b));
    ASSERT_FALSE(seeds.empty());
    for (const auto& s : seeds) EXPECT_EQ(Family().InvalidReason(s, ToJson(b)), "") << tuner::ConfigLabel(s);
  }
  EXPECT_EQ(tuner::EnumerateSpace(Family()).size(), 2u * 3u * 2u);
}

constexpr CUdeviceptr kX = 0x100000, kCos = 0x800000, kSin = 0x900000, kOut = 0xA00000;

RopeArgs Plain() {
  RopeArgs a;
  a.x = kX, a.cos = kCos, a.sin = kSin, a.out = kOut;
  a.tokens = 100, a.heads = 4, a.head_dim = 64, a.rotary_dim = 32;
  a.x_token_stride = 4 * 64, a.x_head_stride = 64;
  return a;
}

tuner::LoadedVariant VariantFor(const RopeArgs& a) {
  tuner::LoadedVariant v;
  v.config = C(4, 256, 8);
  v.functions[KernelNameExpression(*GeometryOf(v.config), ProblemOf(a))] = nullptr;
  v.label = "rope[test]";
  return v;
}

void ExpectInvalid(const RopeArgs& a, const std::string& mentions) {
  const Status s = CheckRopeArgs(a);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
  EXPECT_EQ(LaunchRope(VariantFor(a), a, nullptr).code(), ErrorCode::kInvalidArgument);
}

TEST(RopeApi, ArgumentChecks) {
  EXPECT_TRUE(CheckRopeArgs(Plain()).ok()) << CheckRopeArgs(Plain()).ToString();
  RopeArgs a = Plain();
  a.sin = 0;
  ExpectInvalid(a, "non-null");
  a = Plain();
  a.cos = kCos + 4;
  ExpectInvalid(a, "cos must be 16-byte aligned");
  a = Plain();
  a.x_head_stride = 60;
  ExpectInvalid(a, "x strides");
  a = Plain();
  a.rotary_dim = 40;
  ExpectInvalid(a, "rotary_dim=40");
  a = Plain();
  a.sign = 0.5f;
  ExpectInvalid(a, "sign");
  a = Plain();
  a.out = kX + 4096;  // inside x
  ExpectInvalid(a, "out overlaps x");
  a = Plain();
  a.out = kSin - 16;  // its tail runs into the sin table
  ExpectInvalid(a, "out overlaps sin");
  // A winner of another problem is refused.
  RopeArgs other = Plain();
  other.rotary_dim = 64;
  const Status s = LaunchRope(VariantFor(Plain()), other, nullptr);
  EXPECT_NE(s.message().find("holds no rope kernel"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dflash::rope
