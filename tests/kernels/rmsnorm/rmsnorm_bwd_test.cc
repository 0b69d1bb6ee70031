// The rmsnorm_bwd family on the CPU: its problem (parse, defaults, refusals, bucket), its space (validity rules,
// the dw_partial row count, the kernel name, seeds), and LaunchRmsNormBackward's argument checks, all of which run
// before anything touches a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/rmsnorm/rmsnorm_bwd_api.h"
#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_bwd_space.h"

namespace dflash::rmsnorm {
namespace {

TEST(RmsNormBwdProblem, ParsesDefaultsAndRoundTrips) {
  Result<BwdProblemSpec> p = ParseBwdProblem({{"rows", 8192}, {"cols", 5120}, {"kind", "standard"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, (BwdProblemSpec{8192, 5120, Kind::kStandard, WeightDtype::kBf16}));
  const BwdProblemSpec q{262144, 128, Kind::kZeroCentred, WeightDtype::kFp32};
  EXPECT_EQ(*ParseBwdProblem(ToJson(q)), q);
  EXPECT_EQ(ToJson(q), MakeBwdProblem(262144, 128, Kind::kZeroCentred, WeightDtype::kFp32));
  EXPECT_EQ(ToJson(q)["dtype"], "bf16");
}

TEST(RmsNormBwdProblem, RefusesWhatTheBackwardDoesNotServe) {
  auto message = [](const tuner::Problem& p) { return ParseBwdProblem(p).status().message(); };
  const tuner::Problem base = {{"rows", 10}, {"cols", 64}, {"kind", "standard"}};
  for (const char* field : {"residual", "gate", "batch"}) {
    tuner::Problem p = base;
    p[field] = false;
    EXPECT_NE(message(p).find("unknown field \"" + std::string(field) + "\""), std::string::npos) << message(p);
  }
  tuner::Problem odd = base;
  odd["cols"] = 60;
  EXPECT_NE(message(odd).find("not a multiple of 8"), std::string::npos) << message(odd);
  tuner::Problem no_kind = base;
  no_kind.erase("kind");
  EXPECT_NE(message(no_kind).find("missing field \"kind\""), std::string::npos) << message(no_kind);
  EXPECT_EQ(message(no_kind).rfind("rmsnorm_bwd problem: ", 0), 0u) << message(no_kind);
  tuner::Problem wide = base;
  wide["cols"] = 8200;
  EXPECT_NE(message(wide).find("more than 8192"), std::string::npos) << message(wide);
  wide["cols"] = 8192;
  EXPECT_TRUE(ParseBwdProblem(wide).ok());
  EXPECT_TRUE(BwdServes(8192));
  EXPECT_FALSE(BwdServes(8200));
  tuner::Problem fp16 = base;
  fp16["dtype"] = "fp16";
  EXPECT_EQ(ParseBwdProblem(fp16).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseBwdProblem(tuner::Problem::array()).status().code(), ErrorCode::kInvalidArgument);
}

TEST(RmsNormBwdProblem, BucketRoundsRowsUpToAPowerOfTwoOfAtLeast1024) {
  EXPECT_EQ(BucketOf(BwdProblemSpec{1, 128, Kind::kStandard, WeightDtype::kFp32}).rows, 1024);
  EXPECT_EQ(BucketOf(BwdProblemSpec{8192, 128, Kind::kStandard, WeightDtype::kFp32}).rows, 8192);
  EXPECT_EQ(BucketOf(BwdProblemSpec{8193, 128, Kind::kStandard, WeightDtype::kFp32}).rows, 16384);
  const auto b = BackwardFamily().Bucket(MakeBwdProblem(5000, 5120, Kind::kStandard, WeightDtype::kFp32));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)["rows"], 8192);
  EXPECT_EQ((*b)["weight"], "fp32");
}

tuner::Config C(int row_groups, int row_threads, int threads, int vec) {
  return {{"row_groups", row_groups}, {"row_threads", row_threads}, {"threads", threads}, {"vec", vec}};
}

TEST(RmsNormBwdSpace, ValidityRules) {
  const BwdProblemSpec hidden{8192, 5120, Kind::kStandard, WeightDtype::kFp32};
  EXPECT_EQ(BwdInvalidReasonFor(C(16, 256, 256, 8), hidden), "");  // 3 vectors = 24 elements a thread
  EXPECT_NE(BwdInvalidReasonFor(C(16, 128, 128, 8), hidden).find("40 elements per thread > 32"), std::string::npos);
  EXPECT_NE(BwdInvalidReasonFor(C(16, 512, 256, 8), hidden).find("row_threads=512 > threads=256"), std::string::npos);
  EXPECT_NE(BwdInvalidReasonFor(C(3, 256, 256, 8), hidden).find("row_groups"), std::string::npos);
  EXPECT_NE(BwdInvalidReasonFor(C(16, 256, 1024, 8), hidden).find("registers per thread"), std::string::npos)
      << BwdInvalidReasonFor(C(16, 256, 1024, 8), hidden);
  const BwdProblemSpec head{262144, 128, Kind::kStandard, WeightDtype::kFp32};
  EXPECT_EQ(BwdInvalidReasonFor(C(16, 8, 256, 8), head), "");
  EXPECT_NE(BwdInvalidReasonFor(C(16, 32, 256, 8), head).find("some threads of every row would hold nothing"),
            std::string::npos);
  // Every seed is a valid point; the family refuses a bucket of another family.
  for (const BwdProblemSpec& b : {hidden, head}) {
    const auto seeds = BackwardFamily().SeedConfigs(ToJson(b));
    ASSERT_FALSE(seeds.empty());
    for (const auto& s : seeds) EXPECT_EQ(BackwardFamily().InvalidReason(s, ToJson(b)), "") << tuner::ConfigLabel(s);
  }
  EXPECT_NE(BackwardFamily().InvalidReason(C(16, 8, 256, 8), {{"rows", 1024}, {"cols", 128}, {"kind", "standard"},
                                                              {"residual", true}}).find("not a rmsnorm_bwd bucket"),
            std::string::npos);
  std::size_t valid = 0;
  for (const tuner::Config& c : tuner::EnumerateSpace(BackwardFamily())) valid += BwdInvalidReasonFor(c, hidden).empty();
  EXPECT_GT(valid, 7u);
}

TEST(RmsNormBwdSpace, TheGridAndThePartialRowsFollowTheRowGroups) {
  const BwdGeometry g = *BwdGeometryOf(C(16, 8, 256, 8));  // 32 rows a group, 16 groups: 512 rows a block
  EXPECT_EQ(g.row.rows_per_block, 32);
  EXPECT_EQ(BwdGridBlocks(g, 262144), 512);
  EXPECT_EQ(DwPartialRows(g, 262144), 512 * 32);
  EXPECT_EQ(BwdGridBlocks(g, 1), 1);
  EXPECT_EQ(DwPartialRows(g, 1), 32);
  EXPECT_EQ(BwdGridBlocks(g, 513), 2);
  EXPECT_EQ(BwdGridBlocks(g, 0), 0);
  EXPECT_EQ(BwdKernelNameExpression(*BwdGeometryOf(C(16, 256, 256, 8)),
                                    BwdProblemSpec{8192, 5120, Kind::kStandard, WeightDtype::kFp32}),
            "dflash_rmsnorm::rmsnorm_bwd<5120, 8, 256, 256, 1, 0, 1>");
  EXPECT_EQ(BwdKernelNameExpression(*BwdGeometryOf(C(16, 16, 256, 8)),
                                    BwdProblemSpec{1024, 128, Kind::kZeroCentred, WeightDtype::kBf16}),
            "dflash_rmsnorm::rmsnorm_bwd<128, 8, 16, 256, 1, 1, 0>");
}

constexpr std::int64_t kRows = 100, kCols = 256;
constexpr CUdeviceptr kX = 0x100000, kDy = 0x200000, kW = 0x300000, kDx = 0x400000, kPartial = 0x500000;

RmsNormBwdArgs Plain() {
  RmsNormBwdArgs a;
  a.x = kX, a.dy = kDy, a.weight = kW, a.dx = kDx, a.dw_partial = kPartial;
  a.x_stride = a.dy_stride = a.dx_stride = kCols;
  a.rows = kRows, a.cols = kCols;
  a.weight_dtype = WeightDtype::kFp32;
  return a;
}

tuner::LoadedVariant VariantFor(const RmsNormBwdArgs& args) {
  tuner::LoadedVariant v;
  v.config = C(4, 32, 256, 8);
  v.functions[BwdKernelNameExpression(*BwdGeometryOf(v.config), ProblemOf(args))] = nullptr;
  v.label = "rmsnorm_bwd[test]";
  return v;
}

// The variant's 32 dw_partial rows (100 rows, 8 a block, 4 groups a block: 4 blocks).
constexpr std::int64_t kPartialRows = 32;

void ExpectInvalid(const RmsNormBwdArgs& a, const std::string& mentions) {
  const Status s = CheckRmsNormBwdArgs(a, kPartialRows);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
  const Status l = LaunchRmsNormBackward(VariantFor(a), a, nullptr);
  EXPECT_EQ(l.code(), ErrorCode::kInvalidArgument) << l.ToString();
}

TEST(RmsNormBwdApi, ArgumentChecks) {
  EXPECT_TRUE(CheckRmsNormBwdArgs(Plain(), kPartialRows).ok()) << CheckRmsNormBwdArgs(Plain(), kPartialRows).ToString();
  EXPECT_EQ(*DwPartialRows(VariantFor(Plain()), kRows), kPartialRows);
  RmsNormBwdArgs a = Plain();
  a.dy = 0;
  ExpectInvalid(a, "non-null");
  a = Plain();
  a.x = kX + 8;
  ExpectInvalid(a, "x must be 16-byte aligned");
  a = Plain();
  a.dx_stride = 250;
  ExpectInvalid(a, "dx_stride=250");
  a = Plain();
  a.cols = 12;
  ExpectInvalid(a, "cols=12");
  a = Plain();
  a.eps = -1.0f;
  ExpectInvalid(a, "eps=");
  a = Plain();
  a.dx = kX + 2 * kCols * 50;  // dx's rows run into x's
  ExpectInvalid(a, "dx overlaps x");
  a = Plain();
  a.dw_partial = kDx + 16;
  ExpectInvalid(a, "overlaps");
  a = Plain();
  a.dw_partial = kW - kPartialRows * kCols * 4 + 16;  // the partials' last row runs into the weight
  ExpectInvalid(a, "dw_partial overlaps weight");
  // Interleaved rows of one buffer are fine: dx in the odd rows of x's (doubled-stride) buffer.
  a = Plain();
  a.x_stride = a.dx_stride = 2 * kCols;
  a.dx = kX + 2 * kCols;
  a.dy = 0x800000;
  EXPECT_TRUE(CheckRmsNormBwdArgs(a, kPartialRows).ok()) << CheckRmsNormBwdArgs(a, kPartialRows).ToString();
}

TEST(RmsNormBwdApi, AWinnerOfAnotherProblemIsRefused) {
  const RmsNormBwdArgs a = Plain();
  tuner::LoadedVariant v = VariantFor(a);
  RmsNormBwdArgs other = a;
  other.kind = Kind::kZeroCentred;
  const Status s = LaunchRmsNormBackward(v, other, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("holds no rmsnorm_bwd kernel"), std::string::npos) << s.message();
  v.config = {{"threads", 256}};
  EXPECT_NE(LaunchRmsNormBackward(v, a, nullptr).message().find("is invalid"), std::string::npos);
}

}  // namespace
}  // namespace dflash::rmsnorm
