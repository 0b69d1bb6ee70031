// The swiglu family on the CPU: the float64 reference (hand-computed values, the bf16 rounding of the silu, strides),
// its problem (parse, refusals, bucket), its space and LaunchSwiglu's argument checks, before anything touches a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/swiglu/reference.h"
#include "kernels/swiglu/swiglu_api.h"
#include "kernels/swiglu/swiglu_family.h"

namespace dflash::swiglu {
namespace {

TEST(SwigluReference, SiluRoundedToBf16ThenTheProduct) {
  const std::vector<std::uint16_t> gate = {FloatToBf16(0.0f), FloatToBf16(1.0f), FloatToBf16(-2.0f), FloatToBf16(8.0f)};
  const std::vector<std::uint16_t> up = {FloatToBf16(5.0f), FloatToBf16(2.0f), FloatToBf16(1.0f), FloatToBf16(-0.5f)};
  const ReferenceOutput r = ReferenceSwiglu({gate, up, 4, 4, 1, 4});
  EXPECT_EQ(r.out[0], 0.0);
  // silu(1) = 0.7310586; bf16 = 0.73046875; times 2.
  EXPECT_DOUBLE_EQ(r.out[1], 2.0 * Bf16ToFloat(FloatToBf16(static_cast<float>(1.0 / (1.0 + std::exp(-1.0))))));
  EXPECT_NEAR(r.out[1], 1.4609375, 1e-12);
  EXPECT_NEAR(r.out[2], Bf16ToFloat(FloatToBf16(static_cast<float>(-2.0 / (1.0 + std::exp(2.0))))), 1e-12);
  EXPECT_NEAR(r.out[3], -0.5 * Bf16ToFloat(FloatToBf16(static_cast<float>(8.0 / (1.0 + std::exp(-8.0))))), 1e-12);
  for (double t : r.tol) EXPECT_GT(t, 0.0);
}

TEST(SwigluReference, StridedRowsGiveTheContiguousResultAndNeverReadTheGaps) {
  std::vector<std::uint16_t> g(2 * 8), u(2 * 8), gs(2 * 16, FloatToBf16(NAN)), us(2 * 24, FloatToBf16(NAN));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 8; ++c) {
      g[r * 8 + c] = gs[r * 16 + c] = FloatToBf16(0.25f * (r * 8 + c) - 2.0f);
      u[r * 8 + c] = us[r * 24 + c] = FloatToBf16(1.5f - 0.125f * c);
    }
  EXPECT_EQ(ReferenceSwiglu({g, u, 8, 8, 2, 8}).out, ReferenceSwiglu({gs, us, 16, 24, 2, 8}).out);
}

TEST(SwigluProblem, ParsesRefusesAndBuckets) {
  Result<ProblemSpec> p = ParseProblem({{"rows", 4096}, {"cols", 17408}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, (ProblemSpec{4096, 17408}));
  EXPECT_EQ(*ParseProblem(ToJson(*p)), *p);
  EXPECT_NE(ParseProblem({{"rows", 1}, {"cols", 20}}).status().message().find("not a multiple of 8"),
            std::string::npos);
  EXPECT_NE(ParseProblem({{"rows", 1}, {"cols", 8}, {"gate", 1}}).status().message().find("unknown field \"gate\""),
            std::string::npos);
  EXPECT_NE(ParseProblem({{"cols", 8}}).status().message().find("missing field \"rows\""), std::string::npos);
  EXPECT_EQ(ParseProblem({{"rows", 1}, {"cols", 8}, {"dtype", "fp16"}}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(BucketOf(ProblemSpec{3000, 64}).rows, 4096);
  EXPECT_EQ(BucketOf(ProblemSpec{5, 64}).rows, 1024);
  EXPECT_TRUE(Supported(17408));
  EXPECT_FALSE(Supported(17404));
}

TEST(SwigluSpace, ConfigsGridAndKernelName) {
  EXPECT_EQ(tuner::EnumerateSpace(Family()).size(), 2u * 3u * 2u);
  const tuner::Config c{{"items", 4}, {"threads", 256}, {"vec", 8}};
  EXPECT_EQ(Family().InvalidReason(c, ToJson(ProblemSpec{4096, 17408})), "");
  EXPECT_NE(Family().InvalidReason({{"items", 3}, {"threads", 256}, {"vec", 8}}, ToJson(ProblemSpec{4096, 64})), "");
  EXPECT_EQ(KernelNameExpression(*GeometryOf(c)), "dflash_swiglu::swiglu<8, 256>");
  EXPECT_EQ(GridBlocks(*GeometryOf(c), ProblemSpec{4096, 17408}), (4096 * 17408 / 8 + 1023) / 1024);
  EXPECT_EQ(GridBlocks(*GeometryOf({{"items", 1}, {"threads", 128}, {"vec", 4}}), ProblemSpec{kMaxRows, kMaxCols}),
            kMaxGridBlocks);
  for (const auto& s : Family().SeedConfigs(ToJson(ProblemSpec{4096, 17408})))
    EXPECT_EQ(Family().InvalidReason(s, ToJson(ProblemSpec{4096, 17408})), "") << tuner::ConfigLabel(s);
}

SwigluArgs Plain() {
  SwigluArgs a;
  a.gate = 0x100000, a.up = 0x200000, a.out = 0x300000;
  a.gate_stride = a.up_stride = 256;
  a.rows = 100, a.cols = 256;
  return a;
}

void ExpectInvalid(const SwigluArgs& a, const std::string& mentions) {
  const Status s = CheckSwigluArgs(a);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
  tuner::LoadedVariant v;
  v.config = {{"items", 4}, {"threads", 256}, {"vec", 8}};
  v.functions["dflash_swiglu::swiglu<8, 256>"] = nullptr;
  v.label = "swiglu[test]";
  EXPECT_EQ(LaunchSwiglu(v, a, nullptr).code(), ErrorCode::kInvalidArgument);
}

TEST(SwigluApi, ArgumentChecks) {
  EXPECT_TRUE(CheckSwigluArgs(Plain()).ok()) << CheckSwigluArgs(Plain()).ToString();
  SwigluArgs a = Plain();
  a.up = 0;
  ExpectInvalid(a, "non-null");
  a = Plain();
  a.gate += 8;
  ExpectInvalid(a, "gate must be 16-byte aligned");
  a = Plain();
  a.up_stride = 250;
  ExpectInvalid(a, "up_stride=250");
  a = Plain();
  a.cols = 12;
  ExpectInvalid(a, "cols=12");
  a = Plain();
  a.out = 0x100000 + 1024;
  ExpectInvalid(a, "out overlaps gate");
  // A winner without the kernel of its config is refused naming both.
  tuner::LoadedVariant v;
  v.config = {{"items", 4}, {"threads", 256}, {"vec", 8}};
  v.label = "swiglu[empty]";
  const Status s = LaunchSwiglu(v, Plain(), nullptr);
  EXPECT_NE(s.message().find("holds no swiglu kernel"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dflash::swiglu
